"""What happened to each job of a run, by workload row: the executor writes it, the
result reads it."""

from __future__ import annotations

import numpy as np

from coda.policy.state import Job


class JobOutcomes:
    def __init__(self, n: int, users: list[str]) -> None:
        self.start = np.full(n, np.nan)  # its first start (a requeue keeps it)
        self.end = np.full(n, np.nan)
        self.granted = np.zeros(n, dtype=np.int32)
        self.settled = np.zeros(n, dtype=np.int32)  # cores held at the last change
        self.unschedulable = np.zeros(n, dtype=bool)
        self.waited = np.zeros(n)  # time queued, summed over requeues
        self.preempted = np.zeros(n, dtype=np.int32)
        self.shrunk = np.zeros(n, dtype=np.int32)  # times a CPU job gave cores back
        self.users = users
        # The last reason each job waited (its Reason's token; "" = never waited).
        self.wait_reason: list[str] = [""] * n
        self.requeued_at: dict[Job, float] = {}  # preempted, not restarted yet: since when
        self.lost_core_s = 0.0  # CPU-job work lost to preemption, core-seconds
        self.work_done_error = 0.0  # largest |remaining| at finish, relative to work
        # What co-location cost each CPU job (docs/metrics.md, "CPU jobs' harm"): its
        # runtime alone with the cores it asked (NaN for DNN jobs), the time it ran
        # throttled (quota below 1) and shrunk (fewer cores than it asked), and the work
        # preemptions took from it.
        self.alone_s = np.full(n, np.nan)
        self.throttled_s = np.zeros(n)
        self.shrunk_s = np.zeros(n)
        self.job_lost_core_s = np.zeros(n)
        self.throttled_since: dict[Job, float] = {}
        self.shrunk_since: dict[Job, float] = {}

    def note_cpu_spells(self, job: Job, now: float) -> None:
        """Open or close the CPU job's throttled and shrunk spells to match its state
        now (a job off its nodes is neither)."""
        if job.is_dnn:
            return
        running = job.running
        self._spell(self.throttled_since, self.throttled_s, job, now, running and job.quota < 1.0)
        self._spell(
            self.shrunk_since, self.shrunk_s, job, now, running and job.cores_pn < job.cores_pn_req
        )

    def close_spells(self, now: float) -> None:
        """Count the spells still open when the run stops, up to then."""
        for since, total in ((self.throttled_since, self.throttled_s),
                             (self.shrunk_since, self.shrunk_s)):  # fmt: skip
            for job, t in since.items():
                total[job.idx] += max(0.0, now - t)
            since.clear()

    @staticmethod
    def _spell(since: dict[Job, float], total: np.ndarray, job: Job, now: float, on: bool) -> None:
        if on:
            since.setdefault(job, now)
        elif job in since:
            total[job.idx] += now - since.pop(job)
