"""``coda experiment cpu-harm``: what co-location costs each CPU job on several
workloads (FIFO, DRF, CODA without and with its harm budget)."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from coda.cli.deferred import FORMATS, DeferredChoice
from coda.cli.run_options import MAX_SEEDS, MAX_WORKERS
from coda.cli.terminal import console, runs_bar, user_errors
from coda.params import AsciiIntRange, FiniteFloat, OutDir
from coda.study.config import MAX_SEED
from coda.workload.limits import MAX_TRACE_JOBS


@click.command("cpu-harm")
@click.option(
    "--seeds",
    type=AsciiIntRange(1, MAX_SEEDS),
    default=1,
    show_default=True,
    help="Seeds (first-seed, first-seed + 1, ...).",
)
@click.option(
    "--first-seed",
    type=AsciiIntRange(0, MAX_SEED),
    default=0,
    show_default=True,
    help="The first seed.",
)
@click.option(
    "--jobs",
    "n_jobs",
    type=AsciiIntRange(100, MAX_TRACE_JOBS),
    default=None,
    help="The paper's months: this many jobs at the paper's rate (default 100,000).",
)
@click.option(
    "--trace",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="A trace of yours (Helios, ...) run beside the bundled workloads.",
)
@click.option(
    "--format",
    "fmt",
    type=DeferredChoice(FORMATS),
    default=None,
    help="Its format. Default: detected from the file's header.",
)
@click.option(
    "--cluster",
    default=None,
    help="The cluster --trace runs on (e.g. 50x8g48c). Default: paper.",
)
@click.option(
    "--load",
    type=FiniteFloat(0.0, 1000.0, min_open=True),
    default=None,
    help="Offered GPU load --trace is rescaled to. Default: 1.5.",
)
@click.option(
    "--cases",
    default=None,
    help="Comma-separated workloads to run (default: every one): openb-1.0, "
    "openb-1.5, openb-cpu-twice-1.5, paper-month, paper-month-cpu-days, "
    "paper-month-cpu-days-half-ckpt (half the CPU jobs never checkpoint), trace.",
)
@click.option(
    "--workers",
    type=AsciiIntRange(1, MAX_WORKERS),
    default=None,
    help="Parallel processes (default min(2, CPUs)); 1 runs inline.",
)
@click.option("--tune", "tunes", multiple=True, metavar="PART.FIELD=VALUE",
              help="Override a knob of `coda` (not of the others), e.g. harm.bus_share=0.8: "
              "the report then measures that variant.")  # fmt: skip
@click.option("--out", type=OutDir(), default="out/cpu-harm", show_default=True,
              help="Folder for the report, its data and the generated traces.")  # fmt: skip
def cpu_harm(
    seeds: int,
    first_seed: int,
    n_jobs: int | None,
    trace: str | None,
    fmt: str | None,
    cluster: str | None,
    load: float | None,
    cases: str | None,
    workers: int | None,
    tunes: tuple[str, ...],
    out: str,
) -> None:
    """What co-location costs each CPU job: FIFO, DRF and CODA without and with its harm
    budget on the bundled trace (loads 1.0 and 1.5, CPU-only pods twice), the paper's
    month and that month with day-long CPU jobs; report.md, results.json."""
    from coda.cli.node_daemon import parse_tunes
    from coda.experiment.cpu_harm_study import (
        HarmStudyConfig,
        build_cases,
        plan,
        run_all,
        summarise,
    )
    from coda.experiment.paper import default_workers
    from coda.report.cpu_harm_report import report_markdown
    from coda.report.files import write_report

    with user_errors():
        names = None if cases is None else tuple(c.strip() for c in cases.split(",") if c.strip())
        cfg = HarmStudyConfig(
            out=Path(out), seeds=seeds, first_seed=first_seed, jobs=n_jobs, trace=trace,
            format=fmt, cluster=cluster, load=load, cases=names,
            workers=workers or default_workers(), tune=parse_tunes(tunes),
        )  # fmt: skip
        cfg.validate()
        built = build_cases(cfg)
        runs = plan(cfg, built)
        with runs_bar("workloads") as bar:
            task = bar.add_task("runs", total=len(runs))

            def done(rec, i: int, n: int) -> None:  # type: ignore[no-untyped-def]
                state = rec.error or "done"
                bar.console.print(f"{rec.case} seed {rec.seed}: {state} in {rec.wall_s:.0f} s")
                bar.update(task, completed=i)

            records = run_all(runs, cfg.workers, done)
        res = summarise(cfg, built, records)
        given = [("--trace", trace), ("--format", fmt), ("--cluster", cluster),
                 ("--load", None if load is None else repr(load)),
                 ("--cases", None if names is None else ",".join(names)),
                 *(("--tune", t) for t in tunes)]  # fmt: skip
        command = (
            f"coda experiment cpu-harm --seeds {seeds}"
            + (f" --first-seed {first_seed}" if first_seed else "")
            + (f" --jobs {n_jobs}" if n_jobs is not None else "")
            + "".join(f" {flag} {shlex.quote(v)}" for flag, v in given if v is not None)
            + f" --out {shlex.quote(out)}"
        )  # fmt: skip
        paths = write_report(Path(out), res, command, report_markdown)
    console.print((Path(out) / "report.md").read_text())
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")
    if res["errors"]:
        raise click.ClickException(f"{len(res['errors'])} runs failed; see {out}/results.json")
