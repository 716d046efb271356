"""``coda experiment regimes``: CODA's gain across cores per GPU, CPU-job share and
load, as heat maps and tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.text import Text

from coda.cli.run_options import MAX_SEEDS, MAX_WORKERS
from coda.cli.terminal import console, err_console, runs_bar, user_errors
from coda.params import AsciiIntRange, OutDir
from coda.workload.limits import MAX_TRACE_JOBS


@click.command("regimes")
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
    type=AsciiIntRange(1, MAX_TRACE_JOBS),
    default=None,
    help="DNN jobs in each workload; a CPU share s adds s / (1 - s) CPU jobs per DNN job "
    "(default 1,500).",
)
@click.option("--seeds", type=AsciiIntRange(1, MAX_SEEDS), default=1, show_default=True,
              help="Seeds 0..N-1 per cell.")  # fmt: skip
@click.option(
    "--workers",
    type=AsciiIntRange(1, MAX_WORKERS),
    default=None,
    help="Parallel processes (default min(2, CPUs)); 1 runs inline.",
)
@click.option("--out", type=OutDir(), default="out/regimes", show_default=True,
              help="Folder for the report, its data and the heatmaps.")  # fmt: skip
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
    with user_errors():
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
    with user_errors():
        info = setting(cfg, workloads, command)
        total = len(cfg.cells()) * seeds * 4
        with runs_bar("regimes") as bar:
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
