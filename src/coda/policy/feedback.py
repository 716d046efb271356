"""Throughput samples shared by the allocator (which records them) and the
contention eliminator (which reads them): plain data, no clock."""

from __future__ import annotations

from collections import deque

from coda.policy.state import Job


class ThroughputHistory:
    """Recent throughput samples per running DNN job, and each job's reference.

    The reference is the throughput the allocator measured when the job's core
    count converged: the eliminator compares recent samples against it. Units are
    the job's own (samples/s); only ratios matter. A reference is *solo* when no CPU
    job shared the job's nodes while it was measured, or when a solo probe (the
    eliminator throttling the node's CPU jobs for a moment) confirmed or raised it;
    one measured beside a co-runner would hide that co-runner's contention for the
    job's whole life. The solo speeds a job was measured at, per core count, are
    its own learned profile: a later reference at that count is taken from it
    rather than probed again. (Not shared between jobs of one shape: units are
    each job's own, and a batch size changes them.)
    """

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._samples: dict[Job, deque[tuple[float, float]]] = {}
        self._reference: dict[Job, float] = {}
        self._solo: set[Job] = set()  # jobs whose reference is a solo speed
        self._solo_at: dict[Job, dict[int, float]] = {}  # job -> cores -> solo speed

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

    def set_reference(self, job: Job, value: float, solo: bool = True) -> None:
        """Set the job's reference; ``solo`` False: measured beside a CPU job."""
        self._reference[job] = value
        if solo:
            self._solo.add(job)
        else:
            self._solo.discard(job)

    def reference_solo(self, job: Job) -> bool:
        """The job has a reference and it is a solo speed."""
        return job in self._solo and job in self._reference

    def learn_solo(self, job: Job, cores: int, value: float) -> None:
        """Remember the job's solo speed at ``cores`` cores per node."""
        self._solo_at.setdefault(job, {})[cores] = value

    def solo_speed(self, job: Job, cores: int) -> float | None:
        """The job's solo speed at ``cores`` measured before, if any."""
        known = self._solo_at.get(job)
        return known.get(cores) if known is not None else None

    def clear_reference(self, job: Job) -> None:
        self._reference.pop(job, None)
        self._solo.discard(job)

    def clear_samples(self, job: Job) -> None:
        """Drop a job's samples (its core count changed: old samples no longer apply)."""
        self._samples.pop(job, None)

    def forget(self, job: Job) -> None:
        self._samples.pop(job, None)
        self._reference.pop(job, None)
        self._solo.discard(job)
        self._solo_at.pop(job, None)

    def __len__(self) -> int:
        return len(self._samples)
