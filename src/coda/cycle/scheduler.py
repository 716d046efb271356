"""The scheduling cycle: one runner for the simulator, the node agent and Slurm.

Pure: no I/O, no clock (``now`` is passed in). It holds the queue (each of the
policy's arrays as FIFO buckets), an index of nodes, each array's backfill
reservation and which nodes gained room since the last cycle. A cycle

1. starts each array's first jobs while they fit; the first that does not is the
   array's head and holds a reservation (when and where it can start, from the
   policy's runtime estimates); heads settle in queue order across arrays;
2. backfills: jobs behind the heads, in queue order, start where they do not
   delay a reservation (without runtime estimates: none, strict FIFO);
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
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from typing import Any

from coda.cycle import reasons as R
from coda.cycle.checks import check_no_waiting_fit
from coda.cycle.decisions import Decision, Executor, Reclaimed, Start
from coda.cycle.nodes import InvariantError
from coda.cycle.queue import Bucket, Entry, Parked, Parking, Room
from coda.cycle.reasons import Reason
from coda.cycle.reservations import Hold, Reservation, Reservations
from coda.cycle.tenants import TenantQueues
from coda.policy.framework import CoreBound, Policy
from coda.policy.state import CPU, DNN, GPU_POOL, Job, Node

_MAX_ROUNDS = 64  # rounds at one instant (each starts jobs or moves a reservation)
_SORT_DIRTY_UP_TO = 64  # more dirty nodes than this: search the index instead
_REASONS_KEPT = 4096  # distinct reasons shared (Scheduler._why) before starting afresh


class Scheduler(Reservations):
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
        self._queues = TenantQueues(arrays, policy.fair_share, self._live_entry)
        self.reservations: dict[str, Reservation | None] = dict.fromkeys(arrays)
        self.heads: dict[str, Job | None] = dict.fromkeys(arrays)
        self._bucket_of: dict[Job, Bucket] = {}
        self.queued = {DNN: 0, CPU: 0}
        self._new: list[Job] = []  # submitted since the last cycle: owed a full search
        self._carry: set[Job] = set()  # requeued jobs still owed a full search
        self._requeue: list[Job] = []  # preempted during a cycle, queued after its round
        self._in_cycle = False
        self._generation = policy.core_count.generation
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
    def cores(self, job: Job) -> int:
        return self.policy.core_count.cores_per_node(job)

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
        for arr, resv in self.reservations.items():
            if resv is not None and resv.job is job:
                self.reservations[arr] = None
                for node in resv.nodes:
                    self.mark_dirty(node)

    def is_queued(self, job: Job) -> bool:
        return job in self._bucket_of

    def _enqueue(self, job: Job) -> None:
        arr = self.policy.arrays.array_of(job)
        # Its pools too: alike jobs must be able to go to the same nodes (the merge
        # passes over a bucket whose job failed alike).
        pools = self.policy.pools.pools(job)
        shape = (job.kind, job.gpus_pn, job.nodes, self.policy.core_count.group_key(job), pools)
        buckets = self.buckets[arr]
        bucket = buckets.get(shape)
        if bucket is None:
            bucket = buckets[shape] = Bucket()
            self._groups[arr].setdefault(shape[:2], {})[shape] = bucket
        # The preemption count keeps a requeued job's new entry apart from its old one.
        job.queue_key = (self.policy.queue_sort.key(job), job.idx, job.preemptions)
        bucket.add(job.queue_key, job)
        self._bucket_of[job] = bucket
        self._queues.push(arr, job)
        self.queued[job.kind] += 1

    def _live_entry(self, key: tuple[Any, ...], job: Job) -> bool:
        return job.start < 0 and job.queue_key == key and job in self._bucket_of

    def _booked(self, job: Job) -> None:
        fair = self.policy.fair_share
        if fair is not None:
            self._queues.touch(fair.tenant(job))

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
            or self.policy.core_count.generation != self._generation
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
                dirty = list(self.dirty)
                self.dirty = {}
                self._round(dirty, fresh)
                fresh = set()  # they have had their full search
                if self._requeue:
                    # Preempted mid-round: queued now (not while buckets were being
                    # walked) and given a full search like new arrivals.
                    for job in self._requeue:
                        self._enqueue(job)
                    fresh = set(self._requeue)
                    self._requeue = []
                elif not self.dirty:
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

    def _round(self, dirty: list[Node], fresh: set[Job]) -> None:
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
        return (fair.share(fair.tenant(job)), job.queue_key)

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

    def _backfill(
        self,
        dirty: list[Node],
        fresh: set[Job],
        active: dict[int, list[Hold]],
        heads: dict[str, Job | None],
        blocked: set[str],
    ) -> None:
        """Try the jobs behind the heads, in queue order, where they do not delay
        a reservation. Old jobs are tried on the dirty nodes, bucket by bucket in
        merged queue order; a bucket stops at its first job that does not fit
        what those nodes offer at that point (the room: the most free GPUs, cores
        and memory over the dirty nodes, as of the last start). A bucket whose
        core count may have changed gets a full search for its front instead. New
        jobs get a full search.

        Most buckets cannot fit the room at all (a departure frees one node), so a
        bucket whose next job does not fit it is parked (``Parking``) instead of
        taking part in the merge: it is looked at again only when the room changes,
        and joins the merge then if it fits. That walks the same jobs in the same
        order, with the same room, as merging every bucket would."""
        # With no dirty node only buckets owed a full search take part; none may be.
        walk = bool(dirty) or self._maybe_full
        if walk:
            self._merge(dirty, fresh, active, heads, blocked)
        # New arrivals come last in a FIFO queue; each gets a full search.
        for job in sorted(fresh, key=lambda j: j.queue_key) if len(fresh) > 1 else fresh:
            arr = self.policy.arrays.array_of(job)
            if job.start < 0 and job in self._bucket_of and job is not heads[arr]:
                if arr not in blocked:
                    self._try(job, True, dirty, active)

    def _merge(
        self,
        dirty: list[Node],
        fresh: set[Job],
        active: dict[int, list[Hold]],
        heads: dict[str, Job | None],
        blocked: set[str],
    ) -> None:
        """Backfill's merge of the old jobs, bucket by bucket in queue order."""
        depth = self.policy.backfill_depth
        core_count = self.policy.core_count
        room = self._room(dirty)
        seen = len(dirty)
        heap: list[Entry] = []
        parking = Parking(lambda a, shape, b: self._judged(a, shape, b, heads[a], fresh))
        # No bucket owed a full search: a group lacking the room's GPUs parks unseen.
        by_group = bool(dirty) and not self._maybe_full
        any_full = False
        for arr in self.policy.arrays.names:
            if arr in blocked:
                continue
            buckets = self.buckets[arr]
            groups = self._groups[arr]
            if by_group:
                for (kind, gpus_pn), group in groups.items():
                    if gpus_pn > room[kind][0]:
                        if group:
                            parking.groups.append((kind, gpus_pn, arr, group))
                        continue
                    for shape, bucket in list(group.items()):
                        parked = parking.judge(arr, shape, bucket)
                        if parked is not None:
                            self._take_part(parked, room, heap, parking)
                        elif bucket.front() is None:
                            del buckets[shape], group[shape]  # every job of it started or left
                continue
            for shape in list(buckets):
                bucket = buckets[shape]
                full = bucket.full
                any_full = any_full or full
                if not dirty and not full:
                    continue
                front = bucket.front() if full else None
                parked = None if full else parking.judge(arr, shape, bucket)
                if front is not None:
                    heap.append((front[0], arr, shape, bucket.pos))
                elif parked is not None:
                    self._take_part(parked, room, heap, parking)
                elif bucket.front() is None:
                    del buckets[shape], groups[shape[:2]][shape]  # every job started or left
        if not by_group and not any_full and not blocked:
            self._maybe_full = False  # Bucket.full is set only with a new generation
        heapq.heapify(heap)
        examined = dict.fromkeys(self.policy.arrays.names, 0)
        cores_of: dict[tuple[Any, ...], int] = {}
        gen = core_count.generation
        last: Entry | None = None  # the entry the merge took last
        # Buckets whose job failed alike (``_alike``): the rest of each fails alike until
        # a node changes, nodes join or core counts move (the stamp); then they go on.
        stopped: list[tuple[str, tuple[Any, ...]]] = []
        stamp = (-1, -1, -1)
        # Buckets whose job failed by its memory, length or rank as well: a job of theirs
        # needing no less of each fails too while the stamp stands (``_dominated``).
        failed_with: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]] = {}
        while True:
            if stopped and stamp != (self.book_version, len(dirty), core_count.generation):
                assert last is not None
                self._go_on(stopped, heap, last[0])
                stopped = []
            if parking and len(dirty) != seen:
                # Nodes joined: the merge reads the room afresh at its next room check.
                # Where a parked bucket comes before the merge's next entry, that check is
                # its own (nothing changed since the last step): read the room now.
                nxt = parking.first_after(last, room)
                if nxt is not None and (not heap or nxt < heap[0]):
                    room, seen = self._room(dirty), len(dirty)
                    parking.unpark(heap, room, last)
                    continue
            if not heap:
                break
            last = heapq.heappop(heap)
            key, arr, shape, at = last
            bucket = self.buckets[arr][shape]
            job = bucket.jobs[at]
            if job.start < 0 and job is not heads[arr] and job not in fresh:
                if bucket.full:
                    if examined[arr] >= depth:
                        self._note(job, self._why(R.DEPTH))
                        continue  # still full: its search comes next cycle
                    examined[arr] += 1
                    started = self._try(job, True, dirty, active)
                    if started:
                        room = self._room(dirty)
                    if parking:
                        gen = self._after_try(parking, heap, room, last, gen, started)
                    if not started and not bucket.full:
                        continue  # the rest of the bucket fails alike
                else:
                    if len(dirty) != seen:  # nodes joined mid-round
                        room, seen = self._room(dirty), len(dirty)
                        if parking:
                            parking.unpark(heap, room, last)
                    max_g, max_c, max_m = room[job.kind]
                    # Jobs of a bucket get equal core counts (CoreCount's contract): ask
                    # the plugin once per bucket and round.
                    cores_pn = cores_of.get(shape, -1)
                    if cores_pn < 0:
                        now_gen = core_count.generation
                        cores_pn = cores_of[shape] = bucket.cores_of(job, now_gen, self.cores)
                    if job.gpus_pn > max_g or cores_pn > max_c:
                        continue  # no older job behind it in this bucket fits the dirty nodes
                    # A job too big for their memory is passed over without an attempt
                    # (jobs behind it may need less), so it does not use up the depth.
                    if job.mem_pn <= max_m or job.nodes > 1:
                        if examined[arr] >= depth:
                            self._deferred.update(dict.fromkeys(dirty))
                            self._note(job, self._why(R.DEPTH))
                            continue
                        examined[arr] += 1  # depth counts real placement attempts
                        memo = failed_with.get((arr, shape)) if failed_with else None
                        if memo is not None and self._dominated(job, cores_pn, memo, len(dirty)):
                            pass  # it would fail as the bucket's job before it did
                        else:
                            started = self._try(job, False, dirty, active, cores_pn)
                            if started:
                                room = self._room(dirty)
                            if parking:
                                gen = self._after_try(parking, heap, room, last, gen, started)
                            if not started and self._alike:
                                stopped.append((arr, shape))
                                stamp = (self.book_version, len(dirty), core_count.generation)
                                continue
                            if not started and self._failed_with is not None:
                                failed_with[(arr, shape)] = (
                                    self.book_version,
                                    len(dirty),
                                    core_count.generation,
                                    *self._failed_with,
                                )
            nxt_job = bucket.next_after(at)
            if nxt_job is not None:
                heapq.heappush(heap, (nxt_job[0], arr, shape, nxt_job[1]))

    def _dominated(self, job: Job, cores_pn: int, memo: tuple[Any, ...], dirty: int) -> bool:
        """Whether job would fail as its bucket's job that left ``memo`` did: nothing
        changed since, and it needs no less time, memory and rank (a reservation that
        bound that job binds it too). Sets its estimate as an attempt would."""
        version, seen, generation, finish_by, mem, rank = memo
        if (
            version != self.book_version
            or seen != dirty
            or generation != self.policy.core_count.generation
            or job.mem_pn < mem
        ):
            return False
        job.estimate = self.policy.estimates.runtime(job, cores_pn)
        if self.now + job.estimate < finish_by:
            return False
        return rank is None or self._rank(job) >= rank

    def _go_on(
        self, stopped: list[tuple[str, tuple[Any, ...]]], heap: list[Entry], after: Any
    ) -> None:
        """Stopped buckets rejoin the merge at their first job queued after ``after``
        (the ones before it were passed over while they would have failed alike)."""
        for arr, shape in stopped:
            bucket = self.buckets[arr].get(shape)
            if bucket is None:
                continue
            nxt = bucket.next_after(bisect_right(bucket.keys, after) - 1)
            if nxt is not None:
                heapq.heappush(heap, (nxt[0], arr, shape, nxt[1]))

    def _judged(
        self, arr: str, shape: tuple[Any, ...], bucket: Bucket, head: Job | None, fresh: set[Job]
    ) -> Parked | None:
        """The bucket's first job the merge judges by the room (the array's head and new
        arrivals are passed over), as a parked entry; None if it has none."""
        front = bucket.front()
        if front is None:
            return None
        key, job = front
        at = bucket.pos
        while job is head or job in fresh:
            nxt = bucket.next_after(at)
            if nxt is None:
                return None
            key, at = nxt
            job = bucket.jobs[at]
        cores_pn = bucket.cores_of(job, self.policy.core_count.generation, self.cores)
        return (key, arr, shape, at), job.kind, job.gpus_pn, cores_pn

    @staticmethod
    def _take_part(parked: Parked, room: Room, heap: list[Entry], parking: Parking) -> None:
        """A bucket's next job joins the merge if the room fits it, else it parks."""
        entry, kind, gpus_pn, cores_pn = parked
        max_g, max_c, _ = room[kind]
        if gpus_pn > max_g or cores_pn > max_c:
            parking.entries.append(parked)
        else:
            heap.append(entry)

    def _after_try(
        self,
        parking: Parking,
        heap: list[Entry],
        room: Room,
        last: Entry,
        gen: int,
        started: bool,
    ) -> int:
        """After an attempt: a new room may fit parked buckets; new core counts (the
        generation moved) void what they were parked for, so all of them rejoin."""
        now = self.policy.core_count.generation
        if now != gen:
            parking.unpark(heap, room, last, everyone=True)
        elif started:
            parking.unpark(heap, room, last)
        return now

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
            if full and bucket is not None and bucket.full:
                wait = job.wait
                # Memory and reservations depend on the job, not only its shape.
                if not (isinstance(wait, Reason) and wait.code in (R.MEMORY, R.RESERVATION)):
                    bucket.full = False
            return False
        return self._start(job, nodes, cores_pn)

    def _room(self, dirty: list[Node]) -> Room:
        """(max free GPUs, cores, memory) over the dirty nodes each kind may use; the
        cores as far as the filters that declare ``CoreBound`` would let them in."""
        room = {}
        bounds = self._bounds
        for kind, probe in self._probe.items():
            pools = self.policy.pools.pools(probe)
            g = c = -1
            m = -1.0
            reclaim = kind == DNN and self.dnn_index is not None
            for node in dirty:  # max() of each, without the calls
                if node.pool in pools:
                    x = node.free_gpus
                    if x > g:
                        g = x
                    x = node.free_cores + node.cpu_job_cores if reclaim else node.free_cores
                    for b in bounds:
                        x = min(x, b.most_cores(kind, node))
                    if x > c:
                        c = x
                    y = node.free_mem if node.mem_mib else math.inf
                    if y > m:
                        m = y
            needs_gpu = kind == DNN
            room[kind] = (g, c, m) if c > 0 and (g > 0 or not needs_gpu) else (-1, -1, -1.0)
        return room

    def _hold(self, arr: str, job: Job, active: dict[int, list[Hold]], cores_pn: int) -> None:
        """Give a blocked head its reservation and make it bind later-queued jobs."""
        old = self.reservations[arr]
        resv = self._reserve_for(arr, job, cores_pn, active)
        moved = old is not None and old is not resv
        if moved and resv is not None and old is not None:
            # The same nodes, reserved from no later: nothing kept off them may fit now.
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
            if len(cands) > 1:
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
            for p in pools:
                if p in self.index:
                    streams.append(self.index[p].best_fit(job.gpus_pn, cores_pn))
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

    check_no_waiting_fit = check_no_waiting_fit
