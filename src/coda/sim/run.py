"""From a configuration to results: load the trace, build the cluster and the
workload, scale the load, run policies. Shared by the CLI, tests and benchmarks."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coda.policy import PolicyOptions, make_policy
from coda.policy.allocator import START_POINTS
from coda.policy.estimates import ESTIMATES
from coda.policy.options import MAX_PERIOD_S, MIN_CONTROL_PERIOD_S, ORDERS, RECLAIMS
from coda.sim.constants import GRANTS
from coda.sim.engine import Simulator
from coda.sim.result import SimResult
from coda.workload.cluster import (
    ClusterSpec,
    NodeSpec,
    load_node_list,
    parse_cluster_spec,
)
from coda.workload.jobs import FLAG_CENSORED, FLAG_FRACTIONAL, Trace, TraceReport
from coda.workload.limits import plain_number
from coda.workload.perf import Workload, build_workload, load_profile_set, parse_mix
from coda.workload.scaling import (
    DEFAULT_WARMUP,
    max_reachable_load,
    offered_gpu_load,
    scale_to_load,
    window_bounds,
)
from coda.workload.traces import bundled_nodes_path, bundled_trace_path, load_trace
from coda.workload.traces._common import CENSORED_CHOICES, FRACTIONAL_CHOICES, check_options

# The main job's default: the bundled trace on a tenth of its own cluster (same
# mix of node shapes), arrivals compressed to an offered GPU load of 1.0. On the
# full 6,212-GPU cluster the trace's 7k GPU pods cannot make GPU jobs queue at
# all (see `max_reachable_load`); at this size they do under the baselines.
DEFAULT_CLUSTER = "openb:0.1"
DEFAULT_LOAD = 1.0
# A job without a time limit is planned as running this long in --estimates time-limits
# mode (docs/metrics.md): a common site default of one day (Slurm itself has none).
DEFAULT_TIME_LIMIT_S = 86400.0
BUNDLED = "bundled:alibaba-openb-2023"

# Stated ranges of a run's numeric settings (the CLI's options show and check them too).
MAX_LOAD = 1000.0  # offered GPU load, x GPU capacity
MAX_HORIZON_S = 1e10  # simulated seconds (about 317 years)
MAX_SEED = 2**32 - 1
MAX_SAMPLES = 100_000  # time-series points per run
# The loaders' own choices (one list, checked by check_options).
FRACTIONAL, CENSORED = FRACTIONAL_CHOICES, CENSORED_CHOICES


def _number(name: str, v: Any, lo: float, hi: float, lo_open: bool, hi_open: bool) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"run config: {name} must be a finite number, got {v!r}")
    if v < lo or (lo_open and v == lo) or v > hi or (hi_open and v == hi):
        span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ValueError(f"run config: {name} must be in {span}, got {v!r}")


def _integer(name: str, v: Any, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or not lo <= v <= hi:
        raise ValueError(f"run config: {name} must be an integer in [{lo}, {hi}], got {v!r}")


@dataclass
class RunConfig:
    trace: str | None = None  # None: the bundled Alibaba openb 2023 trace
    format: str | None = None  # None: detect from the header
    cluster: str = DEFAULT_CLUSTER
    load: float | None = DEFAULT_LOAD  # None: keep the trace's own arrival times
    seed: int = 0
    profiles: str = "coda"
    mix: str | None = None
    skip_bad_rows: bool = False
    fractional: str = "whole"
    censored: str = "keep"
    horizon: float | None = None
    warmup: float = DEFAULT_WARMUP  # share of first arrivals left out of the window
    samples: int = 1000
    noise: float = 0.05  # relative std of one throughput sample the allocator sees
    perturb: float = 0.0  # scale every profile value by U(1-p, 1+p) (robustness)
    # What backfill plans with: exact (the simulator's projection), time-limits (what
    # Slurm knows: a trace's requested time, else default_time_limit_s) or none.
    estimates: str = "exact"
    default_time_limit_s: float = DEFAULT_TIME_LIMIT_S
    # CODA's knobs from the paper (coda.policy.options): its order inside each array
    # (drf | fifo), the GPU array's sub-arrays, and where its core search starts.
    order: str = "drf"
    gpu_subarrays: bool = False
    allocator_start: str = "learned"
    # A real stack's timing (coda replay measures it): a started job works only this
    # long after it is placed; and CODA's control period (the eliminator's ticks and
    # the allocator's throughput windows), None for the policy's own (10 s).
    start_delay_s: float = 0.0
    control_period_s: float | None = None
    cycle_period_s: float = 0.0  # a periodic scheduler's (CODA's Slurm controller: 1 s)
    # How a DNN job takes back cores CPU jobs hold: shrink them (then preempt), or
    # requeue whole jobs, as on Slurm (coda.policy.options.RECLAIMS).
    reclaim: str = "shrink"
    # How the books treat a running job's cpuset changes: elastic (CODA's node agent:
    # narrowed-away cores are free at once) or fixed (Slurm's: a job holds its grant
    # until it ends; needs reclaim="requeue"). coda.sim.constants.GRANTS.
    grants: str = "elastic"
    # CODA's allocator: windows left out after each core change (a node agent settles
    # for a second and then waits for a whole window: its steps come a window later).
    settle_windows: int = 0

    def __post_init__(self) -> None:
        # The experiment and benchmarks build configs directly, past the CLI's checks:
        # a NaN here would silently mean "no horizon" or "every DNN job 30x slower".
        if self.load is not None:
            _number("load", self.load, 0.0, MAX_LOAD, True, False)
        if self.horizon is not None:
            _number("horizon", self.horizon, 0.0, MAX_HORIZON_S, True, False)
        _number("warmup", self.warmup, 0.0, 1.0, False, True)
        _number("noise", self.noise, 0.0, 1.0, False, False)
        _number("perturb", self.perturb, 0.0, 1.0, False, True)
        _integer("seed", self.seed, 0, MAX_SEED)
        _integer("samples", self.samples, 2, MAX_SAMPLES)
        _number("default_time_limit_s", self.default_time_limit_s, 0.0, MAX_HORIZON_S, True, False)
        _number("start_delay_s", self.start_delay_s, 0.0, MAX_PERIOD_S, False, False)
        if self.cycle_period_s != 0.0:
            _number("cycle_period_s", self.cycle_period_s, MIN_CONTROL_PERIOD_S, MAX_PERIOD_S,
                    False, False)  # fmt: skip
        if self.control_period_s is not None:
            _number("control_period_s", self.control_period_s, MIN_CONTROL_PERIOD_S, MAX_PERIOD_S,
                    False, False)  # fmt: skip
        if self.estimates not in ESTIMATES:
            raise ValueError(
                f"run config: estimates must be one of {', '.join(ESTIMATES)}, "
                f"got {self.estimates!r}"
            )
        if self.reclaim not in RECLAIMS:
            raise ValueError(
                f"run config: reclaim must be one of {', '.join(RECLAIMS)}, got {self.reclaim!r}"
            )
        _integer("settle_windows", self.settle_windows, 0, 10)
        if self.grants not in GRANTS:
            raise ValueError(
                f"run config: grants must be one of {', '.join(GRANTS)}, got {self.grants!r}"
            )
        if self.grants == "fixed" and self.reclaim != "requeue":
            raise ValueError(
                "run config: fixed grants need reclaim 'requeue' (a shrunk CPU job would "
                "keep its grant: Slurm never changes a running job's allocation)"
            )
        if self.order not in ORDERS or self.allocator_start not in START_POINTS:
            raise ValueError(
                f"run config: order must be one of {', '.join(ORDERS)} and allocator_start "
                f"one of {', '.join(START_POINTS)}, got {self.order!r}, {self.allocator_start!r}"
            )
        if not isinstance(self.gpu_subarrays, bool):
            raise ValueError("run config: gpu_subarrays must be true or false")
        try:
            check_options(self.fractional, self.censored)
        except ValueError as e:
            raise ValueError(f"run config: {e}") from None
        for name in ("trace", "format", "mix"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str | Path):
                raise ValueError(f"run config: {name} must be text, got {type(v).__name__}")
        if not isinstance(self.cluster, str) or not isinstance(self.profiles, str):
            raise ValueError("run config: cluster and profiles must be text")


@dataclass
class Prepared:
    """Everything a run needs except the policy; reused across policies."""

    config: RunConfig
    trace_report: TraceReport
    cluster: ClusterSpec
    workload: Workload
    time_scale: float
    notes: list[str] = field(default_factory=list)


# The paper's cluster: about 80 PCIe servers, 400 GTX 1080Ti GPUs (5 per server on
# average), two 14-core Xeon Gold 6132 each (28 cores), no CPU-only servers. The paper
# gives no per-server GPU counts: ASSUMPTION (ours) 60 servers of 4 GPUs and 20 of 8,
# the two common PCIe chassis, which gives 80 servers, 400 GPUs and 5 per server.
PAPER_CLUSTER = "60x4g28c,20x8g28c"
PAPER_SETTING_CLUSTER = "paper"  # its name as --cluster takes it (`coda compare`'s default)


def resolve_cluster(text: str, bw_per_core: float) -> ClusterSpec:
    """``openb`` (the bundled node list), ``openb:F`` (a fraction F of it, same
    shape mix), ``paper`` (the paper's cluster, PAPER_CLUSTER), a path to a node-list
    CSV, or a compact spec like ``48x8g96c``."""
    if text == "paper":
        spec = parse_cluster_spec(PAPER_CLUSTER, bw_per_core)
        return ClusterSpec(label="paper", nodes=spec.nodes)
    if text == "openb" or text.startswith("openb:"):
        full = load_node_list(bundled_nodes_path(), bw_per_core)
        if text == "openb":
            return ClusterSpec(label="openb", nodes=full.nodes)
        try:
            given = text.split(":", 1)[1]
            if not plain_number(given):
                raise ValueError(given)
            frac = float(given)
        except ValueError:
            raise ValueError(
                f"bad cluster {text!r}: expected openb:<fraction>, e.g. openb:0.1"
            ) from None
        if not 0 < frac <= 1:
            raise ValueError(f"bad cluster {text!r}: the fraction must be in (0, 1]")
        return scale_node_list(full, frac, label=text)
    try:
        is_file = Path(text).is_file()
    except OSError:  # a name the OS refuses as a path (too long): it is read as a spec
        is_file = False
    if is_file:
        return load_node_list(text, bw_per_core)
    try:
        return parse_cluster_spec(text, bw_per_core)
    except ValueError:
        try:
            elsewise = Path(text).exists()
        except OSError:
            elsewise = False
        if elsewise:  # a directory or FIFO meant as a node list: not its syntax's fault
            raise ValueError(
                f"cluster {text!r}: not a regular file (a directory, FIFO or device)"
            ) from None
        raise


def scale_node_list(full: ClusterSpec, frac: float, label: str) -> ClusterSpec:
    """Keep round(frac x count) nodes of every node shape, in file order."""
    groups: dict[tuple[int, int, int, str], list[NodeSpec]] = {}
    for node in full.nodes:
        groups.setdefault((node.gpus, node.cores, node.mem_mib, node.gpu_model), []).append(node)
    kept = [n for members in groups.values() for n in members[: round(len(members) * frac)]]
    if not kept:
        raise ValueError(f"cluster {label!r} keeps no nodes; use a larger fraction")
    order = {n.name: i for i, n in enumerate(full.nodes)}
    kept.sort(key=lambda n: order[n.name])
    return ClusterSpec(label=label, nodes=tuple(kept))


def prepare(config: RunConfig) -> Prepared:
    trace_path = bundled_trace_path() if config.trace is None else Path(config.trace)
    trace: Trace = load_trace(
        trace_path,
        config.format,
        skip_bad_rows=config.skip_bad_rows,
        fractional=config.fractional,
        censored=config.censored,
    )
    if config.trace is None:
        trace.report.path = BUNDLED
    if len(trace.jobs) == 0:
        rep = trace.report
        gone = [f"{n:,} {why.replace('_', ' ')}" for why, n in sorted(rep.excluded.items()) if n]
        if rep.skipped_bad_rows:
            gone.append(f"{rep.skipped_bad_rows:,} bad (skipped)")
        raise ValueError(
            f"{trace_path}: no jobs left to simulate: {rep.rows_read:,} rows read"
            + (f", left out: {', '.join(gone)}" if gone else "")
        )
    profiles = load_profile_set(config.profiles)
    if config.perturb:
        # Its own stream, so the same seed draws the same models with or without it.
        profiles = profiles.perturbed(np.random.default_rng([config.seed, 7]), config.perturb)
    cluster = resolve_cluster(config.cluster, profiles.node_bw_gbps_per_core)
    jobs = trace.jobs
    notes = []
    scale = 1.0
    if config.load is not None:
        jobs, scale = scale_to_load(jobs, cluster.gpus, config.load, config.warmup)
        notes.append(
            f"arrival times scaled by {scale:.6g} so that offered GPU demand inside the "
            f"measurement window is {config.load} x the cluster's {cluster.gpus} GPUs "
            "(durations unchanged)"
        )
    else:
        notes.append(
            "trace arrival times kept; offered GPU load "
            f"{offered_gpu_load(jobs, cluster.gpus, config.warmup):.3f}"
        )
    flags: Counter[str] = Counter()
    for bit, name in ((FLAG_FRACTIONAL, "fractional_gpu"), (FLAG_CENSORED, "censored")):
        flags[name] = int(((jobs.flags & bit) != 0).sum())
    if flags["fractional_gpu"]:
        notes.append(f"{flags['fractional_gpu']} fractional-GPU jobs each hold one whole GPU")
    if flags["censored"]:
        notes.append(
            f"{flags['censored']} jobs were still running at the trace end (duration = lower bound)"
        )
    mix = parse_mix(config.mix, profiles) if config.mix else None
    workload = build_workload(jobs, profiles, config.seed, mix)
    if config.horizon is not None and len(workload.jobs):
        w0, _ = window_bounds(workload.jobs.submit, config.warmup)
        if config.horizon <= w0:  # an empty window would report 0% utilisation as a result
            raise ValueError(
                f"--horizon {config.horizon:g} s ends before the measurement window starts "
                f"({w0:g} s, the arrival at the {config.warmup:.0%} quantile)"
            )
    return Prepared(config, trace.report, cluster, workload, scale, notes)


def run_policy(
    prepared: Prepared,
    policy_name: str,
    *,
    progress: Callable[[int, int], None] | None = None,
    check_invariants: bool = False,
) -> SimResult:
    config = prepared.config
    options = PolicyOptions(
        estimates=config.estimates,
        default_time_limit_s=config.default_time_limit_s,
        order=config.order,
        gpu_subarrays=config.gpu_subarrays,
        allocator_start=config.allocator_start,
        categories=prepared.workload.profiles.domains,
        control_period_s=config.control_period_s,
        reclaim=config.reclaim,
        start_delay_s=config.start_delay_s,
        settle_windows=int(config.settle_windows),
    )
    policy = make_policy(policy_name, options)
    jobs = prepared.workload.jobs
    sim = Simulator(
        prepared.workload,
        prepared.cluster,
        policy,
        horizon=config.horizon,
        window=window_bounds(jobs.submit, config.warmup),
        window_basis=f"from the arrival at the {config.warmup:.0%} quantile (warm-up) to the last",
        samples=config.samples,
        check_invariants=check_invariants,
        progress=progress,
        noise=config.noise,
        seed=config.seed,
        start_delay_s=config.start_delay_s,
        cycle_period_s=config.cycle_period_s,
        grants=config.grants,
    )
    result = sim.run()
    head = {
        "policy": policy.name,
        "policy_description": policy.description,
        "trace": prepared.trace_report.path,
        "format": prepared.trace_report.format,
        "cluster": prepared.cluster.describe(),
        "load": config.load,
        "load_basis": "GPU demand inside the measurement window / (GPUs x window); docs/metrics.md",
        "offered_gpu_load": offered_gpu_load(jobs, prepared.cluster.gpus, config.warmup),
        "max_reachable_load": max_reachable_load(jobs, prepared.cluster.gpus, config.warmup),
        "time_scale": prepared.time_scale,
        "seed": config.seed,
        "runtime_estimates": policy.estimates.name,
        "profile_set": prepared.workload.profiles.name,
        "model_mix": prepared.workload.mix,
    }
    result.summary = {
        **head,
        **result.summary,
        "config": asdict(config),
        "trace_report": prepared.trace_report.as_dict(),
        "notes": list(prepared.notes),
    }
    return result
