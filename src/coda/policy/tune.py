"""Policy knobs from text (``--tune allocator.max_windows=24``): the configs'
defaults suit the simulator's noise; a real node may need others. Part of
building a policy (``make_policy``), never applied to a running one."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from coda.policy.allocator import AdaptiveAllocator
from coda.policy.eliminator import ContentionEliminator
from coda.policy.framework import Policy
from coda.policy.harm_budget import HarmBudget
from coda.workload.limits import plain_number


def tune_policy(policy: Policy, tune: Mapping[str, str]) -> None:
    """Override the allocator's or eliminator's config fields, e.g.
    ``{"eliminator.step_down": "0.5", "allocator.max_windows": "24"}``: the defaults
    suit the simulator's noise; a real node may need others. Values are checked by the
    configs' own validation; unknown names are errors."""
    targets = {
        "allocator": policy.job_control,
        "eliminator": policy.node_control,
        "harm": policy.harm,
    }
    for key, raw in tune.items():
        part, _, name = key.partition(".")
        obj = targets.get(part)
        if not isinstance(obj, (AdaptiveAllocator, ContentionEliminator, HarmBudget)):
            raise ValueError(f"{key}: the policy {policy.name!r} has no {part!r} to tune "
                             f"(use allocator.<field>, eliminator.<field> or "
                             f"harm.<field>)")  # fmt: skip
        fields_ = {f.name: f for f in dataclasses.fields(obj.config)}
        if name not in fields_:
            raise ValueError(f"{key}: unknown field; {part} has {', '.join(sorted(fields_))}")
        current = getattr(obj.config, name)
        try:
            if not plain_number(raw):  # int() and float() take ٥ and 1_6: nobody means them
                raise ValueError(raw)
            if isinstance(current, bool):
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                value: Any = raw.lower() in ("true", "1")
            elif isinstance(current, int):
                value = int(raw)
            elif isinstance(current, float):
                value = float(raw)
            elif current is None:
                value = None if raw.lower() == "none" else int(raw)
            else:
                raise ValueError(raw)
            # nan passes every range check a config makes (all comparisons are false),
            # and a count of 10**100 windows is no setting: both are refused here.
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(raw)
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**9:
                raise ValueError(raw)
        except ValueError:
            raise ValueError(
                f"{key}={raw!r}: expected a finite {type(current).__name__} (integers within +-1e9)"
            ) from None
        try:
            obj.config = dataclasses.replace(obj.config, **{name: value})
        except ValueError as e:
            raise ValueError(f"{key}={raw}: {e}") from None
        if isinstance(obj, ContentionEliminator) and name == "period_s":
            obj.period_s = value
