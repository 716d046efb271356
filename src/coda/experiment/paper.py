"""`coda experiment paper`: every policy on the paper's setting (generated workload on
the paper cluster, or a real trace), one independent run per (seed, policy), in a
process pool; a failed run is recorded with its one-line error and the others go on.

The default workload is the paper preset (coda.workload.generate.paper): the paper's
month at the paper's rate, its unpublished parts fitted to the baselines' published
figures by `coda experiment paper --fit` (coda.experiment.fit), never to CODA's.
Aggregation, targets and the paper's values: coda.experiment.paper_results.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from coda.experiment.pool import run_each
from coda.sim.paper_metrics import paper_metrics
from coda.study.config import DEFAULT_POLICY, MAX_LOAD, MAX_SEED, RunConfig
from coda.study.run import prepare, run_policy
from coda.workload.busy_derivation import DEFAULT_READING, READINGS, with_reading
from coda.workload.generate import PaperParams, generate, marginals, speech_preset, write_csv
from coda.workload.generate.paper import (
    DEFAULT_SPEECH_READING,
    MAX_ARRIVAL_SCALE,
    SPEECH_READINGS,
)
from coda.workload.limits import MAX_TRACE_JOBS
from coda.workload.perf import load_profile_set
from coda.writing import write_text

PAPER_ARRIVAL_SCALE = 1.0  # the paper's rate: 100,000 jobs in 30 days, no compression
PAPER_POLICIES = (
    "fifo",
    "drf",
    "coda",
    "coda-no-slimming",
    "coda-no-colocation",
    "coda-no-eliminator",
    "oracle",
)
ESTIMATES = "time-limits"  # what Slurm knows, as in the paper's cluster
POLICY_OPTIONS = dataclasses.replace(DEFAULT_POLICY, estimates=ESTIMATES)
DEFAULT_CLUSTER = "paper"
DEFAULT_TRACE_LOAD = 1.0
MAX_SEEDS = 1000
# The paper preset's full size; --jobs N keeps its rate (N jobs over days * N / this).
PRESET_JOBS = PaperParams().n_jobs


@dataclass(frozen=True)
class PaperConfig:
    """One `coda experiment paper` invocation; validate() checks it as a whole."""

    out: Path
    trace: str | None = None  # None: the generated paper workload
    format: str | None = None
    cluster: str = DEFAULT_CLUSTER
    load: float | None = None  # with --trace: offered GPU load (default 1.0)
    seeds: int = 3
    first_seed: int = 0  # seeds first_seed ... first_seed + seeds - 1
    jobs: int | None = None  # generated workload only
    policies: tuple[str, ...] = PAPER_POLICIES
    arrival_scale: float = PAPER_ARRIVAL_SCALE
    workers: int = 1
    # Figure 2b's reading (the preset fitted under it) and the busy curves' reading of
    # the models Figure 3 does not show (docs/paper.md).
    speech_reading: str = DEFAULT_SPEECH_READING
    busy_reading: str = DEFAULT_READING
    # The share of CPU jobs that are memory-bandwidth heavy (None: the preset's, 0.5%).
    heavy_share: float | None = None
    # The DNN jobs' model mix by domain (None: the preset's fitted one).
    domain_weights: tuple[tuple[str, float], ...] | None = None

    def validate(self) -> None:
        if not 1 <= self.seeds <= min(MAX_SEEDS, MAX_SEED):
            raise ValueError(f"--seeds must be in [1, {MAX_SEEDS}], got {self.seeds}")
        if not 0 <= self.first_seed <= MAX_SEED - self.seeds + 1:
            raise ValueError(
                f"--first-seed must be in [0, {MAX_SEED - self.seeds + 1}] for {self.seeds} "
                f"seeds, got {self.first_seed}"
            )
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if not self.policies:
            raise ValueError("--policies: no policy given")
        if self.speech_reading not in SPEECH_READINGS:
            raise ValueError(
                f"--speech-reading must be one of {', '.join(SPEECH_READINGS)}, "
                f"got {self.speech_reading!r}"
            )
        if self.busy_reading not in READINGS:
            raise ValueError(
                f"--busy-reading must be one of {', '.join(READINGS)}, got {self.busy_reading!r}"
            )
        if self.heavy_share is not None and not 0.0 <= self.heavy_share <= 1.0:
            raise ValueError(f"--heavy-share must be in [0, 1], got {self.heavy_share}")
        if self.trace is None:
            if self.load is not None:
                raise ValueError(
                    "--load rescales a --trace; the generated workload keeps its own "
                    "arrivals (use --arrival-scale)"
                )
            if self.format is not None:
                raise ValueError("--format names a --trace's format; no --trace is given")
            if self.jobs is not None and not 1 <= self.jobs <= MAX_TRACE_JOBS:
                raise ValueError(f"--jobs must be in [1, {MAX_TRACE_JOBS}], got {self.jobs}")
            if not 0 < self.arrival_scale <= MAX_ARRIVAL_SCALE:
                raise ValueError(
                    f"--arrival-scale must be in (0, {MAX_ARRIVAL_SCALE:g}], "
                    f"got {self.arrival_scale}"
                )
        else:
            if self.heavy_share is not None or self.speech_reading != DEFAULT_SPEECH_READING:
                raise ValueError(
                    "--heavy-share and --speech-reading shape the generated workload; "
                    "a --trace has its own"
                )
            if self.jobs is not None or self.arrival_scale != PAPER_ARRIVAL_SCALE:
                raise ValueError(
                    "--jobs and --arrival-scale shape the generated workload; "
                    "with --trace use --load"
                )
            if self.load is not None and not 0 < self.load <= MAX_LOAD:
                raise ValueError(f"--load must be in (0, {MAX_LOAD:g}], got {self.load}")

    def seed_list(self) -> range:
        return range(self.first_seed, self.first_seed + self.seeds)

    @property
    def generated(self) -> bool:
        return self.trace is None

    def params(self) -> PaperParams:
        """The generated workload's parameters (every seed the same): the preset fitted
        under the speech reading."""
        base = speech_preset(self.speech_reading)
        n = self.jobs if self.jobs is not None else base.n_jobs
        heavy = base.cpu_bw_heavy_share if self.heavy_share is None else self.heavy_share
        mix = base.domain_weights if self.domain_weights is None else self.domain_weights
        return dataclasses.replace(
            base,
            n_jobs=n,
            days=base.days * n / PRESET_JOBS,
            arrival_scale=self.arrival_scale,
            cpu_bw_heavy_share=heavy,
            domain_weights=mix,
        )

    def profiles_path(self) -> Path:
        """Where the busy reading's profile set is written (the default: the shipped one)."""
        return self.out / f"profiles-busy-{self.busy_reading}.json"

    def profiles(self) -> str:
        """The profile set runs name: the shipped one, or the busy reading's copy."""
        return "coda" if self.busy_reading == DEFAULT_READING else str(self.profiles_path())

    def workload_path(self, seed: int) -> Path:
        return self.out / f"workload-seed{seed}.csv"

    def run_config(self, seed: int) -> RunConfig:
        trace: str | None = self.trace
        fmt = self.format
        load: float | None = self.load if self.load is not None else DEFAULT_TRACE_LOAD
        if self.generated:  # native arrivals: the generator already set the rate
            trace, fmt, load = str(self.workload_path(seed)), None, None
        return RunConfig(
            trace=trace,
            format=fmt,
            cluster=self.cluster,
            load=load,
            seed=seed,
            profiles=self.profiles(),
            policy=POLICY_OPTIONS,
        )


