"""Slurm as the policies see it: ``Node``/``Job`` objects kept across cycles.

Every cycle the controller reads Slurm whole (squeue, scontrol show node); this
view turns that into the scheduler's state and tells the scheduler only what
changed: a node whose free GPUs, cores or jobs moved is re-indexed (and marked
as having room when it gained some), a held job is queued once, a job no longer
CODA's is withdrawn. So a cycle's decisions grow with what changed, not with
nodes x jobs, and the same ``coda.cycle.Scheduler`` as in the simulator decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from coda.cycle import Reason, Scheduler
from coda.policy.state import Job, Node
from coda.runtime.agent import pcie_heavy
from coda.slurm.client import SlurmJob, SlurmNode, model_key

RUNNING = ("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING")


def policy_job(sj: SlurmJob) -> Job:
    """A Slurm job as the policies see it."""
    model = model_key(sj)
    job = Job(
        sj.job_id,
        f"{sj.name}#{sj.job_id}",
        float(sj.submit_time),
        sj.gpus_per_node * sj.node_count,
        sj.requested_cores,
        0,
        sj.node_count,
        float("inf"),
        model=model,
        time_limit=sj.time_limit_s if sj.time_limit_s is not None else math.inf,
        # Only a job Slurm may requeue can have its cores taken back.
        preemptible=sj.requeueable,
        pcie_heavy=pcie_heavy(model, sj.gpus_per_node) if sj.gpus_per_node else False,
    )
    job.preemptions = sj.restarts
    return job


def _shape(sj: SlurmJob) -> tuple[object, ...]:
    return (sj.gpus_per_node, sj.node_count, sj.requested_cores, sj.name, sj.time_limit_s,
            sj.requeueable, sj.submit_time)  # fmt: skip


class SlurmView:
    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.nodes: dict[str, Node] = {}
        self.jobs: dict[int, Job] = {}
        self._shapes: dict[int, tuple[object, ...]] = {}
        self._next_idx = 0
        self.queued: dict[int, Job] = {}  # held jobs in the scheduler's queue
        self.never: dict[int, Reason] = {}  # held jobs that can never run here

    def job(self, sj: SlurmJob) -> Job:
        """The one Job object of a Slurm job (made again only if its request changed)."""
        shape = _shape(sj)
        job = self.jobs.get(sj.job_id)
        if job is None or self._shapes[sj.job_id] != shape:
            if job is not None:
                self.sched.withdraw(job)
                self.queued.pop(sj.job_id, None)
            job = self.jobs[sj.job_id] = policy_job(sj)
            self._shapes[sj.job_id] = shape
        return job

    def sync(
        self,
        snodes: Sequence[SlurmNode],
        sjobs: Sequence[SlurmJob],
        ready: Sequence[SlurmJob],
        now: float,
    ) -> bool:
        """Bring the scheduler in line with Slurm. ``ready``: held jobs CODA places
        now. Returns whether the set of usable nodes changed."""
        changed = self._sync_nodes(snodes)
        if changed:
            self.never.clear()  # a job that could never run may fit now: ask again
        self._sync_usage(sjobs, now)
        self._sync_queue(ready)
        live = {j.job_id for j in sjobs}
        for jid in [j for j in self.jobs if j not in live]:  # Slurm forgot it
            self.sched.withdraw(self.jobs.pop(jid))
            self._shapes.pop(jid, None)
            self.queued.pop(jid, None)
            self.never.pop(jid, None)
        return changed

    def _sync_nodes(self, snodes: Sequence[SlurmNode]) -> bool:
        usable = {n.name: n for n in snodes if n.usable}
        changed = False
        for name in [n for n in self.nodes if n not in usable]:
            self.sched.remove_node(self.nodes.pop(name))
            changed = True
        new: list[Node] = []
        for name in sorted(usable):
            sn = usable[name]
            node = self.nodes.get(name)
            if node is not None and (node.gpus, node.cores) != (sn.gpus, sn.cpus):
                self.sched.remove_node(node)  # resized (slurm.conf changed): a new node
                node = None
            if node is None:
                node = Node(self._next_idx, name, sn.gpus, sn.cpus, 0, 0.0)
                self._next_idx += 1
                self.nodes[name] = node
                new.append(node)
                changed = True
        if new:
            self.sched.add_nodes(new)
        self._slurm_nodes = usable
        return changed

    def _sync_usage(self, sjobs: Sequence[SlurmJob], now: float) -> None:
        """Free capacity and jobs of each node: Slurm's allocations, minus what CODA
        placed that Slurm has not started yet."""
        free: dict[str, list[int]] = {
            name: [sn.gpus - sn.gpus_used, sn.cpus - sn.cpus_alloc, 0]
            for name, sn in self._slurm_nodes.items()
        }
        on_node: dict[str, list[Job]] = {name: [] for name in free}
        for j in sjobs:
            running = j.state in RUNNING
            placed = j.state == "PENDING" and j.placed_by_coda
            if not (running or placed):
                continue
            names = [x for x in (j.nodes if running else j.required_nodes) if x in free]
            if not names:
                continue
            job = self.job(j)
            waiting = j.reason in ("None", "Resources", "Priority", "") or j.priority == 0
            if placed and waiting:
                # Placed (and released, or about to be) but not started: spoken for,
                # unless it waits for something else (a limit, a begin time, a hold by
                # its user: then it must not keep cores from other jobs).
                grant = int((j.mark or {}).get("grant", "0") or 0) or j.cpus
                for x in names:
                    free[x][0] -= j.gpus_per_node
                    free[x][1] -= grant
            # A placed job starts about now; its time limit runs from then.
            job.start = float(j.start_time) if running and j.start_time else now
            job.cores_pn = max(1, j.cpus // len(names))
            job.placement = [self.nodes[x] for x in names]
            for x in names:
                on_node[x].append(job)
                if not job.is_dnn:
                    free[x][2] += job.cores_pn
        for name, node in self.nodes.items():
            g, c, cpu_c = free[name]
            g, c = max(0, g), max(0, c)
            jobs = on_node[name]
            same_jobs = len(jobs) == len(node.jobs) and all(j in node.jobs for j in jobs)
            if (node.free_gpus, node.free_cores, node.cpu_job_cores) == (g, c, cpu_c) and same_jobs:
                continue
            grew = (
                g > node.free_gpus
                or c > node.free_cores
                or c + cpu_c > (node.free_cores + node.cpu_job_cores)
            )
            node.free_gpus, node.free_cores, node.cpu_job_cores = g, c, cpu_c
            node.jobs = dict.fromkeys(jobs)
            node.pcie_heavy = [j for j in jobs if j.pcie_heavy]
            self.sched.node_capacity_changed(node, grew)

    def _sync_queue(self, ready: Sequence[SlurmJob]) -> None:
        want: dict[int, Job] = {}
        for sj in ready:
            job = self.job(sj)
            want[sj.job_id] = job
            if self.sched.is_queued(job) or sj.job_id in self.never:
                continue
            job.start, job.placement = -1.0, []
            job.preemptions = sj.restarts
            never = self.sched.submit(job)
            if never is not None:
                self.never[sj.job_id] = never
            else:
                self.queued[sj.job_id] = job
        for jid in [j for j in self.queued if j not in want]:
            self.sched.withdraw(self.queued.pop(jid))
        for jid in [j for j in self.never if j not in want]:
            del self.never[jid]
