"""The simulator's executor: it carries out what the scheduling cycle and the control
loops decide (starts, reclaims, core and quota changes) on the simulated cluster, and
the events that follow (arrivals, launches, finishes, preemptions)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from coda.cycle import InvariantError, Reason, Scheduler, Start
from coda.cycle import reasons as R
from coda.policy.framework import Action, Policy, Preempt, SetQuota
from coda.policy.state import DNN, Job, Node
from coda.sim.book_checks import check_nodes
from coda.sim.constants import EPS, LAUNCH
from coda.sim.controls import Controls
from coda.sim.gauges import Gauges
from coda.sim.kernel import EventKernel
from coda.sim.outcomes import JobOutcomes
from coda.sim.physics import SpeedModel, busy
from coda.workload.perf import Workload

_CYCLE = Reason(R.CYCLE)


class ClusterExecutor:
    """``limits``: each workload row's time limit (inf: none), or None for no limits.
    ``noise`` and ``rng``: the controls' measurement noise (``Controls``).
    ``check``: verify the books after every change (slow; for tests)."""

    def __init__(
        self,
        workload: Workload,
        policy: Policy,
        sched: Scheduler,
        kernel: EventKernel,
        speed: SpeedModel,
        gauges: Gauges,
        outcomes: JobOutcomes,
        *,
        submit: list[float],
        noise: float,
        rng: np.random.Generator,
        limits: list[float] | None,
        start_delay: float,
        fixed_grants: bool,
        check: bool,
    ) -> None:
        self.workload = workload
        self.policy = policy
        self.sched = sched
        self.kernel = kernel
        self.speed = speed
        self.gauges = gauges
        self.outcomes = outcomes
        self.submit = submit  # the simulator's: each workload row's arrival
        self.limits = limits
        self.start_delay = start_delay
        self.fixed_grants = fixed_grants
        self.check = check
        self.busy: dict[Node, None] = {}  # nodes with at least one job
        # A filter reads the nodes' memory traffic: a node whose bus calms is retried.
        self.reads_bandwidth = any(getattr(f, "reads_bandwidth", False) for f in policy.filters)
        # When the loop's job and node controls run, and the control loop every body
        # runs, with this executor as its sink.
        self.controls = Controls(policy, kernel, speed, noise, rng, self, check)
        self.loop = self.controls.loop

    def carry_out(
        self, actions: list[Action], now: float, component: str, reason: dict[str, Any] | None
    ) -> None:
        """The control loop's actions, in order (the reason is not kept here)."""
        for action in actions:
            self.apply(action)

    def check_nodes(self, nodes: list[Node]) -> None:
        check_nodes(nodes, self.sched.grant_pn, self.fixed_grants)

    # -------------------------------------------------------------- arrivals
    def arrive(self, i: int) -> Job | None:
        w = self.workload
        jobs = w.jobs
        gpus = int(jobs.gpus[i])
        nodes = int(jobs.nodes[i])
        model = None
        perf = None
        if gpus > 0:
            model = w.model_names[int(w.model[i])]
            perf = w.profiles.job_perf(model, -(-gpus // nodes), nodes)
        job = Job(
            i,
            jobs.ids[i],
            self.submit[i],
            gpus,
            int(jobs.cores[i]),
            int(jobs.mem_mib[i]),
            nodes,
            float(w.work[i]),
            model=model,
            perf=perf,
            bw_per_core=float(w.cpu_bw_per_core[i]),
            time_limit=self.limits[i] if self.limits is not None else math.inf,
            user=self.outcomes.users[i],
            checkpoints=bool(w.checkpoints[i]),
        )
        never = self.sched.submit(job)
        if never is not None:
            self.outcomes.unschedulable[i] = True
            self.outcomes.wait_reason[i] = never.token
            return None
        if not job.is_dnn:  # alone, with the cores it asked: its work, after its launch
            self.outcomes.alone_s[i] = job.work + self.start_delay
        return job

    # ------------------------------------------------------- start / finish
    def bind(self, start: Start) -> bool:
        """Carry out a start the cycle booked: meters, speeds, the job control."""
        job, nodes, cores_pn = start.job, list(start.nodes), start.cores_pn
        now = self.kernel.now
        out = self.outcomes
        g = self.gauges
        speed = self.speed
        wait = job.wait
        # Its reason, if it waited at all (a job refused and started at one instant did
        # not); one never looked at before this cycle waited for the cycle.
        if isinstance(wait, Reason) and now > out.requeued_at.get(job, job.submit):
            out.wait_reason[job.idx] = _CYCLE.token if wait.code == R.NEW else wait.token
        job.last_update = now
        # Its first throughput window opens when it begins to work.
        job.sample_t = now + self.start_delay
        job.sample_work = job.work - job.remaining
        job.works_from = now + self.start_delay
        if self.start_delay > 0.0:
            speed.launching[job] = job.works_from
            g.gpu_launching += job.gpus
            self.kernel.push(job.works_from, LAUNCH, job, 0)
        if speed.checkpoints and not job.is_dnn:
            speed.ckpt[job] = (now, job.work - job.remaining)  # (last checkpoint, work done)
        g.count[f"{job.kind}_running"] += 1
        g.running += 1
        if math.isnan(out.start[job.idx]):
            out.start[job.idx] = now
            out.waited[job.idx] = now - job.submit
        else:  # restarted after a preemption
            out.waited[job.idx] += now - out.requeued_at.pop(job, now)
        out.granted[job.idx] = cores_pn * job.nodes
        out.settled[job.idx] = cores_pn * job.nodes
        job.bw_pn = speed.bw_demand(job)
        for node in nodes:
            node.bw_used += job.bw_pn
            self.busy[node] = None
        g.gpu_alloc += job.gpus
        if job.kind == DNN:
            g.gpu_busy_full += job.gpus * busy(job, 1.0)
        g.cores_alloc += cores_pn * job.nodes
        g.cores_useful += speed.useful_cores(job)
        speed.refresh(nodes)
        out.note_cpu_spells(job, now)
        if job.is_dnn:
            self.loop.start(job, now)
        for node in nodes:
            self.controls.rewatch(node)
        if self.check:
            self.check_nodes(nodes)
        return True

    def release(self, job: Job) -> list[Node]:
        """Take a running job off its nodes (finish or preemption)."""
        g = self.gauges
        speed = self.speed
        g.gpu_eff -= job.gpus * job.speed
        if job.kind == DNN:
            g.gpu_busy -= job.gpus * busy(job, job.speed)
            g.gpu_busy_base -= job.gpus * busy(job, job.core_speed_now)
            g.gpu_busy_full -= job.gpus * busy(job, 1.0)
        g.gpu_base -= job.gpus * job.core_speed_now
        job.speed = 0.0
        job.core_speed_now = 0.0
        job.version += 1  # retires its pending finish event
        g.gpu_alloc -= job.gpus
        g.cores_useful -= speed.useful_cores(job)
        if self.fixed_grants:  # it leaves with what it was granted
            self.sched.restore_grant(job)
        g.cores_alloc -= job.cores_pn * job.nodes
        g.count[f"{job.kind}_running"] -= 1
        g.running -= 1
        speed.close_episode(job, finished=True)
        speed.ckpt.pop(job, None)
        if speed.launching.pop(job, None) is not None:
            g.gpu_launching -= job.gpus
        nodes = self.sched.vacate(job, self.kernel.now)
        self.outcomes.note_cpu_spells(job, self.kernel.now)
        for node in nodes:
            node.bw_used -= job.bw_pn
            if not node.jobs:
                del self.busy[node]
                node.bw_used = 0.0  # drop accumulated float error
        return nodes

    def finish(self, job: Job) -> None:
        now = self.kernel.now
        out = self.outcomes
        self.speed.settle(job)
        if self.check and abs(job.remaining) > 1e-6 * max(1.0, job.work):
            raise InvariantError(f"{job} finished with {job.remaining} work left")
        out.work_done_error = max(out.work_done_error, abs(job.remaining) / max(job.work, EPS))
        job.end = now
        out.end[job.idx] = now
        nodes = self.release(job)
        if job.is_dnn:
            self.loop.finish(job, now)
        self.speed.refresh(nodes)
        for node in nodes:
            self.controls.rewatch(node)
        if self.check:
            self.check_nodes(nodes)

    def launch(self, job: Job, t: float) -> None:
        """A started job's delay is over: it begins to work (unless it was stopped, or
        stopped and started again, meanwhile: then this event is not its launch)."""
        speed = self.speed
        if speed.launching.get(job) != t:
            return
        self.kernel.events += 1
        del speed.launching[job]
        self.gauges.gpu_launching -= job.gpus
        self.gauges.cores_useful += speed.useful_cores(job)
        speed.rebandwidth(job)  # it draws bandwidth from now (also replans reservations)

    def preempt(self, job: Job) -> None:
        """Stop a CPU job and queue it again; it keeps the work up to its last
        checkpoint (one every ``policy.checkpoint_s`` seconds of its run; none for a
        job that does not checkpoint)."""
        if job.is_dnn:
            raise ValueError(f"only CPU jobs are preempted, not {job}")
        now = self.kernel.now
        out = self.outcomes
        self.speed.settle(job)
        done = job.work - job.remaining
        lost = done - self.speed.ckpt.pop(job, (now, done))[1]
        job.remaining += lost
        out.lost_core_s += lost * job.cores_pn_req * job.nodes
        out.job_lost_core_s[job.idx] += lost * job.cores_pn_req * job.nodes
        nodes = self.release(job)
        job.preemptions += 1
        out.preempted[job.idx] += 1
        out.requeued_at[job] = now
        self.sched.requeue(job)
        self.speed.refresh(nodes)
        for node in nodes:
            self.controls.rewatch(node)

    def rebandwidth(self, job: Job) -> None:
        """The job's draw changed with its cores or quota: its nodes' buses with it, and
        a node whose bus calmed is retried for the jobs queued on it."""
        if not self.reads_bandwidth:
            self.speed.rebandwidth(job)
            return
        before = [n.bw_used for n in job.placement]
        self.speed.rebandwidth(job)
        for node, used in zip(job.placement, before, strict=True):
            if node.bw_used < used:
                self.sched.node_eased(node)

    def apply(self, action: Action) -> bool:
        """Apply a control action; returns True if it freed cores."""
        job = action.job
        if not job.running:
            return False
        if isinstance(action, Preempt):
            self.preempt(job)
            return True
        g = self.gauges
        speed = self.speed
        if isinstance(action, SetQuota):
            if not 0.0 <= action.quota <= 1.0:
                raise ValueError(f"quota must be within [0, 1], got {action.quota}")
            if action.quota < job.quota:
                speed.detected(job)
            g.cores_useful -= speed.useful_cores(job)
            job.quota = action.quota
            self.outcomes.note_cpu_spells(job, self.kernel.now)
            g.cores_useful += speed.useful_cores(job)
            self.rebandwidth(job)
            return False
        new = int(action.cores_pn)
        old = job.cores_pn
        useful = speed.useful_cores(job)
        # Growth comes from free cores only (docs/policies.md, "Probes use free cores
        # only"): CPU jobs' cores are reclaimed for a DNN job's start, never for a probe
        # or later growth. A refused growth is no change; the allocator caps. Under
        # fixed grants the books keep the grant: nothing is freed, nothing is taken.
        resize = self.sched.resize_within_grant if self.fixed_grants else self.sched.resize
        if not resize(job, new):
            return False
        delta = new - old
        self.outcomes.settled[job.idx] = new * job.nodes
        self.outcomes.note_cpu_spells(job, self.kernel.now)
        if delta < 0 and not job.is_dnn:
            job.shrinks += 1
            self.outcomes.shrunk[job.idx] += 1
        g.cores_useful -= useful
        if not self.fixed_grants:
            g.cores_alloc += delta * job.nodes
        g.cores_useful += speed.useful_cores(job)
        self.rebandwidth(job)
        if self.check:
            self.check_nodes(job.placement)
        return delta < 0 and not self.fixed_grants
