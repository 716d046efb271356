"""``coda simulate``, ``coda compare`` and ``coda policies``: one trace replayed through
one policy or several, and the policies they accept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from coda.cli.run_options import default_trace_options, model_options, run_config, trace_options
from coda.cli.terminal import console, prepare_run, run_one_policy, user_errors
from coda.params import OutDir
from coda.policy import POLICIES
from coda.study.config import PAPER_SETTING_CLUSTER


def _check_policies(names: list[str]) -> None:
    if not names:
        raise click.BadParameter("names no policy", param_hint="--policy/--policies")
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise click.BadParameter(
            f"unknown policy {', '.join(map(repr, unknown))}; known: {', '.join(sorted(POLICIES))}",
            param_hint="--policy/--policies",
        )


@click.command()
@default_trace_options
@model_options
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
    with user_errors():
        prepared = prepare_run(run_config(kw))
        result = run_one_policy(prepared, policy)
        paths = write_run(result, Path(out))
    console.print(summary_table(result.summary))
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")


@click.command()
@trace_options(cluster=PAPER_SETTING_CLUSTER)
@model_options
@click.option(
    "--policies",
    default="fifo,drf,coda",
    show_default=True,
    help="Comma-separated policies, run on the same workload (the first is the baseline).",
)
@click.option("--out", type=OutDir(), default="out/compare", show_default=True,
              help="Folder for the comparison, its plots and a folder per policy.")  # fmt: skip
def compare(policies: str, out: str, **kw: Any) -> None:
    """Run several policies on the same trace and workload; side-by-side table. By
    default the paper's setting on the bundled trace: fifo, drf and coda on the paper's
    cluster (GPU servers with scarce cores, shared by both kinds of job)."""
    from coda.report import comparison_table, write_comparison
    from coda.sim.cpu_harm import cpu_stretch

    names = [p.strip() for p in policies.split(",") if p.strip()]
    _check_policies(names)
    if len(set(names)) != len(names):
        raise click.BadParameter("a policy is named twice", param_hint="--policies")
    with user_errors():
        prepared = prepare_run(run_config(kw))
        results = [run_one_policy(prepared, name) for name in names]
        # Each CPU job's execution against the same job's under the baseline (the first).
        for result in results[1:]:
            result.summary["cpu_stretch"] = cpu_stretch(result, results[0], names[0])
        paths = write_comparison(results, Path(out))
    console.print(comparison_table([r.summary for r in results]))
    console.print(f"[dim]wrote {len(paths)} files under {out}[/dim]")


@click.command("policies")
def list_policies() -> None:
    """List the policies that simulate/compare accept."""
    from coda.policy import make_policy

    for name in sorted(POLICIES):
        console.print(f"[bold]{name}[/bold]: {make_policy(name).description}")
