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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from coda.cycle import Reason, Scheduler
from coda.policy.state import Job, Node
from coda.runtime.row_job import pcie_heavy
from coda.slurm.client import SlurmJob, SlurmNode, model_key, same_nodes

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
        # The tenant fair share shares between: its owner, as in the agent.
        user=str(sj.user_id),
        time_limit=sj.time_limit_s if sj.time_limit_s is not None else math.inf,
        # Only a job Slurm may requeue can have its cores taken back.
        preemptible=sj.requeueable,
        # The profile's model name is the job's name (the model key adds its owner).
        pcie_heavy=pcie_heavy(sj.name, sj.gpus_per_node) if sj.gpus_per_node else False,
    )
    job.preemptions = sj.restarts
    return job


def _shape(sj: SlurmJob) -> tuple[object, ...]:
    return (sj.gpus_per_node, sj.node_count, sj.requested_cores, sj.name, sj.time_limit_s,
            sj.requeueable, sj.submit_time)  # fmt: skip


@dataclass
class _Usage:
    fp: tuple[object, ...]  # the fields of its record that matter here
    job: Job
    names: list[str]
    held_g: int
    held_c: int
    sj: SlurmJob  # the record it was read from


class SlurmView:
    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.nodes: dict[str, Node] = {}
        self.jobs: dict[int, Job] = {}
        self._shapes: dict[int, tuple[object, ...]] = {}
        self._read: dict[int, SlurmJob] = {}  # the record each Job was last checked against
        self._reread: set[int] = set()  # forgotten: looked at at the next sync, changed or not
        self._next_idx = 0
        self.queued: dict[int, Job] = {}  # held jobs in the scheduler's queue
        # Running and placed jobs as last seen, and what they hold on each node.
        self._usage: dict[int, _Usage] = {}
        self._held: dict[str, list[int]] = {}  # node -> [GPUs, cores] placed, not started
        self._on: dict[str, dict[int, Job]] = {}  # node -> its running and placed jobs
        # Nodes a cycle booked onto: their job lists are rebuilt at the next sync.
        self.touched: set[str] = set()
        self.never: dict[int, Reason] = {}  # held jobs that can never run here
        self._now = 0.0  # the time of the sync under way (usage dropped is released then)
        self._last_read: list[SlurmNode] = []  # the nodes Slurm listed at the last sync
        self._slurm_nodes: dict[str, SlurmNode] = {}  # the usable ones, by name
        self._moved: set[str] = set()  # usable nodes whose record changed at this sync

    def job(self, sj: SlurmJob) -> Job:
        """The one Job object of a Slurm job (made again only if its request changed)."""
        job = self.jobs.get(sj.job_id)
        if job is not None and self._read.get(sj.job_id) is sj:
            return job  # the same record as last time (JobListing): nothing changed
        shape = _shape(sj)
        self._read[sj.job_id] = sj
        if job is None or self._shapes[sj.job_id] != shape:
            if job is not None:
                self._let_go(job)  # its new Job is charged if it runs
                self.queued.pop(sj.job_id, None)
            job = self.jobs[sj.job_id] = policy_job(sj)
            self._shapes[sj.job_id] = shape
        return job

    def sync(
        self,
        snodes: Sequence[SlurmNode],
        sjobs: Sequence[SlurmJob],
        ready: Iterable[SlurmJob],
        now: float,
        delta: tuple[Sequence[SlurmJob], Sequence[int]] | None = None,
        ready_delta: tuple[Sequence[SlurmJob], Sequence[int]] | None = None,
    ) -> bool:
        """Bring the scheduler in line with Slurm. ``ready``: held jobs CODA places
        now. ``delta``: the jobs new or changed since the last sync and the ids gone
        (``JobIndex``), so only those are looked at; None: look at every job.
        ``ready_delta``: with ``delta``, what moved in ``ready`` since the last sync
        (``ReadyJobs``: jobs to queue or look at again, ids no longer ready), so the
        queue is not walked. Returns whether the set of usable nodes changed."""
        self._now = now
        changed = self._sync_nodes(snodes)
        if changed:
            self.never.clear()  # a job that could never run may fit now: ask again
            delta = None  # and jobs skipped for want of a node count now: read them all
        if delta is not None:
            more: list[SlurmJob] = []
            if self._reread:  # forgotten ones too (``forget``): their reading was stale
                have = {j.job_id for j in delta[0]}
                more = [j for j in sjobs if j.job_id in self._reread and j.job_id not in have]
            self._sync_usage([*delta[0], *more], now, gone=delta[1])
        else:
            self._sync_usage(sjobs, now)
        self._reread.clear()
        if delta is not None and ready_delta is not None:
            self._sync_queue(ready_delta[0], dropped=ready_delta[1])
        else:
            self._sync_queue(ready)
        gone: Iterable[int]
        if delta is not None:
            gone = [jid for jid in delta[1] if jid in self.jobs]
        else:
            live = {j.job_id for j in sjobs}
            gone = [j for j in self.jobs if j not in live]
        for jid in gone:  # Slurm forgot it
            self._let_go(self.jobs.pop(jid))
            self._shapes.pop(jid, None)
            self._read.pop(jid, None)
            self.queued.pop(jid, None)
            self.never.pop(jid, None)
        return changed

    def _sync_nodes(self, snodes: Sequence[SlurmNode]) -> bool:
        if same_nodes(snodes, self._last_read):
            self._moved = set()
            return False
        self._last_read = list(snodes)
        usable = {n.name: n for n in snodes if n.usable}
        last = self._slurm_nodes
        # Nodes whose record changed (or that are new): their free capacity is redone.
        self._moved = {name for name, sn in usable.items() if last.get(name) is not sn}
        changed = False
        for name in [n for n in self.nodes if n not in usable]:
            self.sched.remove_node(self.nodes.pop(name))
            self._forget_node(name)
            changed = True
        new: list[Node] = []
        for name in sorted(self._moved):  # the rest are the very records of last time
            sn = usable[name]
            node = self.nodes.get(name)
            if node is not None and (node.gpus, node.cores) != (sn.gpus, sn.cpus):
                self.sched.remove_node(node)  # resized (slurm.conf changed): a new node
                self._forget_node(name)
                node = None
            if node is None:
                node = Node(self._next_idx, name, sn.gpus, sn.cpus, 0, 0.0)
                self._next_idx += 1
                self.nodes[name] = node
                self._held[name] = [0, 0]
                self._on[name] = {}
                new.append(node)
                changed = True
        if new:
            self.sched.add_nodes(new)
        self._slurm_nodes = usable
        return changed

    def forget(self, jid: int) -> None:
        """Look at a job's record again at the next sync (its last reading is stale)."""
        self._reread.add(jid)
        if jid in self._usage:
            self._drop_usage(jid, self.touched)

    def _forget_node(self, name: str) -> None:
        """A node left: every job seen on it is looked at again."""
        self._held.pop(name, None)
        self._on.pop(name, None)
        for jid in [k for k, u in self._usage.items() if name in u.names]:
            self._drop_usage(jid, self.touched)

    def _sync_usage(
        self, sjobs: Sequence[SlurmJob], now: float, gone: Sequence[int] | None = None
    ) -> None:
        """Free capacity and jobs of each node: Slurm's allocations, minus what CODA
        placed that Slurm has not started yet. A job whose record did not change since
        the last cycle is not looked at again; only nodes whose jobs changed (or that a
        cycle booked onto) get their job lists rebuilt. ``gone``: ``sjobs`` are only the
        jobs that changed, and these ids are the jobs Slurm no longer lists."""
        changed = self.touched
        self.touched = set()
        seen: set[int] = set()
        usage, jobs_now = self._usage, self.jobs
        for j in sjobs:
            prev = usage.get(j.job_id)
            if prev is not None and prev.sj is j and jobs_now.get(j.job_id) is prev.job:
                seen.add(j.job_id)  # the very record of last time (JobListing)
                continue
            running = j.state in RUNNING
            placed = j.state == "PENDING" and j.placed_by_coda
            if not (running or placed):
                continue
            fp = (j.state, j.nodes if running else j.required_nodes, j.cpus, j.priority,
                  j.reason, j.admin_comment, j.start_time, j.gpus_per_node)  # fmt: skip
            if prev is not None and prev.fp == fp and self.jobs.get(j.job_id) is prev.job:
                prev.sj = j
                seen.add(j.job_id)
                continue
            if prev is not None:
                self._drop_usage(j.job_id, changed)
            names = [x for x in (j.nodes if running else j.required_nodes) if x in self.nodes]
            if not names:
                continue
            seen.add(j.job_id)
            job = self.job(j)
            waiting = j.reason in ("None", "Resources", "Priority", "") or j.priority == 0
            held_g = held_c = 0
            if placed and waiting:
                # Placed (and released, or about to be) but not started: spoken for,
                # unless it waits for something else (a limit, a begin time, a hold by
                # its user: then it must not keep cores from other jobs).
                held_g = j.gpus_per_node
                grant = (j.mark or {}).get("grant", "")
                # A grant outside 1..its CPUs is not CODA's writing: Slurm's count holds.
                held_c = int(grant) if grant.isdigit() and 1 <= int(grant) <= j.cpus else j.cpus
            # Only a running job can be requeued: a placed one Slurm has not started yet
            # is not the reclaim plugin's to take. Nor is one CODA did not place (its
            # user held it, or it predates CODA): it is its user's, and Slurm's.
            job.preemptible = j.requeueable and running and j.placed_by_coda
            # A placed job starts about now; its time limit runs from then.
            job.start = float(j.start_time) if running and j.start_time else now
            job.cores_pn = max(1, j.cpus // len(names))
            job.placement = [self.nodes[x] for x in names]
            use = _Usage(fp, job, names, held_g, held_c, j)
            self._usage[j.job_id] = use
            # Its owner's fair share counts what it holds, whoever started it, until it
            # is gone; a placed job waiting for something else holds nothing.
            if running or held_g or held_c:
                self.sched.charge(job, job.placement, now)
            else:
                self.sched.discharge(job, now)
            harm = self.sched.policy.harm
            if harm is not None and running and not job.is_dnn:
                harm.started(job, now)  # its bucket, from its start (Slurm's record)
            for x in names:
                self._held[x][0] += held_g
                self._held[x][1] += held_c
                self._on[x][job.idx] = job
                changed.add(x)
        if gone is None:
            dropped = [k for k in self._usage if k not in seen]
        else:  # changed jobs no longer running or placed, and those Slurm forgot
            dropped = [j.job_id for j in sjobs if j.job_id not in seen and j.job_id in usage]
            dropped += [k for k in gone if k in usage]
        for jid in dropped:
            self._drop_usage(jid, changed)
        # Only nodes whose jobs or Slurm record changed: every other node's free
        # capacity stands (in index order, as the dirty marks are taken).
        nodes = self.nodes
        for name in sorted(changed.union(self._moved).intersection(nodes),
                           key=lambda x: nodes[x].idx):  # fmt: skip
            node = nodes[name]
            sn = self._slurm_nodes[name]
            held = self._held[name]
            g = max(0, sn.gpus - sn.gpus_used - held[0])
            c = min(sn.cpus, max(0, sn.cpus - sn.cpus_alloc - held[1]))
            if name in changed:
                jobs = list(self._on[name].values())
                cpu_c = sum(jb.cores_pn for jb in jobs if not jb.is_dnn)
            else:
                jobs, cpu_c = [], node.cpu_job_cores
            if (node.free_gpus, node.free_cores, node.cpu_job_cores) == (g, c, cpu_c) and (
                name not in changed
                or (len(jobs) == len(node.jobs) and all(jb in node.jobs for jb in jobs))
            ):
                continue
            grew = (
                g > node.free_gpus
                or c > node.free_cores
                or c + cpu_c > (node.free_cores + node.cpu_job_cores)
            )
            node.free_gpus, node.free_cores, node.cpu_job_cores = g, c, cpu_c
            if name in changed:
                node.jobs = dict.fromkeys(jobs)
                node.pcie_heavy = [jb for jb in jobs if jb.pcie_heavy]
            self.sched.node_capacity_changed(node, grew)

    def _drop_usage(self, jid: int, changed: set[str]) -> None:
        use = self._usage.pop(jid)
        self.sched.discharge(use.job, self._now)
        harm = self.sched.policy.harm
        if harm is not None:
            harm.stopped(use.job, self._now)  # ended, unless the controller requeued it
        for x in use.names:
            if x in self._held:
                self._held[x][0] -= use.held_g
                self._held[x][1] -= use.held_c
                self._on[x].pop(use.job.idx, None)
                changed.add(x)

    def _let_go(self, job: Job) -> None:
        """A Job this view no longer stands for: out of the queue and of the shares (a
        placement Slurm did not take leaves it charged by the cycle's booking)."""
        self.sched.withdraw(job)
        self.sched.discharge(job, self._now)

    def _sync_queue(self, ready: Iterable[SlurmJob], dropped: Sequence[int] | None = None) -> None:
        """Queue the ``ready`` jobs not queued yet. ``dropped`` None: ``ready`` are all
        the ready jobs, any other leaves the queue; else ``ready`` are those new or to be
        looked at again and ``dropped`` the ids no longer ready."""
        want: dict[int, Job] = {}
        for sj in ready:
            job = self.job(sj)
            want[sj.job_id] = job
            if sj.job_id in self.never or self.sched.is_queued(job):
                continue
            job.start, job.placement = -1.0, []
            job.preemptions = sj.restarts
            self.sched.discharge(job, self._now)  # booked by a placement Slurm did not take
            never = self.sched.submit(job)
            if never is not None:
                self.never[sj.job_id] = never
            else:
                self.queued[sj.job_id] = job
        if dropped is None:
            out = [j for j in self.queued if j not in want]
            self.never = {jid: why for jid, why in self.never.items() if jid in want}
        else:
            out = [j for j in dropped if j in self.queued]
            for jid in dropped:
                self.never.pop(jid, None)
        for jid in out:
            job = self.queued.pop(jid)
            if jid in self._usage:  # it runs, or is placed: no longer queued, still charged
                self.sched.withdraw(job)
            else:
                self._let_go(job)
