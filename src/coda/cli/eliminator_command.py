"""``coda experiment eliminator``: the contention eliminator in the paper's scenario
(Section VI-E), CODA with and without it at 0.5%, 2% and 5% bandwidth-heavy CPU jobs."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from coda.cli.deferred import SPEECH_READINGS, DeferredChoice
from coda.cli.run_options import MAX_SEEDS, MAX_WORKERS
from coda.cli.terminal import console, err_console, runs_bar, user_errors
from coda.params import AsciiIntRange, OutDir
from coda.study.config import MAX_SEED
from coda.workload.limits import MAX_TRACE_JOBS

MAX_SHARES = 20


@click.command("eliminator")
@click.option(
    "--heavy-shares",
    default="0.005,0.02,0.05",
    show_default=True,
    help="Comma-separated shares of CPU jobs that are memory-bandwidth heavy, each in [0, 1] "
    f"and taken to 6 significant digits, at most {MAX_SHARES} (the paper's scenario: 0.005).",
)
@click.option("--seeds", type=AsciiIntRange(1, MAX_SEEDS), default=3, show_default=True,
              help="Seeds per share (first-seed, first-seed + 1, ...).")  # fmt: skip
@click.option("--first-seed", type=AsciiIntRange(0, MAX_SEED), default=0, show_default=True,
              help="The first seed (the fit ran on seeds 1000 and 1001).")  # fmt: skip
@click.option(
    "--speech-reading",
    type=DeferredChoice(SPEECH_READINGS),
    default="all",
    show_default=True,
    help="Figure 2b's reading, whose fitted preset the month is (docs/paper.md).",
)
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
@click.option("--out", type=OutDir(), default="out/eliminator", show_default=True,
              help="Folder for the report and its data.")  # fmt: skip
def eliminator(
    heavy_shares: str,
    seeds: int,
    first_seed: int,
    speech_reading: str,
    n_jobs: int | None,
    workers: int | None,
    out: str,
) -> None:
    """The contention eliminator in the paper's scenario: CODA with and without it on the
    paper's month at each share of bandwidth-heavy CPU jobs, beside the paper's -2.3 and
    doubled queue; report.md, results.json."""
    from coda.experiment.eliminator_scenario import (
        ScenarioConfig,
        prepare_runs,
        run_scenario,
        summarise,
    )
    from coda.experiment.paper import default_workers
    from coda.experiment.regimes import OptionError, parse_values
    from coda.report.eliminator_report import write_outputs

    with user_errors():
        if heavy_shares.count(",") >= MAX_SHARES:
            raise click.BadParameter(f"at most {MAX_SHARES} values", param_hint="--heavy-shares")
        try:
            # Each share as its 6 significant digits (its label), -0 as 0.
            shares = tuple(
                float(f"{v:.6g}") + 0.0 for v in parse_values(heavy_shares, "--heavy-shares")
            )
        except OptionError as e:
            raise click.BadParameter(str(e), param_hint="--heavy-shares") from None
        if any(not 0.0 <= s <= 1.0 for s in shares):
            raise click.BadParameter("each share must be in [0, 1]", param_hint="--heavy-shares")
        cfg = ScenarioConfig(
            out=Path(out),
            seeds=seeds,
            first_seed=first_seed,
            shares=shares,
            speech_reading=speech_reading,
            workers=workers or default_workers(),
            jobs=n_jobs,
        )
        cfg.validate()
        command = (
            f"coda experiment eliminator --heavy-shares {','.join(f'{s:g}' for s in shares)} "
            f"--seeds {seeds}"
            + (f" --first-seed {first_seed}" if first_seed else "")
            + (f" --speech-reading {speech_reading}" if speech_reading != "all" else "")
            + (f" --jobs {n_jobs}" if n_jobs is not None else "")
            + f" --out {shlex.quote(out)}"
        )
        with err_console.status("generating the workloads"):
            arms = prepare_runs(cfg)
        with runs_bar("eliminator") as bar:
            task = bar.add_task("runs", total=len(arms))

            def on_done(arm: Any, rec: Any, done: int, n: int) -> None:
                what = "done" if rec.ok else f"FAILED ({rec.error})"
                bar.console.print(
                    Text(f"{100 * arm.share:g}% heavy, {arm.arm} seed {rec.seed}: {what} in "
                         f"{rec.wall_s:.1f} s"),
                    highlight=False,
                )  # fmt: skip
                bar.update(task, completed=done, total=n)

            runs = run_scenario(cfg, arms, on_done)
        res = summarise(cfg, runs)
        paths = write_outputs(cfg.out, res, command)
    console.print(Text((cfg.out / "report.md").read_text()))
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")
    if res["errors"]:
        raise click.ClickException(
            f"{len(res['errors'])} runs failed; see {cfg.out / 'results.json'}"
        )
