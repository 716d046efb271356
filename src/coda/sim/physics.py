"""The simulator's physics: each job's speed from its cores, its co-runners'
memory-bandwidth pressure and PCIe sharing (the performance model), work done
between changes, checkpoints, and interference episodes; and the books' checks."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from coda.cycle import InvariantError
from coda.policy.state import DNN, Job, Node
from coda.sim.constants import EPISODE_LOSS, FINISH

if TYPE_CHECKING:
    from coda.sim.engine import Simulator


def _rebandwidth(self: Simulator, job: Job) -> None:
    new_bw = self._bw_demand(job)
    for node in job.placement:
        node.bw_used += new_bw - job.bw_pn
        node.version += 1  # co-runners' projected ends moved: replan reservations
    job.bw_pn = new_bw
    self._refresh(job.placement)


# ----------------------------------------------------- interference episodes
def _detected(self: Simulator, cpu_job: Job) -> None:
    """A co-runner's quota was cut (the eliminator acted): open episodes on its
    nodes count as detected. Reclaim shrinks for a starting DNN job do not count."""
    for node in cpu_job.placement:
        for job in node.jobs:
            ep = self._episodes.get(job)
            if ep is not None and ep[1] is None:
                ep[1] = self.now


def _close_episode(self: Simulator, job: Job, finished: bool = False) -> None:
    ep = self._episodes.pop(job, None)
    if ep is None:
        return
    if finished:
        self.episodes_open_at_finish += 1
        self.episode_log.append((ep[0], ep[1], None))
    else:
        self.episode_log.append((ep[0], ep[1], self.now))


# ---------------------------------------------------------- performance
def _bw_demand(self: Simulator, job: Job) -> float:
    if self._launching and job in self._launching:
        return 0.0  # not working yet: no memory traffic
    if job.perf is not None:
        return job.perf.bw_gbps * job.perf.core_speed(job.cores_pn * job.quota)
    return job.bw_per_core * job.cores_pn * job.quota


def _useful_cores(self: Simulator, job: Job) -> float:
    if self._launching and job in self._launching:
        return 0.0  # held, not working yet
    effective = job.cores_pn * job.quota
    if job.perf is not None:
        effective = min(effective, job.perf.c_opt)
    return effective * job.nodes


def _local_speed(self: Simulator, job: Job, node: Node) -> tuple[float, float]:
    """(speed from cores alone, slowdown from memory-bandwidth pressure x PCIe)."""
    return _core_speed(job), _slowdown(self, job, node)


def _core_speed(job: Job) -> float:
    """Speed from cores alone: the same on each of its nodes."""
    if job.perf is not None:
        return job.perf.core_speed(job.cores_pn * job.quota)
    return min(1.0, job.cores_pn * job.quota / job.cores_pn_req)


def _slowdown(self: Simulator, job: Job, node: Node) -> float:
    """Slowdown on node from memory-bandwidth pressure x PCIe sharing."""
    perf = job.perf
    if perf is not None:
        if self.policy.ideal_isolation:
            return 1.0
        slow = perf.slowdown((node.bw_used - job.bw_pn) / node.bw_gbps)
        if perf.pcie_heavy and len(node.pcie_heavy) > 1:
            pair = self.workload.profiles.pcie_pair_slowdown
            slow *= max(
                pair(job.model or "", o.model or "") for o in node.pcie_heavy if o is not job
            )
        return slow
    if node.bw_used > node.bw_gbps and not self.policy.ideal_isolation:
        return node.bw_used / node.bw_gbps  # saturated bus shared pro rata
    return 1.0


def _refresh(self: Simulator, nodes: list[Node]) -> None:
    """Recompute the speed of every job on these nodes and reschedule its finish."""
    seen: set[Job] = set()
    several = len(nodes) > 1  # a job shows up once per node it spans
    launching = self._launching
    for node in nodes:
        for job in node.jobs:
            if several:
                if job in seen:
                    continue
                seen.add(job)
            if launching and job in launching:
                # Started, not yet working (the start delay): no speed, no episode.
                if job.kind == DNN:
                    self.gpu_base -= job.gpus * job.core_speed_now
                    self.gpu_busy_base -= job.gpus * _busy(job, job.core_speed_now)
                job.core_speed_now = 0.0
                _set_speed(self, job, 0.0)
                continue
            # min() over its nodes of (speed from cores, speed from cores / slowdown),
            # the former starting from 1.0; speed from cores is the same on each node.
            b = _core_speed(job)
            base = 1.0
            speed = math.inf
            for n in job.placement:
                if b < base:
                    base = b
                v = b / _slowdown(self, job, n)
                if v < speed:
                    speed = v
            if job.kind == DNN:
                _track_episode(self, job, base, speed)
                self.gpu_base += job.gpus * (base - job.core_speed_now)
                self.gpu_busy_base += job.gpus * (_busy(job, base) - _busy(job, job.core_speed_now))
            job.core_speed_now = base
            _set_speed(self, job, speed)


def _track_episode(self: Simulator, job: Job, base: float, speed: float) -> None:
    """Episodes of interference that co-located CPU jobs cause: the slowdown
    from all bandwidth pressure over the slowdown without the CPU jobs' share
    (what the eliminator can act on; DNN-DNN and PCIe pressure aside)."""
    perf = job.perf
    factor = 1.0
    if perf is not None and not self.policy.ideal_isolation:
        for n in job.placement:
            if n.cpu_job_cores == 0:
                continue
            cpu_bw = sum(j.bw_pn for j in n.jobs if not j.is_dnn)
            others = n.bw_used - job.bw_pn
            f = perf.slowdown(others / n.bw_gbps) / perf.slowdown((others - cpu_bw) / n.bw_gbps)
            factor = max(factor, f)
    hurt = factor > 1.0 / (1.0 - EPISODE_LOSS)
    if hurt and job not in self._episodes:
        self._episodes[job] = [self.now, None]
    elif not hurt and job in self._episodes:
        self._close_episode(job)


def _settle(self: Simulator, job: Job) -> None:
    now = self.now
    if now > job.last_update:
        if self._checkpoints and job in self._ckpt:
            self._checkpoint(job, now)
        job.remaining -= job.speed * (now - job.last_update)
        job.last_update = now


def _checkpoint(self: Simulator, job: Job, now: float) -> None:
    """Record the last checkpoint (every checkpoint_s of its run) up to now;
    speed is constant since the last settle, so the work then is exact."""
    every = self.policy.checkpoint_s
    last = job.start + math.floor((now - job.start) / every) * every
    if last > self._ckpt[job][0]:
        # Settles happen at every speed change, so last >= last_update here.
        done = job.work - job.remaining + job.speed * (last - job.last_update)
        self._ckpt[job] = (last, done)


def _set_speed(self: Simulator, job: Job, speed: float) -> None:
    _settle(self, job)
    if speed == job.speed and job.version:
        return
    if job.kind == DNN:
        self.gpu_eff += job.gpus * (speed - job.speed)
        self.gpu_busy += job.gpus * (_busy(job, speed) - _busy(job, job.speed))
    job.speed = speed
    job.version += 1
    if speed > 0:
        self._push(self.now + max(job.remaining, 0.0) / speed, FINISH, job, job.version)


def _busy(job: Job, speed: float) -> float:
    """Busy share of each of a DNN job's GPUs at `speed` (its profile's busy curve;
    the speed itself for a job without a profile): docs/metrics.md, gpu_util_busy."""
    perf = job.perf
    return perf.busy(speed) if perf is not None else speed


# --------------------------------------------------------------- checks
def _check_nodes(self: Simulator, nodes: list[Node]) -> None:
    for node in nodes:
        used_g = sum(j.gpus_pn for j in node.jobs)
        used_c = sum(j.cores_pn for j in node.jobs)
        if node.free_gpus < 0 or node.free_cores < 0:
            raise InvariantError(f"{node} over-committed")
        spare = node.spare_cores
        if spare != sum(self.sched.grant_pn(j) - j.cores_pn for j in node.jobs) or (
            spare and not self.fixed_grants
        ):
            raise InvariantError(f"{node}: {spare} spare cores, not its jobs' unused grants")
        if used_g + node.free_gpus != node.gpus or used_c + spare + node.free_cores != node.cores:
            raise InvariantError(f"{node} books do not balance: {used_g}g {used_c}c in use")
        cpu_c = sum(j.cores_pn for j in node.jobs if not j.is_dnn)
        if cpu_c != node.cpu_job_cores:
            raise InvariantError(
                f"{node}: CPU jobs hold {cpu_c} cores, books say {node.cpu_job_cores}"
            )
        if node.mem_mib and node.free_mem < 0:
            raise InvariantError(f"{node} memory over-committed")