@dataclass(frozen=True)
class Run:
    seed: int
    policy: str
    config: RunConfig
    keep_series: bool  # the plots' data (seed 0 only: per-job arrays are large)


@dataclass
class PaperRecord:
    """One (seed, policy) run: its paper metrics, or its one-line error."""

    seed: int
    policy: str
    wall_s: float
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    series: dict[str, np.ndarray] = field(default_factory=dict)  # plots only

    @property
    def ok(self) -> bool:
        return self.error is None


def plan(cfg: PaperConfig) -> list[Run]:
    """Every (seed, policy) run, seed-major so that seed 0's runs finish first."""
    first = cfg.first_seed
    return [Run(s, p, cfg.run_config(s), s == first) for s in cfg.seed_list() for p in cfg.policies]


def write_profiles(cfg: PaperConfig) -> None:
    """The busy reading's profile set, where it is not the shipped one's (before the
    pool, like the workloads)."""
    if cfg.busy_reading == DEFAULT_READING:
        return
    cfg.out.mkdir(parents=True, exist_ok=True)
    spec = with_reading(load_profile_set("coda").to_dict(), cfg.busy_reading)
    write_text(cfg.profiles_path(), json.dumps(spec, indent=1) + "\n")


def write_workloads(cfg: PaperConfig) -> dict[str, Any]:
    """Generate each seed's workload into the out dir (before the pool, so that no two
    workers write one file); return the first seed's marginals beside the paper's."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    write_profiles(cfg)
    params = cfg.params()
    first: dict[str, Any] = {}
    for seed in cfg.seed_list():
        table = generate(params, seed)
        write_csv(table, cfg.workload_path(seed))
        if seed == cfg.first_seed:
            first = marginals(table, speech_reading=params.speech_reading)
    return first


def _series(result: Any) -> dict[str, np.ndarray]:
    ts, jobs = result.timeseries, result.jobs
    queued = np.asarray(jobs["queued_s"], dtype=np.float64)
    is_dnn = np.asarray(jobs["is_dnn"], dtype=bool)
    ran = ~np.isnan(queued)
    return {
        "t": np.asarray(ts["t"], dtype=np.float64),
        "gpu_util_effective": np.asarray(ts["gpu_util_effective"], dtype=np.float64),
        "gpu_util_busy": np.asarray(ts["gpu_util_busy"], dtype=np.float64),
        "gpu_util_allocated": np.asarray(ts["gpu_util_allocated"], dtype=np.float64),
        "dnn_queue_s": queued[ran & is_dnn],
        "cpu_queue_s": queued[ran & ~is_dnn],
    }


def run_one(run: Run) -> PaperRecord:
    """Prepare the seed's workload and run one policy; any failure becomes the record's
    one-line error (type and message), never an exception."""
    start = time.perf_counter()
    try:
        result = run_policy(prepare(run.config), run.policy)
        metrics = paper_metrics(result)
        # The allocator's cost beside the paper's "3-4 profiling steps of 90 s".
        alloc = result.summary.get("policy_stats", {}).get("allocator", {})
        metrics["allocator_probes_per_search"] = alloc.get("mean_probes_per_search")
        metrics["allocator_settle_s"] = alloc.get("settle_s_mean")
        series = _series(result) if run.keep_series else {}
    except Exception as exc:  # noqa: BLE001 - recorded per run, the others go on
        text = " ".join(str(exc).split()) or type(exc).__name__
        return PaperRecord(
            run.seed, run.policy, time.perf_counter() - start, error=f"{type(exc).__name__}: {text}"
        )
    return PaperRecord(run.seed, run.policy, time.perf_counter() - start, metrics, None, series)


def default_workers() -> int:
    return min(2, os.cpu_count() or 1)


def run_many(
    runs: Sequence[Run], workers: int, on_done: Callable[[int, PaperRecord], None]
) -> None:
    """Run each of ``runs`` inline (workers 1) or in a spawn process pool; ``on_done(i,
    record)`` is called in this process as run ``i`` finishes (in any order). A worker
    that dies is recorded as that run's one-line error and the others go on."""

    def failed(run: Run, exc: Exception) -> PaperRecord:
        return PaperRecord(run.seed, run.policy, 0.0, error=f"{type(exc).__name__}: {exc}")

    run_each(runs, run_one, workers, failed, on_done)


