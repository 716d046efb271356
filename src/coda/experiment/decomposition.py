"""Where a gain in effective GPU utilisation comes from: the exact split into more GPUs
allocated, less lost to too few cores and less lost to contention, per load and along
the ablation chain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from coda.experiment.defaults import (
    CHAIN,
    TERMS,
    UNSPLIT_LABEL,
    UPPER_BOUND,
)
from coda.experiment.records import RunRecord
from coda.experiment.stats import (
    by_seed,
)


@dataclass(frozen=True)
class Decomposition:
    """Mean over seeds of (other - base) in effective GPU util, split exactly into the
    TERMS. All values are fractions of GPU capacity (x100 = percentage points)."""

    base: str
    other: str
    load: float
    seeds: int
    base_eff: float  # mean effective GPU util of the base
    gain: float  # mean difference in effective GPU util
    allocated: float
    less_lost: float  # gain - allocated = cores + contention
    cores: float | None  # None where the summaries do not split the loss
    contention: float | None
    residual: float | None  # less_lost - cores - contention; 0 if the summaries are consistent

    @property
    def split(self) -> bool:
        return self.cores is not None and self.contention is not None

    def relative(self, value: float | None) -> float | None:
        """A term as a share of the base's effective util, in %: the terms then add up
        to the relative gain of the mean utilisations."""
        return None if value is None or self.base_eff == 0 else 100.0 * value / self.base_eff

    @property
    def gain_pct(self) -> float | None:
        return self.relative(self.gain)

    def terms(self) -> list[tuple[str, str, float | None]]:
        """(key, label, value) of the parts, in TERMS order (one merged part if unsplit)."""
        if self.split:
            return [(k, label, getattr(self, k)) for k, label in TERMS]
        return [
            ("allocated", TERMS[0][1], self.allocated),
            ("less_lost", UNSPLIT_LABEL, self.less_lost),
        ]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gain_pct_of_base"] = self.gain_pct
        d["terms_pct_of_base"] = {k: self.relative(v) for k, _, v in self.terms()}
        return d


def decompose(
    records: Sequence[RunRecord], base: str, other: str, load: float, kind: str = "main"
) -> Decomposition | None:
    """Paired by seed: effective = allocated - lost_cores - lost_contention in each run, so
    delta effective = delta allocated + (less lost to cores) + (less lost to contention)."""
    a, b = by_seed(records, other, load, kind), by_seed(records, base, load, kind)
    rows: list[tuple[float, float, float, float | None, float | None]] = []
    for seed in sorted(a.keys() & b.keys()):
        o, s = a[seed], b[seed]
        eo, es = o.get("gpu_util_effective"), s.get("gpu_util_effective")
        ao, as_ = o.get("gpu_util_allocated"), s.get("gpu_util_allocated")
        if eo is None or es is None or ao is None or as_ is None:
            continue
        cores_s, cores_o = s.get("gpu_lost_cores"), o.get("gpu_lost_cores")
        cont_s, cont_o = s.get("gpu_lost_contention"), o.get("gpu_lost_contention")
        cores: float | None = None
        contention: float | None = None
        if not (cores_s is None or cores_o is None or cont_s is None or cont_o is None):
            cores, contention = cores_s - cores_o, cont_s - cont_o
        rows.append((es, eo - es, ao - as_, cores, contention))
    if not rows:
        return None

    def mean(xs: list[float | None]) -> float | None:
        known = [x for x in xs if x is not None]
        return math.fsum(known) / len(known) if len(known) == len(xs) else None

    base_eff = math.fsum(r[0] for r in rows) / len(rows)
    gain = math.fsum(r[1] for r in rows) / len(rows)
    allocated = math.fsum(r[2] for r in rows) / len(rows)
    cores, contention = mean([r[3] for r in rows]), mean([r[4] for r in rows])
    less_lost = gain - allocated
    residual = None if cores is None or contention is None else less_lost - cores - contention
    return Decomposition(
        base,
        other,
        load,
        len(rows),
        base_eff,
        gain,
        allocated,
        less_lost,
        cores,
        contention,
        residual,
    )


@dataclass(frozen=True)
class ChainStep:
    label: str
    step: Decomposition  # previous policy -> this one
    cumulative_pct: float | None  # this policy's gain over the baseline, % of baseline


def ablation_chain(
    records: Sequence[RunRecord],
    load: float,
    policies: Sequence[str],
    chain: Sequence[tuple[str, str]] = CHAIN,
    upper: str = UPPER_BOUND,
) -> list[ChainStep]:
    """baseline -> each ablation -> full CODA (the ones that ran), then the oracle's
    headroom over the last; each step decomposed like the headline gain."""
    present = [(p, label) for p, label in chain if p in policies]
    if len(present) < 2 or present[0][0] != chain[0][0]:
        return []
    base = present[0][0]
    steps = []
    links = list(zip(present, present[1:], strict=False))
    if upper in policies and upper != present[-1][0]:
        links.append((present[-1], (upper, f"{upper} (upper bound)")))
    for (prev, _), (cur, label) in links:
        step = decompose(records, prev, cur, load)
        total = decompose(records, base, cur, load)
        if step is None:
            continue
        # Each step relative to the baseline's util, so the steps add up to the total.
        step = replace(step, base_eff=total.base_eff if total else step.base_eff)
        steps.append(ChainStep(label, step, total.gain_pct if total else None))
    return steps
