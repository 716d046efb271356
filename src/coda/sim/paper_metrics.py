"""The paper's metrics (CODA, "The paper's evaluation"), computed from one SimResult.

Definitions, windows and edge cases: docs/metrics.md, "The paper's metrics". Jobs
count if they were submitted inside the measurement window and could fit the
cluster at all; fractions are 0-1, times seconds, and a statistic of no jobs (or of
no time) is None, never NaN.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from coda.sim.cpu_harm import cpu_harm
from coda.sim.result import SimResult

NO_QUEUE_S = 1.0  # "did not queue at all": started within a second of arriving
# The paper's "queuing over" (Figure 11's markers at 3 min, 10 min and 1 h).
DNN_QUEUE_THRESHOLDS_S = {"3min": 180.0, "10min": 600.0, "1h": 3600.0}
# The paper's "placed within" (Figure 11; 10^4 s: the time axis ends there, where every
# curve has reached 1.0), both kinds.
CPU_PLACED_WITHIN_S = {"10s": 10.0, "180s": 180.0, "1h": 3600.0, "1e4s": 10_000.0}
DNN_PLACED_WITHIN_S = {"10s": 10.0, "1e4s": 10_000.0}
GPU_ACTIVE_HIGH = 0.90  # Figure 10: share of time the GPU active rate is above 90%
USER_QUANTILE = 99.0  # per-user fairness: each user's 99th-percentile queuing time
QUEUE_QUANTILE = 99.0  # each kind's 99th-percentile queuing time (Figure 11's tail)
# The paper's tuning result (Figure 14, Section VI-D): 57.1% of DNN jobs got 1-5 cores
# more than they asked, 33.6% got 1-20 fewer (total cores per job).
CORES_MORE = (1, 5)
CORES_FEWER = (1, 20)

_REQUIRED = (
    "is_dnn",
    "submit",
    "start",
    "end",
    "cores_requested",
    "cores_granted",
    "user",
    "preemptions",
    "shrinks",
)


def _share(hit: np.ndarray, among: np.ndarray) -> float | None:
    n = int(among.sum())
    return int((hit & among).sum()) / n if n else None


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if x.size else None


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if x.size else None


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def group_percentile(keys: np.ndarray, values: np.ndarray, q: float) -> dict[str, float]:
    """The q-th percentile of values per key (numpy's default linear method), by one
    sort, not one pass per key: traces can have thousands of users."""
    if keys.size == 0:
        return {}
    names, inverse = np.unique(keys.astype(str), return_inverse=True)
    order = np.lexsort((values, inverse))
    grouped = inverse[order]
    ordered = values[order]
    starts = np.searchsorted(grouped, np.arange(names.size), side="left")
    counts = np.bincount(inverse, minlength=names.size)
    pos = (q / 100.0) * (counts - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, counts - 1)
    frac = pos - lo
    a = ordered[starts + lo]
    b = ordered[starts + hi]
    p = a + frac * (b - a)
    return {str(n): float(v) for n, v in zip(names, p, strict=True)}


def _columns(result: SimResult) -> dict[str, np.ndarray]:
    jobs = result.jobs
    missing = [c for c in _REQUIRED if c not in jobs]
    if missing:
        raise ValueError(f"paper_metrics: SimResult.jobs lacks column(s) {', '.join(missing)}")
    cols = {c: np.asarray(jobs[c]) for c in _REQUIRED}
    n = {c: len(v) for c, v in cols.items()}
    if len(set(n.values())) > 1:
        raise ValueError(f"paper_metrics: SimResult.jobs columns differ in length ({n})")
    submit = cols["submit"].astype(np.float64)
    start = cols["start"].astype(np.float64)
    unsched = (
        np.asarray(jobs["unschedulable"], dtype=bool)
        if "unschedulable" in jobs
        else np.zeros(submit.size, dtype=bool)
    )
    # Time queued (requeues included); results without the column: first wait only.
    queued = (
        np.asarray(jobs["queued_s"], dtype=np.float64) if "queued_s" in jobs else start - submit
    )
    cols.update(submit=submit, start=start, unschedulable=unsched, queued_s=queued)
    return cols


def _window(result: SimResult, submit: np.ndarray) -> np.ndarray:
    window = result.summary.get("window")
    if not isinstance(window, dict):
        return np.ones(submit.size, dtype=bool)  # no window stated: every job
    w0, w1 = _finite(window.get("start")), _finite(window.get("end"))
    inside = np.ones(submit.size, dtype=bool)
    if w0 is not None:
        inside &= submit >= w0
    if w1 is not None:
        inside &= submit <= w1
    return inside


def _series_figures(series: dict[str, np.ndarray]) -> dict[str, float | None]:
    """What the time series' samples (evenly spaced over the window) give: Figure 10's
    share of time with the GPU active rate above 90% and its time-averaged busy share
    (each instant's busy share of the active GPUs, unweighted), the busy share while a
    DNN job queues, the time-averaged number of queued jobs, and the CPU active rate's
    peak."""
    gpu = np.asarray(series.get("gpu_util_allocated", ()), dtype=np.float64)
    cpu = np.asarray(series.get("cpu_util", ()), dtype=np.float64)
    busy = np.asarray(series.get("gpu_util_busy", ()), dtype=np.float64)
    dnn_q = np.asarray(series.get("dnn_queued", ()), dtype=np.float64)
    cpu_q = np.asarray(series.get("cpu_queued", ()), dtype=np.float64)
    held = busy[~np.isnan(busy)]
    out: dict[str, float | None] = {
        "gpu_active_over_90_time_share": (
            float(np.mean(gpu > GPU_ACTIVE_HIGH)) if gpu.size else None
        ),
        "gpu_util_busy_time_avg": float(held.mean()) if held.size else None,
        "cpu_active_peak": float(cpu.max()) if cpu.size else None,
        "gpu_util_busy_queued": None,
        "queued_jobs_mean": None,
        "dnn_queued_jobs_mean": None,
    }
    if dnn_q.size and dnn_q.size == busy.size:
        while_queued = busy[(dnn_q > 0) & ~np.isnan(busy)]
        out["gpu_util_busy_queued"] = float(while_queued.mean()) if while_queued.size else None
        out["dnn_queued_jobs_mean"] = float(dnn_q.mean())
        if cpu_q.size == dnn_q.size:
            out["queued_jobs_mean"] = float((dnn_q + cpu_q).mean())
    return out


def paper_metrics(result: SimResult) -> dict[str, Any]:
    """The paper's metrics of one run, as one flat dict (docs/metrics.md)."""
    s = result.summary
    c = _columns(result)
    submit, start = c["submit"], c["start"]
    is_dnn = c["is_dnn"].astype(bool)
    counted = _window(result, submit) & ~c["unschedulable"]
    dnn, cpu = counted & is_dnn, counted & ~is_dnn
    started = ~np.isnan(start)
    finished = ~np.isnan(c["end"].astype(np.float64))
    first_wait = np.where(started, start - submit, np.inf)  # to its first start
    queued = np.nan_to_num(c["queued_s"], nan=0.0)  # NaN only where never queued
    jct = c["end"].astype(np.float64) - submit

    out: dict[str, Any] = {
        "dnn_jobs": int(dnn.sum()),
        "cpu_jobs": int(cpu.sum()),
        "gpu_util_busy": _finite(s.get("gpu_util_busy")),
        "gpu_busy_full": _finite(s.get("gpu_busy_full")),
        "gpu_busy_lost_cores": _finite(s.get("gpu_busy_lost_cores")),
        "gpu_busy_lost_contention": _finite(s.get("gpu_busy_lost_contention")),
        "gpu_util_effective": _finite(s.get("gpu_util_effective")),
        "gpu_util_allocated": _finite(s.get("gpu_util_allocated")),
        "gpu_active_queued": _finite(s.get("gpu_active_queued")),
        "dnn_queued_time_share": _finite(s.get("dnn_queued_time_share")),
        "gpu_frag_cores": _finite(s.get("gpu_frag_cores")),
        "dnn_no_queue_share": _share(first_wait < NO_QUEUE_S, dnn),
    }
    for name, limit in DNN_QUEUE_THRESHOLDS_S.items():
        out[f"dnn_queue_over_{name}_share"] = _share(queued > limit, dnn)
    out["dnn_queue_p99_s"] = _pct(queued[dnn], QUEUE_QUANTILE)
    out["cpu_queue_p99_s"] = _pct(queued[cpu], QUEUE_QUANTILE)
    for name, limit in CPU_PLACED_WITHIN_S.items():
        out[f"cpu_within_{name}_share"] = _share(first_wait <= limit, cpu)
    for name, limit in DNN_PLACED_WITHIN_S.items():
        out[f"dnn_within_{name}_share"] = _share(first_wait <= limit, dnn)
    out.update(_series_figures(result.timeseries))
    for kind, mask in (("dnn", dnn), ("cpu", cpu)):
        done = jct[mask & finished]
        out[f"{kind}_jct_n"] = int(done.size)
        out[f"{kind}_jct_mean_s"] = _mean(done)
        out[f"{kind}_jct_p95_s"] = _pct(done, 95)
    for what in ("preemptions", "shrinks"):
        per_job = c[what][cpu].astype(np.int64)
        out[f"cpu_{what}_per_job"] = _mean(per_job)
        out[f"cpu_{what}_max"] = int(per_job.max()) if per_job.size else None
    out["cpu_preempted_share"] = _share(c["preemptions"] > 0, cpu)
    out["cpu_shrunk_share"] = _share(c["shrinks"] > 0, cpu)
    out.update(cpu_harm(result, counted))

    per_user = group_percentile(c["user"][counted], queued[counted], USER_QUANTILE)
    p99s = np.array(list(per_user.values()))
    out["users"] = len(per_user)
    out["user_queue_p99_max_s"] = float(p99s.max()) if p99s.size else None
    out["user_queue_p99_median_s"] = _pct(p99s, 50)
    out["user_queue_p99_s"] = per_user

    # Granted minus requested cores, per DNN job; the engine records the grant at start.
    granted = "cores_settled" if "cores_settled" in result.jobs else "cores_granted"
    ran = dnn & started
    delta = (
        np.asarray(result.jobs[granted]).astype(np.int64) - c["cores_requested"].astype(np.int64)
    )[ran]
    out["core_delta_basis"] = "settled" if granted == "cores_settled" else "at start"
    out["core_delta_hist"] = {int(k): int(v) for k, v in sorted(Counter(delta.tolist()).items())}
    out["dnn_more_cores_share"] = _share(
        (delta >= CORES_MORE[0]) & (delta <= CORES_MORE[1]), np.ones(delta.size, dtype=bool)
    )
    out["dnn_fewer_cores_share"] = _share(
        (-delta >= CORES_FEWER[0]) & (-delta <= CORES_FEWER[1]), np.ones(delta.size, dtype=bool)
    )
    return out


def summary_block(result: SimResult) -> dict[str, Any]:
    """What summary.json keeps under "paper": every metric but the per-user dict
    (jobs.csv has each job's user, and a trace may have thousands of them)."""
    out = paper_metrics(result)
    del out["user_queue_p99_s"]
    return out
