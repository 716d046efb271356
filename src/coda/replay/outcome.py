"""What happened to each job of a replay: from Slurm's records and the job's own output
(its start, progress and end lines, coda.runtime.workloads.emulated), or from the
simulator's per-job table; and the metrics the report compares.

Times are seconds from the replay's start (the first arrival), real or simulated.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coda.replay.plan import ReplayJob
from coda.runtime.progress import read_trusted

MAX_OUTPUT = 4 << 20  # bytes read from one job's output file
MAX_SPAN_S = 7 * 86400.0  # a line further than this from the replay's start is not its
# Slurm states of a job still in the system (queued, starting, running, requeued).
LIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
        "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}  # fmt: skip


@dataclass
class Outcome:
    """One job's run as its own lines tell it (and Slurm's record of it)."""

    idx: int
    starts: list[float] = field(default_factory=list)  # each start's time
    end: float | None = None  # when its work was done
    done: float = 0.0  # work done, seconds at full speed
    progress: list[tuple[float, float]] = field(default_factory=list)  # (t, work done)
    slurm_state: str = ""
    slurm_restarts: int = 0

    @property
    def first_start(self) -> float | None:
        return self.starts[0] if self.starts else None


def read_output(path: Path, t0_wall: float, out: Outcome, owner: int | None = None) -> None:
    """Add the lines of one output file (a job's, appended across its starts): only a
    regular file (no symlink, no FIFO) of ``owner``'s, at most MAX_OUTPUT bytes. Lines
    that are not the emulated job's JSON (Slurm's own messages) are skipped."""
    raw = read_trusted(path, owner, MAX_OUTPUT)
    if raw is None:
        return
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            d = json.loads(line)
            event, wall = d.get("event"), d.get("wall")
        except (ValueError, TypeError, AttributeError, RecursionError):
            continue
        if isinstance(wall, bool) or not isinstance(wall, int | float):
            continue
        t = float(wall) - t0_wall
        if not -MAX_SPAN_S < t < MAX_SPAN_S:  # not this replay's
            continue
        if event == "start":
            out.starts.append(t)
            out.progress.append((t, _num(d.get("done"))))
        elif event == "progress":
            out.progress.append((t, _num(d.get("done"))))
        elif event == "end":
            out.progress.append((t, _num(d.get("done"))))
            out.done = max(out.done, _num(d.get("done")))


def _num(v: Any) -> float:
    """A number the job printed (JSON numbers only, never a string or a boolean)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return 0.0
    x = float(v)
    return x if math.isfinite(x) and x >= 0 else 0.0


def finish(out: Outcome, job: ReplayJob, tol: float = 1e-6) -> None:
    """Set its end: the first time its progress reached its work. What it says it did
    counts up to its work, never more."""
    out.done = min(out.done, job.work_s)
    out.progress = sorted((t, min(d, job.work_s)) for t, d in out.progress)
    for t, done in out.progress:
        if done >= job.work_s * (1 - tol):
            out.end = t
            return


def work_in(progress: list[tuple[float, float]], w0: float, w1: float) -> float:
    """Work done between w0 and w1, from (time, work done) points: linear between
    them; a drop (a restart from a checkpoint) starts a new stretch."""
    total = 0.0
    for (ta, da), (tb, db) in zip(progress, progress[1:], strict=False):
        if db < da or tb <= ta:
            continue  # restarted: the work since its checkpoint is done again
        lo, hi = max(ta, w0), min(tb, w1)
        if hi > lo:
            total += (db - da) * (hi - lo) / (tb - ta)
    return total


@dataclass
class RunMetrics:
    """One run's figures (real or simulated)."""

    gpu_util_effective: float
    cpu_queue_delay_mean_s: float | None
    jobs_finished: int
    jobs_lost: int
    jobs_started_twice: int
    jct_s: dict[int, float]
    jobs_unfinished: int = 0  # still queued or running when the run stopped (not lost)
    # Each finished CPU job's execution: its first start (its own start line) to its end.
    cpu_exec_s: dict[int, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpu_util_effective": self.gpu_util_effective,
            "cpu_queue_delay_mean_s": self.cpu_queue_delay_mean_s,
            "jobs_finished": self.jobs_finished,
            "jobs_unfinished": self.jobs_unfinished,
            "jobs_lost": self.jobs_lost,
            "jobs_started_twice": self.jobs_started_twice,
        }


def window(jobs: list[ReplayJob]) -> tuple[float, float]:
    """The measurement window: first to last arrival (the simulator's, warmup 0)."""
    return (jobs[0].submit_s, jobs[-1].submit_s) if jobs else (0.0, 0.0)


