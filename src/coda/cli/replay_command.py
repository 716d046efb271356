"""``coda replay``: a trace through plain Slurm, CODA on Slurm and the simulator."""

from __future__ import annotations

from pathlib import Path

import click

from coda.cli.deferred import FORMATS, DeferredChoice
from coda.params import AsciiIntRange, FiniteFloat, OutDir


@click.command()
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    help="A trace (default: the generated paper workload).",
)
@click.option("--format", "fmt", type=DeferredChoice(FORMATS),
              help="The trace's format (default: detected).")  # fmt: skip
@click.option("--jobs", type=AsciiIntRange(1, 2000), default=36, show_default=True,
              help="The first N jobs of the trace, by arrival.")  # fmt: skip
@click.option("--speed", type=FiniteFloat(min=1, max=1e6), default=300.0, show_default=True,
              help="Time compression: trace seconds per real second.")  # fmt: skip
@click.option("--load", type=FiniteFloat(min=0.05, max=10), default=0.9, show_default=True,
              help="Offered GPU load on the test cluster (arrival gaps scaled).")  # fmt: skip
@click.option("--nodes", type=AsciiIntRange(1, 16), default=2, show_default=True,
              help="Nodes of the replay's test cluster.")  # fmt: skip
@click.option("--gpus", type=AsciiIntRange(1, 8), default=5, show_default=True,
              help="Fake GPUs per node.")  # fmt: skip
@click.option("--cores", type=AsciiIntRange(1, 256), default=28, show_default=True,
              help="Declared cores per node (the paper's: 28 cores, about 5 GPUs).")  # fmt: skip
@click.option("--users", type=AsciiIntRange(1, 16), default=3, show_default=True,
              help="Ordinary users the jobs are submitted as.")  # fmt: skip
@click.option("--seed", type=AsciiIntRange(0, 2**32 - 1), default=0, show_default=True,
              help="Random seed of the replayed jobs.")  # fmt: skip
@click.option("--faults/--no-faults", default=True, show_default=True,
              help="SIGKILL the controller and agents, restart a slurmd (CODA run).")  # fmt: skip
@click.option("--probes", type=AsciiIntRange(0, 50), default=5, show_default=True,
              help="Probe jobs that measure each stack's start latency before its run; the "
              "simulated twins start jobs that much after placing them (0: no probes, no "
              "delay).")  # fmt: skip
@click.option("--sim-seeds", type=AsciiIntRange(1, 50), default=5, show_default=True,
              help="Noise seeds CODA's simulated twin runs (plain Slurm's has no allocator: one); "
              "the report gives their mean, and the JCT error's median over them.")  # fmt: skip
@click.option("--drain", type=FiniteFloat(min=10, max=86400), default=300.0, show_default=True,
              help="Seconds to wait, after the last arrival, for the jobs to end.")  # fmt: skip
@click.option("--repeat", type=AsciiIntRange(1, 20), default=1, show_default=True,
              help="Run the whole replay this many times (each into rep-K/); report.md then "
              "gives every repetition's figures and their spread.")  # fmt: skip
@click.option("--out", type=OutDir(), default="out/replay", show_default=True,
              help="Folder for the replay's report and records.")  # fmt: skip
@click.option("--cluster-dir", type=click.Path(file_okay=False), default="/var/tmp/coda-replay",
              show_default=True, help="Where the test cluster lives.")  # fmt: skip
def replay(trace: str | None, fmt: str | None, jobs: int, speed: float, load: float, nodes: int,
           gpus: int, cores: int, users: int, seed: int, faults: bool, probes: int,
           sim_seeds: int, drain: float, repeat: int, out: str,
           cluster_dir: str) -> None:  # fmt: skip
    """Replay a trace on a real Slurm test cluster twice, plain Slurm and CODA, and in
    the simulator with the matching policies; write report.md and replay.json. Needs
    root and Slurm's packages (deploy/slurm-test-cluster install)."""
    from coda.replay.plan import ClusterShape
    from coda.replay.repeats import replay_repeated
    from coda.replay.run import ReplayConfig
    from coda.replay.run import replay as run_replay
    from coda.replay.stack import StackError
    from coda.slurm.client import SlurmError

    if fmt is not None and trace is None:
        raise click.UsageError("--format goes with --trace (the generated workload has none)")
    try:
        cfg = ReplayConfig(trace=trace, format=fmt, jobs=jobs, speed=speed, load=load, seed=seed,
                           shape=ClusterShape(nodes, nodes, gpus, cores), users=users,
                           out=Path(out), cluster_dir=Path(cluster_dir), faults=faults,
                           drain_timeout_s=drain, probes=probes,
                           sim_seeds=sim_seeds)  # fmt: skip
        log = lambda m: click.echo(m, err=True)  # noqa: E731
        if repeat == 1:
            result = run_replay(cfg, log=log)
        else:
            result = replay_repeated(cfg, repeat, run_replay, log=log)
    except (ValueError, OSError, StackError, SlurmError) as e:
        raise click.ClickException(str(e)) from None
    click.echo((Path(out) / "report.md").read_text())
    lost = sum(result["jobs_lost"].values()) + sum(
        result["jobs_started_twice"].values()
    )  # not unfinished
    if lost:
        raise click.ClickException(f"{lost} jobs lost or started twice (see {out}/report.md)")
