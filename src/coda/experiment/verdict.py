"""The verdict on the paper's claim at one load: its conditions (the baseline queues DNN
jobs, the GPU gain reaches the target, CPU-job queuing and DNN JCT are no longer), each
with the sentence that gives its numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from coda.experiment.decomposition import Decomposition, decompose
from coda.experiment.defaults import (
    BASELINE,
    DNN_QUEUE_STRESS_S,
    PAPER_GAIN_PCT,
    SUBJECT,
)
from coda.experiment.records import RunRecord
from coda.experiment.stats import (
    Estimate,
    by_seed,
    difference_of,
    mean_ci,
    paired,
    relative_gain_of,
    relative_gain_pct,
    tolerance,
)
from coda.values import fmt_duration


@dataclass(frozen=True)
class Condition:
    key: str  # "stress", "gpu_gain", "cpu_queue", "dnn_jct"
    label: str
    met: bool | None  # None: could not be judged (no data)
    detail: str  # one sentence with the numbers
    value: float | None = None
    target: float | None = None
    ci: Estimate | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "ci"}
        d["ci"] = self.ci.to_dict() if self.ci else None
        return d


@dataclass(frozen=True)
class LoadVerdict:
    load: float
    status: str  # "met", "not met", "undetermined", "not judged"
    conditions: tuple[Condition, ...]
    summary: str
    decomposition: Decomposition | None = None

    def failed(self) -> list[Condition]:
        return [c for c in self.conditions if c.met is False]

    def to_dict(self) -> dict[str, Any]:
        return {
            "load": self.load,
            "status": self.status,
            "summary": self.summary,
            "conditions": [c.to_dict() for c in self.conditions],
        }


def _ci_text(est: Estimate, fmt: Callable[[float], str]) -> str:
    if est.low is None or est.high is None:
        return f"n={est.n}, no CI"
    return f"95% CI {fmt(est.low)} to {fmt(est.high)}, n={est.n}"


def signed(x: float, decimals: int) -> str:
    """'+1.23', '-0.40', and '0.00' (never '-0.00') for what rounds to zero."""
    text = f"{x:+.{decimals}f}"
    return "0." + "0" * decimals if float(text) == 0 else text


def _pct(x: float) -> str:
    return f"{signed(x, 1)}%"


def _dur_signed(x: float) -> str:
    return ("+" if x >= 0 else "-") + fmt_duration(abs(x))


def _no_longer(
    records: Sequence[RunRecord],
    key: str,
    what: str,
    load: float,
    base: str,
    subject: str,
    cond: str,
    kind: str = "main",
) -> Condition:
    """subject's mean `key` no higher than base's, judged on the paired difference."""
    est = paired(records, subject, base, load, difference_of(key), kind)
    a, b = by_seed(records, subject, load, kind), by_seed(records, base, load, kind)
    seeds = sorted(a.keys() & b.keys())
    pairs = [
        (x, y)
        for s in seeds
        if (x := a[s].get(key)) is not None and (y := b[s].get(key)) is not None
    ]
    sv, bv = [x for x, _ in pairs], [y for _, y in pairs]
    label = f"{what} no longer than {base}'s"
    if est.mean is None:
        return Condition(cond, label, None, f"{what}: no data for both {subject} and {base}")
    s_mean, b_mean = math.fsum(sv) / len(sv), math.fsum(bv) / len(bv)
    met = est.mean <= tolerance(b_mean)
    head = (
        f"{subject}'s {what} is {fmt_duration(s_mean)} vs {base}'s {fmt_duration(b_mean)}"
        f" (difference {_dur_signed(est.mean)}"
    )
    rel = relative_gain_pct(s_mean, b_mean)
    if rel is not None and not met:
        head += f", {rel:+.1f}%"
    head += f"; {_ci_text(est, _dur_signed)})"
    if met:
        note = " - met"
        if est.high is not None and est.high > tolerance(b_mean):
            note += " on the mean; the CI reaches above 0, so not significant"
    else:
        note = f" - NOT met: longer by {fmt_duration(est.mean)}"
        if est.low is not None and est.low <= 0:
            note += " on the mean; the CI reaches 0"
    return Condition(cond, label, met, head + note, est.mean, 0.0, est)


def judge_load(
    records: Sequence[RunRecord],
    load: float,
    base: str = BASELINE,
    subject: str = SUBJECT,
    target_pct: float = PAPER_GAIN_PCT,
    stress_s: float = DNN_QUEUE_STRESS_S,
    kind: str = "main",
) -> LoadVerdict:
    """The paper's claim at one load: the baseline queues DNN jobs (> stress_s mean),
    subject's relative effective-GPU-util gain >= target_pct, its CPU-job mean queuing
    and mean DNN JCT no higher than the baseline's. Judged on means over seeds; the CI
    says whether the margin is significant."""
    base_runs = by_seed(records, base, load, kind)
    subj_runs = by_seed(records, subject, load, kind)
    if not subj_runs or not base_runs:
        missing = subject if not subj_runs else base
        return LoadVerdict(
            load,
            "not judged",
            (),
            f"load {load:g}: not judged - no successful {missing} runs "
            "(not registered, not in the policies, or failed)",
        )
    conditions = []

    stress = mean_ci(r.get("dnn_queue_mean") for r in base_runs.values())
    if stress.mean is None:
        conditions.append(
            Condition("stress", "baseline queues DNN jobs", None, f"{base}: no DNN queuing data")
        )
    else:
        met = stress.mean > stress_s
        text = (
            f"{base}'s mean DNN queuing is {fmt_duration(stress.mean)} "
            f"({_ci_text(stress, fmt_duration)}); "
        )
        text += (
            f"above {stress_s:g} s, so GPUs are contended - met"
            if met
            else f"not above {stress_s:g} s: the GPUs are not contended at this load, "
            "so there is little for CODA to gain - NOT met"
        )
        label = f"{base} queues DNN jobs (mean > {stress_s:g} s)"
        conditions.append(Condition("stress", label, met, text, stress.mean, stress_s, stress))

    gain = paired(records, subject, base, load, relative_gain_of("gpu_util_effective"), kind)
    dec = decompose(records, base, subject, load, kind)
    label = f"effective GPU util gain >= {target_pct:g}%"
    if gain.mean is None:
        conditions.append(Condition("gpu_gain", label, None, "no paired GPU-util data"))
    else:
        met = gain.mean >= target_pct
        text = (
            f"{subject}'s effective GPU utilisation is {_pct(gain.mean)} relative to {base}'s "
            f"({_ci_text(gain, _pct)}; paired per seed)"
        )
        if met:
            text += " - met"
            if gain.low is not None and gain.low < target_pct:
                text += f" on the mean; the CI reaches below {target_pct:g}%, so not significant"
        else:
            text += f" - NOT met: {target_pct - gain.mean:.1f} points short of {target_pct:g}%"
            if gain.high is not None and gain.high >= target_pct:
                text += " on the mean; the CI reaches the target"
            if dec is not None:
                text += "; " + describe_decomposition(dec)
        conditions.append(Condition("gpu_gain", label, met, text, gain.mean, target_pct, gain))

    conditions.append(
        _no_longer(
            records,
            "cpu_queue_mean",
            "CPU-job mean queuing",
            load,
            base,
            subject,
            "cpu_queue",
            kind,
        )
    )
    conditions.append(
        _no_longer(records, "dnn_jct_mean", "mean DNN JCT", load, base, subject, "dnn_jct", kind)
    )

    flags = [c.met for c in conditions]
    if all(f is True for f in flags):
        status = "met"
    elif any(f is False for f in flags):
        status = "not met"
    else:
        status = "undetermined"
    if status == "met":
        assert gain.mean is not None  # "met" needs the gain condition met, so its data
        summary = f"load {load:g}: claim MET ({_pct(gain.mean)} effective GPU util vs {base})"
    elif status == "not met":
        failed = "; ".join(c.label for c in conditions if c.met is False)
        summary = f"load {load:g}: claim NOT MET - failed: {failed}"
    else:
        summary = f"load {load:g}: undetermined - some conditions have no data"
    return LoadVerdict(load, status, tuple(conditions), summary, dec)


def describe_decomposition(dec: Decomposition) -> str:
    """'decomposition: +3.1 pp from more GPUs allocated (...), ...' in points of capacity."""
    parts = [f"{signed(100 * v, 2)} pp {label}" for _, label, v in dec.terms() if v is not None]
    return "decomposition (points of GPU capacity): " + ", ".join(parts)
