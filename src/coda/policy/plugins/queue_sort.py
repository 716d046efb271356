"""Queue sort: FIFO per array, a preempted CPU job first."""

from __future__ import annotations

from typing import Any

from coda.policy.state import Job


class PreemptedFirst:
    """FIFO per array, but a CPU job that was preempted goes to the head: of its array,
    before every tenant's jobs under DRF too (the paper: an aborted CPU job "re-enters
    the head of its array")."""

    def key(self, job: Job) -> tuple[Any, ...]:
        return (self.band(job), job.submit)

    def band(self, job: Job) -> int:
        return 0 if job.preemptions else 1
