"""The headline experiment's outputs: report.md, results.json, runs.csv, plots, and the
compact terminal table. The numbers come from `coda.experiment`; this module and its
siblings only render them: `experiment_format` (numbers as text), `experiment_markdown`
(report.md), `experiment_data` (results.json, runs.csv), `experiment_plots` (figures),
`experiment_terminal` (verdict lines, table). Like every other report, each title states
trace, cluster, loads, seeds. Every public name is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from coda.experiment import ExperimentResult, reproduce_command
from coda.report.experiment_data import RUN_COLUMNS, results_dict, write_runs_csv
from coda.report.experiment_format import fmt_estimate
from coda.report.experiment_markdown import markdown_report
from coda.report.experiment_terminal import experiment_table, verdict_lines
from coda.report.files import write_json
from coda.writing import write_text

__all__ = [
    "REPORT_FILES",
    "RUN_COLUMNS",
    "experiment_table",
    "fmt_estimate",
    "markdown_report",
    "results_dict",
    "verdict_lines",
    "write_experiment",
    "write_runs_csv",
]

REPORT_FILES = (
    "report.md",
    "results.json",
    "runs.csv",
    "gpu_util_vs_load.png",
    "queuing_vs_load.png",
    "gain_decomposition.png",
    "robustness.png",
)


def write_experiment(
    result: ExperimentResult, out_dir: Path, command: str | None = None
) -> list[Path]:
    """report.md, results.json, runs.csv and the four plots (REPORT_FILES) in out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = command or reproduce_command(result.config, str(out_dir))
    md = out_dir / "report.md"
    write_text(md, markdown_report(result, command))
    from coda.report.experiment_plots import (  # matplotlib: here only
        plot_gain_decomposition,
        plot_gpu_util_vs_load,
        plot_queuing_vs_load,
        plot_robustness,
    )

    plots: list[tuple[Callable[[ExperimentResult, Path], Path], str]] = [
        (plot_gpu_util_vs_load, "gpu_util_vs_load.png"),
        (plot_queuing_vs_load, "queuing_vs_load.png"),
        (plot_gain_decomposition, "gain_decomposition.png"),
        (plot_robustness, "robustness.png"),
    ]
    return [
        md,
        write_json(results_dict(result, command), out_dir / "results.json"),
        write_runs_csv(result.records, out_dir / "runs.csv"),
        *[fn(result, out_dir / name) for fn, name in plots],
    ]
