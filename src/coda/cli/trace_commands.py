"""``coda trace``: describe a trace (``info``, the default) or generate a workload and
write it as one (``generate``)."""

from __future__ import annotations

import click
from rich.text import Text

from coda.cli.deferred import (
    CENSORED,
    FORMATS,
    FRACTIONAL,
    MAX_ARRIVAL_SCALE,
    MAX_GENERATED_DAYS,
    PRESETS,
    DeferredChoice,
    DeferredMaxFloat,
)
from coda.cli.terminal import console, user_errors
from coda.params import AsciiIntRange, OutFile
from coda.study.config import MAX_SEED
from coda.workload.limits import MAX_TRACE_JOBS


class _TraceGroup(click.Group):
    """`coda trace [PATH] [options]` describes a trace: `info`, taken whenever no
    subcommand is named, so the command reads as it did before it had subcommands;
    `coda trace generate ...` writes a generated workload."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["info", *args]
        return super().parse_args(ctx, args)


@click.group("trace", cls=_TraceGroup)
def trace_group() -> None:
    """Describe a trace (`coda trace [PATH] [options]`, the default; its options:
    `coda trace info --help`) or generate one (`coda trace generate --preset paper
    --out FILE`)."""


@trace_group.command("info")
@click.argument("path", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--trace",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Trace file (or give it as PATH). Default: the bundled Alibaba openb 2023 pod list.",
)
@click.option("--format", "fmt", type=DeferredChoice(FORMATS), default=None,
              help="The trace's format [default: from its name and columns].")  # fmt: skip
@click.option(
    "--skip-bad-rows",
    is_flag=True,
    help="Skip malformed trace rows (counted in the report) instead of failing.",
)
@click.option("--fractional", type=DeferredChoice(FRACTIONAL), default="whole",
              help="Fractional-GPU jobs: give a whole GPU, or drop.")  # fmt: skip
@click.option("--censored", type=DeferredChoice(CENSORED), default="keep",
              help="Jobs still running at the trace end: keep or drop.")  # fmt: skip
def trace_info(
    path: str | None,
    trace: str | None,
    fmt: str | None,
    skip_bad_rows: bool,
    fractional: str,
    censored: str,
) -> None:
    """Load a trace and show what became of every row, and how rows were treated."""
    import numpy as np
    from rich.table import Table

    from coda.workload.traces import bundled_trace_path, load_trace

    if path is not None and trace is not None and path != trace:
        raise click.UsageError("give the trace once: as PATH or as --trace")
    with user_errors():
        loaded = load_trace(
            path or trace or bundled_trace_path(),
            fmt,
            skip_bad_rows=skip_bad_rows,
            fractional=fractional,
            censored=censored,
        )
    rep, jobs = loaded.report, loaded.jobs
    table = Table(title=f"{rep.path} ({rep.format})", show_header=False)
    table.add_row("rows read", f"{rep.rows_read:,}")
    table.add_row("jobs loaded", f"{rep.jobs_loaded:,}")
    table.add_row("  DNN (GPU) jobs", f"{int(jobs.is_dnn.sum()):,}")
    table.add_row("  CPU jobs", f"{int((~jobs.is_dnn).sum()):,}")
    table.add_row("skipped bad rows", f"{rep.skipped_bad_rows:,}")
    if rep.duplicate_ids:
        examples = ", ".join(rep.duplicate_id_examples)
        table.add_row("duplicate ids (kept, renamed)", f"{rep.duplicate_ids:,} ({examples})")
    for key, n in rep.excluded.items():
        table.add_row(f"excluded: {key}", f"{n:,}")
    for key, n in rep.adjusted.items():
        table.add_row(f"adjusted: {key}", f"{n:,}")
    if len(jobs):
        span = float(jobs.submit[-1] - jobs.submit[0])
        table.add_row("arrival span", f"{span / 86400:.2f} days")
        table.add_row("GPU-hours asked", f"{float((jobs.gpus * jobs.duration).sum()) / 3600:,.0f}")
    # The optional columns, where the trace gives them.
    if jobs.user is not None:
        table.add_row("users", f"{len(set(jobs.user) - {''}):,}")
    if jobs.model is not None:
        table.add_row("DNN jobs naming their model", f"{sum(1 for m in jobs.model if m):,}")
    if jobs.time_limit is not None:
        table.add_row("jobs with a time limit", f"{int((~np.isnan(jobs.time_limit)).sum()):,}")
    if jobs.cpu_bw is not None:
        given = int((~np.isnan(jobs.cpu_bw)).sum())
        table.add_row("CPU jobs with a bandwidth per core", f"{given:,}")
    console.print(table)
    for key, text in rep.treatments.items():
        console.print(f"[bold]{key}[/bold]: ", Text(text))
    for example in rep.bad_row_examples:
        console.print(Text(f"bad row: {example}"))


@trace_group.command("generate")
@click.option(
    "--preset",
    type=DeferredChoice(PRESETS, sort=True),
    default="paper",
    show_default=True,
    help="Parameter set (docs/trace-formats.md, Generated workloads, lists each with its source).",
)
@click.option("--seed", type=AsciiIntRange(0, MAX_SEED), default=0, show_default=True,
              help="Random seed of the generated trace.")  # fmt: skip
@click.option(
    "--jobs",
    "n_jobs",
    type=AsciiIntRange(1, MAX_TRACE_JOBS),
    default=None,
    help="Number of jobs. Default: the preset's (paper: 100,000).",
)
@click.option(
    "--days",
    type=DeferredMaxFloat(0.0, MAX_GENERATED_DAYS, min_open=True),
    default=None,
    help="Days the jobs arrive over at --arrival-scale 1. Default: the preset's (paper: 30).",
)
@click.option(
    "--arrival-scale",
    type=DeferredMaxFloat(0.0, MAX_ARRIVAL_SCALE, min_open=True),
    default=None,
    help="Multiplies the arrival rate (the same jobs arrive over days / scale). Default: 1.",
)
@click.option(
    "--out",
    type=OutFile(),
    required=True,
    help="CSV file to write (the csv trace format, optional columns included).",
)
def trace_generate(
    preset: str,
    seed: int,
    n_jobs: int | None,
    days: float | None,
    arrival_scale: float | None,
    out: str,
) -> None:
    """Generate a workload and write it as a csv trace; show its marginals beside the
    paper's."""
    from rich.table import Table

    from coda.workload.generate import PRESETS, generate_preset, marginals, write_csv

    with user_errors():
        jobs = generate_preset(preset, seed, n_jobs=n_jobs, days=days, arrival_scale=arrival_scale)
        path = write_csv(jobs, out)
    table = Table(title=f"{preset} workload, seed {seed}: marginals")
    for col in ("marginal", "ours", "paper"):
        table.add_column(col)
    reading = PRESETS[preset].speech_reading
    for m in marginals(jobs, speech_reading=reading).values():
        table.add_row(m["what"], _marginal_text(m["ours"]), Text(m["paper_says"]))
    console.print(table)
    console.print(Text(f"wrote {len(jobs):,} jobs to {path}"))


def _marginal_text(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and 0 <= v <= 1:
        return f"{100 * v:.1f}%"
    if isinstance(v, float):
        return f"{v:.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)
