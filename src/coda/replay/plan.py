"""What a replay submits: a trace's jobs, time-compressed and fitted to the test
cluster, as the simulator prepares them, so that the real stack and the simulator run
exactly the same jobs.

The chain: take the first ``jobs`` jobs of the trace (by arrival); divide arrival
times, durations and time limits by ``speed`` (a job shorter than ``min_job_s`` after
that is lengthened to it); give every job a time limit in whole minutes (Slurm's unit),
at least one, from its own or ``default_time_limit_s``; map the trace's users onto the
cluster's local users; write that table as a CSV and let the simulator's ``prepare``
load it onto the test cluster's shape at the offered GPU load ``load`` (arrival gaps
scaled, durations kept). The plan's jobs are the prepared workload's, one by one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda.study.config import DEFAULT_POLICY, DEFAULT_TIME_LIMIT_S, RunConfig
from coda.study.run import Prepared, prepare
from coda.workload.jobs import JobTable
from coda.workload.traces import load_trace
from coda.workload.traces.generic_csv import write_csv

MIN_JOB_S = 5.0  # a Slurm job takes about a second to start: shorter ones say little
MAX_JOBS = 2000


@dataclass(frozen=True)
class ClusterShape:
    """The test cluster (deploy/slurm-test-cluster up --nodes --gpu-nodes --gpus --cores)."""

    nodes: int = 4
    gpu_nodes: int = 4
    gpus: int = 5
    cores: int = 28

    def __post_init__(self) -> None:
        if not (1 <= self.nodes <= 16 and 0 <= self.gpu_nodes <= self.nodes):
            raise ValueError(f"cluster shape {self}: 1-16 nodes, at most that many with GPUs")
        if not (1 <= self.gpus <= 8 and 1 <= self.cores <= 256):
            raise ValueError(f"cluster shape {self}: 1-8 GPUs and 1-256 cores per node")

    @property
    def spec(self) -> str:
        """The simulator's compact cluster spec for the same nodes."""
        parts = []
        if self.gpu_nodes:
            parts.append(f"{self.gpu_nodes}x{self.gpus}g{self.cores}c")
        if self.nodes > self.gpu_nodes:
            parts.append(f"{self.nodes - self.gpu_nodes}x0g{self.cores}c")
        return ",".join(parts)


@dataclass(frozen=True)
class ReplayJob:
    """One job as the replay submits it (times in real seconds from the replay's start)."""

    idx: int  # its row in the prepared workload (the simulator's job index)
    name: str
    user: str
    submit_s: float
    kind: str  # "dnn" or "cpu"
    gpus: int  # in total (the simulator's weight for the job's GPUs)
    nodes: int
    gpus_pn: int
    cores_pn: int
    model: str  # "" for a CPU job
    work_s: float  # seconds of work at full speed
    bw_per_core: float  # GB/s per core (CPU jobs)
    time_limit_min: int

    def record(self) -> dict[str, Any]:
        """The job as replay.json lists it."""
        return {"idx": self.idx, "name": self.name, "user": self.user, "kind": self.kind,
                "submit_s": self.submit_s, "nodes": self.nodes, "gpus_pn": self.gpus_pn,
                "cores_pn": self.cores_pn, "model": self.model, "work_s": self.work_s,
                "time_limit_min": self.time_limit_min}  # fmt: skip


