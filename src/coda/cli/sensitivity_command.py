"""``coda experiment sensitivity``: the paper's verdict under every reading of the paper
(Figure 2b's speech share, the busy curves of the models Figure 3 does not show)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from coda.cli.run_options import MAX_SEEDS, MAX_WORKERS
from coda.cli.terminal import console, err_console, runs_bar, user_errors
from coda.params import AsciiIntRange, OutDir
from coda.study.config import MAX_SEED
from coda.workload.limits import MAX_TRACE_JOBS


@click.command("sensitivity")
@click.option("--seeds", type=AsciiIntRange(1, MAX_SEEDS), default=2, show_default=True,
              help="Seeds per reading (first-seed, first-seed + 1, ...).")  # fmt: skip
@click.option("--first-seed", type=AsciiIntRange(0, MAX_SEED), default=0, show_default=True,
              help="The first seed (the fit ran on seeds 1000 and 1001).")  # fmt: skip
@click.option(
    "--jobs",
    "n_jobs",
    type=AsciiIntRange(1, MAX_TRACE_JOBS),
    default=None,
    help="This many jobs at the paper's rate (default 100,000).",
)
@click.option(
    "--workers",
    type=AsciiIntRange(1, MAX_WORKERS),
    default=None,
    help="Parallel processes (default min(2, CPUs)); 1 runs inline.",
)
@click.option("--out", type=OutDir(), default="out/sensitivity", show_default=True,
              help="Folder for the report and its data.")  # fmt: skip
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
        command = (
            f"coda experiment sensitivity --seeds {seeds}"
            + (f" --first-seed {first_seed}" if first_seed else "")
            + (f" --jobs {n_jobs}" if n_jobs is not None else "")
            + f" --out {shlex.quote(out)}"
        )
        with err_console.status("generating the workloads"):
            runs, marginals = prepare_runs(cfg)
        with runs_bar("sensitivity") as bar:
            task = bar.add_task("runs", total=len(runs))

            def on_done(rr: Any, rec: Any, done: int, n: int) -> None:
                what = "done" if rec.ok else f"FAILED ({rec.error})"
                bar.console.print(
                    Text(f"{rr.reading.name} {rec.policy} seed {rec.seed}: {what} in "
                         f"{rec.wall_s:.1f} s"),
                    highlight=False,
                )  # fmt: skip
                bar.update(task, completed=done, total=n)

            done = run_readings(cfg, runs, on_done)
        res = summarise(cfg, done, marginals)
        paths = write_outputs(cfg.out, res, command)
    console.print(Text((cfg.out / "report.md").read_text()))
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")
    if res["errors"]:
        raise click.ClickException(
            f"{len(res['errors'])} runs failed; see {cfg.out / 'results.json'}"
        )
