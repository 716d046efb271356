"""The typed arguments a policy is built from (``coda.policy.make_policy``).

Drivers differ in what they know and can do, and say so here once, instead of
patching a built policy: the simulator knows exact run times and can shrink a CPU
job; the node agent knows users' time limits; Slurm knows time limits, cannot
shrink a running job (it requeues) and adds its partition filter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from coda.policy.allocator_config import START_POINTS
from coda.policy.estimates import ESTIMATES, ExactProjection, NoEstimates, TimeLimits
from coda.policy.framework import Filter, Reclaim, RuntimeEstimate
from coda.policy.harm_budget import HarmBudget

RECLAIMS = ("shrink", "requeue")  # what a simulation or a node's agent may be asked for
# ... and "none": nothing is ever taken back (Slurm's node agent: Slurm owns the grants).
POLICY_RECLAIMS = (*RECLAIMS, "none")
ORDERS = ("drf", "fifo")  # how CODA orders jobs inside each array
# A control period shorter than this is no setting (ticks would pile up at one instant
# once t + period == t); a period or start delay longer than a day neither.
MIN_CONTROL_PERIOD_S = 0.01
MAX_PERIOD_S = 86400.0


def checked_seconds(name: str, v: object, *, at_least: float = 0.0, or_zero: bool = False) -> float:
    """``v`` as seconds within [at_least, a day] (or exactly 0 where ``or_zero``): a
    period or delay of the simulator's or a policy's, checked alike wherever it enters."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{name} must be a number of seconds, got {v!r}")
    if not (at_least <= v <= MAX_PERIOD_S or (or_zero and v == 0.0)):  # NaN fails both
        span = f"[{at_least:g}, {MAX_PERIOD_S:g}]" + (" or 0" if or_zero else "")
        raise ValueError(f"{name} must be within {span} s, got {v}")
    return float(v)


@dataclass(frozen=True)
class PolicyOptions:
    """``estimates``: exact | time-limits | none (``default_time_limit_s`` for jobs
    with no limit); ``reclaim``: shrink (then preempt) | requeue (whole jobs only);
    ``tune``: config knobs, e.g. ``{"eliminator.step_down": "0.5"}``; ``filters``:
    the driver's own filters, run after the policy's; ``order``: CODA's order inside
    each array, drf (tenants by dominant share, as the paper) | fifo; ``gpu_subarrays``:
    CODA's GPU array split into jobs of 4+ GPUs and of fewer (the paper's option);
    ``allocator_start``/``categories``: where CODA's core search starts;
    ``control_period_s``: CODA's control period, the eliminator's tick and the
    allocator's throughput window (None: the eliminator's own, 10 s; a node agent's
    is its ``--window``); ``start_delay_s``: the driver's delay between placing a job
    and its working (the simulator's), which exact estimates plan with."""

    estimates: str = "exact"
    default_time_limit_s: float = math.inf
    reclaim: str = "shrink"
    tune: Mapping[str, str] = field(default_factory=dict)
    filters: tuple[Filter, ...] = ()
    order: str = "drf"
    gpu_subarrays: bool = False
    # CODA's allocator: where a search starts (learned | paper | request, AllocatorConfig.start)
    # and each model's category (cv, nlp, speech) for the paper's start point.
    allocator_start: str = "learned"
    categories: Mapping[str, str] = field(default_factory=dict)
    # Allocator windows left out after each core change: 0 where the driver cuts its
    # windows at changes itself (a node agent), 1 to model one that settles for a
    # while after a change and so steps a window later (coda replay's twin).
    settle_windows: int = 0
    control_period_s: float | None = None
    start_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.allocator_start not in START_POINTS:
            raise ValueError(
                f"unknown allocator start {self.allocator_start!r}; known: "
                f"{', '.join(START_POINTS)}"
            )
        if self.order not in ORDERS:
            raise ValueError(f"unknown queue order {self.order!r}; known: {', '.join(ORDERS)}")
        if self.estimates not in ESTIMATES:
            raise ValueError(
                f"unknown runtime estimates {self.estimates!r}; known: {', '.join(ESTIMATES)}"
            )
        if self.reclaim not in POLICY_RECLAIMS:
            raise ValueError(
                f"unknown reclaim {self.reclaim!r}; known: {', '.join(POLICY_RECLAIMS)}"
            )
        sw = self.settle_windows
        if isinstance(sw, bool) or not isinstance(sw, int) or not 0 <= sw <= 10:
            raise ValueError(
                f"settle windows must be a whole number in 0..10, got {self.settle_windows!r}"
            )
        if self.control_period_s is not None:
            checked_seconds("control period", self.control_period_s, at_least=MIN_CONTROL_PERIOD_S)
        checked_seconds("start_delay_s", self.start_delay_s)
        limit = self.default_time_limit_s
        # inf: a job without a limit of its own is planned as never ending.
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0:
            raise ValueError(f"default time limit must be > 0 s, got {limit!r}")
        if not isinstance(self.gpu_subarrays, bool):
            raise ValueError(f"gpu_subarrays must be true or false, got {self.gpu_subarrays!r}")

    def __reduce__(self) -> tuple[type[PolicyOptions], tuple[Any, ...]]:
        # Pickled by its fields: the compiled (mypyc) class has no __dict__ to restore
        # and refuses setattr, so a process pool could not receive it otherwise.
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    def runtime_estimate(self) -> RuntimeEstimate:
        if self.estimates == "exact":
            return ExactProjection(self.start_delay_s)
        if self.estimates == "time-limits":
            return TimeLimits(self.default_time_limit_s)
        return NoEstimates()

    def reclaimer(self, harm: HarmBudget | None = None) -> Reclaim | None:
        """The reclaim asked for, within ``harm``'s budgets where given."""
        from coda.policy.plugins.reclaim import RequeueOnly, ShrinkThenPreempt

        if self.reclaim == "none":
            return None
        return ShrinkThenPreempt(harm=harm) if self.reclaim == "shrink" else RequeueOnly(harm=harm)
