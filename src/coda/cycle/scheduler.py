"""The scheduling cycle: one runner for the simulator, the node agent and Slurm.

Pure: no I/O, no clock (``now`` is passed in). It holds the queue (each of the
policy's arrays as FIFO buckets), an index of nodes, each array's backfill
reservation and which nodes gained room since the last cycle. A cycle

1. starts each array's first jobs while they fit; the first that does not is the
   array's head and holds a reservation (when and where it can start, from the
   policy's runtime estimates); heads settle in queue order across arrays;
2. backfills (``backfill.py``): jobs behind the heads, in queue order, start where
   they do not delay a reservation (without runtime estimates: none, strict FIFO);
   where the policy asks (``reservations="every-job"``), every job that does not fit
   is planned instead, as Slurm does (``every_job.py``);
3. for a DNN job where the policy reclaims, counts cores CPU jobs hold on a GPU
   node as free, and takes them back through the reclaim plugin when it starts.

Every start and reclaim action is booked here (``occupy``/``vacate``/``resize``)
and handed to the driver's ``Executor``; every job not started keeps a
``Reason``. Old jobs are retried only on nodes that gained room ("dirty"), new
ones search the index, so a cycle costs what changed, not the queue's length
times the cluster's size.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Iterator
from typing import Any

from coda.cycle import reasons as R
from coda.cycle.backfill import Backfill
from coda.cycle.decisions import Decision, Executor, Reclaimed, Start
from coda.cycle.invariant import InvariantError
from coda.cycle.queue import Bucket
from coda.cycle.reasons import Reason
from coda.cycle.reservations import Hold, Reservation
from coda.cycle.tenants import TenantQueues
from coda.policy.framework import CoreBound, Policy
from coda.policy.state import CPU, DNN, GPU_POOL, Job, Node

_MAX_ROUNDS = 64  # rounds at one instant (each starts jobs or moves a reservation)
_SORT_DIRTY_UP_TO = 64  # more dirty nodes than this: search the index instead
_REASONS_KEPT = 4096  # distinct reasons shared (Scheduler._why) before starting afresh


class Scheduler(Backfill):
    """The queue, the node index and the cycle over them, for one policy."""

    def __init__(self, policy: Policy, nodes: Iterable[Node] = ()) -> None:
        super().__init__(policy)
        arrays = policy.arrays.names
        self.buckets: dict[str, dict[tuple[Any, ...], Bucket]] = {a: {} for a in arrays}
        # The same buckets by (kind, GPUs per node), so backfill passes over whole groups.
        self._groups: dict[str, dict[tuple[Any, ...], dict[tuple[Any, ...], Bucket]]] = {
            a: {} for a in arrays
        }
        # Each array's jobs in the order heads are taken (per tenant under fair share).
        self._queues = TenantQueues(
            arrays, policy.fair_share, self._live_entry, policy.queue_sort.band
        )
        self.reservations: dict[str, Reservation | None] = dict.fromkeys(arrays)
        self.heads: dict[str, Job | None] = dict.fromkeys(arrays)
        self.every_job_holds: dict[int, list[Hold]] = {}
        # Fixed once the policy is built: read here, not on every attempt.
        self._every_job = policy.reserves_every_job
        self._fewest_cores = policy.node_order == "fewest-cores"
        self._slurm_windows = policy.plan_times == "slurm-windows"
        self._bucket_of: dict[Job, Bucket] = {}
        self.queued = {DNN: 0, CPU: 0}
        self._filed = 0  # entries filed so far (``_enqueue``)
        self._unbound: set[str] = set()  # arrays whose reservation shares moved past
        self._shares_moved = False  # a booking moved a share since the round began
        self._new: list[Job] = []  # submitted since the last cycle: owed a full search
        self._carry: set[Job] = set()  # requeued jobs still owed a full search
        self._requeue: list[Job] = []  # preempted during a cycle, queued after its round
        self._in_cycle = False
        self._generation = policy.core_count.generation
        self._pools_generation = policy.pools.generation
        self._static = [f for f in policy.filters if f.static]
        self._bounds = [f for f in policy.filters if isinstance(f, CoreBound)]
        self.cycles = 0
        self.now = 0.0
        self._executor: Executor | None = None
        self._decisions: list[Decision] = []
        self._reasons: dict[tuple[str, str, str | None], Reason] = {}
        self._maybe_full = True  # some bucket may be owed a full search (Bucket.full)
        # The last failed attempt was refused by what its bucket's jobs share (GPUs,
        # cores, filters declaring ``by_shape``), not by its memory or a reservation.
        self._alike = False
        # Or by its memory, length or rank too, as (finish by, memory, rank) it failed
        # with (a lower bound where that did not matter), None if not even so.
        self._failed_with: tuple[float, int, tuple[Any, ...] | None] | None = None
        # Stand-in jobs, to ask the policy which pools each kind of job may use.
        self._probe = {
            DNN: Job(-1, "probe", 0.0, 1, 1, 0, 1, 0.0),
            CPU: Job(-1, "probe", 0.0, 0, 1, 0, 1, 0.0),
        }
        self.add_nodes(nodes)

    # ------------------------------------------------------------ queue
    def submit(self, job: Job) -> Reason | None:
        """Queue a job. A job that could not run even on the empty cluster is not
        queued: its reason (``NEVER``) is returned."""
        cores_pn = self.cores(job)
        never = self._never_fits(job, cores_pn)
        if never is not None:
            job.wait, job.wait_cycle = never, self.cycles
            return never
        self._enqueue(job)
        job.wait, job.wait_cycle = self._why(R.NEW), self.cycles
        self._new.append(job)
        return None

    def requeue(self, job: Job) -> None:
        """Queue a preempted job again (it keeps its preemption count): queued
        after the running round, with a full search."""
        job.start = -1.0
        job.queue_key = ()  # its old entry (if any) is dead from now on
        if self._in_cycle:
            self._requeue.append(job)
        else:
            self._enqueue(job)
            self._carry.add(job)

    def withdraw(self, job: Job) -> None:
        """Drop a queued job (cancelled, or gone from the cluster manager)."""
        bucket = self._bucket_of.pop(job, None)
        if bucket is None:
            return
        job.queue_key = ()
        self.queued[job.kind] -= 1
        self._carry.discard(job)
        self._booked(job)  # its tenant's first job may have been this one
        if self._every_job:
            self._plans_moved(job)
        for arr, resv in self.reservations.items():
            if resv is not None and resv.job is job:
                self.reservations[arr] = None
                for node in resv.nodes:
                    self.mark_dirty(node)

    def is_queued(self, job: Job) -> bool:
        return job in self._bucket_of

    def _enqueue(self, job: Job) -> None:
        arr = self.policy.arrays.array_of(job)
        # The filing count keeps a requeued job's new entry apart from its old one (not
        # its preemption count: a driver may requeue a job before it counts that).
        self._filed += 1
        job.queue_key = (self.policy.queue_sort.key(job), job.idx, self._filed)
        self._file(arr, job)
        self._queues.push(arr, job)
        self.queued[job.kind] += 1

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
            self._groups[arr].setdefault(shape[:2], {})[shape] = bucket
        bucket.add(job.queue_key, job)
        self._bucket_of[job] = bucket

    def _refile(self) -> None:
        """The pools plugin's answers may have changed (its nodes did): file every
        queued job again, each bucket owed a full search."""
        for arr, buckets in self.buckets.items():
            jobs = [job for bucket in buckets.values() for job in bucket.live()]
            buckets.clear()
            self._groups[arr].clear()
            for job in jobs:
                self._file(arr, job)
            for bucket in buckets.values():
                bucket.full = True
        self._maybe_full = True

    def _live_entry(self, key: tuple[Any, ...], job: Job) -> bool:
        return job.start < 0 and job.queue_key == key and job in self._bucket_of

    def _booked(self, job: Job) -> None:
        fair = self.policy.fair_share
        if fair is not None:
            self._queues.touch(fair.tenant(job))
            self._shares_moved = True

    def _never_fits(self, job: Job, cores_pn: int) -> Reason | None:
        pools = self.policy.pools.pools(job)
        if self._static:
            # Stops at the job's node count: most jobs fit the first nodes looked at.
            candidates = (
                n
                for n in self.nodes.values()
                if n.pool in pools
                and self._shape_fits(n, job, cores_pn)
                and all(f.filter(job, n, cores_pn) for f in self._static)
            )
            ok = sum(1 for _ in itertools.islice(candidates, job.nodes)) >= job.nodes
        else:
            key = (pools, job.gpus_pn, cores_pn, job.mem_pn, job.nodes)
            hit = self._fit_cache.get(key)
            if hit is None:
                # By distinct node shape, not node: a million jobs on ten thousand
                # nodes must not cost jobs x nodes.
                fitting = sum(
                    count
                    for (pool, g, c, m), count in self.shapes.items()
                    if pool in pools
                    and g >= job.gpus_pn
                    and c >= cores_pn
                    and (m == 0 or m >= job.mem_pn)
                )
                hit = self._fit_cache[key] = fitting >= job.nodes
            ok = hit
        if ok:
            return None
        need = f"{job.nodes} node(s) with {job.gpus_pn} GPUs, {cores_pn} cores"
        if job.mem_pn:
            need += f", {job.mem_pn} MiB"
        return Reason(R.NEVER, f"needs {need} in pools {'/'.join(pools)}")

    # ------------------------------------------------------------ reasons
    def reason_of(self, job: Job) -> Reason | None:
        """Why a queued job waits (None once it has started)."""
        if job.start >= 0:
            return None
        reason = job.wait if isinstance(job.wait, Reason) else None
        bucket = self._bucket_of.get(job)
        if bucket is not None and bucket.wait_cycle > job.wait_cycle:
            reason = bucket.wait if isinstance(bucket.wait, Reason) else reason
        if bucket is not None and not self.policy.backfill:
            head = self.heads.get(self.policy.arrays.array_of(job))
            if head is not None and head is not job and head.start < 0:
                return Reason(R.FIFO, behind=head.job_id)
        return reason or Reason(R.NEW)

    def waiting(self) -> Iterator[tuple[Job, Reason]]:
        """Every queued job with its reason, in queue order per array."""
        for arr in self.policy.arrays.names:
            jobs = [j for b in self.buckets[arr].values() for j in b.live()]
            for job in sorted(jobs, key=lambda j: j.queue_key):
                reason = self.reason_of(job)
                if reason is not None:
                    yield job, reason

    def _why(self, code: str, detail: str = "", behind: str | None = None) -> Reason:
        """``Reason(code, detail, behind)``; reasons are values, so equal ones are shared
        (a cycle notes one for every job it tries)."""
        key = (code, detail, behind)
        reason = self._reasons.get(key)
        if reason is None:
            if len(self._reasons) >= _REASONS_KEPT:
                self._reasons.clear()
            reason = self._reasons[key] = Reason(code, detail, behind)
        return reason

    def _note(self, job: Job, reason: Reason) -> None:
        job.wait, job.wait_cycle = reason, self.cycles
        bucket = self._bucket_of.get(job)
        if bucket is not None:
            bucket.wait, bucket.wait_cycle = reason, self.cycles

    # ------------------------------------------------------------ the cycle
    def pending(self) -> bool:
        """Whether a cycle now could start anything."""
        return bool(
            self.dirty
            or self._new
            or self._carry
            or self._unbound  # shares moved past a reservation (``_share_moved``)
            or self.policy.core_count.generation != self._generation
            or self.policy.pools.generation != self._pools_generation
        )

    def cycle(self, now: float, executor: Executor) -> list[Decision]:
        """Scheduling rounds at one instant, until nothing is left to retry.

        A job that was already queued failed to fit at an earlier cycle, and free
        capacity has since grown only on the dirty nodes. So old jobs are tried on
        those nodes only; new arrivals search the whole index.
        """
        self.now = now
        self.cycles += 1
        self._executor = executor
        self._decisions = []
        self._in_cycle = True
        if self.policy.pools.generation != self._pools_generation:
            self._pools_generation = self.policy.pools.generation
            self._refile()
        generation = self.policy.core_count.generation
        if generation != self._generation:
            # Core counts changed (the allocator learned a shape): each bucket's
            # front gets one full search, since its count may be smaller now.
            self._generation = generation
            for buckets in self.buckets.values():
                for bucket in buckets.values():
                    bucket.full = True
            self._maybe_full = True
        fresh = set(self._new)
        if self._carry:
            fresh |= self._carry
            self._carry = set()
        self._new = []
        try:
            for _ in range(_MAX_ROUNDS):
                if self._unbound:
                    self._rebind()
                dirty = list(self.dirty)
                self.dirty = {}
                self._shares_moved = False
                self._round(dirty, fresh)
                # They have had their full search; a job the round's starts moved to
                # its array's front (fair share) is owed one as the head it now is.
                fresh = self._overtaken()
                if self._requeue:
                    # Preempted mid-round: queued now (not while buckets were being
                    # walked) and given a full search like new arrivals.
                    for job in self._requeue:
                        self._enqueue(job)
                    fresh.update(self._requeue)
                    self._requeue = []
                elif not self.dirty and not fresh and not self._unbound:
                    break
        finally:
            self._in_cycle = False
            self._executor = None
        # Nodes a depth-limited sweep did not get to: retried at the next cycle; so
        # are requeued jobs the round limit left without their full search.
        self.dirty.update(self._deferred)
        self._deferred = {}
        self._carry = {job for job in fresh if job.start < 0 and job in self._bucket_of}
        return self._decisions

    def _share_before(self, job: Job) -> float | None:
        fair = self.policy.fair_share
        if fair is None:
            return None
        for arr, resv in self.reservations.items():
            if resv is not None and arr not in self._unbound:
                return fair.share(fair.tenant(job))
        return None  # no reservation a move could unbind

    def _share_moved(self, job: Job, before: float) -> None:
        """A reservation binds the jobs ranked after its holder (by share, then queue
        key). A job it kept off its nodes may rank before it now if its tenant's share
        fell past the holder's, or the holder's own tenant took more: its array is
        owed a retry of those nodes (``_rebind``). Other moves only bind more jobs."""
        fair = self.policy.fair_share
        assert fair is not None  # called under fair share only
        tenant = fair.tenant(job)
        after = fair.share(tenant)
        for arr, resv in self.reservations.items():
            if resv is None or arr in self._unbound:
                continue
            if fair.tenant(resv.job) == tenant:
                if after > before:
                    self._unbound.add(arr)
            elif after < before and after <= resv.rank[1] <= before:  # (band, share, key)
                self._unbound.add(arr)

    def _rebind(self) -> None:
        """The nodes of the reservations shares moved past are retried, as if they had
        gained room: a job those reservations kept off them may start there now."""
        for arr in self._unbound:
            resv = self.reservations.get(arr)
            if resv is not None:
                for node in resv.nodes:
                    self.mark_dirty(node)
        self._unbound.clear()

    def _overtaken(self) -> set[Job]:
        """Each array's first job that is not the head the round settled on: under fair
        share a start moves its tenant's share, so a job of another tenant may come
        first after its array's head was settled (and bound by that head's reservation).
        Another round settles it; without this it waited, with a stale reason, for a
        node to change."""
        if not self._shares_moved:  # no start or stop this round: the heads stand
            return set()
        overtaken = set()
        for arr, head in self.heads.items():
            if head is not None and head.start < 0:
                first = self._earliest(arr)
                if first is not None and first is not head:
                    overtaken.add(first)
        return overtaken

    def _round(self, dirty: list[Node], fresh: set[Job]) -> None:
        if self._every_job:
            # Slurm's sched/backfill: the whole queue, every job planned (every_job.py).
            self._every_job_rounds()
            return
        # Nodes that gain room during the round (a reservation spent or moved)
        # join `dirty` at once, so the jobs kept off them are retried now.
        self._live, self._live_set = dirty, set(dirty)
        # node idx -> [(shadow, owner's queue key, owner)]: binds later-queued jobs only
        active: dict[int, list[Hold]] = {}
        heads = self._start_heads(dirty, fresh, active)
        self.heads = heads
        if not self.policy.backfill:
            # Strict FIFO per array: nothing behind a blocked head may start.
            blocked = {arr for arr, h in heads.items() if h is not None}
        else:
            blocked = set()
        self._backfill(dirty, fresh, active, heads, blocked)
        self._live = None

    def _rank(self, job: Job) -> tuple[Any, ...]:
        """A job's place in the queue now: its queue key, after its tenant's dominant
        share where the policy shares fairly (shares move as jobs start and end)."""
        fair = self.policy.fair_share
        if fair is None:
            return job.queue_key
        return (self.policy.queue_sort.band(job), fair.share(fair.tenant(job)), job.queue_key)

    def _earliest(self, arr: str) -> Job | None:
        """The first queued job of an array: the tenant of smallest share first where
        the policy shares fairly, then queue order (``TenantQueues``)."""
        return self._queues.first(arr)

    def _full(self, job: Job, fresh: set[Job]) -> bool:
        # Without backfill the jobs behind a head are never tried, so whatever room
        # appeared while they waited, a new head is searched for everywhere.
        if job in fresh or not self.policy.backfill:
            return True
        bucket = self._bucket_of.get(job)
        return bucket is not None and bucket.full

    def _start_heads(
        self, dirty: list[Node], fresh: set[Job], active: dict[int, list[Hold]]
    ) -> dict[str, Job | None]:
        """Start each array's first jobs while they fit; the first that does not
        is the array's head and holds a reservation. Heads are settled in queue
        order across arrays, so an earlier head's reservation binds a later one."""
        names = self.policy.arrays.names
        heads: dict[str, Job | None] = dict.fromkeys(names)
        pending: dict[str, Job] = {}
        for arr in names:
            first = self._earliest(arr)
            if first is not None:
                pending[arr] = first
        core_count = self.policy.core_count
        while pending:
            if len(pending) == 1:
                arr = next(iter(pending))
            else:
                arr = min(pending, key=lambda a: self._rank(pending[a]))
            job = pending[arr]
            gen = core_count.generation
            cores_pn = self.cores(job)
            if self._try(job, self._full(job, fresh), dirty, active, cores_pn):
                nxt = self._earliest(arr)
                if nxt is None:
                    del pending[arr]
                else:
                    pending[arr] = nxt
                continue
            heads[arr] = job
            del pending[arr]
            if self.policy.backfill:
                if core_count.generation != gen:  # the attempt moved core counts
                    cores_pn = self.cores(job)
                self._hold(arr, job, active, cores_pn)
        return heads

    def _try(
        self,
        job: Job,
        full: bool,
        dirty: list[Node],
        active: dict[int, list[Hold]],
        cores_pn: int | None = None,
    ) -> bool:
        """Start the job if it fits (an old job: on a dirty node); True if started."""
        if cores_pn is None:
            cores_pn = self.cores(job)
        job.estimate = self.policy.estimates.runtime(job, cores_pn)
        self._alike = False
        self._failed_with = None
        nodes = self._find_nodes(job, cores_pn, active, None if full else dirty)
        if nodes is None:
            bucket = self._bucket_of.get(job)
            if full and bucket is not None and bucket.full and self._alike:
                # Refused by what its bucket's jobs share: they need no full search each
                # (memory, reservations and per-job filters depend on the job).
                bucket.full = False
            return False
        return self._start(job, nodes, cores_pn)

    def _hold(self, arr: str, job: Job, active: dict[int, list[Hold]], cores_pn: int) -> None:
        """Give a blocked head its reservation and make it bind later-queued jobs."""
        old = self.reservations[arr]
        resv = self._reserve_for(arr, job, cores_pn, active)
        moved = old is not None and old is not resv
        if moved and resv is not None and old is not None and resv.job is old.job:
            # The same job on the same nodes, from no later: nothing kept off them may
            # fit now. (A new head was itself kept off them, by its predecessor's hold.)
            moved = resv.nodes != old.nodes or resv.shadow > old.shadow
        if moved and old is not None:
            for node in old.nodes:
                self.mark_dirty(node)  # jobs kept off these nodes may fit now
        if resv is not None:
            resv.rank = self._rank(job)
            for node in resv.nodes:
                active.setdefault(node.idx, []).append((resv.shadow, resv.rank, job))

    def _find_nodes(
        self,
        job: Job,
        cores_pn: int,
        active: dict[int, list[Hold]],
        only: list[Node] | None,
    ) -> list[Node] | None:
        """Feasible nodes in best-fit order, then the policy's scores pick among them.

        ``only``: search just these nodes (a single-node job retried after a
        departure); a gang job always searches the index, since the nodes it
        needs beside a freed one may have been free all along. On failure the
        job's reason is noted.
        """
        policy = self.policy
        need = job.nodes
        want = max(need, policy.candidates_to_score)
        pools = policy.pools.pools(job)
        reclaim = job.kind == DNN and self.dnn_index is not None
        if only is not None and need == 1 and len(only) <= _SORT_DIRTY_UP_TO:
            gpus_pn = job.gpus_pn
            cands = [
                n
                for n in only
                if n.pool in pools
                and n.free_gpus >= gpus_pn
                and (n.free_cores >= cores_pn or reclaim and self._dnn_fits(n, cores_pn))
            ]
            if not cands:  # nothing on them has the room
                self._note(job, self._short_of(job, cores_pn, pools))
                self._alike = True
                return None
            if len(cands) > 1 and self._fewest_cores:
                # Pools in no order (Slurm's), nodes that need reclaiming last.
                cands.sort(key=lambda n: (n.free_cores < cores_pn, n.free_cores, n.idx))
            elif len(cands) > 1:
                cands.sort(
                    # Nodes where it would have to reclaim CPU jobs' cores come last.
                    key=lambda n: (
                        pools.index(n.pool),
                        n.free_cores < cores_pn,
                        n.free_gpus,
                        n.free_cores,
                        n.idx,
                    ),
                )
            streams: list[Iterable[Node]] = [cands]
        else:
            # Many dirty nodes: the index finds the same feasible set (no node that
            # stayed clean can fit a job that failed before) without sorting them.
            streams = []
            fewest = self._fewest_cores
            if fewest and len(pools) > 1:
                # Slurm's order knows no pools: one order over the pools' nodes.
                streams.append(
                    heapq.merge(
                        *(self.index[p].fewest_cores(job.gpus_pn, cores_pn)
                          for p in pools if p in self.index),
                        key=_fewest_cores_key,
                    )
                )  # fmt: skip
            for p in pools:
                if p in self.index:
                    index = self.index[p]
                    if fewest:
                        if len(pools) == 1:
                            streams.append(index.fewest_cores(job.gpus_pn, cores_pn))
                    else:
                        streams.append(index.best_fit(job.gpus_pn, cores_pn))
                    if reclaim and p == GPU_POOL:
                        # Then the nodes that fit only once CPU jobs give cores back.
                        streams.append(self._needs_reclaim(job.gpus_pn, cores_pn))
        mem = job.mem_pn
        finish_by = self.now + job.estimate
        key: tuple[Any, ...] | None = None  # its rank, worked out where a reservation asks
        filters = policy.filters
        found: list[Node] = []
        seen = 0
        by_mem = 0
        by_resv: Job | None = None
        by_filter: str | None = None
        by_job = False  # refused by something its bucket's jobs need not share
        for stream in streams:
            for node in stream:
                seen += 1
                if mem and node.mem_mib and node.free_mem < mem:
                    by_mem += 1
                    continue
                held = active.get(node.idx)
                if held is not None:
                    if key is None:
                        key = self._rank(job)
                    owner = self._binding_owner(job, key, finish_by, held)
                    if owner is not None:
                        by_resv = by_resv or owner
                        continue  # would delay an earlier job's reservation
                if filters:
                    refused = None
                    for f in filters:  # Policy.refusing_filter, without the call
                        if not f.filter(job, node, cores_pn):
                            refused = f
                            break
                    if refused is not None:
                        by_filter = by_filter or type(refused).__name__
                        by_job = by_job or not refused.by_shape
                        continue
                found.append(node)
                if len(found) >= want:
                    break
            if len(found) >= want:
                break
        if len(found) < need:
            if by_resv is not None:
                reason = self._why(R.RESERVATION, behind=by_resv.job_id)
            elif by_filter is not None:
                reason = self._why(R.FILTER, by_filter)
            elif by_mem:
                reason = self._why(R.MEMORY, str(mem))
            elif seen == 0 or only is not None:
                reason = self._short_of(job, cores_pn, pools)
            else:
                reason = self._why(R.CORES, str(cores_pn))  # a gang short of nodes
            self._note(job, reason)
            self._alike = not (by_job or by_mem or by_resv is not None)
            if not by_job:
                self._failed_with = (
                    finish_by if by_resv is not None else -math.inf,
                    mem if by_mem else 0,
                    key if by_resv is not None else None,
                )
            return None
        return policy.pick(job, found, cores_pn, need)

    def _short_of(self, job: Job, cores_pn: int, pools: tuple[str, ...]) -> Reason:
        """Nothing fitted: whether GPUs or cores are what no node has free."""
        reclaim = job.kind == DNN and self.dnn_index is not None
        for p in pools:
            index = self.dnn_index if reclaim and p == GPU_POOL else self.index.get(p)
            if index is not None:
                masks = index.masks
                for g in range(job.gpus_pn, len(masks)):
                    if masks[g]:  # some node has its GPUs free
                        return self._why(R.CORES, str(cores_pn))
        if job.gpus_pn:
            return self._why(R.GPUS, str(job.gpus_pn))
        return self._why(R.CORES, str(cores_pn))

    # ------------------------------------------------------------ start
    def _start(self, job: Job, nodes: list[Node], cores_pn: int) -> bool:
        """Reclaim what it needs, book it, hand it to the driver; True if it started."""
        now = self.now
        executor = self._executor
        assert executor is not None
        if job.is_dnn and self.dnn_index is not None:
            for node in nodes:
                if node.free_cores < cores_pn and not self._reclaim(
                    job, node, cores_pn - node.free_cores
                ):
                    # The driver could not take the cores back (a process that will not
                    # die): the job waits, for cores, and nothing is over-committed.
                    self._note(job, Reason(R.CORES, str(cores_pn)))
                    return False
        # The last reason it waited, for the drivers' records (FIFO waits are worked out
        # from the array's head, so they are read here, before it leaves the queue).
        job.wait = self._waited(job)
        self.occupy(job, nodes, cores_pn, now)
        job.start = now
        self._bucket_of.pop(job, None)
        self.queued[job.kind] -= 1
        arr = self.policy.arrays.array_of(job)
        resv = self.reservations[arr]
        if resv is not None and resv.job is job:
            # Its reservation is spent; jobs it kept off those nodes may fit there now.
            self.reservations[arr] = None
            for node in resv.nodes:
                self.mark_dirty(node)
        if job.is_dnn and self.policy.filters and self.queued[CPU]:
            # Filters may depend on idle GPUs (CODA's reserve for them shrinks when
            # they are taken), so queued CPU jobs are worth a retry here.
            for node in nodes:
                if node.free_cores:
                    self.mark_dirty(node)
        start = Start(job, tuple(nodes), cores_pn)
        self._decisions.append(start)
        if not executor.bind(start):
            if job.placement:  # the driver may have given it back already
                self.vacate(job, now)
            job.start = -1.0
            job.queue_key = ()
            self._decisions.pop()
            return False
        return True

    def _reclaim(self, job: Job, node: Node, need: int) -> bool:
        """Free ``need`` cores that CPU jobs hold on node, as the policy chooses; False
        if the driver could not carry an action out (it returned False)."""
        reclaim = self.policy.reclaim
        executor = self._executor
        assert reclaim is not None and executor is not None
        before = node.free_cores
        refused = False
        for action in reclaim.reclaim(job, node, need, self.now):
            if not action.job.running:
                continue
            self._decisions.append(Reclaimed(job, node, action))
            if executor.apply(action) is False:
                refused = True
        if node.free_cores - before >= need:
            return True
        if refused:
            return False
        raise InvariantError(
            f"reclaim freed {node.free_cores - before} of the {need} cores {job} needs on {node}"
        )

    def _waited(self, job: Job) -> Reason | None:
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
            if head is not None and head is not job and job.submit < self.now:
                reason = Reason(R.FIFO, behind=head.job_id)
        return reason

    def check_no_waiting_fit(self) -> None:
        """Invariant check (tests and ``--check-invariants`` runs only): after a cycle
        no queued job may fit anywhere, unless a reservation of an earlier-queued job
        forbids it (or, without backfill, it is not first)."""
        active: dict[int, list[Hold]] = {}
        every_job = self.policy.reserves_every_job
        if every_job:
            for idx, held in self.every_job_holds.items():
                active[idx] = [h for h in held if self.is_queued(h[2])]
        for resv in self.reservations.values():
            if resv is not None and resv.job.start < 0:
                for node in resv.nodes:
                    active.setdefault(node.idx, []).append((resv.shadow, resv.rank, resv.job))
        for arr in self.policy.arrays.names:
            waiting = sorted(
                (j for b in self.buckets[arr].values() for j in b.live()),
                key=self._rank,
            )
            if not self.policy.backfill:
                first = self._earliest(arr)
                waiting = [first] if first is not None else []
            for job in waiting:
                if every_job and isinstance(job.wait, Reason) and job.wait.code == R.DEPTH:
                    continue  # past the depth: not looked at, as in Slurm's pass
                cores_pn = self.cores(job)
                job.estimate = self.policy.estimates.runtime(job, cores_pn)
                wait, cycle = job.wait, job.wait_cycle
                if self._find_nodes(job, cores_pn, active, None) is not None:
                    raise InvariantError(f"{job} fits at t={self.now} but was left waiting")
                job.wait, job.wait_cycle = wait, cycle


def _fewest_cores_key(n: Node) -> tuple[int, int]:
    return n.free_cores, n.idx
