"""The headline experiment's machine-readable files: results.json (configuration, verdict,
aggregates, every run, errors with tracebacks) and runs.csv (one row per run).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coda.experiment import (
    DNN_QUEUE_STRESS_S,
    EXTRA_METRICS,
    METRICS,
    PAPER_GAIN_PCT,
    ExperimentResult,
    RunRecord,
    reproduce_command,
    robustness_policies,
)
from coda.report.files import format_cell
from coda.writing import text_output


def results_dict(result: ExperimentResult, command: str | None = None) -> dict[str, Any]:
    cfg = result.config
    analysis = result.analysis.to_dict()
    return {
        "experiment": {
            "command": command or reproduce_command(cfg),
            "claim": f"+{PAPER_GAIN_PCT:g}% GPU utilisation (relative), CPU queuing no longer",
            "target_gain_pct": PAPER_GAIN_PCT,
            "dnn_queue_stress_s": DNN_QUEUE_STRESS_S,
            "loads": list(cfg.loads),
            "seeds": list(range(cfg.seeds)),
            "headline_load": cfg.judged_load,
            "policies_requested": list(cfg.policies),
            "policies_run": list(result.policies),
            "policies_skipped": list(result.skipped),
            "baseline": cfg.baseline,
            "subject": cfg.subject,
            "robustness": {
                "enabled": cfg.robustness,
                "perturb": cfg.perturb,
                "noise": cfg.noise,
                "policies": list(robustness_policies(cfg)) if cfg.robustness else [],
            },
            "base_config": asdict(cfg.base),
            "runs": len(result.records),
            "failed": len(result.errors),
            "wall_s": result.wall_s,
        },
        "verdict": analysis.pop("verdict"),
        **analysis,
        "runs": [
            {k: v for k, v in r.to_dict().items() if k != "traceback"} for r in result.records
        ],
        "errors": [
            {
                "kind": r.kind,
                "policy": r.policy,
                "load": r.load,
                "seed": r.seed,
                "error": r.error,
                "config": r.config,
                "traceback": r.traceback,
            }
            for r in result.errors
        ],
    }


RUN_COLUMNS = ("kind", "policy", "load", "seed", "perturb", "noise", "error")


def write_runs_csv(records: Sequence[RunRecord], path: Path) -> Path:
    """One row per run: its coordinates, error (empty if none) and every kept metric."""
    keys = [k for k, _, _ in METRICS] + [k for k in EXTRA_METRICS]
    with text_output(path, newline="") as f:
        w = csv.writer(f)
        w.writerow([*RUN_COLUMNS, *keys])
        for r in records:
            row = [r.kind, r.policy, r.load, r.seed, r.perturb, r.noise, r.error or ""]
            row += [r.metrics.get(k) for k in keys]
            w.writerow(["" if v is None else format_cell(v) for v in row])
    return Path(path)
