"""The simulator's meters: utilisation integrated over the measurement window,
the time series sampled on a regular grid, and the run's summary and per-job table."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from coda.cycle import reasons as R
from coda.policy.state import DNN, GPU_POOL
from coda.sim.constants import EPISODE_LOSS
from coda.sim.result import SimResult, describe

if TYPE_CHECKING:
    from coda.sim.engine import Simulator


def _advance(self: Simulator, t: float) -> None:
    """Integrate the aggregates from the last instant to t and take due samples."""
    last = self.last_t
    if t <= last:
        return
    lo = max(last, self.w0)
    hi = min(t, self.w1)
    if hi > lo:
        dt = hi - lo
        area = self.area
        area["gpu_eff"] += self.gpu_eff * dt
        area["gpu_base"] += self.gpu_base * dt
        area["gpu_busy"] += self.gpu_busy * dt
        area["gpu_busy_base"] += self.gpu_busy_base * dt
        area["gpu_busy_full"] += self.gpu_busy_full * dt
        area["gpu_alloc"] += self.gpu_alloc * dt
        area["cores_alloc"] += self.cores_alloc * dt
        area["cores_useful"] += self.cores_useful * dt
        if self.gpu_launching:  # GPUs held by jobs not working yet (a start delay)
            area["gpu_launch"] = area.get("gpu_launch", 0.0) + self.gpu_launching * dt
        if self.sched.queued[DNN]:
            # The paper's active rate while jobs queue (docs/metrics.md); its areas are
            # created on first use, so the engine needs no extra setup.
            area["dnn_queued"] = area.get("dnn_queued", 0.0) + dt
            area["gpu_alloc_queued"] = area.get("gpu_alloc_queued", 0.0) + self.gpu_alloc * dt
    times = self.sample_times
    while self.sample_i < len(times) and times[self.sample_i] < t:
        self._sample(self.sample_i)
        self.sample_i += 1
    self.last_t = t
    self.now = t


def _sample(self: Simulator, i: int) -> None:
    s = self.series
    total = self.total_gpus
    s["t"][i] = self.sample_times[i] - self.w0
    s["gpu_util_effective"][i] = self.gpu_eff / total if total else 0.0
    s["gpu_util_allocated"][i] = self.gpu_alloc / total if total else 0.0
    # The paper's utilisation: busy share of the allocated GPUs (none allocated: none).
    s["gpu_util_busy"][i] = self.gpu_busy / self.gpu_alloc if self.gpu_alloc else np.nan
    s["gpu_frag_cores"][i] = _frag_gpus(self) / total if total else 0.0
    s["cpu_util"][i] = self.cores_alloc / self.total_cores
    s["dnn_queued"][i] = self.sched.queued["dnn"]
    s["cpu_queued"][i] = self.sched.queued["cpu"]
    for k, v in self.count.items():
        s[k][i] = v


def _frag_gpus(self: Simulator) -> int:
    """GPUs free on nodes where some queued DNN job fits by GPUs (its GPUs per node
    <= the node's free GPUs) but not by free cores (the cores per node the policy
    would grant it > the node's free cores, CPU jobs' cores counted as free where
    the policy reclaims them; yet <= the node's cores, so a node too small for the
    job even when empty is not counted). docs/metrics.md, gpu_frag_cores.

    Cost: one look per queued DNN shape (bucket), not per queued job, and one per
    occupied (free GPUs, free cores) level of the node index, not per node, except
    on clusters whose smallest GPU node has fewer cores than some queued shape wants.
    Taken at the samples only: at every event it cost a deep FIFO queue (some 60
    shapes) a third more run time (docs/metrics.md).
    """
    sched = self.sched
    if not sched.queued[DNN] or self.gpu_alloc >= self.total_gpus:
        return 0
    reclaim = sched.dnn_index is not None
    index = sched.dnn_index if reclaim else sched.index.get(GPU_POOL)
    if index is None:
        return 0
    cores_of = self.policy.core_count.cores_per_node
    want: dict[int, set[int]] = {}  # GPUs per node -> cores per node, of queued shapes
    for buckets in sched.buckets.values():
        for shape, bucket in buckets.items():
            if shape[0] != DNN:
                continue
            head = bucket.front()
            if head is not None:
                want.setdefault(shape[1], set()).add(cores_of(head[1]))
    if not want:
        return 0
    smallest = min((c for p, _, c, _ in sched.shapes if p == GPU_POOL), default=0)
    by_gpus = sorted(want)
    cores: list[int] = []  # sorted cores per node of the shapes that fit g free GPUs
    k = 0
    frag = 0
    for g in range(by_gpus[0], index.max_gpus + 1):
        while k < len(by_gpus) and by_gpus[k] <= g:
            cores = sorted(set(cores).union(want[by_gpus[k]]))
            k += 1
        # Occupied free-core levels below the largest core count wanted.
        levels = index.masks[g] & ((1 << cores[-1]) - 1)
        bucket_at = index.buckets[g]
        while levels:
            low = levels & -levels
            levels ^= low
            free = low.bit_length() - 1
            need = cores[bisect_right(cores, free)]  # the fewest cores wanted above free
            nodes = bucket_at[free]
            if need <= smallest:
                frag += g * len(nodes)
            else:
                frag += g * sum(1 for n in nodes if n.cores >= need)
    return frag


# --------------------------------------------------------------- result
def _episode_summary(self: Simulator) -> dict[str, Any]:
    """Interference episodes: how long until a co-runner was throttled
    (detect) and until the job ran within 5% of its speed again (recover)."""
    log = self.episode_log + [(ep[0], ep[1], None) for ep in self._episodes.values()]
    detect = np.array([d - o for o, d, _ in log if d is not None])
    recover = np.array([e - o for o, d, e in log if d is not None and e is not None])
    gone = np.array([e - o for o, d, e in log if d is None and e is not None])
    return {
        "episodes": len(log),
        "loss_threshold": EPISODE_LOSS,
        "detected": int(detect.size),
        "detect_s": describe(detect),
        "recover_s": describe(recover),
        "ended_undetected_s": describe(gone),
        "open_at_job_end": self.episodes_open_at_finish,
    }


def _policy_stats(self: Simulator) -> dict[str, Any]:
    out = {}
    from coda.policy.allocator import AdaptiveAllocator
    from coda.policy.eliminator import ContentionEliminator

    for name, part in (
        ("allocator", self.policy.job_control),
        ("eliminator", self.policy.node_control),
    ):
        if isinstance(part, (AdaptiveAllocator, ContentionEliminator)):
            out[name] = part.stats()
    return out


def _queued_s(self: Simulator, submit: np.ndarray) -> np.ndarray:
    """Each job's time queued: summed over requeues; a job still queued when the run
    stopped counts up to then (a lower bound); NaN for a job that was never queued
    (unschedulable, or arriving after the horizon)."""
    queued = self.waited.copy()
    waiting = np.isnan(self.start) & ~self.unschedulable & (submit <= self.now)
    queued[waiting] = self.now - submit[waiting]
    queued[self.unschedulable | (submit > self.now)] = np.nan
    return queued


def _result(self: Simulator, wall: float) -> SimResult:
    is_dnn = self.workload.jobs.gpus > 0
    submit = np.asarray(self.submit)
    started = ~np.isnan(self.start)
    finished = ~np.isnan(self.end)
    w_end = min(self.w1, self.horizon)
    span = w_end - self.w0
    area = self.area

    def util(x: float, total: int) -> float:
        if total == 0 or span <= 0:  # no capacity, or a window of one instant
            return 0.0
        return x / (span * total)

    def busy_of(x: float) -> float | None:
        # Over the allocated GPU-time (None when no GPU was allocated in the window).
        return x / area["gpu_alloc"] if area["gpu_alloc"] > 0 else None

    while self.sample_i < len(self.sample_times):
        self._sample(self.sample_i)
        self.sample_i += 1
    for job, since in self._requeued_at.items():  # preempted, not restarted by the end
        self.waited[job.idx] += max(0.0, self.now - since)
    for job, reason in self.sched.waiting():  # still queued at the end: why
        # Queued since the last cycle: it waits for the next one (a periodic scheduler).
        self.wait_reason[job.idx] = R.CYCLE if reason.code == R.NEW else reason.token
    waits = Counter(r.split(":", 1)[0] for r in self.wait_reason if r)
    queued_time = area.get("dnn_queued", 0.0)
    frag = self.series["gpu_frag_cores"]
    summary = {
        "jobs": {
            "dnn": int(is_dnn.sum()),
            "cpu": int((~is_dnn).sum()),
            "finished": int(finished.sum()),
            "unfinished": int((~finished).sum()),
            "unschedulable": int(self.unschedulable.sum()),
            "never_started": int((~started).sum()),
        },
        "window": {"start": self.w0, "end": w_end, "basis": self.window_basis},
        "stopped_at": self.now,
        "gpu_util_effective": util(area["gpu_eff"], self.total_gpus),
        "gpu_util_allocated": util(area["gpu_alloc"], self.total_gpus),
        # The paper's GPU utilisation: busy GPU-time over allocated GPU-time (None when
        # no GPU was allocated inside the window).
        "gpu_util_busy": busy_of(area["gpu_busy"]),
        # Its split, exact: the busy share every allocated GPU would have at full speed,
        # minus what too few cores and interference take (docs/metrics.md).
        "gpu_busy_full": busy_of(area["gpu_busy_full"]),
        "gpu_busy_lost_cores": busy_of(area["gpu_busy_full"] - area["gpu_busy_base"]),
        "gpu_busy_lost_contention": busy_of(area["gpu_busy_base"] - area["gpu_busy"]),
        # allocated - lost to too few cores - lost to interference - lost to launches
        # (held by jobs not working yet: the start delay) = effective
        "gpu_lost_cores": util(
            area["gpu_alloc"] - area["gpu_base"] - area.get("gpu_launch", 0.0), self.total_gpus
        ),
        "gpu_lost_contention": util(area["gpu_base"] - area["gpu_eff"], self.total_gpus),
        "gpu_lost_launch": util(area.get("gpu_launch", 0.0), self.total_gpus),
        # The paper's active rate while DNN jobs queue: None if none ever queued.
        "gpu_active_queued": (
            area.get("gpu_alloc_queued", 0.0) / (queued_time * self.total_gpus)
            if queued_time > 0 and self.total_gpus
            else None
        ),
        "dnn_queued_time_share": queued_time / span if span > 0 else 0.0,
        # The mean of its samples, evenly spaced over the window (see _frag_gpus).
        "gpu_frag_cores": float(frag.mean()) if frag.size else None,
        "cpu_util": util(area["cores_alloc"], self.total_cores),
        "cpu_util_useful": util(area["cores_useful"], self.total_cores),
        "dnn_queue_delay_s": describe(self.waited[is_dnn & started]),
        "dnn_jct_s": describe((self.end - submit)[is_dnn & finished]),
        "cpu_queue_delay_s": describe(self.waited[~is_dnn & started]),
        "cpu_jct_s": describe((self.end - submit)[~is_dnn & finished]),
        "makespan_s": float(np.nanmax(self.end) - self.submit[0]) if finished.any() else None,
        "wall_seconds": wall,
        "events": self.events + self.n,
        "events_per_s": (self.events + self.n) / wall if wall > 0 else None,
        "max_work_error": self.work_done_error,
        "preemption": {
            "count": int(self.preempted.sum()),
            "jobs": int((self.preempted > 0).sum()),
            "lost_core_s": self.lost_core_s,
        },
        # Jobs by the last reason they waited (a job that never waited: none).
        "waits_by_reason": dict(sorted(waits.items())),
        "contention": self._episode_summary(),
        "policy_stats": self._policy_stats(),
    }
    jobs = {
        "job_id": np.asarray(self.workload.jobs.ids, dtype=object),
        "is_dnn": is_dnn,
        "submit": submit,
        "start": self.start,
        "end": self.end,
        "gpus": self.workload.jobs.gpus,
        "cores_requested": self.workload.jobs.cores,
        "cores_granted": self.granted,
        "cores_settled": self.settled,
        "wait_reason": np.asarray(self.wait_reason, dtype=object),
        "user": np.asarray(self.users, dtype=object),
        "preemptions": self.preempted,
        "shrinks": self.shrunk,
        "unschedulable": self.unschedulable,
        "queued_s": _queued_s(self, submit),
    }
    result = SimResult(summary=summary, timeseries=self.series, jobs=jobs)
    # The paper's metrics (coda.report.paper_metrics), so summary.json carries them;
    # imported here, as the report layer imports the simulator's result types.
    from coda.report.paper_metrics import summary_block

    summary["paper"] = summary_block(result)
    return result
