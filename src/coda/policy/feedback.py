"""Throughput samples shared by the allocator (which records them) and the
contention eliminator (which reads them): plain data, no clock."""

from __future__ import annotations

from collections import deque

from coda.policy.state import Job


class ThroughputBook:
    """Recent throughput samples per running DNN job, and each job's reference.

    The reference is the throughput the allocator measured when the job's core
    count converged, with no co-runner throttled: the eliminator compares recent
    samples against it. Units are the job's own (samples/s); only ratios matter.
    """

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._samples: dict[Job, deque[tuple[float, float]]] = {}
        self._reference: dict[Job, float] = {}

    def add(self, job: Job, now: float, throughput: float) -> None:
        q = self._samples.get(job)
        if q is None:
            q = self._samples[job] = deque(maxlen=self.keep)
        q.append((now, throughput))

    def samples(self, job: Job) -> list[tuple[float, float]]:
        """(time, throughput) pairs, oldest first."""
        return list(self._samples.get(job, ()))

    def recent(self, job: Job, n: int, since: float = float("-inf")) -> float | None:
        """Mean of the last ``n`` samples taken after ``since``; None if there are none."""
        q = self._samples.get(job)
        if not q:
            return None
        vals = [v for t, v in list(q)[-n:] if t > since]
        return sum(vals) / len(vals) if vals else None

    def last_time(self, job: Job) -> float | None:
        q = self._samples.get(job)
        return q[-1][0] if q else None

    def reference(self, job: Job) -> float | None:
        return self._reference.get(job)

    def set_reference(self, job: Job, value: float) -> None:
        self._reference[job] = value

    def clear_reference(self, job: Job) -> None:
        self._reference.pop(job, None)

    def clear_samples(self, job: Job) -> None:
        """Drop a job's samples (its core count changed: old samples no longer apply)."""
        self._samples.pop(job, None)

    def forget(self, job: Job) -> None:
        self._samples.pop(job, None)
        self._reference.pop(job, None)

    def __len__(self) -> int:
        return len(self._samples)
