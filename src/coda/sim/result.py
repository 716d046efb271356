"""What one simulation run produces: plain data, ready to report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Columns of SimResult.timeseries, in order. Utilisations are fractions 0..1.
TIMESERIES_COLUMNS = (
    "t",  # seconds since the start of the window
    "gpu_util_effective",  # sum(GPUs x speed) / total GPUs
    "gpu_util_allocated",  # GPUs held by running jobs / total GPUs
    "gpu_util_busy",  # busy share of the GPUs held (NaN when none is held)
    "gpu_frag_cores",  # GPUs free where a queued DNN job lacks only cores / total GPUs
    "cpu_util",  # cores held by running jobs / total cores
    "dnn_queued",  # DNN jobs waiting
    "cpu_queued",  # CPU jobs waiting
    "dnn_running",
    "cpu_running",
)


def describe(values: np.ndarray) -> dict[str, float | int | None]:
    """mean/p50/p95/p99 of a sample; None where the sample is empty (never NaN in JSON)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return {"n": 0, "mean": None, "p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {
        "n": int(values.size),
        "mean": float(values.mean()),
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
    }


@dataclass
class SimResult:
    """summary: the content of summary.json (see docs/metrics.md).

    timeseries: TIMESERIES_COLUMNS -> equal-length float arrays, sampled on a
    regular grid over the measurement window.

    jobs: per-job arrays, one entry per job of the workload, in submit order:
      job_id (the trace's id, unique after loading; object array of str),
      is_dnn (bool), submit, start, end (float seconds; NaN = never started /
      never finished), gpus, cores_requested, cores_granted (int; cores per job
      in total at start, 0 if never started), wait_reason (the last reason the job
      waited, a coda.cycle.Reason token such as ``cores`` or ``reservation:12``;
      "" if it never waited), user (its owner, coda.workload.tenants), preemptions
      and shrinks (int: times its cores were taken back by a requeue or a shrink),
      unschedulable (bool: could never fit this cluster, never queued), queued_s
      (float seconds queued, summed over requeues; a job still queued when the run
      stopped counts up to then; NaN if it never queued: unschedulable, or arriving
      after the horizon).
    """

    summary: dict[str, Any]
    timeseries: dict[str, np.ndarray] = field(default_factory=dict)
    jobs: dict[str, np.ndarray] = field(default_factory=dict)