L = TypeVar("L")


def run_labelled(
    items: Sequence[tuple[L, Run]],
    workers: int,
    on_done: Callable[[L, PaperRecord, int, int], None] | None = None,
) -> list[tuple[L, PaperRecord]]:
    """``run_many`` over labelled runs: each finished run with its label, in the order
    they finish; ``on_done(label, record, done, total)`` as each one does."""
    out: list[tuple[L, PaperRecord]] = []

    def done(i: int, rec: PaperRecord) -> None:
        out.append((items[i][0], rec))
        if on_done:
            on_done(items[i][0], rec, len(out), len(items))

    run_many([run for _, run in items], workers, done)
    return out


def run_all(
    cfg: PaperConfig, on_done: Callable[[PaperRecord, int, int], None] | None = None
) -> list[PaperRecord]:
    """Run the plan (``run_many``); ``on_done(record, done, total)`` is called in this
    process as each run finishes."""
    runs = plan(cfg)
    records: list[PaperRecord] = []

    def done(_: int, rec: PaperRecord) -> None:
        records.append(rec)
        if on_done:
            on_done(rec, len(records), len(runs))

    run_many(runs, cfg.workers, done)
    order = {p: i for i, p in enumerate(cfg.policies)}
    records.sort(key=lambda r: (r.seed, order[r.policy]))
    return records


def check_policies(names: Sequence[str], known: Sequence[str]) -> None:
    if not names:
        raise ValueError("--policies: names no policy")
    unknown = [p for p in names if p not in known]
    if unknown:
        raise ValueError(
            f"--policies: unknown policy {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(known))}"
        )
    dup = [p for i, p in enumerate(names) if p in names[:i]]
    if dup:
        raise ValueError(f"--policies: {dup[0]!r} is named twice")


def setting(cfg: PaperConfig, cluster: str, arrivals_note: str, command: str) -> dict[str, Any]:
    """results.json's `setting`: what was run, and the command that reruns it."""
    params = cfg.params() if cfg.generated else None
    return {
        "trace": cfg.trace,
        "format": cfg.format,
        "workload": (
            f"generated paper preset, {params.n_jobs:,} jobs over {params.days:g} days at "
            f"arrival scale {params.arrival_scale:g} (files workload-seed<s>.csv)"
            if params
            else f"trace {cfg.trace}"
        ),
        "cluster": cluster,
        "cluster_spec": cfg.cluster,
        "load": None if cfg.generated else (cfg.load or DEFAULT_TRACE_LOAD),
        "arrival_scale": cfg.arrival_scale if cfg.generated else None,
        "arrivals": arrivals_note,
        "seeds": cfg.seeds,
        "first_seed": cfg.first_seed,
        "jobs": params.n_jobs if params else None,
        "policies": list(cfg.policies),
        "speech_reading": params.speech_reading if params else None,
        "busy_reading": cfg.busy_reading,
        "cpu_bw_heavy_share": params.cpu_bw_heavy_share if params else None,
        "estimates": ESTIMATES,
        "workers": cfg.workers,
        "command": command,
    }
