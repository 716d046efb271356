"""Running an experiment: the plan of run groups (one prepared workload per load and seed,
shared by every policy), each group inline or in a process pool, failures recorded per
run, then the analysis.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

from coda.experiment.analysis import Analysis, analyse
from coda.experiment.config import (
    ExperimentConfig,
    robustness_policies,
    split_policies,
)
from coda.experiment.pool import run_each
from coda.experiment.records import RunRecord
from coda.study.config import RunConfig
from coda.study.run import prepare, run_policy


@dataclass(frozen=True)
class Group:
    """Runs that share one prepared workload: every policy at one (kind, load, seed)."""

    kind: str
    config: RunConfig
    policies: tuple[str, ...]


def plan(cfg: ExperimentConfig) -> list[Group]:
    """The main grid (load x seed, every registered policy), then the robustness sweep."""
    cfg.validate()
    policies, _ = split_policies(cfg.policies)
    groups = [
        Group("main", replace(cfg.base, load=load, seed=seed), policies)
        for load in cfg.loads
        for seed in range(cfg.seeds)
    ]
    if cfg.robustness:
        rob = robustness_policies(cfg)
        groups += [
            Group(
                "robustness",
                cfg.base.varied(
                    load=cfg.judged_load,
                    seed=seed,
                    perturb=cfg.perturb,
                    simulation={"noise": cfg.noise},
                ),
                rob,
            )
            for seed in range(cfg.seeds)
        ]
    return [g for g in groups if g.policies]


def check_workloads(cfg: ExperimentConfig) -> None:
    """Prepare seed 0 of every load (and of the robustness sweep) in this process, so
    that bad input (a malformed trace, an unreachable load) fails at once with one
    message instead of once per run."""
    seen = set()
    for group in plan(cfg):
        key = (group.config.load, group.config.perturb)
        if key not in seen:
            seen.add(key)
            prepare(replace(group.config, seed=0))


def _error_record(group: Group, policy: str, exc: BaseException) -> RunRecord:
    c = group.config
    return RunRecord(
        kind=group.kind,
        policy=policy,
        load=float(c.load if c.load is not None else math.nan),
        seed=c.seed,
        perturb=c.perturb,
        noise=c.simulation.noise,
        config=c.as_dict(),
        error=f"{type(exc).__name__}: {exc}",
        traceback="".join(traceback.format_exception(exc)),
    )


def run_group(group: Group, on_run: Callable[[], None] | None = None) -> list[RunRecord]:
    """Prepare the workload once, run every policy on it. A failure is recorded with the
    run's config and the other runs go on."""
    try:
        prepared = prepare(group.config)
    except Exception as exc:  # noqa: BLE001 - reported per run, not swallowed
        records = [_error_record(group, p, exc) for p in group.policies]
        if on_run:
            for _ in records:
                on_run()
        return records
    records = []
    for policy in group.policies:
        try:
            summary = run_policy(prepared, policy).summary
            records.append(
                RunRecord.from_summary(
                    group.kind, summary, group.config.perturb, group.config.simulation.noise, policy
                )
            )
        except Exception as exc:  # noqa: BLE001
            records.append(_error_record(group, policy, exc))
        if on_run:
            on_run()
    return records


def _sort_key(cfg: ExperimentConfig) -> Callable[[RunRecord], tuple[bool, float, int, int]]:
    order = {p: i for i, p in enumerate(cfg.policies)}
    return lambda r: (r.kind != "main", r.load, r.seed, order.get(r.policy, len(order)))


@dataclass
class ExperimentResult:
    config: ExperimentConfig
    policies: tuple[str, ...]  # run
    skipped: tuple[str, ...]  # asked for but not registered
    records: list[RunRecord]
    wall_s: float
    analysis: Analysis

    @property
    def errors(self) -> list[RunRecord]:
        return [r for r in self.records if not r.ok]


def run_experiment(
    cfg: ExperimentConfig,
    progress: Callable[[int, int], None] | None = None,
) -> ExperimentResult:
    """Run the whole plan, inline (workers 1) or in a process pool; then analyse.
    ``progress(done, total)`` is called in this process as runs finish."""
    start = time.perf_counter()
    policies, skipped = split_policies(cfg.policies)
    groups = plan(cfg)
    total = sum(len(g.policies) for g in groups)
    done = 0
    if progress:
        progress(0, total)

    def tick(n: int = 1) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    workers = min(cfg.workers or os.cpu_count() or 1, max(len(groups), 1))
    records: list[RunRecord] = []

    def failed(group: Group, exc: Exception) -> list[RunRecord]:
        return [_error_record(group, p, exc) for p in group.policies]

    def finished(_i: int, got: list[RunRecord]) -> None:
        records.extend(got)
        tick(len(got))

    if workers <= 1:  # inline: progress after each run, not each group
        for group in groups:
            records += run_group(group, on_run=tick)
    else:
        run_each(groups, run_group, workers, failed, finished)
    records.sort(key=_sort_key(cfg))
    analysis = analyse(records, cfg, policies)
    return ExperimentResult(cfg, policies, skipped, records, time.perf_counter() - start, analysis)
