"""Core count: the oracle upper bound."""

from __future__ import annotations

import math
from typing import Any

from coda.policy.state import Job


class OracleCores:
    """Upper bound: every job's true optimum, known in advance (reads the
    performance model, which no real policy can)."""

    generation = 0  # the model's optima never change

    def cores_per_node(self, job: Job) -> int:
        if job.perf is not None:
            return max(1, math.ceil(job.perf.c_opt))
        return job.cores_pn_req

    def group_key(self, job: Job) -> tuple[Any, ...]:
        return (job.model, job.cores_pn_req)
