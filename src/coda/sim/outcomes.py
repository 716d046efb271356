"""What happened to each job of a run, by workload row: the executor writes it, the
result reads it."""

from __future__ import annotations

import numpy as np

from coda.policy.state import Job


class JobOutcomes:
    def __init__(self, n: int, users: list[str]) -> None:
        self.start = np.full(n, np.nan)
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
