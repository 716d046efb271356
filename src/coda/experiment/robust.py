"""The robustness sweep: per seed of perturbed profiles and noisier samples, does the
subject still beat the baseline with CPU-job queuing and DNN JCT no worse?
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from coda.experiment.defaults import (
    BASELINE,
    PAPER_GAIN_PCT,
    SUBJECT,
)
from coda.experiment.records import RunRecord
from coda.experiment.stats import (
    by_seed,
    relative_gain_pct,
    tolerance,
)


@dataclass(frozen=True)
class RobustSeed:
    seed: int
    base_eff: float | None
    subject_eff: float | None
    gain_pct: float | None
    base_cpu_queue: float | None
    subject_cpu_queue: float | None
    base_dnn_jct: float | None
    subject_dnn_jct: float | None
    gpu_better: bool | None
    cpu_queue_ok: bool | None
    dnn_jct_ok: bool | None
    holds: bool | None  # all three
    meets_target: bool | None  # gain >= the paper's 20.8% as well


@dataclass(frozen=True)
class Robustness:
    load: float
    perturb: float
    noise: float
    subject: str
    base: str
    rows: tuple[RobustSeed, ...]
    status: str  # "survives", "does not survive", "not judged"
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _leq(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else a <= b + tolerance(b)


def robustness(
    records: Sequence[RunRecord],
    load: float,
    perturb: float,
    noise: float,
    base: str = BASELINE,
    subject: str = SUBJECT,
    target_pct: float = PAPER_GAIN_PCT,
) -> Robustness | None:
    """Per seed of the robustness sweep: does subject still beat base on effective GPU
    util, with CPU-job mean queuing no higher and mean DNN JCT no worse?"""
    b = by_seed(records, base, load, "robustness")
    s = by_seed(records, subject, load, "robustness")
    if not any(r.kind == "robustness" for r in records):
        return None
    rows = []
    for seed in sorted(b.keys() | s.keys()):
        br, sr = b.get(seed), s.get(seed)

        def g(r: RunRecord | None, key: str) -> float | None:
            return None if r is None else r.get(key)

        be, se = g(br, "gpu_util_effective"), g(sr, "gpu_util_effective")
        gain = relative_gain_pct(se, be)
        better = None if gain is None else gain > 0
        cpu_ok = _leq(g(sr, "cpu_queue_mean"), g(br, "cpu_queue_mean"))
        jct_ok = _leq(g(sr, "dnn_jct_mean"), g(br, "dnn_jct_mean"))
        checks = (better, cpu_ok, jct_ok)
        holds = False if False in checks else (None if None in checks else True)
        rows.append(
            RobustSeed(
                seed,
                be,
                se,
                gain,
                g(br, "cpu_queue_mean"),
                g(sr, "cpu_queue_mean"),
                g(br, "dnn_jct_mean"),
                g(sr, "dnn_jct_mean"),
                better,
                cpu_ok,
                jct_ok,
                holds,
                None if gain is None else gain >= target_pct,
            )
        )
    judged = [r for r in rows if r.holds is not None]
    held = sum(1 for r in judged if r.holds)
    where = (
        f"Robustness (load {load:g}, profiles perturbed ±{100 * perturb:g}%, "
        f"sample noise {noise:g})"
    )
    if not s:
        status, summary = "not judged", f"{where}: not judged - no {subject} runs"
    elif judged and held == len(rows):
        status = "survives"
        summary = (
            f"{where}: the conclusion survives - {subject} beats {base} on "
            f"effective GPU util with CPU-job queuing and DNN JCT no worse in all "
            f"{len(rows)} seeds"
        )
    else:
        status = "does not survive"
        summary = (
            f"{where}: holds in {held} of {len(rows)} seeds "
            f"(seeds where it fails: "
            f"{', '.join(str(r.seed) for r in rows if r.holds is not True)})"
        )
    met = sum(1 for r in rows if r.meets_target)
    if s:
        summary += f"; the gain reaches {target_pct:g}% in {met} of {len(rows)} seeds"
    return Robustness(load, perturb, noise, subject, base, tuple(rows), status, summary)