def compress(
    table: JobTable,
    jobs: int,
    speed: float,
    users: list[str],
    min_job_s: float = MIN_JOB_S,
    default_time_limit_s: float = DEFAULT_TIME_LIMIT_S,
) -> JobTable:
    """The first ``jobs`` jobs of ``table``, time-compressed by ``speed``, with whole-minute
    time limits and the trace's users mapped onto ``users`` (in order of first arrival)."""
    if not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"--jobs {jobs}: must be in 1..{MAX_JOBS}")
    if not (math.isfinite(speed) and speed >= 1):
        raise ValueError(f"--speed {speed}: must be a number >= 1")
    if not users:
        raise ValueError("no local users to submit as")
    if len(table) == 0:
        raise ValueError("the trace has no jobs to replay")
    order = np.argsort(table.submit, kind="stable")[:jobs]
    sub = table.take(order)
    limits = sub.time_limit if sub.time_limit is not None else np.full(len(sub), np.nan)
    limits = np.where(np.isnan(limits), default_time_limit_s, limits) / speed
    durations = np.maximum(sub.duration / speed, min_job_s)
    # Slurm's unit is the minute: the simulator plans with the same rounded limits.
    limit_min = np.maximum(1, np.ceil(np.maximum(limits, durations) / 60.0))
    trace_users = (
        sub.user if sub.user is not None else [f"u{i % len(users)}" for i in range(len(sub))]
    )
    seen: dict[str, str] = {}
    for u in trace_users:
        if u not in seen:
            seen[u] = users[len(seen) % len(users)]
    return dataclasses.replace(
        sub,
        submit=(sub.submit - sub.submit[0]) / speed,
        duration=durations,
        time_limit=limit_min * 60.0,
        user=[seen[u] for u in trace_users],
    )


def fitting(table: JobTable, shape: ClusterShape) -> tuple[JobTable, int]:
    """The jobs that fit the test cluster's nodes (GPUs, cores per node, node count;
    Slurm would refuse the others at submission), and how many were left out."""
    nodes = np.maximum(table.nodes, 1)
    gpus_pn = -(-table.gpus // nodes)
    cores_pn = -(-table.cores // nodes)
    dnn = table.gpus > 0
    ok = (cores_pn <= shape.cores) & (nodes <= shape.nodes)
    ok &= ~dnn | ((gpus_pn <= shape.gpus) & (nodes <= shape.gpu_nodes))
    keep = np.flatnonzero(ok)
    return table.take(keep), int(len(table) - len(keep))


def prepare_replay(
    table: JobTable, shape: ClusterShape, out: Path, seed: int, load: float = 1.0
) -> Prepared:
    """The simulator's prepared workload for the compressed table on the test cluster
    (time-limit estimates: what Slurm's backfill knows)."""
    out.mkdir(parents=True, exist_ok=True)
    path = write_csv(table, out / "replay-trace.csv")
    config = RunConfig(
        trace=str(path), format="csv", cluster=shape.spec, load=load, seed=seed,
        policy=dataclasses.replace(DEFAULT_POLICY, estimates="time-limits"), warmup=0.0,
    )  # fmt: skip
    return prepare(config)


def plan(prepared: Prepared) -> list[ReplayJob]:
    """One ReplayJob per prepared job, in arrival order."""
    w = prepared.workload
    jobs = w.jobs
    if jobs.user is None or jobs.time_limit is None:  # compress() sets both
        raise ValueError("the trace has no user or time-limit column: not a replay's trace")
    out = []
    for i in range(len(jobs)):
        if not jobs.user[i]:  # it would be submitted as nobody in particular
            raise ValueError(f"job {jobs.ids[i]!r} has no user: not a replay's trace")
        if not math.isfinite(jobs.time_limit[i]):  # Slurm would be given none
            raise ValueError(f"job {jobs.ids[i]!r} has no time limit: not a replay's trace")
        gpus, nodes = int(jobs.gpus[i]), int(jobs.nodes[i])
        dnn = gpus > 0
        out.append(
            ReplayJob(
                idx=i,
                name=f"r{i}",
                user=jobs.user[i],
                submit_s=float(jobs.submit[i]),
                kind="dnn" if dnn else "cpu",
                gpus=gpus,
                nodes=nodes,
                gpus_pn=-(-gpus // nodes),
                cores_pn=max(1, -(-int(jobs.cores[i]) // nodes)),
                model=w.model_names[int(w.model[i])] if dnn else "",
                work_s=float(w.work[i]),
                bw_per_core=float(w.cpu_bw_per_core[i]),
                time_limit_min=int(round(float(jobs.time_limit[i]) / 60.0)),
            )  # fmt: skip
        )
    return out


def load_table(trace: str | None, fmt: str | None, seed: int, jobs: int) -> JobTable:
    """The trace's jobs, or (no trace) the generated paper workload."""
    if trace is None:
        from coda.workload.generate import generate_preset

        return generate_preset("paper", seed, n_jobs=max(jobs, 100))
    return load_trace(Path(trace), fmt).jobs
