"""The ``coda`` command."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from coda.params import FiniteFloat, OutDir
from coda.policy import POLICIES
from coda.policy.allocator import START_POINTS
from coda.policy.estimates import ESTIMATES
from coda.policy.options import ORDERS
from coda.sim.result import SimResult
from coda.sim.run import (
    CENSORED,
    DEFAULT_CLUSTER,
    DEFAULT_LOAD,
    DEFAULT_TIME_LIMIT_S,
    FRACTIONAL,
    MAX_HORIZON_S,
    MAX_LOAD,
    MAX_SEED,
    Prepared,
    RunConfig,
    prepare,
    run_policy,
)
from coda.workload.generate import PRESETS
from coda.workload.generate.paper import MAX_ARRIVAL_SCALE
from coda.workload.generate.paper import MAX_DAYS as MAX_GENERATED_DAYS
from coda.workload.jobs import TraceFormatError
from coda.workload.limits import MAX_TRACE_JOBS
from coda.workload.traces import FORMATS

# Piped or captured output has no terminal width; rich would then assume 80
# columns and squeeze the label column of a many-policy table to nothing.
console = Console() if Console().is_terminal else Console(width=160)
err_console = Console(stderr=True)

# Stated ranges of the numeric options (shown in --help; click checks them); the
# run's own ranges come from RunConfig, which checks them again.
MAX_SEEDS = 1000
MAX_WORKERS = 1024

F = TypeVar("F", bound=Callable[..., Any])  # a click command function, decorated in place


def _trace_options(f: F) -> F:
    options = [
        click.option(
            "--trace",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="Trace file. Default: the bundled Alibaba openb 2023 pod list.",
        ),
        click.option(
            "--format",
            "fmt",
            type=click.Choice(FORMATS),
            default=None,
            help="Trace format. Default: detected from the file's header.",
        ),
        click.option(
            "--cluster",
            default=DEFAULT_CLUSTER,
            show_default=True,
            help="'openb' (bundled node list), 'openb:F' (fraction F of it), "
            "a node-list CSV, or a spec like '48x8g96c,16x0g96c'.",
        ),
        click.option(
            "--load",
            type=FiniteFloat(0.0, MAX_LOAD, min_open=True),
            default=DEFAULT_LOAD,
            show_default=True,
            help="Rescale arrivals to this offered GPU load (x GPU capacity).",
        ),
        click.option(
            "--native-time",
            is_flag=True,
            help="Keep the trace's own arrival times (ignores --load).",
        ),
        click.option(
            "--seed",
            type=click.IntRange(0, MAX_SEED),
            default=0,
            show_default=True,
            help="Seeds the model draw, profile perturbation and sample noise.",
        ),
        click.option(
            "--profiles",
            default="coda",
            show_default=True,
            help="Performance profile set: coda, synergy, or a JSON file.",
        ),
        click.option(
            "--mix",
            default=None,
            help="DNN model mix, e.g. 'AlexNet=2,ResNet50=1'. Default: the profile set's.",
        ),
        click.option(
            "--skip-bad-rows",
            is_flag=True,
            help="Skip malformed trace rows (counted in the report) instead of failing.",
        ),
        click.option(
            "--fractional",
            type=click.Choice(FRACTIONAL),
            default="whole",
            show_default=True,
            help="Fractional-GPU jobs: give a whole GPU, or drop.",
        ),
        click.option(
            "--censored",
            type=click.Choice(CENSORED),
            default="keep",
            show_default=True,
            help="Jobs still running at the trace end: keep or drop.",
        ),
        click.option(
            "--horizon",
            type=FiniteFloat(0.0, MAX_HORIZON_S, min_open=True),
            default=None,
            help="Stop at this simulated time (s, from the trace's first arrival); "
            "later jobs count as unfinished. Default: run until every job finished.",
        ),
        click.option(
            "--warmup",
            type=FiniteFloat(0.0, 1.0, max_open=True),
            default=0.01,
            show_default=True,
            help="Share of the first arrivals that only warm the cluster up: "
            "the measurement window starts after them.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _config(kw: dict[str, Any]) -> RunConfig:
    return RunConfig(
        trace=kw["trace"],
        format=kw["fmt"],
        cluster=kw["cluster"],
        load=None if kw["native_time"] else kw["load"],
        seed=kw["seed"],
        profiles=kw["profiles"],
        mix=kw["mix"],
        skip_bad_rows=kw["skip_bad_rows"],
        fractional=kw["fractional"],
        censored=kw["censored"],
        horizon=kw["horizon"],
        warmup=kw["warmup"],
        noise=kw.get("noise", 0.05),
        perturb=kw.get("perturb", 0.0),
        estimates=kw.get("estimates", "exact"),
        default_time_limit_s=kw.get("default_time_limit", DEFAULT_TIME_LIMIT_S),
        order=kw.get("order", "drf"),
        gpu_subarrays=kw.get("gpu_subarrays", False),
        allocator_start=kw.get("allocator_start", "learned"),
    )


def _model_options(f: F) -> F:
    """Measurement noise, profile perturbation and backfill's runtime estimates
    (simulate, compare)."""
    f = click.option(
        "--allocator-start",
        type=click.Choice(START_POINTS),
        default="learned",
        show_default=True,
        help="Where CODA's core search starts: learned (its shape's learned count, at most "
        "the request) or paper (the owner's largest earlier count for the model's category, "
        "else 3 CV / 5 NLP / 5 speech).",
    )(f)
    f = click.option(
        "--gpu-subarrays/--no-gpu-subarrays",
        default=False,
        show_default=True,
        help="Split CODA's GPU array into jobs of 4+ GPUs and of fewer.",
    )(f)
    f = click.option(
        "--order",
        type=click.Choice(ORDERS),
        default="drf",
        show_default=True,
        help="CODA's order inside each array: drf (tenants by dominant share, as the paper) "
        "or fifo.",
    )(f)
    f = click.option(
        "--default-time-limit",
        type=FiniteFloat(1.0, MAX_HORIZON_S),
        default=DEFAULT_TIME_LIMIT_S,
        show_default=True,
        help="With --estimates time-limits: the limit (seconds) of a job whose trace gives none.",
    )(f)
    f = click.option(
        "--estimates",
        type=click.Choice(ESTIMATES),
        default="exact",
        show_default=True,
        help="What backfill plans with: exact (the simulator's projection), time-limits "
        "(what Slurm knows: requested times, else --default-time-limit) or none (no "
        "backfill: strict FIFO per array).",
    )(f)
    f = click.option(
        "--perturb",
        type=FiniteFloat(0.0, 1.0, max_open=True),
        default=0.0,
        show_default=True,
        help="Scale every profile value by its own U(1-P, 1+P) draw (seeded).",
    )(f)
    return click.option(
        "--noise",
        type=FiniteFloat(0.0, 1.0),
        default=0.05,
        show_default=True,
        help="Relative noise of each throughput sample the allocator sees.",
    )(f)


def one_line(e: BaseException) -> str:
    """An exception as one line: its message with line breaks folded, never empty."""
    text = " ".join(str(e).split())
    return text or type(e).__name__


@contextmanager
def _user_errors() -> Iterator[None]:
    """Bad input ends with one clear line and exit 1, not a traceback: loaders raise
    TraceFormatError/ValueError (UnicodeDecodeError and json errors are ValueErrors),
    unreadable or unwritable paths OSError, and numbers beyond what numpy or a
    float holds OverflowError."""
    try:
        yield
    except (TraceFormatError, ValueError, OSError, OverflowError) as e:
        raise click.ClickException(one_line(e)) from None


def _prepare(config: RunConfig) -> Prepared:
    with err_console.status("loading trace and building workload"):
        prepared = prepare(config)
    rep = prepared.trace_report
    excluded = ", ".join(f"{k} {v}" for k, v in rep.excluded.items()) or "none"
    dups = rep.duplicate_ids
    renamed = f"; duplicate ids (kept, renamed): {dups}" if dups else ""
    err_console.print(
        f"[dim]{rep.path}: {rep.rows_read} rows, {rep.jobs_loaded} jobs; excluded: {excluded}; "
        f"bad rows skipped: {rep.skipped_bad_rows}{renamed}; cluster {prepared.cluster.label}: "
        f"{len(prepared.cluster.nodes)} nodes, {prepared.cluster.gpus} GPUs, "
        f"{prepared.cluster.cores} cores[/dim]"
    )
    return prepared


def _run(prepared: Prepared, policy: str) -> SimResult:
    with Progress(
        TextColumn(f"[bold]{policy}[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs arrived"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    ) as bar:
        task = bar.add_task(policy, total=len(prepared.workload.jobs))
        return run_policy(
            prepared, policy, progress=lambda done, total: bar.update(task, completed=done)
        )


def _check_policies(names: list[str]) -> None:
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise click.BadParameter(
            f"unknown policy {', '.join(unknown)}; known: {', '.join(sorted(POLICIES))}",
            param_hint="--policy/--policies",
        )


@click.group()
@click.version_option(package_name="coda")
def main() -> None:
    """CODA: slim DNN jobs' CPU allocations and co-locate CPU jobs on the cores freed."""


