"""Runtime estimates: what backfill plans with (the ``RuntimeEstimate`` point).

- ``ExactProjection``: the simulator's own knowledge, a queued job's work at its
  cores and a running job's remaining work at its current speed. No real
  scheduler knows this; it is the simulator's optimistic default.
- ``TimeLimits``: what Slurm's backfill knows, each job's time limit (``sbatch -t``,
  ``coda submit --time``; in the simulator a trace's requested time), else a
  default (Slurm: the partition's DefaultTime). A running job is expected to end
  at its start plus its limit (or now, once past it).
- ``NoEstimates``: nothing is known; no backfill, each array is strict FIFO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coda.policy.state import Job

_EPS = 1e-9


@dataclass
class ExactProjection:
    """``start_delay_s``: the driver's start delay (the simulator's ``--start-delay``):
    a job placed now works from that much later."""

    start_delay_s: float = 0.0
    name: str = "exact"
    backfills: bool = True

    def runtime(self, job: Job, cores_pn: int) -> float:
        return self.start_delay_s + job.remaining / max(job.core_speed(cores_pn), _EPS)

    def end_of(self, job: Job, now: float) -> float:
        if job.speed <= 0:
            if job.works_from > now:  # placed, not working yet: at its cores from then
                speed = job.core_speed(job.cores_pn * job.quota)
                return job.works_from + job.remaining / max(speed, _EPS)
            return math.inf
        return job.last_update + job.remaining / job.speed


@dataclass
class TimeLimits:
    """``default_s``: the limit of a job that gave none (inf: such a job never
    backfills onto reserved nodes and its nodes are never planned for)."""

    default_s: float = math.inf
    name: str = "time-limits"
    backfills: bool = True

    def __post_init__(self) -> None:
        if not self.default_s > 0:
            raise ValueError(f"the default time limit must be > 0 s, got {self.default_s}")

    def limit(self, job: Job) -> float:
        return job.time_limit if math.isfinite(job.time_limit) else self.default_s

    def runtime(self, job: Job, cores_pn: int) -> float:
        return self.limit(job)

    def end_of(self, job: Job, now: float) -> float:
        if job.start < 0:
            return math.inf
        return max(now, job.start + self.limit(job))


class NoEstimates:
    name = "none"
    backfills = False

    def runtime(self, job: Job, cores_pn: int) -> float:
        return math.inf

    def end_of(self, job: Job, now: float) -> float:
        return math.inf


ESTIMATES = ("exact", "time-limits", "none")
