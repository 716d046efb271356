"""``coda experiment headline``: the paper's headline claim tested over every policy x
load x seed, with a robustness sweep, statistics and a verdict."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from coda.cli.run_options import MAX_SEEDS, MAX_WORKERS, default_trace_options, run_config
from coda.cli.terminal import console, err_console, runs_bar, user_errors
from coda.params import AsciiIntRange, FiniteFloat, OutDir
from coda.policy import POLICIES
from coda.study.config import MAX_LOAD
from coda.workload.limits import plain_number


def _parse_loads(text: str) -> tuple[float, ...]:
    loads = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            if not plain_number(item):
                raise ValueError(item)
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


@click.command()
@click.option(
    "--loads",
    default="0.8,1.0,1.3",
    show_default=True,
    help=f"Comma-separated offered GPU loads (x GPU capacity), each in (0, {MAX_LOAD:g}].",
)
@click.option(
    "--seeds",
    type=AsciiIntRange(1, MAX_SEEDS),
    default=5,
    show_default=True,
    help="Seeds 0..N-1.",
)
@click.option(
    "--policies",
    default="static-separate,static-shared,coda,coda-no-slimming,coda-no-colocation,"
    "coda-no-eliminator,oracle",
    show_default=True,
    help="Comma-separated, each once; must include static-separate. A name that is no "
    "policy is refused (one of the experiment's own that is not registered is skipped, "
    "with a warning).",
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
    type=AsciiIntRange(1, MAX_WORKERS),
    default=None,
    help="Parallel processes. Default: the number of CPUs; 1 runs inline.",
)
@click.option(
    "--out",
    type=OutDir(),
    default="out/experiment/headline",
    show_default=True,
    help="Folder for report.md, results.json, runs.csv and the plots.",
)
@default_trace_options
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
    with user_errors():
        base = run_config({**kw, "load": load_list[0], "native_time": False, "seed": 0})
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
    with user_errors():
        with err_console.status("checking the trace and loads"):
            check_workloads(cfg)
        total = sum(len(g.policies) for g in plan(cfg))
        with runs_bar("experiment") as bar:
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
