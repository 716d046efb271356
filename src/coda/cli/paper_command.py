"""``coda experiment paper``: CODA in the paper's own setting against FIFO and DRF, with
its ablations and the oracle, reported beside the paper's table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from coda.cli.deferred import (
    FORMATS,
    MAX_ARRIVAL_SCALE,
    SPEECH_READINGS,
    DeferredChoice,
    DeferredMaxFloat,
)
from coda.cli.run_options import MAX_SEEDS, MAX_WORKERS
from coda.cli.terminal import console, err_console, runs_bar, user_errors
from coda.params import AsciiIntRange, FiniteFloat, OutDir
from coda.policy import POLICIES
from coda.study.config import MAX_LOAD, MAX_SEED
from coda.workload.busy_derivation import READINGS as BUSY_READINGS
from coda.workload.limits import MAX_TRACE_JOBS


@click.command("paper")
@click.option(
    "--trace",
    default=None,
    help="A real trace instead of the generated paper workload: a file, or 'openb' for the "
    "bundled Alibaba openb 2023 trace.",
)
@click.option("--format", "fmt", type=DeferredChoice(FORMATS), default=None, help="Trace format.")
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
@click.option("--seeds", type=AsciiIntRange(1, MAX_SEEDS), default=3, show_default=True,
              help="Seeds 0..N-1 per policy.")  # fmt: skip
@click.option(
    "--jobs",
    "n_jobs",
    type=AsciiIntRange(1, MAX_TRACE_JOBS),
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
    type=DeferredMaxFloat(0.0, MAX_ARRIVAL_SCALE, min_open=True),
    default=None,
    help="Generated workload: arrival-rate multiplier (default 1, the paper's rate).",
)
@click.option(
    "--first-seed",
    type=AsciiIntRange(0, MAX_SEED),
    default=0,
    show_default=True,
    help="Run seeds N, N+1, ... (the fit ran on seeds 1000 and 1001).",
)
@click.option(
    "--fit",
    is_flag=True,
    help="Instead of the experiment: fit the generated workload's unpublished parts to the "
    "baselines' published figures (fifo and drf only) and write fit.md and fit.json.",
)
@click.option(
    "--fit-budget",
    type=AsciiIntRange(2, 1000),
    default=None,
    help="With --fit: candidates to run (default 48; each is a month under fifo and drf).",
)
@click.option(
    "--speech-reading",
    type=DeferredChoice(SPEECH_READINGS),
    default="all",
    show_default=True,
    help="How Figure 2b's 86.4% speech-related jobs is read: of all jobs ('all', ours), or "
    "of DNN jobs ('dnn'); each has its own fitted preset (docs/paper.md).",
)
@click.option(
    "--busy-reading",
    type=click.Choice(BUSY_READINGS),
    default="mid",
    show_default=True,
    help="The busy curves of the models Figure 3 does not show: the measured pipelined "
    "models' mean ('mid'), lower or higher (docs/paper.md).",
)
@click.option(
    "--heavy-share",
    type=FiniteFloat(0.0, 1.0),
    default=None,
    help="Generated workload: the share of CPU jobs that are memory-bandwidth heavy "
    "(default the paper's 0.5%).",
)
@click.option("--out", type=OutDir(), default="out/paper", show_default=True,
              help="Folder for the report, its data and the plots.")  # fmt: skip
@click.option(
    "--workers",
    type=AsciiIntRange(1, MAX_WORKERS),
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
    first_seed: int,
    fit: bool,
    fit_budget: int | None,
    speech_reading: str,
    busy_reading: str,
    heavy_share: float | None,
    out: str,
    workers: int | None,
) -> None:
    """CODA in the paper's own setting against FIFO and DRF, with its ablations and the
    oracle: the paper's table beside ours, targets, plots (report.md, results.json).
    With --fit: the workload fitted to the baselines' published figures (fit.md)."""
    import time

    ctx = click.get_current_context()
    if fit:
        flags = {p.name: p.opts[0] for p in ctx.command.params}
        given = [
            flags[name]
            for name in (
                "trace", "fmt", "cluster", "load", "seeds", "n_jobs", "policies",
                "arrival_scale", "first_seed", "busy_reading", "heavy_share",
            )
            if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT
        ]  # fmt: skip
        if given:
            raise click.UsageError(
                f"--fit runs its own fixed setting; {', '.join(given)} cannot go with it"
            )
        _fit(Path(out), fit_budget, workers, speech_reading)
        return
    if fit_budget is not None:
        raise click.UsageError("--fit-budget goes with --fit")

    from coda.experiment.paper import (
        PAPER_ARRIVAL_SCALE,
        PaperConfig,
        check_policies,
        default_workers,
        run_all,
        setting,
        write_profiles,
        write_workloads,
    )
    from coda.experiment.paper_results import results
    from coda.report.paper_report import write_outputs
    from coda.study.run import prepare
    from coda.workload.traces import bundled_trace_path

    names = tuple(p.strip() for p in policies.split(",") if p.strip())
    if trace == "openb":
        trace = str(bundled_trace_path())
    elif trace is not None and not _readable_file(trace):
        raise click.BadParameter(f"{trace!r} is not a readable file", param_hint="--trace")
    with user_errors():
        check_policies(names, list(POLICIES))
        if trace is not None and (n_jobs is not None or arrival_scale is not None):
            raise ValueError(
                "--jobs and --arrival-scale shape the generated workload; with --trace use --load"
            )
        if trace is not None and (heavy_share is not None or speech_reading != "all"):
            raise ValueError(
                "--heavy-share and --speech-reading shape the generated workload; "
                "a --trace has its own"
            )
        cfg = PaperConfig(
            out=Path(out),
            trace=trace,
            format=fmt,
            cluster=cluster,
            load=load,
            seeds=seeds,
            first_seed=first_seed,
            jobs=n_jobs,
            policies=names,
            arrival_scale=PAPER_ARRIVAL_SCALE if arrival_scale is None else arrival_scale,
            workers=workers or default_workers(),
            speech_reading=speech_reading,
            busy_reading=busy_reading,
            heavy_share=None if heavy_share is None else heavy_share + 0.0,  # -0 is 0
        )
        cfg.validate()
        start = time.perf_counter()
        marg = None
        with err_console.status("generating and checking the workload"):
            if cfg.generated:
                marg = write_workloads(cfg)
            else:
                write_profiles(cfg)
            # The first seed here, so that a bad trace or cluster fails once, not per run.
            prepared = prepare(cfg.run_config(cfg.first_seed))
        if not cfg.generated:
            from coda.workload.generate import marginals

            marg = marginals(prepared.workload.jobs)
        parts = [f"--trace {trace}"] if trace else []
        parts += [f"--format {fmt}"] if fmt else []
        parts += [f"--load {load:g}"] if load is not None else []
        parts += [f"--jobs {n_jobs}"] if n_jobs is not None else []
        parts += [f"--arrival-scale {arrival_scale:g}"] if arrival_scale is not None else []
        parts += [f"--speech-reading {speech_reading}"] if speech_reading != "all" else []
        parts += [f"--busy-reading {busy_reading}"] if busy_reading != "mid" else []
        parts += [f"--heavy-share {heavy_share:g}"] if heavy_share is not None else []
        command = " ".join(
            [
                "coda experiment paper",
                *parts,
                f"--cluster {cluster}",
                f"--seeds {seeds}",
                *([f"--first-seed {first_seed}"] if first_seed else []),
                f"--policies {','.join(names)}",
                f"--out {out}",
            ]
        )
        c = prepared.cluster
        where = f"{c.label}: {len(c.nodes)} servers, {c.gpus} GPUs, {c.cores} cores"
        info = setting(cfg, where, "; ".join(prepared.notes), command)
        total = len(names) * seeds
        with runs_bar("paper") as bar:
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


