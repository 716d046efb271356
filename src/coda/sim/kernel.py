"""The event kernel: a virtual clock and a heap of timed events, nothing else.

An event is ``(time, seq, kind, job or None, version)``: ``seq`` keeps events at one
instant in the order they were pushed. Stale finish events (their job's version moved
on, or the job stopped) far outnumber the live ones, and the loop wakes at their times
too: when they fill the heap, ``compact`` moves their times to a sorted array, so the
heap stays the size of the live events and the loop wakes at the same instants.
"""

from __future__ import annotations

import heapq

import numpy as np

from coda.policy.state import Job
from coda.sim.constants import FINISH

Event = tuple[float, int, int, Job | None, int]


class EventKernel:
    def __init__(self, now: float) -> None:
        self.now = now
        self.heap: list[Event] = []
        # Times of retired finish events taken out of the heap, sorted: a flat array,
        # as it holds several times per live event and is merged at every compaction
        # (a list's float objects, scattered, cost a cache miss each).
        self.retired: np.ndarray = np.empty(0)
        self.seq = 0
        self.events = 0  # events handled: live finishes, launches, ticks, samples

    def push(self, t: float, kind: int, obj: Job | None, version: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, version))

    def compact(self, ri: int) -> np.ndarray:
        """Take the retired finish events (version moved on, or the job stopped: for
        ever, as versions only grow) out of the heap, their times into ``retired``
        from ``ri`` on, which it returns. The live events keep their keys, so they pop
        in the same order; every time stays a wake-up. Called between instants, so
        every time moved is still ahead."""
        heap = self.heap
        live: list[Event] = []
        gone: list[float] = []
        for e in heap:
            job = e[3]
            if e[2] == FINISH and job is not None and (job.version != e[4] or not job.running):
                gone.append(e[0])
            else:
                live.append(e)
        heap[:] = live  # the same list: the loop holds it
        heapq.heapify(heap)
        rest = np.concatenate((self.retired[ri:], np.array(gone, dtype=np.float64)))
        rest.sort(kind="stable")  # a sorted run and the new times: Timsort merges them
        self.retired = rest
        return rest
