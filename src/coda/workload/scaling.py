"""Load scaling and resampling of job tables.

Offered load is measured the way utilisation is: inside the measurement window.
A job contributes GPUs x the part of its run that falls inside the window, so a
months-long pod cannot pose as load in a one-day window.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from coda.workload.jobs import JobTable

# The first 1% of arrivals warm the cluster up and are not measured: in the
# bundled trace they span 115 of its 149 days (long-running services that were
# already there when the recording began) and would otherwise dominate the window.
DEFAULT_WARMUP = 0.01


def window_bounds(submit: np.ndarray, warmup: float = DEFAULT_WARMUP) -> tuple[float, float]:
    """Measurement window: from the arrival at quantile ``warmup`` to the last arrival."""
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup}")
    if len(submit) == 0:
        return 0.0, 0.0
    first = int(np.floor(warmup * (len(submit) - 1)))
    return float(submit[first]), float(submit[-1])


def _offered(
    rel: np.ndarray, jobs: JobTable, total_gpus: int, r0: float, r1: float, scale: float
) -> float:
    """Offered GPU load in the window [r0, r1] (relative, unscaled) once arrivals
    are scaled by ``scale``: each job counts the part of its run inside the window."""
    a = rel * scale
    lo, hi = r0 * scale, r1 * scale
    overlap = np.clip(np.minimum(a + jobs.duration, hi) - np.maximum(a, lo), 0.0, None)
    return float((jobs.gpus * overlap).sum() / (total_gpus * (hi - lo)))


def _relative_window(
    jobs: JobTable, total_gpus: int, warmup: float
) -> tuple[np.ndarray, float, float] | None:
    """Arrival offsets from the first arrival and the window in the same terms;
    None when there is no window to load (fewer than two jobs, one instant, no GPUs)."""
    if len(jobs) < 2 or total_gpus <= 0:
        return None
    w0, w1 = window_bounds(jobs.submit, warmup)
    if w1 <= w0:
        return None
    a0 = jobs.submit[0]
    return jobs.submit - a0, w0 - a0, w1 - a0


def offered_gpu_load(jobs: JobTable, total_gpus: int, warmup: float = DEFAULT_WARMUP) -> float:
    """GPU demand inside the measurement window / (GPU capacity x window length)."""
    rel = _relative_window(jobs, total_gpus, warmup)
    if rel is None:
        return 0.0
    offsets, r0, r1 = rel
    return _offered(offsets, jobs, total_gpus, r0, r1, 1.0)


def max_reachable_load(jobs: JobTable, total_gpus: int, warmup: float = DEFAULT_WARMUP) -> float:
    """The offered load as arrivals are compressed without limit (its supremum)."""
    rel = _relative_window(jobs, total_gpus, warmup)
    if rel is None:
        return 0.0
    offsets, r0, r1 = rel
    # As scale -> 0 each job covers the window from its arrival on.
    cover = np.clip(r1 - np.maximum(offsets, r0), 0.0, None)
    return float((jobs.gpus * cover).sum() / (total_gpus * (r1 - r0)))


def scale_to_load(
    jobs: JobTable, total_gpus: int, load: float, warmup: float = DEFAULT_WARMUP
) -> tuple[JobTable, float]:
    """Stretch or compress arrival times (not durations) to the given offered load.

    Returns the rescaled table and the factor applied to arrival offsets.
    Offered load falls monotonically as the factor grows, so bisection finds it.
    """
    if not load > 0:  # also rejects NaN
        raise ValueError(f"--load must be a number > 0, got {load}")
    if len(jobs) < 2 or not (jobs.gpus > 0).any():
        raise ValueError("scaling to a GPU load needs at least two jobs, some with GPUs")
    rel = _relative_window(jobs, total_gpus, warmup)
    if rel is None:
        raise ValueError("scaling to a GPU load needs arrivals spread over time")
    offsets, r0, r1 = rel
    ceiling = max_reachable_load(jobs, total_gpus, warmup)
    if load >= ceiling:
        raise ValueError(
            f"load {load} cannot be reached: this trace offers at most {ceiling:.3f} x "
            f"{total_gpus} GPUs however much its arrivals are compressed; use a smaller cluster"
        )
    lo, hi = 1e-12, 1e12  # offered(lo) ~ ceiling > load > offered(hi) ~ 0
    for _ in range(200):
        mid = float(np.sqrt(lo * hi))
        if _offered(offsets, jobs, total_gpus, r0, r1, mid) > load:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    scale = float(np.sqrt(lo * hi))
    got = _offered(offsets, jobs, total_gpus, r0, r1, scale)
    if not abs(got / load - 1.0) < 1e-3:  # the bracket's end: stretching cannot go lower
        raise ValueError(
            f"load {load:g} cannot be reached: stretching this trace's arrivals a "
            f"trillion-fold still offers {got:.3g} x {total_gpus} GPUs"
        )
    return replace(jobs, submit=jobs.submit[0] + offsets * scale), scale


def resample_jobs(jobs: JobTable, n: int, seed: int) -> JobTable:
    """n jobs drawn with replacement from jobs, with inter-arrival gaps bootstrapped
    from the trace's own gaps (so burstiness is kept); ids get a ``~k`` suffix."""
    if len(jobs) < 2:
        raise ValueError("resampling needs at least two jobs")
    if n < 1:
        raise ValueError(f"cannot resample {n} jobs; ask for at least 1")
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(jobs), size=n)
    gaps = np.diff(jobs.submit)
    arrivals = np.concatenate([[0.0], np.cumsum(rng.choice(gaps, size=n - 1))]) + jobs.submit[0]
    ids = [f"{jobs.ids[j]}~{k}" for k, j in enumerate(pick.tolist())]
    return replace(jobs.take(pick), ids=ids, submit=arrivals)
