"""The speed model: each job's speed from its cores, its co-runners' memory-bandwidth
pressure and PCIe sharing (the performance model), work done between changes,
checkpoints, and interference episodes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from coda.policy.state import DNN, Job, Node
from coda.sim.constants import EPISODE_LOSS, FINISH
from coda.sim.gauges import Gauges
from coda.sim.kernel import EventKernel


def busy(job: Job, speed: float) -> float:
    """Busy share of each of a DNN job's GPUs at `speed` (its profile's busy curve;
    the speed itself for a job without a profile): docs/metrics.md, gpu_util_busy."""
    perf = job.perf
    return perf.busy(speed) if perf is not None else speed


def core_speed(job: Job) -> float:
    """Speed from cores alone: the same on each of its nodes."""
    if job.perf is not None:
        return job.perf.core_speed(job.cores_pn * job.quota)
    return min(1.0, job.cores_pn * job.quota / job.cores_pn_req)


class SpeedModel:
    """Job speeds and the work they do. ``launching``: jobs started but not working
    yet (the start delay), job -> when they begin; they have no speed until then.
    ``pcie_pair``: the slowdown of two PCIe-heavy models on one node. A job's finish
    is pushed on the kernel whenever its speed changes."""

    def __init__(
        self,
        kernel: EventKernel,
        gauges: Gauges,
        *,
        ideal_isolation: bool,
        pcie_pair: Callable[[str, str], float],
        checkpoint_s: float,
        checkpoints: bool,
    ) -> None:
        self.kernel = kernel
        self.gauges = gauges
        self.ideal_isolation = ideal_isolation
        self.pcie_pair = pcie_pair
        self.checkpoint_s = checkpoint_s
        self.launching: dict[Job, float] = {}
        # Checkpoints of preemptable CPU jobs are tracked only where preemption exists:
        # CPU job -> (its last checkpoint, work done then).
        self.checkpoints = checkpoints
        self.ckpt: dict[Job, tuple[float, float]] = {}
        # Interference episodes: job -> [onset, first throttle on its nodes or None].
        self.episodes: dict[Job, list[Any]] = {}
        self.episode_log: list[tuple[float, float | None, float | None]] = []
        self.episodes_open_at_finish = 0

    def rebandwidth(self, job: Job) -> None:
        new_bw = self.bw_demand(job)
        for node in job.placement:
            node.bw_used += new_bw - job.bw_pn
            node.version += 1  # co-runners' projected ends moved: replan reservations
        job.bw_pn = new_bw
        self.refresh(job.placement)

    # ------------------------------------------------- interference episodes
    def detected(self, cpu_job: Job) -> None:
        """A co-runner's quota was cut (the eliminator acted): open episodes on its
        nodes count as detected. Reclaim shrinks for a starting DNN job do not count."""
        for node in cpu_job.placement:
            for job in node.jobs:
                ep = self.episodes.get(job)
                if ep is not None and ep[1] is None:
                    ep[1] = self.kernel.now

    def close_episode(self, job: Job, finished: bool = False) -> None:
        ep = self.episodes.pop(job, None)
        if ep is None:
            return
        if finished:
            self.episodes_open_at_finish += 1
            self.episode_log.append((ep[0], ep[1], None))
        else:
            self.episode_log.append((ep[0], ep[1], self.kernel.now))

    # ------------------------------------------------------------ performance
    def bw_demand(self, job: Job) -> float:
        if self.launching and job in self.launching:
            return 0.0  # not working yet: no memory traffic
        if job.perf is not None:
            return job.perf.bw_gbps * job.perf.core_speed(job.cores_pn * job.quota)
        return job.bw_per_core * job.cores_pn * job.quota

    def useful_cores(self, job: Job) -> float:
        if self.launching and job in self.launching:
            return 0.0  # held, not working yet
        effective = job.cores_pn * job.quota
        if job.perf is not None:
            effective = min(effective, job.perf.c_opt)
        return effective * job.nodes

    def local_speed(self, job: Job, node: Node) -> tuple[float, float]:
        """(speed from cores alone, slowdown from memory-bandwidth pressure x PCIe)."""
        return core_speed(job), self.slowdown(job, node)

    def slowdown(self, job: Job, node: Node) -> float:
        """Slowdown on node from memory-bandwidth pressure x PCIe sharing."""
        perf = job.perf
        if perf is not None:
            if self.ideal_isolation:
                return 1.0
            slow = perf.slowdown((node.bw_used - job.bw_pn) / node.bw_gbps)
            if perf.pcie_heavy and len(node.pcie_heavy) > 1:
                pair = self.pcie_pair
                slow *= max(
                    pair(job.model or "", o.model or "") for o in node.pcie_heavy if o is not job
                )
            return slow
        if node.bw_used > node.bw_gbps and not self.ideal_isolation:
            return node.bw_used / node.bw_gbps  # saturated bus shared pro rata
        return 1.0

    def refresh(self, nodes: list[Node]) -> None:
        """Recompute the speed of every job on these nodes and reschedule its finish."""
        seen: set[Job] = set()
        several = len(nodes) > 1  # a job shows up once per node it spans
        launching = self.launching
        g = self.gauges
        for node in nodes:
            for job in node.jobs:
                if several:
                    if job in seen:
                        continue
                    seen.add(job)
                if launching and job in launching:
                    # Started, not yet working (the start delay): no speed, no episode.
                    if job.kind == DNN:
                        g.gpu_base -= job.gpus * job.core_speed_now
                        g.gpu_busy_base -= job.gpus * busy(job, job.core_speed_now)
                    job.core_speed_now = 0.0
                    self.set_speed(job, 0.0)
                    continue
                # min() over its nodes of (speed from cores, speed from cores / slowdown),
                # the former starting from 1.0; speed from cores is the same on each node.
                b = core_speed(job)
                base = 1.0
                speed = math.inf
                for n in job.placement:
                    if b < base:
                        base = b
                    v = b / self.slowdown(job, n)
                    if v < speed:
                        speed = v
                if job.kind == DNN:
                    self.track_episode(job, base, speed)
                    if base != job.core_speed_now:  # else both would add exactly 0.0
                        g.gpu_base += job.gpus * (base - job.core_speed_now)
                        g.gpu_busy_base += job.gpus * (
                            busy(job, base) - busy(job, job.core_speed_now)
                        )
                job.core_speed_now = base
                self.set_speed(job, speed)

    def track_episode(self, job: Job, base: float, speed: float) -> None:
        """Episodes of interference that co-located CPU jobs cause: the slowdown
        from all bandwidth pressure over the slowdown without the CPU jobs' share
        (what the eliminator can act on; DNN-DNN and PCIe pressure aside)."""
        perf = job.perf
        factor = 1.0
        if perf is not None and not self.ideal_isolation:
            for n in job.placement:
                if n.cpu_job_cores == 0:
                    continue
                cpu_bw = sum(j.bw_pn for j in n.jobs if not j.is_dnn)
                others = n.bw_used - job.bw_pn
                f = perf.slowdown(others / n.bw_gbps) / perf.slowdown((others - cpu_bw) / n.bw_gbps)
                factor = max(factor, f)
        hurt = factor > 1.0 / (1.0 - EPISODE_LOSS)
        if hurt and job not in self.episodes:
            self.episodes[job] = [self.kernel.now, None]
        elif not hurt and job in self.episodes:
            self.close_episode(job)

    def settle(self, job: Job) -> None:
        now = self.kernel.now
        if now > job.last_update:
            if self.checkpoints and job.checkpoints and job in self.ckpt:
                self.checkpoint(job, now)
            job.remaining -= job.speed * (now - job.last_update)
            job.last_update = now

    def checkpoint(self, job: Job, now: float) -> None:
        """Record the last checkpoint (every checkpoint_s of its run) up to now;
        speed is constant since the last settle, so the work then is exact."""
        every = self.checkpoint_s
        last = job.start + math.floor((now - job.start) / every) * every
        if last > self.ckpt[job][0]:
            # Settles happen at every speed change, so last >= last_update here.
            done = job.work - job.remaining + job.speed * (last - job.last_update)
            self.ckpt[job] = (last, done)

    def set_speed(self, job: Job, speed: float) -> None:
        self.settle(job)
        if speed == job.speed and job.version:
            return
        if job.kind == DNN:
            g = self.gauges
            g.gpu_eff += job.gpus * (speed - job.speed)
            g.gpu_busy += job.gpus * (busy(job, speed) - busy(job, job.speed))
        job.speed = speed
        job.version += 1
        if speed > 0:
            kernel = self.kernel
            kernel.push(kernel.now + max(job.remaining, 0.0) / speed, FINISH, job, job.version)
