"""``coda experiment eliminator``: the contention eliminator in the paper's scenario
(Section VI-E), CODA with and without it at 0.5%, 2% and 5% bandwidth-heavy CPU jobs."""

from __future__ import annotations

from pathlib import Path

import click

from coda.cli.deferred import SPEECH_READINGS, DeferredChoice
from coda.cli.month_options import month_command, month_options, run_shown, show_report
from coda.cli.terminal import err_console, user_errors

MAX_SHARES = 20


@click.command("eliminator")
@click.option(
    "--heavy-shares",
    default="0.005,0.02,0.05",
    show_default=True,
    help="Comma-separated shares of CPU jobs that are memory-bandwidth heavy, each in [0, 1] "
    f"and taken to 6 significant digits, at most {MAX_SHARES} (the paper's scenario: 0.005).",
)
@click.option(
    "--speech-reading",
    type=DeferredChoice(SPEECH_READINGS),
    default="all",
    show_default=True,
    help="Figure 2b's reading, whose fitted preset the month is (docs/paper.md).",
)
@month_options(out="out/eliminator", seeds=3)
def eliminator(
    heavy_shares: str,
    speech_reading: str,
    seeds: int,
    first_seed: int,
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
    from coda.report.eliminator_report import write_outputs

    with user_errors():
        shares = _shares(heavy_shares)
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
        extra = f" --heavy-shares {','.join(f'{s:g}' for s in shares)}" + (
            f" --speech-reading {speech_reading}" if speech_reading != "all" else ""
        )
        command = month_command("eliminator", seeds, first_seed, n_jobs, out, extra)
        with err_console.status("generating the workloads"):
            arms = prepare_runs(cfg)
        runs = run_shown(
            "eliminator",
            arms,
            lambda on_done: run_scenario(cfg, arms, on_done),
            lambda arm: f"{100 * arm.share:g}% heavy, {arm.arm}",
        )
        res = summarise(cfg, runs)
        paths = write_outputs(cfg.out, res, command)
    show_report(cfg.out, paths, res["errors"])


def _shares(text: str) -> tuple[float, ...]:
    """--heavy-shares: at most MAX_SHARES numbers in [0, 1], each as its 6 significant
    digits (its label), -0 as 0."""
    from coda.experiment.regimes import OptionError, parse_values

    if text.count(",") >= MAX_SHARES:
        raise click.BadParameter(f"at most {MAX_SHARES} values", param_hint="--heavy-shares")
    try:
        shares = tuple(float(f"{v:.6g}") + 0.0 for v in parse_values(text, "--heavy-shares"))
    except OptionError as e:
        raise click.BadParameter(str(e), param_hint="--heavy-shares") from None
    if any(not 0.0 <= s <= 1.0 for s in shares):
        raise click.BadParameter("each share must be in [0, 1]", param_hint="--heavy-shares")
    return shares
