"""The headline experiment's numbers as text, shared by its report, plots and terminal
table: an estimate with its confidence interval, a relative change, and the context
(trace, cluster, profiles, loads, seeds) every title states.
"""

from __future__ import annotations

import textwrap

from coda.experiment import (
    Estimate,
    ExperimentResult,
    describe_loads,
    signed,
)
from coda.report.tables import describe_cluster
from coda.values import MISSING, fmt_duration


def _duration_unit(seconds: float) -> tuple[float, str, int]:
    """(divisor, unit, decimals) the way fmt_duration picks them, for a value and its CI."""
    a = abs(seconds)
    if a < 10:
        return 1.0, "s", 2
    if a < 120:
        return 1.0, "s", 1
    if a < 7200:
        return 60.0, "min", 1
    return 3600.0, "h", 1


def fmt_estimate(est: Estimate | None, kind: str) -> str:
    """'83.4% ± 0.6' (pct, CI half-width in points), '12.3 ± 0.4 min' (duration),
    '+21.0% [18.2, 23.8]' (gain: the CI's bounds), '—' when there is no value."""
    if est is None or est.mean is None:
        return MISSING
    m, h = est.mean, est.half
    if kind == "gain":
        text = f"{signed(m, 1)}%"
        lo, hi = est.low, est.high  # None exactly when h is
        return text + (
            f" [{signed(lo, 1)}, {signed(hi, 1)}]" if lo is not None and hi is not None else ""
        )
    if kind == "pct":
        return f"{100 * m:.1f}%" + (f" ± {100 * h:.1f}" if h is not None else "")
    if kind == "duration":
        if h is None:
            return fmt_duration(m)
        # One unit for both, from the larger (a CI can dwarf a mean near 0).
        div, unit, dec = _duration_unit(max(abs(m), h))
        value = f"{m / div:.{dec}f}"
        if float(value) == 0:
            value = f"{0:.{dec}f}"  # no '-0.0'
        return f"{value} ± {h / div:.{dec}f} {unit}"
    if kind == "count":
        return f"{m:,.1f}" + (f" ± {h:,.1f}" if h is not None else "")
    return f"{m:.3g}" + (f" ± {h:.2g}" if h is not None else "")


def fmt_relative(x: float | None) -> str:
    return MISSING if x is None else f"{signed(x, 1)}%"


def context_of(result: ExperimentResult) -> dict[str, str]:
    ok = [r for r in result.records if r.ok]
    ctx = ok[0].context if ok else {}
    base = result.config.base
    return {
        "trace": str(ctx.get("trace") or base.trace or "bundled"),
        "cluster": describe_cluster(ctx.get("cluster")) if ctx else base.cluster,
        "profiles": str(ctx.get("profile_set") or base.profiles),
        "loads": describe_loads(result.config.loads),
        "seeds": f"0-{result.config.seeds - 1}" if result.config.seeds > 1 else "0",
    }


def figure_title(result: ExperimentResult) -> str:
    c = context_of(result)
    # A cluster given as a long node spec would stretch the figure to its width.
    cluster = textwrap.fill(c["cluster"], 110, break_on_hyphens=False)
    return f"{c['trace']} · {cluster}\nloads {c['loads']} · seeds {c['seeds']}"