@main.command()
@_trace_options
@_model_options
@click.option("--policy", default="coda", show_default=True, help="Scheduling policy.")
@click.option(
    "--out",
    type=OutDir(),
    default="out/simulate",
    show_default=True,
    help="Where to write summary.json, time series, per-job CSV and plots.",
)
def simulate(policy: str, out: str, **kw: Any) -> None:
    """Replay a trace through one policy; print and write the results."""
    from coda.report import summary_table, write_run

    _check_policies([policy])
    with _user_errors():
        prepared = _prepare(_config(kw))
        result = _run(prepared, policy)
        paths = write_run(result, Path(out))
    console.print(summary_table(result.summary))
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")


@main.command()
@_trace_options
@_model_options
@click.option(
    "--policies",
    default="static-separate,static-shared,coda",
    show_default=True,
    help="Comma-separated policies, run on the same workload (the first is the baseline).",
)
@click.option("--out", type=OutDir(), default="out/compare", show_default=True)
def compare(policies: str, out: str, **kw: Any) -> None:
    """Run several policies on the same trace and workload; side-by-side table."""
    from coda.report import comparison_table, write_comparison

    names = [p.strip() for p in policies.split(",") if p.strip()]
    _check_policies(names)
    if len(set(names)) != len(names):
        raise click.BadParameter("a policy is named twice", param_hint="--policies")
    with _user_errors():
        prepared = _prepare(_config(kw))
        results = [_run(prepared, name) for name in names]
        paths = write_comparison(results, Path(out))
    console.print(comparison_table([r.summary for r in results]))
    console.print(f"[dim]wrote {len(paths)} files under {out}[/dim]")


