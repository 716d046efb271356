"""From a configuration to results: load the trace, build the cluster and the
workload, scale the load (``prepare``), then build a Simulator for a policy and run it
(``run_policy``). Shared by the CLI, experiments, the replay's twins, tests and
benchmarks."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from coda.policy import make_policy
from coda.sim.engine import Simulator
from coda.sim.result import SimResult
from coda.study.clusters import resolve_cluster
from coda.study.config import BUNDLED, RunConfig
from coda.workload.cluster import ClusterSpec
from coda.workload.jobs import FLAG_CENSORED, FLAG_FRACTIONAL, Trace, TraceReport
from coda.workload.perf import Workload, build_workload, load_profile_set, parse_mix
from coda.workload.scaling import (
    max_reachable_load,
    offered_gpu_load,
    scale_to_load,
    window_bounds,
)
from coda.workload.traces import bundled_trace_path, load_trace


@dataclass
class Prepared:
    """Everything a run needs except the policy; reused across policies."""

    config: RunConfig
    trace_report: TraceReport
    cluster: ClusterSpec
    workload: Workload
    time_scale: float
    notes: list[str] = field(default_factory=list)


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
    workload = build_workload(jobs, profiles, config.seed, mix, config.cpu_checkpoint_share)
    horizon = config.simulation.horizon
    if horizon is not None and len(workload.jobs):
        w0, _ = window_bounds(workload.jobs.submit, config.warmup)
        if horizon <= w0:  # an empty window would report 0% utilisation as a result
            raise ValueError(
                f"--horizon {horizon:g} s ends before the measurement window starts "
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
    sim_options = config.simulation
    options = config.policy
    if not options.categories:  # the profile set's: where CODA's paper start point begins
        options = dataclasses.replace(options, categories=prepared.workload.profiles.domains)
    policy = make_policy(policy_name, options)
    jobs = prepared.workload.jobs
    sim = Simulator(
        prepared.workload,
        prepared.cluster,
        policy,
        horizon=sim_options.horizon,
        window=window_bounds(jobs.submit, config.warmup),
        window_basis=f"from the arrival at the {config.warmup:.0%} quantile (warm-up) to the last",
        samples=sim_options.samples,
        check_invariants=check_invariants,
        progress=progress,
        noise=sim_options.noise,
        seed=config.seed,
        start_delay_s=options.start_delay_s,
        cycle_period_s=sim_options.cycle_period_s,
        grants=sim_options.grants,
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
        "config": config.as_dict(),
        "trace_report": prepared.trace_report.as_dict(),
        "notes": list(prepared.notes),
    }
    return result
