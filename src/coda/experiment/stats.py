"""Statistics over seeds: mean and Student-t 95% confidence interval, paired per-seed
comparisons with the baseline, and the aggregates per (policy, load).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from coda.experiment.defaults import (
    METRICS,
)
from coda.experiment.records import RunRecord
from coda.values import finite

# Two-sided 95% Student-t critical values t_{0.975, df}, df = 1..30 (no scipy here).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
Z975 = 1.96  # normal approximation beyond df 30


def t_critical(df: int) -> float:
    """Two-sided 95% Student-t critical value; 1.96 beyond df 30."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else Z975


@dataclass(frozen=True)
class Estimate:
    """Mean over seeds with its 95% confidence half-width (None below two values)."""

    n: int
    mean: float | None
    half: float | None
    sd: float | None

    @property
    def low(self) -> float | None:
        return None if self.mean is None or self.half is None else self.mean - self.half

    @property
    def high(self) -> float | None:
        return None if self.mean is None or self.half is None else self.mean + self.half

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "mean": self.mean,
            "ci95_low": self.low,
            "ci95_high": self.high,
            "ci95_half": self.half,
            "sd": self.sd,
        }


def mean_ci(values: Iterable[float | None]) -> Estimate:
    """Mean and Student-t 95% CI of the finite values; None and NaN are left out."""
    xs = [x for v in values if (x := finite(v)) is not None]
    n = len(xs)
    if n == 0:
        return Estimate(0, None, None, None)
    mean = math.fsum(xs) / n
    if n == 1:
        return Estimate(1, mean, None, None)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    return Estimate(n, mean, t_critical(n - 1) * sd / math.sqrt(n), sd)


def by_seed(
    records: Iterable[RunRecord], policy: str, load: float, kind: str
) -> dict[int, RunRecord]:
    return {
        r.seed: r
        for r in records
        if r.ok and r.kind == kind and r.policy == policy and r.load == load
    }


def paired(
    records: Sequence[RunRecord],
    policy: str,
    base: str,
    load: float,
    fn: Callable[[RunRecord, RunRecord], float | None],
    kind: str = "main",
) -> Estimate:
    """Mean and CI of fn(policy's run, base's run) over the seeds both have."""
    a, b = by_seed(records, policy, load, kind), by_seed(records, base, load, kind)
    return mean_ci(fn(a[s], b[s]) for s in sorted(a.keys() & b.keys()))


def relative_gain_pct(value: float | None, base: float | None) -> float | None:
    """100 * (value - base) / base; None where undefined."""
    if value is None or base is None or base == 0:
        return None
    return 100.0 * (value - base) / base


def relative_gain_of(key: str) -> Callable[[RunRecord, RunRecord], float | None]:
    return lambda a, b: relative_gain_pct(a.get(key), b.get(key))


def difference_of(key: str) -> Callable[[RunRecord, RunRecord], float | None]:
    def fn(a: RunRecord, b: RunRecord) -> float | None:
        x, y = a.get(key), b.get(key)
        return None if x is None or y is None else x - y

    return fn


# Paired comparisons against the baseline: (key, label, kind, function).
GAINS = (
    (
        "gpu_gain_pct",
        "GPU util (effective), relative gain",
        "gain",
        relative_gain_of("gpu_util_effective"),
    ),
    (
        "gpu_alloc_gain_pct",
        "GPU util (allocated), relative gain",
        "gain",
        relative_gain_of("gpu_util_allocated"),
    ),
    (
        "cpu_queue_diff_s",
        "CPU queuing mean, difference",
        "duration",
        difference_of("cpu_queue_mean"),
    ),
    (
        "dnn_queue_diff_s",
        "DNN queuing mean, difference",
        "duration",
        difference_of("dnn_queue_mean"),
    ),
    ("dnn_jct_diff_s", "DNN JCT mean, difference", "duration", difference_of("dnn_jct_mean")),
    ("cpu_jct_diff_s", "CPU JCT mean, difference", "duration", difference_of("cpu_jct_mean")),
)


def aggregate(
    records: Sequence[RunRecord], policies: Sequence[str], loads: Sequence[float]
) -> dict[tuple[str, float], dict[str, Estimate]]:
    """Mean and CI over seeds of every METRICS key, per (policy, load), main runs only."""
    out = {}
    for policy in policies:
        for load in loads:
            runs = by_seed(records, policy, load, "main").values()
            out[(policy, load)] = {k: mean_ci(r.get(k) for r in runs) for k, _, _ in METRICS}
    return out


def gains(
    records: Sequence[RunRecord], policies: Sequence[str], loads: Sequence[float], base: str
) -> dict[tuple[str, float], dict[str, Estimate]]:
    """Paired per-seed comparisons of every other policy with the baseline."""
    return {
        (p, load): {key: paired(records, p, base, load, fn) for key, _, _, fn in GAINS}
        for p in policies
        if p != base
        for load in loads
    }


def tolerance(x: float) -> float:
    # Means of identical runs may differ in the last bits; that is not "longer".
    return 1e-9 * max(1.0, abs(x))