def _fit(out: Path, budget: int | None, workers: int | None, speech_reading: str) -> None:
    """`--fit`: the seeded search (coda.experiment.fit), its table and chosen parameters."""
    from coda.experiment.fit import (
        DEFAULT_BUDGET,
        FIT_SEED,
        FitSearch,
        evaluate_in_pool,
        fit_result,
        knob_values,
        knobs_for,
    )
    from coda.experiment.paper import default_workers
    from coda.report.fit_report import write_fit
    from coda.workload.generate import speech_preset

    n = budget or DEFAULT_BUDGET
    reading = f" --speech-reading {speech_reading}" if speech_reading != "all" else ""
    command = f"coda experiment paper --fit --fit-budget {n}{reading} --out {out}"
    base = speech_preset(speech_reading)
    with user_errors(), runs_bar("fit") as bar:
        task = bar.add_task("candidates", total=n)
        best_d = [float("inf")]

        def on_candidate(c: Any, done: int, total: int) -> None:
            best_d[0] = min(best_d[0], c.distance)
            what = f"distance {c.distance:.3f}" if c.error is None else f"FAILED ({c.error})"
            bar.console.print(
                Text(f"candidate {done}: {what} (best {best_d[0]:.3f})"), highlight=False
            )
            bar.update(task, completed=done, total=total)

        search = FitSearch(
            n,
            FIT_SEED,
            evaluate_in_pool(workers or default_workers(), base),
            start=knob_values(base),
            on_candidate=on_candidate,
            knobs=knobs_for(base),
        )
        best = search.run()
        res = fit_result(best, search.tried, command, base)
        paths = write_fit(out, res)
    console.print(Text((out / "fit.md").read_text()))
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")


def _readable_file(path: str) -> bool:
    try:
        return Path(path).is_file() and os.access(path, os.R_OK)
    except OSError:  # a name the OS refuses (too long)
        return False
