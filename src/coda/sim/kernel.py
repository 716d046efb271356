"""The event kernel: a virtual clock and a heap of timed events, nothing else.

An event is ``(time, seq, kind, job or None, version)``: ``seq`` keeps events at one
instant in the order they were pushed. Stale finish events (their job's version moved
on, or the job stopped) far outnumber the live ones, and the loop wakes at their times
too: when they fill the heap, ``compact`` moves their times to a sorted array, so the
heap stays the size of the live events and the loop wakes at the same instants.

The loop asks, it never walks the heap: ``next_time`` (the next instant it wakes at),
``pop`` (the next event due by an instant), ``passed`` (done with an instant).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from coda.policy.state import Job
from coda.sim.constants import FINISH

Event = tuple[float, int, int, Job | None, int]

# The heap is compacted once it holds this many events and twice as many as after
# the last compaction. Each compaction walks the heap and sorts in the retired times
# still ahead (several per live event): a constant share of the pushes since the last.
COMPACT_MIN = 4096


class EventKernel:
    def __init__(self, now: float) -> None:
        self.now = now
        self._heap: list[Event] = []
        # Times of retired finish events taken out of the heap, sorted: a flat array,
        # as it holds several times per live event and is merged at every compaction
        # (a list's float objects, scattered, cost a cache miss each). Those before
        # ``_ri`` are past; ``_next_retired`` is the one at ``_ri`` (inf: none left).
        self._retired: np.ndarray = np.empty(0)
        self._ri = 0
        self._next_retired = math.inf
        self._compact_min = COMPACT_MIN
        self._compact_at = COMPACT_MIN
        self.seq = 0
        self.events = 0  # events handled: live finishes, launches, ticks, samples

    def __len__(self) -> int:
        """Events in the heap, live or stale."""
        return len(self._heap)

    def move_to(self, t: float) -> None:
        """The clock moves on to ``t`` (the loop's next instant)."""
        self.now = t

    def push(self, t: float, kind: int, obj: Job | None, version: int) -> None:
        self.seq += 1
        heapq.heappush(self._heap, (t, self.seq, kind, obj, version))

    def next_time(self) -> float:
        """The next instant the loop wakes at: an event's, or a retired event's (inf:
        none is left)."""
        heap = self._heap
        t = heap[0][0] if heap else math.inf
        nr = self._next_retired
        return nr if nr < t else t

    def pop(self, t: float) -> Event | None:
        """The next event due by ``t``, taken off the heap; None when none is."""
        heap = self._heap
        if heap and heap[0][0] <= t:
            return heapq.heappop(heap)
        return None

    def passed(self, t: float) -> None:
        """The loop is done with the events of instant ``t``: retired times up to it are
        past, and the heap is compacted once it has doubled since the last time."""
        if self._next_retired <= t:
            retired = self._retired
            ri, n = self._ri, len(retired)
            nr = self._next_retired
            while nr <= t:
                ri += 1  # a retired finish event's instant: a wake-up, like its pop
                nr = float(retired[ri]) if ri < n else math.inf
            self._ri, self._next_retired = ri, nr
        if len(self._heap) > self._compact_at:
            self.compact()
            self._compact_at = max(self._compact_min, 2 * len(self._heap))

    def events_ahead(self) -> list[Event]:
        """The events in the heap (live or stale), in no order: for checks."""
        return list(self._heap)

    def compact(self) -> None:
        """Take the retired finish events (version moved on, or the job stopped: for
        ever, as versions only grow) out of the heap, their times into the retired
        times still ahead. The live events keep their keys, so they pop in the same
        order; every time stays a wake-up. Called between instants, so every time moved
        is still ahead."""
        heap = self._heap
        live: list[Event] = []
        gone: list[float] = []
        for e in heap:
            job = e[3]
            if e[2] == FINISH and job is not None and (job.version != e[4] or not job.running):
                gone.append(e[0])
            else:
                live.append(e)
        heapq.heapify(live)
        self._heap = live
        rest = np.concatenate((self._retired[self._ri :], np.array(gone, dtype=np.float64)))
        rest.sort(kind="stable")  # a sorted run and the new times: Timsort merges them
        self._retired = rest
        self._ri = 0
        self._next_retired = float(rest[0]) if len(rest) else math.inf
