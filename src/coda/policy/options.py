"""The typed arguments a policy is built from (``coda.policy.make_policy``).

Drivers differ in what they know and can do, and say so here once, instead of
patching a built policy: the simulator knows exact run times and can shrink a CPU
job; the node agent knows users' time limits; Slurm knows time limits, cannot
shrink a running job (it requeues) and adds its partition filter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from coda.policy.estimates import ESTIMATES, ExactProjection, NoEstimates, TimeLimits
from coda.policy.framework import Filter, Reclaim, RuntimeEstimate

RECLAIMS = ("shrink", "requeue")


@dataclass(frozen=True)
class PolicyOptions:
    """``estimates``: exact | time-limits | none (``default_time_limit_s`` for jobs
    with no limit); ``reclaim``: shrink (then preempt) | requeue (whole jobs only);
    ``tune``: config knobs, e.g. ``{"eliminator.step_down": "0.5"}``; ``filters``:
    the driver's own filters, run after the policy's."""

    estimates: str = "exact"
    default_time_limit_s: float = math.inf
    reclaim: str = "shrink"
    tune: Mapping[str, str] = field(default_factory=dict)
    filters: tuple[Filter, ...] = ()

    def __post_init__(self) -> None:
        if self.estimates not in ESTIMATES:
            raise ValueError(
                f"unknown runtime estimates {self.estimates!r}; known: {', '.join(ESTIMATES)}"
            )
        if self.reclaim not in RECLAIMS:
            raise ValueError(f"unknown reclaim {self.reclaim!r}; known: {', '.join(RECLAIMS)}")
        if not self.default_time_limit_s > 0:
            raise ValueError(f"default time limit must be > 0 s, got {self.default_time_limit_s}")

    def runtime_estimate(self) -> RuntimeEstimate:
        if self.estimates == "exact":
            return ExactProjection()
        if self.estimates == "time-limits":
            return TimeLimits(self.default_time_limit_s)
        return NoEstimates()

    def reclaimer(self) -> Reclaim:
        from coda.policy.coda import RequeueOnly, ShrinkThenPreempt

        return ShrinkThenPreempt() if self.reclaim == "shrink" else RequeueOnly()
