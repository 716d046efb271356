"""Values as people read them (counts, shares, durations, rates, numbers, changes)
and a run summary's nested lookups: shared by the experiments and the reports, so
neither imports the other for them."""

from __future__ import annotations

import math
from typing import Any

MISSING = "—"  # what a None / absent / non-finite value renders as


def finite(value: Any) -> float | None:
    """A finite float, or None for None / NaN / inf / non-numbers (bool is not a number)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def fmt_count(value: Any) -> str:
    x = finite(value)
    if x is None:
        return MISSING
    return f"{int(round(x)):,}"


def fmt_pct(value: Any) -> str:
    """A fraction 0..1 as a percentage."""
    x = finite(value)
    return MISSING if x is None else f"{100.0 * x:.1f}%"


def fmt_duration(value: Any) -> str:
    """Seconds in the unit a reader thinks in: s below 2 min, min below 2 h, h above."""
    x = finite(value)
    if x is None:
        return MISSING
    a = abs(x)
    if a == 0:
        return "0 s"
    if a < 10:
        return f"{x:.2f} s"
    if a < 120:
        return f"{x:.1f} s"
    if a < 7200:
        return f"{x / 60:.1f} min"
    return f"{x / 3600:.1f} h"


def fmt_rate(value: Any) -> str:
    x = finite(value)
    return MISSING if x is None else f"{x:,.0f}/s"


def fmt_number(value: Any) -> str:
    """A plain number such as the load factor: shortest faithful form."""
    x = finite(value)
    if x is None:
        return MISSING if value is None else str(value)
    return f"{x:g}"


def fmt_times(value: Any) -> str:
    """A ratio such as a slowdown: two decimals and an x."""
    x = finite(value)
    return MISSING if x is None else f"{x:.2f}x"


def relative_change(value: Any, base: Any) -> float | None:
    """(value - base) / base in percent; None where it is undefined (missing or zero base)."""
    v, b = finite(value), finite(base)
    if v is None or b is None:
        return None
    if b == 0:
        return 0.0 if v == 0 else None
    return 100.0 * (v - b) / abs(b)


def fmt_relative(value: Any, base: Any) -> str:
    """' (+12.3%)', or '' where the change is undefined."""
    rel = relative_change(value, base)
    if rel is None:
        return ""
    if rel == 0:  # avoid '-0.0%'
        rel = 0.0
    return f" ({rel:+.1f}%)"


# ---------------------------------------------------------------- run context


def lookup(summary: dict[str, Any], *keys: str) -> Any:
    """summary[k1][k2]..., or None where any level is missing or not a dict."""
    cur: Any = summary
    for key in keys:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur
