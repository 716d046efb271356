"""The simulator's meters: utilisation integrated over the measurement window, the
time series sampled on a regular grid, and the run's summary and per-job table. They
observe the cluster's gauges and the scheduler's queues; they change nothing."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from typing import Any, cast

import numpy as np

from coda.cycle import Scheduler
from coda.cycle import reasons as R
from coda.policy.framework import Policy, StatsSource
from coda.policy.state import DNN, GPU_POOL
from coda.sim.constants import EPISODE_LOSS
from coda.sim.gauges import Gauges
from coda.sim.outcomes import JobOutcomes
from coda.sim.physics import SpeedModel
from coda.sim.result import TIMESERIES_COLUMNS, SimResult, describe
from coda.workload.perf import Workload


class Meters:
    """``window``: the measurement window (w0, w1); ``horizon``: where the run stops
    (inf: none); ``samples``: points of the time series, evenly spaced over the window
    (none for an empty workload)."""

    def __init__(
        self,
        gauges: Gauges,
        sched: Scheduler,
        policy: Policy,
        *,
        total_gpus: int,
        total_cores: int,
        window: tuple[float, float],
        window_basis: str,
        horizon: float,
        samples: int,
        start: float,
        any_jobs: bool,
    ) -> None:
        self.gauges = gauges
        self.sched = sched
        self.policy = policy
        self.total_gpus = total_gpus
        self.total_cores = total_cores
        self.w0, self.w1 = window
        self.window_basis = window_basis
        self.horizon = horizon
        self.area = {
            "gpu_eff": 0.0,
            "gpu_base": 0.0,
            "gpu_busy": 0.0,
            "gpu_busy_base": 0.0,
            "gpu_busy_full": 0.0,
            "gpu_alloc": 0.0,
            "cores_alloc": 0.0,
            "cores_useful": 0.0,
        }
        self.last_t = start
        w_end = min(self.w1, horizon)
        self.sample_times = (
            np.linspace(self.w0, w_end, samples) if any_jobs and w_end >= self.w0 else np.zeros(0)
        )
        self.sample_i = 0
        self.series = {c: np.zeros(len(self.sample_times)) for c in TIMESERIES_COLUMNS}

    def advance(self, t: float) -> None:
        """Integrate the gauges from the last instant to t (t later than it) and take
        the samples due."""
        last = self.last_t
        lo = max(last, self.w0)
        hi = min(t, self.w1)
        if hi > lo:
            dt = hi - lo
            g = self.gauges
            area = self.area
            area["gpu_eff"] += g.gpu_eff * dt
            area["gpu_base"] += g.gpu_base * dt
            area["gpu_busy"] += g.gpu_busy * dt
            area["gpu_busy_base"] += g.gpu_busy_base * dt
            area["gpu_busy_full"] += g.gpu_busy_full * dt
            area["gpu_alloc"] += g.gpu_alloc * dt
            area["cores_alloc"] += g.cores_alloc * dt
            area["cores_useful"] += g.cores_useful * dt
            if g.gpu_launching:  # GPUs held by jobs not working yet (a start delay)
                area["gpu_launch"] = area.get("gpu_launch", 0.0) + g.gpu_launching * dt
            if self.sched.queued[DNN]:
                # The paper's active rate while jobs queue (docs/metrics.md); its areas
                # are created on first use, so the engine needs no extra setup.
                area["dnn_queued"] = area.get("dnn_queued", 0.0) + dt
                area["gpu_alloc_queued"] = area.get("gpu_alloc_queued", 0.0) + g.gpu_alloc * dt
        times = self.sample_times
        while self.sample_i < len(times) and times[self.sample_i] < t:
            self.sample(self.sample_i)
            self.sample_i += 1
        self.last_t = t

    def sample(self, i: int) -> None:
        s = self.series
        g = self.gauges
        total = self.total_gpus
        s["t"][i] = self.sample_times[i] - self.w0
        s["gpu_util_effective"][i] = g.gpu_eff / total if total else 0.0
        s["gpu_util_allocated"][i] = g.gpu_alloc / total if total else 0.0
        # The paper's utilisation: busy share of the allocated GPUs (none allocated: none).
        s["gpu_util_busy"][i] = g.gpu_busy / g.gpu_alloc if g.gpu_alloc else np.nan
        s["gpu_frag_cores"][i] = self.frag_gpus() / total if total else 0.0
        s["cpu_util"][i] = g.cores_alloc / self.total_cores
        s["dnn_queued"][i] = self.sched.queued["dnn"]
        s["cpu_queued"][i] = self.sched.queued["cpu"]
        for k, v in g.count.items():
            s[k][i] = v

    def frag_gpus(self) -> int:
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
        if not sched.queued[DNN] or self.gauges.gpu_alloc >= self.total_gpus:
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

    # ------------------------------------------------------------------ result
    def policy_stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, part in (
            ("allocator", self.policy.job_control),
            ("eliminator", self.policy.node_control),
            ("harm", self.policy.harm),
        ):
            # The StatsSource capability (framework.py): whatever the plugin's class (a
            # compiled Protocol cannot be checked with isinstance).
            if part is not None and hasattr(part, "stats"):
                out[name] = cast(StatsSource, part).stats()
        return out

    def result(
        self,
        workload: Workload,
        outcomes: JobOutcomes,
        speed: SpeedModel,
        *,
        now: float,
        wall: float,
        events: int,
    ) -> SimResult:
        """The run's summary, time series and per-job table, the run stopped at ``now``
        after ``wall`` seconds and ``events`` events (arrivals aside)."""
        out = outcomes
        n = len(out.start)
        is_dnn = workload.jobs.gpus > 0
        submit = np.asarray(workload.jobs.submit)
        started = ~np.isnan(out.start)
        finished = ~np.isnan(out.end)
        w_end = min(self.w1, self.horizon)
        span = w_end - self.w0
        area = self.area
        total_gpus = self.total_gpus

        def util(x: float, total: int) -> float:
            if total == 0 or span <= 0:  # no capacity, or a window of one instant
                return 0.0
            return x / (span * total)

        def busy_of(x: float) -> float | None:
            # Over the allocated GPU-time (None when no GPU was allocated in the window).
            return x / area["gpu_alloc"] if area["gpu_alloc"] > 0 else None

        while self.sample_i < len(self.sample_times):
            self.sample(self.sample_i)
            self.sample_i += 1
        out.close_spells(now)
        for job, since in out.requeued_at.items():  # preempted, not restarted by the end
            out.waited[job.idx] += max(0.0, now - since)
        for job, reason in self.sched.waiting():  # still queued at the end: why
            # Queued since the last cycle: it waits for the next one (a periodic scheduler).
            out.wait_reason[job.idx] = R.CYCLE if reason.code == R.NEW else reason.token
        waits = Counter(r.split(":", 1)[0] for r in out.wait_reason if r)
        queued_time = area.get("dnn_queued", 0.0)
        frag = self.series["gpu_frag_cores"]
        summary = {
            "jobs": {
                "dnn": int(is_dnn.sum()),
                "cpu": int((~is_dnn).sum()),
                "finished": int(finished.sum()),
                "unfinished": int((~finished).sum()),
                "unschedulable": int(out.unschedulable.sum()),
                "never_started": int((~started).sum()),
            },
            "window": {"start": self.w0, "end": w_end, "basis": self.window_basis},
            "stopped_at": now,
            "gpu_util_effective": util(area["gpu_eff"], total_gpus),
            "gpu_util_allocated": util(area["gpu_alloc"], total_gpus),
            # The paper's GPU utilisation: busy GPU-time over allocated GPU-time (None
            # when no GPU was allocated inside the window).
            "gpu_util_busy": busy_of(area["gpu_busy"]),
            # Its split, exact: the busy share every allocated GPU would have at full
            # speed, minus what too few cores and interference take (docs/metrics.md).
            "gpu_busy_full": busy_of(area["gpu_busy_full"]),
            "gpu_busy_lost_cores": busy_of(area["gpu_busy_full"] - area["gpu_busy_base"]),
            "gpu_busy_lost_contention": busy_of(area["gpu_busy_base"] - area["gpu_busy"]),
            # allocated - lost to too few cores - lost to interference - lost to launches
            # (held by jobs not working yet: the start delay) = effective
            "gpu_lost_cores": util(
                area["gpu_alloc"] - area["gpu_base"] - area.get("gpu_launch", 0.0), total_gpus
            ),
            "gpu_lost_contention": util(area["gpu_base"] - area["gpu_eff"], total_gpus),
            "gpu_lost_launch": util(area.get("gpu_launch", 0.0), total_gpus),
            # The paper's active rate while DNN jobs queue: None if none ever queued.
            "gpu_active_queued": (
                area.get("gpu_alloc_queued", 0.0) / (queued_time * total_gpus)
                if queued_time > 0 and total_gpus
                else None
            ),
            "dnn_queued_time_share": queued_time / span if span > 0 else 0.0,
            # The mean of its samples, evenly spaced over the window (see frag_gpus).
            "gpu_frag_cores": float(frag.mean()) if frag.size else None,
            "cpu_util": util(area["cores_alloc"], self.total_cores),
            "cpu_util_useful": util(area["cores_useful"], self.total_cores),
            "dnn_queue_delay_s": describe(out.waited[is_dnn & started]),
            "dnn_jct_s": describe((out.end - submit)[is_dnn & finished]),
            "cpu_queue_delay_s": describe(out.waited[~is_dnn & started]),
            "cpu_jct_s": describe((out.end - submit)[~is_dnn & finished]),
            "makespan_s": float(np.nanmax(out.end) - submit[0]) if finished.any() else None,
            "wall_seconds": wall,
            "events": events + n,
            "events_per_s": (events + n) / wall if wall > 0 else None,
            "max_work_error": out.work_done_error,
            "preemption": {
                "count": int(out.preempted.sum()),
                "jobs": int((out.preempted > 0).sum()),
                "lost_core_s": out.lost_core_s,
            },
            # Jobs by the last reason they waited (a job that never waited: none).
            "waits_by_reason": dict(sorted(waits.items())),
            "contention": episode_summary(speed),
            "policy_stats": self.policy_stats(),
        }
        jobs = {
            "job_id": np.asarray(workload.jobs.ids, dtype=object),
            "is_dnn": is_dnn,
            "submit": submit,
            "start": out.start,
            "end": out.end,
            "gpus": workload.jobs.gpus,
            "cores_requested": workload.jobs.cores,
            "cores_granted": out.granted,
            "cores_settled": out.settled,
            "wait_reason": np.asarray(out.wait_reason, dtype=object),
            "user": np.asarray(out.users, dtype=object),
            "preemptions": out.preempted,
            "shrinks": out.shrunk,
            "unschedulable": out.unschedulable,
            "queued_s": queued_s(out, submit, now),
            "alone_s": out.alone_s,
            "throttled_s": out.throttled_s,
            "shrunk_s": out.shrunk_s,
            "lost_core_s": out.job_lost_core_s,
        }
        return SimResult(summary=summary, timeseries=self.series, jobs=jobs)


def episode_summary(speed: SpeedModel) -> dict[str, Any]:
    """Interference episodes: how long until a co-runner was throttled
    (detect) and until the job ran within 5% of its speed again (recover)."""
    log = speed.episode_log + [(ep[0], ep[1], None) for ep in speed.episodes.values()]
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
        "open_at_job_end": speed.episodes_open_at_finish,
    }


def queued_s(out: JobOutcomes, submit: np.ndarray, now: float) -> np.ndarray:
    """Each job's time queued: summed over requeues; a job still queued when the run
    stopped counts up to then (a lower bound); NaN for a job that was never queued
    (unschedulable, or arriving after the horizon)."""
    queued = out.waited.copy()
    waiting = np.isnan(out.start) & ~out.unschedulable & (submit <= now)
    queued[waiting] = now - submit[waiting]
    queued[out.unschedulable | (submit > now)] = np.nan
    return queued
