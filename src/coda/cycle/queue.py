"""The queued jobs of one array, as FIFO buckets of alike jobs.

Jobs of one shape (kind, GPUs per node, nodes, the core count's group) fit or
fail alike, so a cycle looks at bucket fronts, not at every queued job. Each
bucket is sorted by queue key; started or withdrawn jobs are skipped lazily and
trimmed from the front.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from coda.policy.state import Job


class Bucket:
    __slots__ = ("keys", "jobs", "pos", "wait", "wait_cycle", "full")

    def __init__(self) -> None:
        self.keys: list[tuple[Any, ...]] = []
        self.jobs: list[Job] = []
        self.pos = 0  # entries before pos have all started
        self.wait: object = None  # why its front waited last (a Reason)
        self.wait_cycle = -1
        # Core counts changed since its front last failed: retry with a full search.
        self.full = False

    def add(self, key: tuple[Any, ...], job: Job) -> None:
        at = bisect_right(self.keys, key)
        self.keys.insert(at, key)
        self.jobs.insert(at, job)
        self.pos = min(self.pos, at)

    def _stale(self, i: int) -> bool:
        # Started, withdrawn, or requeued (after a preemption) under a new key.
        job = self.jobs[i]
        return job.start >= 0 or job.queue_key != self.keys[i]

    def front(self) -> tuple[tuple[Any, ...], Job] | None:
        jobs, i = self.jobs, self.pos
        while i < len(jobs) and self._stale(i):
            i += 1
        if i > 64 and i * 2 > len(jobs):  # trim the started prefix
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

    def live(self) -> list[Job]:
        return [self.jobs[i] for i in range(self.pos, len(self.jobs)) if not self._stale(i)]
