"""``coda experiment sensitivity``: the paper's verdict under every reading of the paper
(Figure 2b's speech share, the busy curves of the models Figure 3 does not show)."""

from __future__ import annotations

from pathlib import Path

import click

from coda.cli.month_options import month_command, month_options, run_shown, show_report
from coda.cli.terminal import err_console, user_errors


@click.command("sensitivity")
@month_options(out="out/sensitivity", seeds=2)
def sensitivity(
    seeds: int, first_seed: int, n_jobs: int | None, workers: int | None, out: str
) -> None:
    """The paper's verdict under every reading of the paper: FIFO, CODA and the oracle
    per reading of Figure 2b and of the busy curves Figure 3 does not give; report.md,
    results.json."""
    from coda.experiment.paper import default_workers
    from coda.experiment.sensitivity import (
        SensitivityConfig,
        prepare_runs,
        run_readings,
        summarise,
    )
    from coda.report.sensitivity_report import write_outputs

    with user_errors():
        cfg = SensitivityConfig(
            out=Path(out),
            seeds=seeds,
            first_seed=first_seed,
            workers=workers or default_workers(),
            jobs=n_jobs,
        )
        cfg.validate()
        command = month_command("sensitivity", seeds, first_seed, n_jobs, out)
        with err_console.status("generating the workloads"):
            runs, marginals = prepare_runs(cfg)
        done = run_shown(
            "sensitivity",
            runs,
            lambda on_done: run_readings(cfg, runs, on_done),
            lambda rr: rr.reading.name,
        )
        res = summarise(cfg, done, marginals)
        paths = write_outputs(cfg.out, res, command)
    show_report(cfg.out, paths, res["errors"])
