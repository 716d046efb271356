"""Everything together: statistics, decomposition, verdicts and robustness from the
records of one experiment (`analyse`), as one `Analysis`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from coda.experiment.config import (
    ExperimentConfig,
    split_policies,
)
from coda.experiment.decomposition import ChainStep, Decomposition, ablation_chain, decompose
from coda.experiment.records import RunRecord
from coda.experiment.robust import Robustness, robustness
from coda.experiment.stats import (
    Estimate,
    aggregate,
    gains,
)
from coda.experiment.verdict import (
    LoadVerdict,
    judge_load,
)
from coda.values import fmt_number


@dataclass
class Analysis:
    loads: tuple[float, ...]
    policies: tuple[str, ...]
    base: str
    subject: str
    judged_load: float
    stats: dict[tuple[str, float], dict[str, Estimate]]
    gains: dict[tuple[str, float], dict[str, Estimate]]
    decomposition: dict[float, Decomposition | None]
    chain: dict[float, list[ChainStep]]
    verdicts: dict[float, LoadVerdict]
    robustness: Robustness | None
    notes: list[tuple[str, int]]  # (note, number of runs that gave it)

    @property
    def headline(self) -> LoadVerdict:
        return self.verdicts[self.judged_load]

    def met_at(self) -> list[float]:
        return [load for load, v in self.verdicts.items() if v.status == "met"]

    def to_dict(self) -> dict[str, Any]:
        def cells(table: dict[tuple[str, float], dict[str, Estimate]]) -> list[dict[str, Any]]:
            return [
                {"policy": p, "load": load, **{k: e.to_dict() for k, e in metrics.items()}}
                for (p, load), metrics in table.items()
            ]

        return {
            "baseline": self.base,
            "subject": self.subject,
            "headline_load": self.judged_load,
            "verdict": {
                "headline": self.headline.to_dict(),
                "met_at_loads": self.met_at(),
                "per_load": [v.to_dict() for v in self.verdicts.values()],
                "robustness": self.robustness.status if self.robustness else None,
            },
            "aggregates": cells(self.stats),
            "gains_vs_baseline": cells(self.gains),
            "decomposition": [d.to_dict() for d in self.decomposition.values() if d is not None],
            "ablation_chain": [
                {
                    "load": load,
                    "steps": [
                        {"label": s.label, "cumulative_pct": s.cumulative_pct, **s.step.to_dict()}
                        for s in steps
                    ],
                }
                for load, steps in self.chain.items()
                if steps
            ],
            "robustness": self.robustness.to_dict() if self.robustness else None,
            "notes": [{"note": n, "runs": k} for n, k in self.notes],
        }


def dedup_notes(records: Iterable[RunRecord]) -> list[tuple[str, int]]:
    """Every distinct note with the number of runs that gave it, in first-seen order."""
    counts: Counter[str] = Counter()
    for r in records:
        counts.update(dict.fromkeys(r.notes, 1))
    return list(counts.items())


def analyse(
    records: Sequence[RunRecord], cfg: ExperimentConfig, policies: Sequence[str] | None = None
) -> Analysis:
    """Statistics, decomposition, verdicts and robustness from the records."""
    if policies is None:
        policies = split_policies(cfg.policies)[0]
    policies = tuple(policies)
    loads = tuple(cfg.loads)
    return Analysis(
        loads=loads,
        policies=policies,
        base=cfg.baseline,
        subject=cfg.subject,
        judged_load=cfg.judged_load,
        stats=aggregate(records, policies, loads),
        gains=gains(records, policies, loads, cfg.baseline),
        decomposition={load: decompose(records, cfg.baseline, cfg.subject, load) for load in loads},
        chain={load: ablation_chain(records, load, policies) for load in loads},
        verdicts={load: judge_load(records, load, cfg.baseline, cfg.subject) for load in loads},
        robustness=robustness(
            records, cfg.judged_load, cfg.perturb, cfg.noise, cfg.baseline, cfg.subject
        ),
        notes=dedup_notes(records),
    )


def describe_loads(loads: Sequence[float]) -> str:
    return ", ".join(fmt_number(x) for x in loads)