class _TraceGroup(click.Group):
    """`coda trace [PATH] [options]` describes a trace: `info`, taken whenever no
    subcommand is named, so the command reads as it did before it had subcommands;
    `coda trace generate ...` writes a generated workload."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["info", *args]
        return super().parse_args(ctx, args)


@main.group("trace", cls=_TraceGroup)
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
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None)
@click.option("--skip-bad-rows", is_flag=True)
@click.option("--fractional", type=click.Choice(FRACTIONAL), default="whole")
@click.option("--censored", type=click.Choice(CENSORED), default="keep")
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
    with _user_errors():
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
    type=click.Choice(sorted(PRESETS)),
    default="paper",
    show_default=True,
    help="Parameter set (docs/trace-formats.md, Generated workloads, lists each with its source).",
)
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True)
@click.option(
    "--jobs",
    "n_jobs",
    type=click.IntRange(1, MAX_TRACE_JOBS),
    default=None,
    help="Number of jobs. Default: the preset's (paper: 100,000).",
)
@click.option(
    "--days",
    type=FiniteFloat(0.0, MAX_GENERATED_DAYS, min_open=True),
    default=None,
    help="Days the jobs arrive over at --arrival-scale 1. Default: the preset's (paper: 30).",
)
@click.option(
    "--arrival-scale",
    type=FiniteFloat(0.0, MAX_ARRIVAL_SCALE, min_open=True),
    default=None,
    help="Multiplies the arrival rate (the same jobs arrive over days / scale). Default: 1.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True),
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

    from coda.workload.generate import generate_preset, marginals, write_csv

    with _user_errors():
        jobs = generate_preset(preset, seed, n_jobs=n_jobs, days=days, arrival_scale=arrival_scale)
        path = write_csv(jobs, out)
    table = Table(title=f"{preset} workload, seed {seed}: marginals")
    for col in ("marginal", "ours", "paper"):
        table.add_column(col)
    for m in marginals(jobs).values():
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


@main.command("policies")
def list_policies() -> None:
    """List the policies that simulate/compare accept."""
    from coda.policy import make_policy

    for name in sorted(POLICIES):
        console.print(f"[bold]{name}[/bold]: {make_policy(name).description}")


# ---------------------------------------------------------------- experiments


def _parse_loads(text: str) -> tuple[float, ...]:
    loads = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            load = float(item)
        except ValueError:
            raise click.BadParameter(
                f"bad load {item!r}: not a number", param_hint="--loads"
            ) from None
        if not (math.isfinite(load) and 0 < load <= MAX_LOAD):
            raise click.BadParameter(
                f"bad load {item!r}: must be a finite number in (0, {MAX_LOAD:g}]",
                param_hint="--loads",
            )
        if load in loads:
            raise click.BadParameter(f"load {item!r} is given twice", param_hint="--loads")
        loads.append(load)
    if not loads:
        raise click.BadParameter("no loads given", param_hint="--loads")
    return tuple(sorted(loads))


def _parse_experiment_policies(text: str) -> tuple[str, ...]:
    from coda.experiment import BASELINE, DEFAULT_POLICIES

    names = [p.strip() for p in text.split(",") if p.strip()]
    # Names the experiment knows of may not be registered yet (skipped with a warning);
    # anything else is a typo.
    for name in names:
        if name not in POLICIES and name not in DEFAULT_POLICIES:
            known = ", ".join(dict.fromkeys([*DEFAULT_POLICIES, *sorted(POLICIES)]))
            raise click.BadParameter(
                f"unknown policy {name!r}; known: {known}", param_hint="--policies"
            )
    dup = [p for i, p in enumerate(names) if p in names[:i]]
    if dup:
        raise click.BadParameter(f"policy {dup[0]!r} is named twice", param_hint="--policies")
    if BASELINE not in names:
        raise click.BadParameter(
            f"must include {BASELINE}, the baseline every gain is measured against",
            param_hint="--policies",
        )
    return tuple(names)


@main.group()
def experiment() -> None:
    """Experiments that test the paper's claims: many runs, statistics, a report."""


