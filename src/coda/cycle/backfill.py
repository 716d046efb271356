"""Backfill: the jobs behind the arrays' heads, tried where they delay no reservation.

Old jobs are tried on the nodes that gained room since the last cycle ("dirty"), bucket
by bucket in merged queue order, against the room those nodes offer; buckets that cannot
fit it wait parked (``Parking``), buckets whose job failed alike wait until a node
changes, and a job needing no less than one of its bucket that failed is not tried. New
jobs get a full search. Each attempt is the ``Starter``'s; what refused a failed one is
its ``NodeSearch``'s to tell.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from typing import Any

from coda.cycle import reasons as R
from coda.cycle.buckets import Bucket, Entry, Parked, Parking, Room
from coda.cycle.clock import Clock
from coda.cycle.nodes import NodeBook
from coda.cycle.queue import Queue
from coda.cycle.reasons import Reason, Reasons
from coda.cycle.reservations import Hold
from coda.cycle.search import NodeSearch
from coda.cycle.starts import Starter
from coda.cycle.tenants import rank
from coda.policy.framework import CoreBound, Policy
from coda.policy.state import CPU, DNN, Job, Node


class Backfill:
    """The jobs behind the heads: the backfill half of the cycle."""

    def __init__(
        self,
        policy: Policy,
        book: NodeBook,
        queue: Queue,
        search: NodeSearch,
        starter: Starter,
        reasons: Reasons,
        clock: Clock,
    ) -> None:
        self.policy = policy
        self.book = book
        self.queue = queue
        self.search = search
        self.starter = starter
        self.reasons = reasons
        self.clock = clock
        self._bounds = [f for f in policy.filters if isinstance(f, CoreBound)]
        # Stand-in jobs, to ask the policy which pools each kind of job may use.
        self._probe = {
            DNN: Job(-1, "probe", 0.0, 1, 1, 0, 1, 0.0),
            CPU: Job(-1, "probe", 0.0, 0, 1, 0, 1, 0.0),
        }

    def run(
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
        and memory over the dirty nodes, as of the last start). The jobs of a bucket
        whose core count may have changed, and those a sweep cut short by the backfill
        depth did not get to, owe a full search instead (``Bucket.full``; a cycle is
        due while any is owed for the depth). New jobs get a full search.

        Most buckets cannot fit the room at all (a departure frees one node), so a
        bucket whose next job does not fit it is parked (``Parking``) instead of
        taking part in the merge: it is looked at again only when the room changes,
        and joins the merge then if it fits. That walks the same jobs in the same
        order, with the same room, as merging every bucket would."""
        # With no dirty node only buckets owed a full search take part; none may be.
        walk = bool(dirty) or self.queue.maybe_full
        if walk:
            self._merge(dirty, fresh, active, heads, blocked)
        # New arrivals come last in a FIFO queue; each gets a full search. One that fails
        # by what its bucket's jobs share fails for the next new one of its bucket too,
        # while nothing changed (a restart queues every held job at once): that one gets
        # what its search would have given it (its estimate, and the same reason).
        queue, book, bucket_of = self.queue, self.book, self.queue.bucket_of
        core_count, estimates = self.policy.core_count, self.policy.estimates
        stopped: dict[Bucket, tuple[tuple[int, int, int], Reason]] = {}
        # One that failed by its memory, length or rank as well: a new job of its bucket
        # needing no less of each fails too while nothing changed (``_dominated``).
        failed: dict[Bucket, tuple[tuple[Any, ...], Reason]] = {}
        for job in sorted(fresh, key=lambda j: j.queue_key) if len(fresh) > 1 else fresh:
            arr = self.policy.arrays.array_of(job)
            if job.start < 0 and job in bucket_of and job is not heads[arr]:
                if arr in blocked:
                    continue
                bucket = bucket_of[job]
                state = (book.book_version, len(dirty), core_count.generation)
                cores_pn = book.cores(job)  # asked once: the memos' and the attempt's
                memo = stopped.get(bucket)
                if memo is not None and memo[0] == state and bucket.wait == memo[1]:
                    job.estimate = estimates.runtime(job, cores_pn)
                    queue.note(job, memo[1])
                    continue
                held = failed.get(bucket)
                if held is not None and self._dominated(job, cores_pn, held[0], len(dirty)):
                    queue.note(job, held[1])
                    if bucket.full:
                        bucket.searched_through(job)
                    continue
                started = self.starter.attempt(job, True, dirty, active, cores_pn)
                if started or not isinstance(job.wait, Reason):
                    continue
                if self.search.alike:
                    stopped[bucket] = (state, job.wait)
                elif self.search.failed_with is not None:
                    failed[bucket] = ((state, self.search.failed_with), job.wait)
        self.queue.settle_full()

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
        queue, book, search, starter = self.queue, self.book, self.search, self.starter
        room = self._room(dirty)
        seen = len(dirty)
        heap: list[Entry] = []
        # A full bucket's last key that had its full search: its walk on the dirty
        # nodes stops there, where the walk of the jobs that owe one goes on.
        bound: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]] = {}
        parking = Parking(lambda a, shape, b: self._judged(a, shape, b, heads[a], fresh))
        # No bucket owed a full search: a group lacking the room's GPUs parks unseen.
        by_group = bool(dirty) and not queue.maybe_full
        any_full = False
        for arr in self.policy.arrays.names:
            if arr in blocked:
                continue
            buckets = queue.buckets[arr]
            groups = queue.groups[arr]
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
                if full:
                    # Its jobs up to ``searched`` had their full search: they are retried
                    # on the dirty nodes like any old job's, the rest searched in full.
                    front = bucket.front()  # first: it may trim, moving the indices
                    owed = bucket.unsearched()
                    if owed is None:
                        full = bucket.full = False
                    else:
                        any_full = True
                        bound[(arr, shape)] = bucket.searched
                        heap.append((owed[0], arr, shape, owed[1]))
                        if dirty and front is not None and front[0] < owed[0]:
                            heap.append((front[0], arr, shape, bucket.pos))
                        continue
                if not dirty:
                    continue
                parked = parking.judge(arr, shape, bucket)
                if parked is not None:
                    self._take_part(parked, room, heap, parking)
                elif bucket.front() is None:
                    del buckets[shape], groups[shape[:2]][shape]  # every job started or left
        if not by_group and not any_full and not blocked:
            queue.maybe_full = False  # Bucket.full is set only with a new generation
        heapq.heapify(heap)
        examined = dict.fromkeys(self.policy.arrays.names, 0)
        cut: set[str] = set()  # arrays whose sweep of the dirty nodes the depth stopped
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
            if stopped and stamp != (book.book_version, len(dirty), core_count.generation):
                assert last is not None
                self._go_on(stopped, heap, last[0], bound)
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
            bucket = queue.buckets[arr][shape]
            job = bucket.jobs[at]
            searched = bound.get((arr, shape)) if bound else None
            if job.start < 0 and job is not heads[arr] and job not in fresh:
                if bucket.full and (searched is None or key > searched):
                    if examined[arr] >= depth:
                        self._put_off(job)
                        queue.depth_owed = True
                        continue  # still full: its search comes next cycle
                    examined[arr] += 1
                    started = starter.attempt(job, True, dirty, active)
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
                        cores_pn = cores_of[shape] = bucket.cores_of(job, now_gen, book.cores)
                    if job.gpus_pn > max_g or cores_pn > max_c:
                        continue  # no older job behind it in this bucket fits the dirty nodes
                    # A job too big for their memory is passed over without an attempt
                    # (jobs behind it may need less), so it does not use up the depth.
                    if job.mem_pn <= max_m or job.nodes > 1:
                        if examined[arr] >= depth:
                            if arr not in cut:
                                cut.add(arr)
                                self._owe_after_cut(arr, key, room)
                            self._put_off(job)
                            continue
                        examined[arr] += 1  # depth counts real placement attempts
                        memo = failed_with.get((arr, shape)) if failed_with else None
                        if memo is not None and self._dominated(job, cores_pn, memo, len(dirty)):
                            pass  # it would fail as the bucket's job before it did
                        else:
                            started = starter.attempt(job, False, dirty, active, cores_pn)
                            if started:
                                room = self._room(dirty)
                            if parking:
                                gen = self._after_try(parking, heap, room, last, gen, started)
                            if not started and (search.alike or search.failed_with):
                                state = (book.book_version, len(dirty), core_count.generation)
                                if search.alike:
                                    stopped.append((arr, shape))
                                    stamp = state
                                    continue
                                failed_with[(arr, shape)] = (state, search.failed_with)
            nxt_job = bucket.next_after(at)
            if nxt_job is not None and (
                searched is None or key > searched or nxt_job[0] <= searched
            ):
                heapq.heappush(heap, (nxt_job[0], arr, shape, nxt_job[1]))

    def _owe_after_cut(self, arr: str, key: tuple[Any, ...], room: Room) -> None:
        """The depth stopped arr's sweep of the dirty nodes at ``key``: the buckets whose
        jobs fit the room (what those nodes offer) owe their jobs from there on a full
        search, in later cycles."""
        gen, cores, owing = self.policy.core_count.generation, self.book.cores, []
        for shape, bucket in self.queue.buckets[arr].items():
            max_g, max_c, _ = room[shape[0]]
            if shape[1] > max_g:
                continue
            at = bisect_left(bucket.keys, key)
            if at < len(bucket.keys) and bucket.cores_of(bucket.jobs[at], gen, cores) <= max_c:
                owing.append(bucket)
        self.queue.owe_full_from(owing, key)

    def _put_off(self, job: Job) -> None:
        """The depth left job unexamined this round: it keeps the reason its last
        examination gave (as Slurm's backfill does), or is given the depth's."""
        shown = self.queue.reason_of(job)
        if shown is None or shown.code == R.NEW:
            self.queue.note(job, self.reasons.why(R.DEPTH))

    def _dominated(self, job: Job, cores_pn: int, memo: tuple[Any, ...], dirty: int) -> bool:
        """Whether job would fail as its bucket's job that left ``memo`` (the merge's
        stamp then, and ``NodeSearch.failed_with``) did: nothing changed since, and it needs no
        less time, memory and rank (a reservation that bound that job binds it too).
        Sets its estimate as an attempt would."""
        state, (finish_by, mem, held_by) = memo
        if state != (self.book.book_version, dirty, self.policy.core_count.generation):
            return False
        if job.mem_pn < mem:
            return False
        job.estimate = self.policy.estimates.runtime(job, cores_pn)
        if self.clock.now + job.estimate < finish_by:
            return False
        return held_by is None or rank(self.policy, job) >= held_by

    def _go_on(
        self,
        stopped: list[tuple[str, tuple[Any, ...]]],
        heap: list[Entry],
        after: Any,
        bound: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]],
    ) -> None:
        """Stopped buckets rejoin the merge at their first job queued after ``after``
        (the ones before it were passed over while they would have failed alike), up to
        a full bucket's ``bound`` (its jobs after that are walked on their own)."""
        for arr, shape in stopped:
            bucket = self.queue.buckets[arr].get(shape)
            if bucket is None:
                continue
            nxt = bucket.next_after(bisect_right(bucket.keys, after) - 1)
            searched = bound.get((arr, shape))
            if nxt is not None and (searched is None or nxt[0] <= searched):
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
        cores_pn = bucket.cores_of(job, self.policy.core_count.generation, self.book.cores)
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

    def _room(self, dirty: list[Node]) -> Room:
        """(max free GPUs, cores, memory) over the dirty nodes each kind may use; the
        cores as far as the filters that declare ``CoreBound`` would let them in."""
        room = {}
        bounds = self._bounds
        for kind, probe in self._probe.items():
            pools = self.policy.pools.pools(probe)
            g = c = -1
            m = -1.0
            reclaim = kind == DNN and self.book.dnn_index is not None
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
