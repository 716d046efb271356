"""The queue: each of the policy's arrays as FIFO buckets of alike jobs, the order its
heads are taken in, and why each queued job waits.

A job is filed into its array's bucket for its shape (``buckets.py``) and into the
array's order of heads (``TenantQueues``). The cycle notes a reason on every job it
tries and on the job's bucket, so the jobs behind a bucket's front, not tried, show
the reason their front got.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from coda.cycle import reasons as R
from coda.cycle.buckets import Bucket
from coda.cycle.clock import Clock
from coda.cycle.reasons import Reason
from coda.cycle.tenants import TenantQueues
from coda.policy.framework import Policy
from coda.policy.state import CPU, DNN, Job

Shape = tuple[Any, ...]  # (kind, GPUs per node, nodes, core count's group, pools)


class ReasonChanges:
    """What moved since the last call: ``jobs``, whose reason may have changed, each to
    be asked its own (and the bucket whose reason it shows, ``Queue.shown_by``), and
    ``moved``, buckets whose reason changed: each job that showed a bucket's reason
    at the last call and is not among ``jobs`` shows its new one. A bucket's thousands
    of jobs move with it, named nowhere."""

    __slots__ = ("jobs", "moved")

    def __init__(self, jobs: list[Job], moved: list[tuple[Bucket, Reason]]) -> None:
        self.jobs = jobs
        self.moved = moved


class Queue:
    def __init__(self, policy: Policy, clock: Clock) -> None:
        self.policy = policy
        self.clock = clock
        arrays = policy.arrays.names
        self.buckets: dict[str, dict[Shape, Bucket]] = {a: {} for a in arrays}
        # The same buckets by (kind, GPUs per node), so backfill passes over whole groups.
        self.groups: dict[str, dict[tuple[Any, ...], dict[Shape, Bucket]]] = {a: {} for a in arrays}
        # Each array's jobs in the order heads are taken (per tenant under fair share).
        self.tenants = TenantQueues(
            arrays, policy.fair_share, self._live_entry, policy.queue_sort.band
        )
        self.bucket_of: dict[Job, Bucket] = {}
        self.queued = {DNN: 0, CPU: 0}
        # Each array's head as the last round settled it (None: nothing blocked).
        self.heads: dict[str, Job | None] = dict.fromkeys(arrays)
        self.maybe_full = True  # some bucket may be owed a full search (Bucket.full)
        # The backfill depth cut a sweep short of full searches owed: a cycle is due.
        self.depth_owed = False
        self._filed = 0  # entries filed so far (``enqueue``)
        # For a driver that mirrors each queued job's reason (the Slurm controller's
        # marks): the jobs noted, filed or gone since it last asked (``reason_changes``;
        # None until it first asks), the buckets noted, each bucket's reason when it
        # last asked, and each bucket's jobs that may show a reason of their own.
        self._touched: dict[Job, None] | None = None
        self._noted: dict[Bucket, None] = {}
        self._told: dict[Bucket, object] = {}
        self._own: dict[Bucket, set[Job]] = {}
        self._refiled = False

    # ------------------------------------------------------------ filing
    def enqueue(self, job: Job) -> None:
        arr = self.policy.arrays.array_of(job)
        # The filing count keeps a requeued job's new entry apart from its old one (not
        # its preemption count: a driver may requeue a job before it counts that).
        self._filed += 1
        job.queue_key = (self.policy.queue_sort.key(job), job.idx, self._filed)
        self._file(arr, job)
        self.tenants.push(arr, job)
        self.queued[job.kind] += 1
        if self._touched is not None:
            self._touched[job] = None

    def _file(self, arr: str, job: Job) -> None:
        """Put a queued job into its array's bucket for its shape."""
        # Its pools too: alike jobs must be able to go to the same nodes (the merge
        # passes over a bucket whose job failed alike).
        pools = self.policy.pools.pools(job)
        shape = (job.kind, job.gpus_pn, job.nodes, self.policy.core_count.group_key(job), pools)
        buckets = self.buckets[arr]
        bucket = buckets.get(shape)
        if bucket is None:
            bucket = buckets[shape] = Bucket()
            self.groups[arr].setdefault(shape[:2], {})[shape] = bucket
        bucket.add(job.queue_key, job)
        self.bucket_of[job] = bucket

    def refile(self) -> None:
        """The pools plugin's answers may have changed (its nodes did): file every
        queued job again, each bucket owed a full search."""
        for arr, buckets in self.buckets.items():
            jobs = [job for bucket in buckets.values() for job in bucket.live()]
            buckets.clear()
            self.groups[arr].clear()
            for job in jobs:
                self._file(arr, job)
            for bucket in buckets.values():
                bucket.owe_full_search()
        self.maybe_full = True
        self._refiled = True

    def owe_full_search(self) -> None:
        """Core counts changed (the allocator learned a shape): each bucket's front gets
        one full search, since its count may be smaller now."""
        for buckets in self.buckets.values():
            for bucket in buckets.values():
                bucket.owe_full_search()
        self.maybe_full = True

    def owe_full_from(self, buckets: Iterable[Bucket], key: tuple[Any, ...]) -> None:
        """The backfill depth stopped a sweep at ``key``: these buckets' jobs from there
        on owe a full search (the nodes that gained room are not carried to later
        cycles, whose sweeps would stop at the depth again while the set of them grew)."""
        for bucket in buckets:
            bucket.owe_full_from(key)
        self.maybe_full = self.depth_owed = True

    def settle_full(self) -> None:
        """After a round whose sweep the depth cut: whether full searches are still
        owed, exactly (a cycle is due while they are: ``Scheduler.pending``)."""
        if not self.depth_owed:
            return
        owed = False
        for buckets in self.buckets.values():
            for bucket in buckets.values():
                if bucket.full:
                    if bucket.unsearched() is None:
                        bucket.full = False  # every job it owed a search to started
                    else:
                        owed = True
        self.depth_owed = self.maybe_full = owed

    def drop(self, arr: str, shape: Shape) -> None:
        """Forget a bucket every job of which started or left."""
        bucket = self.buckets[arr].pop(shape)
        del self.groups[arr][shape[:2]][shape]
        self._told.pop(bucket, None)
        self._own.pop(bucket, None)
        self._noted.pop(bucket, None)

    def withdraw(self, job: Job) -> bool:
        """Take a job out of the queue; False if it was not queued."""
        bucket = self.bucket_of.pop(job, None)
        if bucket is None:
            return False
        job.queue_key = ()
        self.queued[job.kind] -= 1
        if self._touched is not None:
            self._touched[job] = None
        return True

    def started(self, job: Job) -> None:
        """A queued job started: it leaves the queue (its entries are skipped lazily)."""
        self.bucket_of.pop(job, None)
        self.queued[job.kind] -= 1
        if self._touched is not None:
            self._touched[job] = None

    def is_queued(self, job: Job) -> bool:
        return job in self.bucket_of

    def _live_entry(self, key: tuple[Any, ...], job: Job) -> bool:
        return job.start < 0 and job.queue_key == key and job in self.bucket_of

    # ------------------------------------------------------------ order
    def earliest(self, arr: str) -> Job | None:
        """The first queued job of an array: the tenant of smallest share first where
        the policy shares fairly, then queue order (``TenantQueues``)."""
        return self.tenants.first(arr)

    def live(self, arr: str) -> list[Job]:
        """An array's queued jobs, bucket by bucket."""
        return [j for b in self.buckets[arr].values() for j in b.live()]

    def touch(self, tenant: str) -> None:
        """A tenant's share moved, or its first job left (``TenantQueues.touch``)."""
        self.tenants.touch(tenant)

    # ------------------------------------------------------------ reasons
    def note(self, job: Job, reason: Reason) -> None:
        """Why the job (and its bucket's jobs behind it) waits, as of this cycle."""
        job.wait, job.wait_cycle = reason, self.clock.cycles
        bucket = self.bucket_of.get(job)
        if bucket is not None:
            bucket.wait, bucket.wait_cycle = reason, self.clock.cycles
        if self._touched is not None:
            self._touched[job] = None
            if bucket is not None:
                self._noted[bucket] = None

    def note_job(self, job: Job, reason: object) -> None:
        """Why the job waits, as of this cycle, and not its bucket's jobs behind it."""
        job.wait, job.wait_cycle = reason, self.clock.cycles
        if self._touched is not None:
            self._touched[job] = None

    def reason_changes(self) -> ReasonChanges | None:
        """The jobs whose ``reason_of`` may have changed since the last call (queued
        since, or gone from the queue since, among them); None: any job's may have
        (the first call, a refile, or no backfill: every job waits behind its array's
        head). A job shows its bucket's reason unless noted since the bucket was:
        when a bucket's reason changes, all its jobs change (those that show it are
        not named: the bucket is, with its new reason); when it is noted again, those
        that showed their own are named."""
        touched, noted = self._touched, self._noted
        self._touched, self._noted = {}, {}
        if touched is None or self._refiled or not self.policy.backfill:
            self._refiled = False
            self._told, self._own = {}, {}
            for buckets in self.buckets.values():
                for bucket in buckets.values():
                    self._told[bucket] = bucket.wait
                    own = {j for j in bucket.live() if j.wait_cycle >= bucket.wait_cycle}
                    if own:
                        self._own[bucket] = own
            return None
        out = dict(touched)
        moved: list[tuple[Bucket, Reason]] = []
        for bucket in noted:
            # Its jobs that showed their own show the bucket's now (or their own again).
            out.update(dict.fromkeys(self._own.pop(bucket, ())))
            why = bucket.wait
            if bucket not in self._told or self._told[bucket] != why:
                if isinstance(why, Reason):
                    # The rest of its jobs noted before it was show its reason now
                    # (``reason_of``); those noted since are among the touched.
                    moved.append((bucket, why))
                else:
                    out.update(dict.fromkeys(bucket.live()))
            self._told[bucket] = why
        for job in touched:
            home = self.bucket_of.get(job)
            if home is not None and job.wait_cycle >= home.wait_cycle:
                self._own.setdefault(home, set()).add(job)
        return ReasonChanges(list(out), moved)

    def shown_by(self, job: Job) -> Bucket | None:
        """The bucket whose reason the job shows as its own (``reason_of``), if any."""
        if not self.policy.backfill:  # each job shows the head it is behind
            return None
        return self._showing(job)

    def _showing(self, job: Job) -> Bucket | None:
        """The job's bucket, if it was noted since the job was (with a reason)."""
        bucket = self.bucket_of.get(job)
        if bucket is None or bucket.wait_cycle <= job.wait_cycle or job.start >= 0:
            return None
        return bucket if isinstance(bucket.wait, Reason) else None

    def reason_of(self, job: Job) -> Reason | None:
        """Why a queued job waits (None once it has started)."""
        if job.start >= 0:
            return None
        reason = job.wait if isinstance(job.wait, Reason) else None
        shown = self._showing(job)
        if shown is not None and isinstance(shown.wait, Reason):  # _showing says it is
            reason = shown.wait
        bucket = self.bucket_of.get(job)
        if bucket is not None and not self.policy.backfill:
            head = self.heads.get(self.policy.arrays.array_of(job))
            if head is not None and head is not job and head.start < 0:
                return Reason(R.FIFO, behind=head.job_id)
        return reason or Reason(R.NEW)

    def waiting(self) -> Iterator[tuple[Job, Reason]]:
        """Every queued job with its reason, in queue order per array."""
        for arr in self.policy.arrays.names:
            for job in sorted(self.live(arr), key=lambda j: j.queue_key):
                reason = self.reason_of(job)
                if reason is not None:
                    yield job, reason

    def waited(self, job: Job) -> Reason | None:
        """Why a job about to start waited last (its own reason, its bucket's or, with
        no backfill, the head it was behind)."""
        start, job.start = job.start, -1.0
        try:
            reason = self.reason_of(job)
        finally:
            job.start = start
        if (reason is None or reason.code == R.NEW) and not self.policy.backfill:
            # Never tried: it waited behind its array's head (which may have started
            # just before it, in this cycle).
            head = self.heads.get(self.policy.arrays.array_of(job))
            if head is not None and head is not job and job.submit < self.clock.now:
                reason = Reason(R.FIFO, behind=head.job_id)
        return reason
