"""The performance model of DNN and CPU jobs, kept as data (profiles/*.json), and a job
table with it applied (`Workload`, `build_workload`).

A profile set says, per DNN model, how training speed depends on the cores a job
gets on each node, how much memory bandwidth it uses, how much a bandwidth-hungry
co-runner slows it, and whether it is PCIe-heavy. The simulator engine reads it
only through `JobPerf` (per job shape, cached) and `ProfileSet`. The equations that
combine these values, their provenance and every assumption are in
docs/performance-model.md. The parts live beside this module: `job_perf` (one job
shape), `profile_schema` (the JSON schema), `profile_set` (a loaded set), `mix`
(model mixes); their public names are importable from here as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coda.workload.job_perf import JobPerf
from coda.workload.jobs import JobTable
from coda.workload.mix import normalise_mix, parse_mix
from coda.workload.profile_schema import SCHEMA, TABLE_COLUMNS
from coda.workload.profile_set import (
    PROFILE_DIR,
    ProfileSet,
    available_profile_sets,
    load_profile_set,
)

__all__ = [
    "PROFILE_DIR",
    "SCHEMA",
    "TABLE_COLUMNS",
    "JobPerf",
    "ProfileSet",
    "Workload",
    "available_profile_sets",
    "build_workload",
    "load_profile_set",
    "normalise_mix",
    "parse_mix",
]


@dataclass
class Workload:
    """A job table with the performance model applied: who runs what, how much work."""

    jobs: JobTable
    model: np.ndarray  # int16 index into model_names; -1 for CPU jobs
    model_names: tuple[str, ...]
    cpu_bw_per_core: np.ndarray  # float64 GB/s per core; 0.0 for DNN jobs
    # bool: whether a requeue keeps the job's work up to its last checkpoint (CPU jobs;
    # True for DNN jobs, which are never requeued)
    checkpoints: np.ndarray
    work: np.ndarray  # float64 seconds at full speed (DNN: duration * speed(requested))
    profiles: ProfileSet
    seed: int
    mix: dict[str, float]

    def __len__(self) -> int:
        return len(self.jobs)


def _ceil_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = -(-a // b)
    return out


def _given_models(
    given: list[str], dnn: np.ndarray, model: np.ndarray, names: tuple[str, ...]
) -> None:
    """Put the table's own model names (case-insensitive; "" = keep the draw) in place."""
    canon = {m.lower(): i for i, m in enumerate(names)}
    for i in dnn.tolist():
        name = given[i]
        if not name:
            continue
        at = canon.get(name.lower())
        if at is None:
            raise ValueError(
                f"job table: job {i} names model {name[:40]!r}, not in the profile set "
                f"({', '.join(names)})"
            )
        model[i] = at


def build_workload(
    jobs: JobTable,
    profiles: ProfileSet,
    seed: int,
    mix: dict[str, float] | None = None,
    checkpoint_share: float = 1.0,
) -> Workload:
    """Assign models to DNN jobs and bandwidth to CPU jobs; convert durations to work.

    Deterministic for a seed: models are drawn first (DNN jobs in table order), then
    the CPU jobs' bandwidth, then (where ``checkpoint_share`` < 1) which CPU jobs
    checkpoint: each does with that probability, the rest lose their whole run when
    requeued. A DNN job's trace duration is taken as its run at the
    cores it asked for, ceil(cores / nodes) per node, so its work at full speed is
    duration * core_speed(requested), with GPUs per node = ceil(gpus / nodes).
    """
    norm_mix = normalise_mix(mix if mix is not None else profiles.default_mix, profiles)
    rng = np.random.default_rng(seed)
    names = profiles.models
    n = len(jobs)
    is_dnn = np.asarray(jobs.gpus) > 0
    dnn = np.flatnonzero(is_dnn)
    cpu = np.flatnonzero(~is_dnn)

    model = np.full(n, -1, dtype=np.int16)
    p = np.array([norm_mix.get(m, 0.0) for m in names])
    # Drawn for every DNN job even where the table names its model, so a seed draws
    # the same models for the rest whether or not some are given.
    model[dnn] = rng.choice(len(names), size=dnn.size, p=p / p.sum())
    if jobs.model is not None:
        _given_models(jobs.model, dnn, model, names)
    cpu_bw = np.zeros(n, dtype=np.float64)
    cpu_bw[cpu] = profiles.sample_cpu_bw_per_core(rng, cpu.size)
    if jobs.cpu_bw is not None:
        given = np.asarray(jobs.cpu_bw, dtype=np.float64)[cpu]
        if np.any(given < 0) or np.any(np.isinf(given)):
            raise ValueError("job table: cpu_bw must be finite and >= 0 GB/s per core")
        cpu_bw[cpu] = np.where(np.isnan(given), cpu_bw[cpu], given)
    if not 0.0 <= checkpoint_share <= 1.0:
        raise ValueError(f"the share of CPU jobs that checkpoint must be in [0, 1], got "
                         f"{checkpoint_share!r}")  # fmt: skip
    checkpoints = np.ones(n, dtype=bool)
    if checkpoint_share < 1.0:
        checkpoints[cpu] = rng.random(cpu.size) < checkpoint_share

    work = np.asarray(jobs.duration, dtype=np.float64).copy()
    if dnn.size:
        nodes = np.maximum(jobs.nodes[dnn].astype(np.int64), 1)
        g = np.maximum(_ceil_div(jobs.gpus[dnn].astype(np.int64), nodes), 1)
        req = np.maximum(_ceil_div(jobs.cores[dnn].astype(np.int64), nodes), 1)
        mi = model[dnn].astype(np.int64)
        if g.max() >= 1 << 16 or nodes.max() >= 1 << 16 or req.max() >= 1 << 24:
            raise ValueError("job shape out of range (>= 65536 GPUs/nodes or 2^24 cores per node)")
        # One speed per distinct (model, g, nodes, cores) shape: a few thousand, not 1e6.
        key = (((mi << 16) | g) << 16 | nodes) << 24 | req
        uniq, inv = np.unique(key, return_inverse=True)
        speeds = np.empty(uniq.size, dtype=np.float64)
        for i, k in enumerate(uniq.tolist()):
            r = k & 0xFFFFFF
            nd = (k >> 24) & 0xFFFF
            gg = (k >> 40) & 0xFFFF
            mm = k >> 56
            s = profiles.job_perf(names[mm], gg, nd).core_speed(float(r))
            if not s > 0.0:  # cannot happen for cores >= 1; guards a malformed custom curve
                raise ValueError(f"{names[mm]} with {r} cores/node has speed {s}; work undefined")
            speeds[i] = s
        work[dnn] = work[dnn] * speeds[inv.reshape(-1)]
    return Workload(
        jobs=jobs,
        model=model,
        model_names=names,
        cpu_bw_per_core=cpu_bw,
        checkpoints=checkpoints,
        work=work,
        profiles=profiles,
        seed=seed,
        mix=norm_mix,
    )