@experiment.command()
@click.option(
    "--loads",
    default="0.8,1.0,1.3",
    show_default=True,
    help=f"Comma-separated offered GPU loads (x GPU capacity), each in (0, {MAX_LOAD:g}].",
)
@click.option(
    "--seeds",
    type=click.IntRange(1, MAX_SEEDS),
    default=5,
    show_default=True,
    help="Seeds 0..N-1.",
)
@click.option(
    "--policies",
    default="static-separate,static-shared,coda,coda-no-slimming,coda-no-colocation,"
    "coda-no-eliminator,oracle",
    show_default=True,
    help="Comma-separated; must include static-separate. Names not registered yet are "
    "skipped with a warning.",
)
@click.option(
    "--headline-load",
    type=FiniteFloat(0.0, MAX_LOAD, min_open=True),
    default=None,
    help="Load at which the claim is judged (and the robustness sweep runs). "
    "Default: the highest of --loads.",
)
@click.option(
    "--robustness/--no-robustness",
    default=True,
    show_default=True,
    help="Also rerun baselines and coda at the headline load with perturbed profiles.",
)
@click.option(
    "--perturb",
    type=FiniteFloat(0.0, 1.0, max_open=True),
    default=0.3,
    show_default=True,
    help="Robustness: scale every profile value by U(1-p, 1+p).",
)
@click.option(
    "--noise",
    type=FiniteFloat(0.0, 1.0),
    default=0.1,
    show_default=True,
    help="Robustness: relative std of the allocator's throughput samples.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, MAX_WORKERS),
    default=None,
    help="Parallel processes. Default: the number of CPUs; 1 runs inline.",
)
@click.option(
    "--out",
    type=OutDir(),
    default="out/experiment/headline",
    show_default=True,
)
@_trace_options
def headline(
    loads: str,
    seeds: int,
    policies: str,
    headline_load: float | None,
    robustness: bool,
    perturb: float,
    noise: float,
    workers: int | None,
    out: str,
    **kw: Any,
) -> None:
    """Test the paper's claim (+20.8% GPU utilisation, CPU queuing no longer): every
    policy x load x seed, a robustness sweep, statistics, decomposition, verdict."""
    from coda.experiment import ExperimentConfig, check_workloads, plan, run_experiment
    from coda.report.experiment import experiment_table, verdict_lines, write_experiment

    load_list = _parse_loads(loads)
    names = _parse_experiment_policies(policies)
    if headline_load is not None and headline_load not in load_list:
        raise click.BadParameter(
            f"{headline_load:g} is not among --loads ({loads})", param_hint="--headline-load"
        )
    with _user_errors():
        base = _config({**kw, "load": load_list[0], "native_time": False, "seed": 0})
        cfg = ExperimentConfig(
            base=base,
            loads=load_list,
            seeds=seeds,
            policies=names,
            headline_load=headline_load,
            robustness=robustness,
            perturb=perturb,
            noise=noise,
            workers=workers,
        )
    missing = [p for p in names if p not in POLICIES]
    if missing:
        err_console.print(
            f"[yellow]warning:[/yellow] not registered, skipped: {', '.join(missing)}",
            highlight=False,
        )
    with _user_errors():
        with err_console.status("checking the trace and loads"):
            check_workloads(cfg)
        total = sum(len(g.policies) for g in plan(cfg))
        with Progress(
            TextColumn("[bold]experiment[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("runs"),
            TimeElapsedColumn(),
            console=err_console,
            disable=not err_console.is_terminal,
        ) as bar:
            task = bar.add_task("runs", total=total)
            result = run_experiment(
                cfg, progress=lambda done, n: bar.update(task, completed=done, total=n)
            )
        paths = write_experiment(result, Path(out))
    console.print(experiment_table(result))
    for line in verdict_lines(result):
        console.print(Text(line))
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")
    if result.errors:
        for r in result.errors:
            err_console.print(
                Text(
                    f"failed: {r.kind} run {r.policy} load {r.load:g} seed {r.seed} "
                    f"perturb {r.perturb:g} noise {r.noise:g}: {r.error}"
                )
            )
        raise click.ClickException(
            f"{len(result.errors)} of {len(result.records)} runs failed; "
            f"configs and tracebacks in {Path(out) / 'results.json'}"
        )


# The experiment's --loads and --seeds replace simulate's --load, --native-time and --seed.
headline.params = [p for p in headline.params if p.name not in ("load", "native_time", "seed")]


def _runs_bar(label: str) -> Progress:
    """An experiment's progress bar over its runs (stderr, shown on a terminal only)."""
    return Progress(
        TextColumn(f"[bold]{label}[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("runs"),
        TimeElapsedColumn(),
        console=err_console,
        disable=not err_console.is_terminal,
    )


@experiment.command("paper")
@click.option(
    "--trace",
    default=None,
    help="A real trace instead of the generated paper workload: a file, or 'openb' for the "
    "bundled Alibaba openb 2023 trace.",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None, help="Trace format.")
@click.option(
    "--cluster",
    default="paper",
    show_default=True,
    help="'paper' (80 servers, 400 GPUs, 28 cores each), 'openb[:F]', a node list or a spec.",
)
@click.option(
    "--load",
    type=FiniteFloat(0.0, MAX_LOAD, min_open=True),
    default=None,
    help="With --trace: rescale arrivals to this offered GPU load (default 1.0).",
)
@click.option("--seeds", type=click.IntRange(1, MAX_SEEDS), default=3, show_default=True)
@click.option(
    "--jobs",
    "n_jobs",
    type=click.IntRange(1, MAX_TRACE_JOBS),
    default=None,
    help="Generated workload: this many jobs at the paper's rate (default 100,000).",
)
@click.option(
    "--policies",
    default="fifo,drf,coda,coda-no-slimming,coda-no-colocation,coda-no-eliminator,oracle",
    show_default=True,
    help="Comma-separated policies to run.",
)
@click.option(
    "--arrival-scale",
    type=FiniteFloat(0.0, MAX_ARRIVAL_SCALE, min_open=True),
    default=None,
    help="Generated workload: arrival-rate multiplier (default 2.6, calibrated on FIFO).",
)
@click.option("--out", type=OutDir(), default="out/paper", show_default=True)
@click.option(
    "--workers",
    type=click.IntRange(1, MAX_WORKERS),
    default=None,
    help="Parallel processes (default min(2, CPUs)); 1 runs inline.",
)
def paper(
    trace: str | None,
    fmt: str | None,
    cluster: str,
    load: float | None,
    seeds: int,
    n_jobs: int | None,
    policies: str,
    arrival_scale: float | None,
    out: str,
    workers: int | None,
) -> None:
    """CODA in the paper's own setting against FIFO and DRF, with its ablations and the
    oracle: the paper's table beside ours, targets, plots (report.md, results.json)."""
    import time

    from coda.experiment.paper import (
        PAPER_ARRIVAL_SCALE,
        PaperConfig,
        check_policies,
        default_workers,
        run_all,
        setting,
        write_workloads,
    )
    from coda.experiment.paper_results import results
    from coda.report.paper_report import write_outputs
    from coda.workload.traces import bundled_trace_path

    names = tuple(p.strip() for p in policies.split(",") if p.strip())
    if trace == "openb":
        trace = str(bundled_trace_path())
    elif trace is not None and not (Path(trace).is_file() and os.access(trace, os.R_OK)):
        raise click.BadParameter(f"{trace!r} is not a readable file", param_hint="--trace")
    with _user_errors():
        check_policies(names, list(POLICIES))
        if trace is not None and (n_jobs is not None or arrival_scale is not None):
            raise ValueError(
                "--jobs and --arrival-scale shape the generated workload; with --trace use --load"
            )
        cfg = PaperConfig(
            out=Path(out),
            trace=trace,
            format=fmt,
            cluster=cluster,
            load=load,
            seeds=seeds,
            jobs=n_jobs,
            policies=names,
            arrival_scale=PAPER_ARRIVAL_SCALE if arrival_scale is None else arrival_scale,
            workers=workers or default_workers(),
        )
        cfg.validate()
        start = time.perf_counter()
        marg = None
        with err_console.status("generating and checking the workload"):
            if cfg.generated:
                marg = write_workloads(cfg)
            # Seed 0 here, so that a bad trace or cluster fails once, not once per run.
            prepared = prepare(cfg.run_config(0))
        if not cfg.generated:
            from coda.workload.generate import marginals

            marg = marginals(prepared.workload.jobs)
        parts = [f"--trace {trace}"] if trace else []
        parts += [f"--format {fmt}"] if fmt else []
        parts += [f"--load {load:g}"] if load is not None else []
        parts += [f"--jobs {n_jobs}"] if n_jobs is not None else []
        parts += [f"--arrival-scale {arrival_scale:g}"] if arrival_scale is not None else []
        command = " ".join(
            [
                "coda experiment paper",
                *parts,
                f"--cluster {cluster}",
                f"--seeds {seeds}",
                f"--policies {','.join(names)}",
                f"--out {out}",
            ]
        )
        c = prepared.cluster
        where = f"{c.label}: {len(c.nodes)} servers, {c.gpus} GPUs, {c.cores} cores"
        info = setting(cfg, where, "; ".join(prepared.notes), command)
        total = len(names) * seeds
        with _runs_bar("paper") as bar:
            task = bar.add_task("runs", total=total)

            def on_done(rec: Any, done: int, n: int) -> None:
                what = "done" if rec.ok else f"FAILED ({rec.error})"
                bar.console.print(
                    Text(f"{rec.policy} seed {rec.seed}: {what} in {rec.wall_s:.1f} s"),
                    highlight=False,
                )
                bar.update(task, completed=done, total=n)

            records = run_all(cfg, on_done)
        res = results(info, records, names, marg, time.perf_counter() - start)
        paths = write_outputs(cfg.out, res, records, names)
    console.print(Text((cfg.out / "report.md").read_text().split("## Targets")[0]))
    for t in res["targets"]:
        console.print(Text(f"{'met' if t['met'] else 'MISSED'}: {t['label']}"))
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")
    if res["errors"]:
        raise click.ClickException(
            f"{len(res['errors'])} of {len(records)} runs failed; see {cfg.out / 'results.json'}"
        )


@experiment.command("regimes")
@click.option(
    "--cores-per-gpu",
    "cores_per_gpu",
    default="3,5.6,8,16",
    show_default=True,
    help="Comma-separated cores per GPU r: servers of the paper's GPUs with round(5 r) cores "
    "each (5.6: the paper's 28).",
)
@click.option(
    "--cpu-shares",
    "cpu_shares",
    default="0.25,0.5,0.75",
    show_default=True,
    help="Comma-separated shares of jobs that are CPU jobs, each in (0, 1).",
)
@click.option(
    "--loads",
    "loads_text",
    default="0.8,1.2,1.6",
    show_default=True,
    help="Comma-separated offered GPU loads (docs/metrics.md).",
)
@click.option(
    "--jobs",
    "n_jobs",
    type=click.IntRange(1, MAX_TRACE_JOBS),
    default=None,
    help="DNN jobs in each workload; a CPU share s adds s / (1 - s) CPU jobs per DNN job "
    "(default 1,500).",
)
@click.option("--seeds", type=click.IntRange(1, MAX_SEEDS), default=1, show_default=True)
@click.option(
    "--workers",
    type=click.IntRange(1, MAX_WORKERS),
    default=None,
    help="Parallel processes (default min(2, CPUs)); 1 runs inline.",
)
@click.option("--out", type=OutDir(), default="out/regimes", show_default=True)
def regimes(
    cores_per_gpu: str,
    cpu_shares: str,
    loads_text: str,
    n_jobs: int | None,
    seeds: int,
    workers: int | None,
    out: str,
) -> None:
    """CODA's gain over fifo (shared cluster) and over static-separate (plus CPU-only
    servers) across cores per GPU, CPU-job share and load: heat maps, tables, results.json."""
    import time

    from coda.experiment.paper import default_workers
    from coda.experiment.regimes import (
        DEFAULT_DNN_JOBS,
        OptionError,
        RegimesConfig,
        parse_values,
        run_all,
        setting,
        write_workloads,
    )
    from coda.report.regimes_report import results, write_outputs

    start = time.perf_counter()
    with _user_errors():
        try:
            cfg = RegimesConfig(
                out=Path(out),
                cores_per_gpu=parse_values(cores_per_gpu, "--cores-per-gpu"),
                cpu_shares=parse_values(cpu_shares, "--cpu-shares"),
                loads=parse_values(loads_text, "--loads"),
                dnn_jobs=DEFAULT_DNN_JOBS if n_jobs is None else n_jobs,
                seeds=seeds,
                workers=workers or default_workers(),
            )
            cfg.validate()
            with err_console.status("generating the workloads"):
                workloads = write_workloads(cfg)  # also checks that every load is reachable
        except OptionError as e:  # a usage error (exit 2), not a failed run
            raise click.BadParameter(str(e), param_hint=e.option) from None
    command = " ".join(
        [
            "coda experiment regimes",
            f"--cores-per-gpu {','.join(f'{v:g}' for v in cfg.cores_per_gpu)}",
            f"--cpu-shares {','.join(f'{v:g}' for v in cfg.cpu_shares)}",
            f"--loads {','.join(f'{v:g}' for v in cfg.loads)}",
            f"--jobs {cfg.dnn_jobs}",
            f"--seeds {seeds}",
            f"--out {out}",
        ]
    )
    with _user_errors():
        info = setting(cfg, workloads, command)
        total = len(cfg.cells()) * seeds * 4
        with _runs_bar("regimes") as bar:
            task = bar.add_task("runs", total=total)

            def on_done(rec: Any, done: int, n: int) -> None:
                what = "done" if rec.ok else f"FAILED ({rec.record.error})"
                bar.console.print(
                    Text(
                        f"[{done}/{n}] {rec.cell.label()} {rec.policy} on {rec.cluster} "
                        f"seed {rec.seed}: {what} in {rec.record.wall_s:.1f} s"
                    ),
                    highlight=False,
                    soft_wrap=True,  # one line per run, however long its error
                )
                bar.update(task, completed=done, total=n)

            records = run_all(cfg, workloads, on_done)
        res = results(cfg, info, records, workloads, time.perf_counter() - start)
        paths = write_outputs(cfg.out, res)
    report = (cfg.out / "report.md").read_text()
    console.print(Text(report.split("## Every policy")[0]))
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")
    if res["errors"]:
        raise click.ClickException(
            f"{len(res['errors'])} of {len(records)} runs failed; see {cfg.out / 'results.json'}"
        )


def _register_runtime() -> None:
    from coda.runtime.cli import register
    from coda.slurm.cli import register as register_slurm

    register(main)
    register_slurm(main)


_register_runtime()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