def real_metrics(jobs: list[ReplayJob], outcomes: dict[int, Outcome], gpus: int) -> RunMetrics:
    w0, w1 = window(jobs)
    span = max(w1 - w0, 1e-9)
    gpu_work = 0.0
    delays: list[float] = []
    jct: dict[int, float] = {}
    cpu_exec: dict[int, float] = {}
    lost = twice = unfinished = 0
    for job in jobs:
        o = outcomes.get(job.idx) or Outcome(job.idx)
        if job.kind == "dnn":
            gpu_work += job.gpus * work_in(o.progress, w0, w1)
        if job.kind == "cpu" and o.first_start is not None:
            delays.append(o.first_start - job.submit_s)
        if o.slurm_state in LIVE:
            unfinished += 1  # the run stopped first: neither done nor lost
        elif o.end is None or o.slurm_state not in ("COMPLETED", ""):
            lost += 1  # Slurm ended it (or forgot it) before its work was done
        else:
            jct[job.idx] = o.end - job.submit_s
            if job.kind == "cpu" and o.first_start is not None:
                cpu_exec[job.idx] = o.end - o.first_start
        # A start Slurm's requeues do not explain: the job ran again on its own.
        if len(o.starts) > 1 + o.slurm_restarts:
            twice += 1
    return RunMetrics(
        gpu_util_effective=gpu_work / (gpus * span),
        cpu_queue_delay_mean_s=statistics.fmean(delays) if delays else None,
        jobs_finished=len(jct), jobs_lost=lost, jobs_started_twice=twice, jct_s=jct,
        jobs_unfinished=unfinished, cpu_exec_s=cpu_exec,
    )  # fmt: skip


def sim_metrics(
    jobs: list[ReplayJob],
    table: dict[str, np.ndarray],
    summary: dict[str, Any],
    start_delay_s: float = 0.0,
) -> RunMetrics:
    """The same figures from the simulator's per-job table and summary (its effective
    GPU utilisation is over the same window: first to last arrival). A simulated job
    starts working ``start_delay_s`` after it is placed (its ``start``): that is when a
    real one prints its start line, which the real queue delay is measured to."""
    start, end, submit = table["start"], table["end"], table["submit"]
    delays = [
        float(start[j.idx] + start_delay_s - submit[j.idx])
        for j in jobs
        if j.kind == "cpu" and np.isfinite(start[j.idx])
    ]
    jct = {j.idx: float(end[j.idx] - submit[j.idx]) for j in jobs if np.isfinite(end[j.idx])}
    cpu_exec = {
        j.idx: float(end[j.idx] - start[j.idx] - start_delay_s)
        for j in jobs
        if j.kind == "cpu" and np.isfinite(end[j.idx]) and np.isfinite(start[j.idx])
    }
    return RunMetrics(
        gpu_util_effective=float(summary["gpu_util_effective"]),
        cpu_queue_delay_mean_s=statistics.fmean(delays) if delays else None,
        jobs_finished=len(jct), jobs_lost=len(jobs) - len(jct), jobs_started_twice=0, jct_s=jct,
        cpu_exec_s=cpu_exec,
    )  # fmt: skip


def mean_of(runs: list[RunMetrics]) -> RunMetrics:
    """The simulated twin over several noise seeds, as one prediction: mean utilisation
    and queue delay, each job's median completion time over the seeds it finished in
    all of (one seed of a chaotic schedule is one sample, not the expectation)."""
    if not runs:
        raise ValueError("no simulated runs to average")
    delays = [r.cpu_queue_delay_mean_s for r in runs if r.cpu_queue_delay_mean_s is not None]
    common = set(runs[0].jct_s).intersection(*(r.jct_s for r in runs[1:]))
    jct = {i: statistics.median(r.jct_s[i] for r in runs) for i in sorted(common)}
    ran = set(runs[0].cpu_exec_s).intersection(*(r.cpu_exec_s for r in runs[1:]))
    cpu_exec = {i: statistics.median(r.cpu_exec_s[i] for r in runs) for i in sorted(ran)}
    return RunMetrics(
        gpu_util_effective=statistics.fmean(r.gpu_util_effective for r in runs),
        cpu_queue_delay_mean_s=statistics.fmean(delays) if delays else None,
        jobs_finished=len(jct), jobs_lost=max(r.jobs_lost for r in runs),
        jobs_started_twice=0, jct_s=jct, cpu_exec_s=cpu_exec,
    )  # fmt: skip


def jct_rel_error_median(real: RunMetrics, sim: RunMetrics) -> float | None:
    """Median over jobs both finished of |real - sim| / real JCT."""
    errs = [abs(r - sim.jct_s[i]) / r for i, r in real.jct_s.items() if i in sim.jct_s and r > 0]
    return statistics.median(errs) if errs else None


def cpu_stretch(base: RunMetrics, other: RunMetrics) -> dict[str, Any]:
    """Each CPU job finished in both runs: its execution in ``other`` over its execution
    in ``base`` (coda.sim.cpu_harm's figures)."""
    from coda.sim.cpu_harm import stretch_stats

    pairs = [(x, base.cpu_exec_s[i]) for i, x in other.cpu_exec_s.items() if i in base.cpu_exec_s]
    ratio = np.array([x / b for x, b in pairs if b > 0], dtype=np.float64)
    return stretch_stats(ratio)


def gain(base: RunMetrics, coda: RunMetrics) -> float | None:
    b = base.gpu_util_effective
    return coda.gpu_util_effective / b - 1.0 if b > 0 else None
