"""The queued jobs of one array, as FIFO buckets of alike jobs.

Jobs of one shape (kind, GPUs per node, nodes, the core count's group) fit or
fail alike, so a cycle looks at bucket fronts, not at every queued job. Each
bucket is sorted by queue key; started or withdrawn jobs are skipped lazily and
trimmed from the front. ``Parking`` holds back, during one backfill merge, the
buckets whose next job cannot fit what the dirty nodes offer.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

from coda.policy.state import Job


class Bucket:
    __slots__ = (
        "keys", "jobs", "pos", "wait", "wait_cycle", "full", "searched", "memo_job", "memo_gen",
        "memo_cores",
    )  # fmt: skip

    def __init__(self) -> None:
        self.keys: list[tuple[Any, ...]] = []
        self.jobs: list[Job] = []
        self.pos = 0  # entries before pos have all started
        self.wait: object = None  # why its front waited last (a Reason)
        self.wait_cycle = -1
        # Core counts (or pools) changed since its jobs last failed: each owes one full
        # search, not only one on the nodes that gained room.
        self.full = False
        # While full: the queue key up to which its jobs have had that search (they
        # failed by what is their own, a reservation or memory); () for none yet.
        self.searched: tuple[Any, ...] = ()
        # The core count last asked for one of its jobs, and the plugin's generation then.
        self.memo_job: Job | None = None
        self.memo_gen = -1
        self.memo_cores = 0

    def add(self, key: tuple[Any, ...], job: Job) -> None:
        keys = self.keys
        if not keys or key >= keys[-1]:
            # The usual case, a queue in arrival order: where bisect_right would put it,
            # without its walk over a bucket as long as the queue (a compare each).
            keys.append(key)
            self.jobs.append(job)
            return
        at = bisect_right(keys, key)
        keys.insert(at, key)
        self.jobs.insert(at, job)
        self.pos = min(self.pos, at)

    def _stale(self, i: int) -> bool:
        # Started, withdrawn, or requeued (after a preemption) under a new key.
        job = self.jobs[i]
        return job.start >= 0 or job.queue_key != self.keys[i]

    def front(self) -> tuple[tuple[Any, ...], Job] | None:
        jobs, i = self.jobs, self.pos
        n = len(jobs)
        if i < n and (i <= 64 or i * 2 <= n):
            job = jobs[i]
            key = self.keys[i]
            if job.start < 0 and job.queue_key == key:
                return key, job  # the usual case: the front is still queued
        while i < n and self._stale(i):
            i += 1
        if i > 64 and i * 2 > n:  # trim the started prefix
            del self.keys[:i], self.jobs[:i]
            i = 0
        self.pos = i
        return (self.keys[i], jobs[i]) if i < len(jobs) else None

    def next_after(self, at: int) -> tuple[tuple[Any, ...], int] | None:
        jobs = self.jobs
        i = at + 1
        while i < len(jobs) and self._stale(i):
            i += 1
        return (self.keys[i], i) if i < len(jobs) else None

    def owe_full_search(self) -> None:
        self.full = True
        self.searched = ()

    def owe_full_from(self, key: tuple[Any, ...]) -> None:
        """Its jobs queued from ``key`` on owe a full search: a sweep limited by the
        backfill depth stopped there, so they never saw the nodes that gained room."""
        at = bisect_left(self.keys, key)
        if at == len(self.keys):
            return  # none of its jobs is queued after the sweep stopped
        mark = self.keys[at - 1] if at > 0 else ()
        if not self.full or mark < self.searched:
            self.searched = mark
        self.full = True

    def owes_full(self, job: Job) -> bool:
        """Whether job still owes the full search the bucket's jobs are owed."""
        return self.full and job.queue_key > self.searched

    def unsearched(self) -> tuple[tuple[Any, ...], int] | None:
        """The first queued job that still owes its full search (key, index)."""
        i = max(self.pos, bisect_right(self.keys, self.searched)) if self.searched else self.pos
        jobs = self.jobs
        while i < len(jobs) and self._stale(i):
            i += 1
        return (self.keys[i], i) if i < len(jobs) else None

    def searched_through(self, job: Job) -> None:
        """job, the first that owed its full search, failed it by what is its own: the
        jobs up to it need only the nodes that gain room from now on (the searches go
        in queue order; one out of order records nothing). The last one clears full."""
        nxt = self.unsearched()
        if nxt is not None and self.jobs[nxt[1]] is job:
            self.searched = nxt[0]
            if self.unsearched() is None:
                self.full = False

    def live(self) -> list[Job]:
        pos = self.pos
        pairs = zip(self.jobs[pos:], self.keys[pos:], strict=True)
        return [job for job, key in pairs if job.start < 0 and job.queue_key == key]

    def cores_of(self, job: Job, generation: int, ask: Callable[[Job], int]) -> int:
        """``ask(job)``, asked again only when the job or the core count's generation
        changed (CoreCount: answers change only with the generation)."""
        if job is not self.memo_job or generation != self.memo_gen:
            self.memo_job, self.memo_gen, self.memo_cores = job, generation, ask(job)
        return self.memo_cores


# The backfill merge's entries: (a job's queue key, its array, its bucket's shape, its
# index in the bucket), and a parked one with what its job needs (kind, GPUs, cores).
Entry = tuple[tuple[Any, ...], str, tuple[Any, ...], int]
Parked = tuple[Entry, str, int, int]
Room = dict[str, tuple[int, int, float]]  # kind -> (max free GPUs, cores, memory)
# Looks at a bucket for the merge: the parked form of its first job the merge judges
# by the room, or None if it has none (every job in it started, or is skipped).
Judge = Callable[[str, tuple[Any, ...], Bucket], Parked | None]


class Parking:
    """The buckets a backfill merge holds back: their next job does not fit the room
    (the most any dirty node offers), so they cost nothing until the room changes.

    Whole groups of buckets (an array's buckets of one kind and GPUs per node) park
    unseen when the room lacks those GPUs; they are looked at (``judge``) only once the
    room has the GPUs, or when the merge must know where their jobs stand."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self.entries: list[Parked] = []
        self.groups: list[tuple[str, int, str, dict[tuple[Any, ...], Bucket]]] = []

    def __bool__(self) -> bool:
        return bool(self.entries or self.groups)

    def _open(self, everyone: bool, room: Room) -> None:
        keep = []
        for group in self.groups:
            kind, gpus_pn, arr, buckets = group
            if everyone or gpus_pn <= room[kind][0]:
                for shape, bucket in list(buckets.items()):
                    parked = self.judge(arr, shape, bucket)
                    if parked is not None:
                        self.entries.append(parked)
            else:
                keep.append(group)
        self.groups = keep

    def first_after(self, last: Entry | None, room: Room) -> Entry | None:
        """The first parked entry the merge has not passed."""
        self._open(True, room)
        return min((p[0] for p in self.entries if last is None or p[0] > last), default=None)

    def unpark(
        self, heap: list[Entry], room: Room, last: Entry | None, everyone: bool = False
    ) -> None:
        """Move the parked buckets the room now fits (``everyone``: all) into the merge.
        Those the merge has passed did not fit when it did (the room had not changed)."""
        self._open(everyone, room)
        keep = []
        for p in self.entries:
            entry, kind, gpus_pn, cores_pn = p
            if last is not None and entry < last:
                continue
            max_g, max_c, _ = room[kind]
            if everyone or (gpus_pn <= max_g and cores_pn <= max_c):
                heapq.heappush(heap, entry)
            else:
                keep.append(p)
        self.entries = keep
