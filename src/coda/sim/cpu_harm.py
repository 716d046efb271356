"""What co-location cost each CPU job of one run, and how much slower each executed
than under another policy on the same workload (docs/metrics.md, "CPU jobs' harm").

A CPU job's execution is the time from its first start to its end: a requeue's wait
counts (its owner waits for it), the queue before its first start does not (any
change of order, DRF's too, moves waits). Its slowdown is its execution over its
runtime alone with the cores it asked; its stretch against a baseline is its
execution over the same job's under that baseline. Both over finished CPU jobs; the
throttled, shrunk and lost figures over every CPU job that started. A statistic of
no jobs is None, never NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from coda.sim.result import SimResult

# Execution this many times slower counts as slowed (the issue's and users' lines).
SLOWED_OVER = {"1_5x": 1.5, "2x": 2.0}
TAIL_QUANTILE = 99.0
_SPELLS = ("throttled_s", "shrunk_s", "lost_core_s")


def _stats(prefix: str, x: np.ndarray) -> dict[str, float | None]:
    if not x.size:
        return {f"{prefix}_mean": None, f"{prefix}_p99": None, f"{prefix}_max": None}
    return {
        f"{prefix}_mean": float(x.mean()),
        f"{prefix}_p99": float(np.percentile(x, TAIL_QUANTILE)),
        f"{prefix}_max": float(x.max()),
    }


def _slowed(prefix: str, ratio: np.ndarray) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, line in SLOWED_OVER.items():
        out[f"{prefix}_over_{name}_share"] = float((ratio > line).mean()) if ratio.size else None
    return out


def _execution(jobs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each job's execution (NaN unless it finished) and whether it is a CPU job."""
    start = np.asarray(jobs["start"], dtype=np.float64)
    end = np.asarray(jobs["end"], dtype=np.float64)
    return end - start, ~np.asarray(jobs["is_dnn"], dtype=bool)


def cpu_harm(result: SimResult, among: np.ndarray | None = None) -> dict[str, Any]:
    """Flat keys: the slowdown of finished CPU jobs (mean, p99, max, shares over 1.5x
    and 2x) and, over CPU jobs that started, the seconds throttled and shrunk and the
    core-seconds lost to preemption. ``among``: the jobs that count (all by default).
    A result without the columns (a real cluster's) gives None for what it lacks."""
    jobs = result.jobs
    execution, cpu = _execution(jobs)
    if among is not None:
        cpu &= among
    started = cpu & ~np.isnan(np.asarray(jobs["start"], dtype=np.float64))
    out: dict[str, Any] = {"cpu_harm_jobs": int(started.sum())}
    if "alone_s" in jobs:
        alone = np.asarray(jobs["alone_s"], dtype=np.float64)
        done = cpu & ~np.isnan(execution) & (alone > 0)
        ratio = execution[done] / alone[done]
    else:
        ratio = np.empty(0)
    out.update(_stats("cpu_slowdown", ratio))
    out.update(_slowed("cpu_slowed", ratio))
    for column in _SPELLS:
        values = np.asarray(jobs[column], dtype=np.float64)[started] if column in jobs else None
        out.update(_stats(f"cpu_{column}", values if values is not None else np.empty(0)))
    return out


def cpu_stretch(result: SimResult, baseline: SimResult, name: str) -> dict[str, Any]:
    """Each CPU job finished in both runs: its execution here over its execution under
    ``baseline`` (matched by job id), as mean, p99, max and the shares over 1.5x and
    2x; ``name`` names the baseline."""
    execution, cpu = _execution(result.jobs)
    base_execution, base_cpu = _execution(baseline.jobs)
    row = {str(j): i for i, j in enumerate(baseline.jobs["job_id"])}
    ours, theirs = [], []
    for i, job_id in enumerate(result.jobs["job_id"]):
        j = row.get(str(job_id))
        if j is None or not cpu[i] or not base_cpu[j]:
            continue
        if np.isnan(execution[i]) or np.isnan(base_execution[j]) or base_execution[j] <= 0:
            continue
        ours.append(execution[i])
        theirs.append(base_execution[j])
    ratio = np.asarray(ours, dtype=np.float64) / np.asarray(theirs, dtype=np.float64)
    return {"baseline": name, **stretch_stats(ratio)}


def stretch_stats(ratio: np.ndarray) -> dict[str, Any]:
    """``jobs``, ``stretch_mean``/``_p99``/``_max`` and the shares over 1.5x and 2x of
    each job's execution over its execution under a baseline."""
    ratio = np.asarray(ratio, dtype=np.float64)
    return {"jobs": int(ratio.size), **_stats("stretch", ratio), **_slowed("stretch", ratio)}
