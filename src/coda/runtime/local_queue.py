"""The stand-alone node agent's job source: the node's own queue in the state database.

Each period it reaps jobs that ended, acts on cancels and time limits, and starts
queued jobs by running the one scheduling cycle (``coda.cycle``) the simulator and the
Slurm controller run: arrays, queue order, core count (the allocator's learned value
for DNN jobs), backfill from users' time limits, filters and reclaim. Every job left
waiting gets its reason in the database. The jobs run under the ``Supervisor``; a
restarted agent re-adopts them (``Adoption``)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from coda.cycle import Scheduler, Start
from coda.policy.allocator import free_room
from coda.policy.framework import Action, SetCores
from coda.policy.state import Job, Node
from coda.runtime.adoption import Adoption
from coda.runtime.agent import NodeAgent
from coda.runtime.cgroup_parent import CgroupParent
from coda.runtime.cgroups import CgroupDriver, CgroupError, format_cpus
from coda.runtime.job_source import AgentHost
from coda.runtime.limits import COMPACT_PAGES, PURGE_BATCH, PURGE_EVERY_S, PURGE_PASS_S
from coda.runtime.log_quota import LogQuota
from coda.runtime.managed import AgentConfig, Managed
from coda.runtime.processes import quietly
from coda.runtime.progress import Progress
from coda.runtime.resctrl import ResctrlControl
from coda.runtime.row_job import job_of
from coda.runtime.statedir import PUBLIC_DIR_MODE, run_dir_of, secure_dir
from coda.runtime.store import Store
from coda.runtime.supervisor import Supervisor
from coda.runtime.suspensions import Suspensions


class LocalQueue:
    """The node's queue, run by the scheduling cycle, its jobs under the supervisor."""

    preempts = True

    def __init__(
        self, host: AgentHost, cgroups: CgroupDriver, run_dir: str | os.PathLike[str] | None
    ) -> None:
        self.host = host
        self.cg = cgroups
        # Public (0755): the control socket and the jobs' progress files, which jobs
        # running as their submitters must reach. The state directory stays 0700.
        self.run_dir = Path(run_dir) if run_dir is not None else run_dir_of(host.state_dir)
        self.progress_dir = self.run_dir / "progress"
        self.parent = CgroupParent(cgroups, host.store, host.log)
        self.supervisor = Supervisor(
            host, host.store, cgroups, host.jobs, host.processes, host.decisions,
            host.config, host.state_dir, self.progress_dir, host.wall, host.log,
        )  # fmt: skip
        self.suspensions = Suspensions(
            host, host.store, cgroups, host.actuator, host.jobs, host.processes,
            host.decisions, self.supervisor, host.wall, host.log,
        )  # fmt: skip
        self.adoption = Adoption(
            host, host.store, cgroups, host.jobs, self.supervisor, host.actuator,
            host.decisions, host.clock, host.wall, host.log,
        )  # fmt: skip
        self.node: Node | None = None
        self.cpus: list[int] = []
        self.sched: Scheduler | None = None  # made in resume(), once the policy saw the node
        self.queued: dict[int, Job] = {}  # jobs the scheduler holds, by id
        self.reasons: dict[int, str] = {}  # wait reasons as last written, by job id
        self.next_purge = -math.inf
        self.purge_batch = PURGE_BATCH  # rows a pass, fitted to what a pass costs here
        self.log_quota = LogQuota(self.supervisor.job_dir)

    # ------------------------------------------------------------ lifecycle
    def open(self) -> Node:
        """Take the cgroup parent; the node is the CPUs configured (or all the parent
        has) and the GPUs declared."""
        host = self.host
        self.parent.take()
        cfg = host.config
        cpus = cfg.cpus if cfg.cpus is not None else self.cg.available_cpus()
        if not cpus:
            raise CgroupError("no CPUs available to manage")
        missing = sorted(set(cpus) - set(self.cg.available_cpus()))
        if missing:
            raise CgroupError(f"CPUs {format_cpus(missing)} are not available to the cgroup parent")
        self.cpus = list(cpus)
        self.node = Node(0, host.node_name, cfg.gpus, len(cpus), 0, 0.0)
        host.jobs.reset(cpus, cfg.gpus)
        return self.node

    def resume(self, now: float) -> None:
        """The scheduler made; jobs of the database re-adopted; the agent's record."""
        host, node = self.host, self.node
        assert node is not None
        self.sched = Scheduler(host.policy, [node])
        secure_dir(host.state_dir / "jobs")
        secure_dir(self.run_dir, PUBLIC_DIR_MODE, "run directory")
        secure_dir(self.progress_dir, PUBLIC_DIR_MODE, "progress directory")
        self.adoption.adopt_all()
        for r in host.store.jobs(("suspended",)):
            self.suspensions.adopt(r)
        self.adoption.remove_orphan_cgroups()
        cfg = host.config
        record = {
            "pid": os.getpid(),
            "node": host.node_name,
            "cpus": format_cpus(self.cpus),
            "gpus": cfg.gpus,
            "policy": host.policy.name,
            "period_s": cfg.period_s,
            "keep_finished_s": cfg.limits.keep_finished_s,
            "finished_per_user": cfg.limits.finished_per_user,
            "started": host.wall(),
        }
        host.store.set_meta("agent", json.dumps(record))

    def intake(self, now: float) -> None:
        self.supervisor.reap(now)
        self.suspensions.reap()
        if self._warned_done(now):
            self.books_changed(grew=True)  # the cycle asks again: the preemption completes
        self.supervisor.cancels(now)
        self.supervisor.time_limits(now)
        self.admit(now)
        self.purge()

    def _warned_done(self, now: float, stopped: bool = True) -> list[Managed]:
        """Jobs told to checkpoint for a preemption whose grace is over, or (with
        ``stopped``) that have stopped; never those being cancelled or stopped at their
        limit."""
        host = self.host
        grace = host.config.kill_grace_s
        return [
            m
            for m in host.jobs.running.values()
            if m.warned_at is not None
            and m.kill_at is None
            and (now >= m.warned_at + grace or (stopped and not host.processes.pids(m)))
        ]

    def after_control(self, now: float) -> None:
        """Requeue each job told to checkpoint whose grace is over and that the cycle
        did not take back itself (the DNN job that asked went elsewhere): a job told to
        stop does not run on as though never told. One that stopped early waits for its
        grace to end here: the cycle takes it back first where the DNN job still waits
        (intake asks it to look), so the cores go to that job, not to the requeued one.
        Otherwise nothing: the database rows the agent writes are this queue's whole
        report."""
        for m in self._warned_done(now, stopped=False):
            self.host.actuator.preempt(m, now, "agent", {"after": "checkpoint warning"})

    def leave(self, stop_jobs: bool, now: float) -> None:
        """With ``stop_jobs``, SIGKILL every job and wait (10 s at most) for them to end
        as cancelled; without, they keep running (suspended ones frozen) for a later agent
        to re-adopt."""
        if not stop_jobs:
            return
        self.suspensions.end_all("cancelled", "stopped with the agent")
        jobs = self.host.jobs
        for m in list(jobs.running.values()):
            self.host.processes.signal(m, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while jobs.running and time.monotonic() < deadline:
            self.supervisor.reap(now, final_state="cancelled")
            if jobs.running:
                time.sleep(0.05)

    def close(self) -> None:
        self.adoption.remove_orphan_cgroups()
        self.parent.leave(empty=not self.host.jobs.running)

    # ------------------------------------------------------------ admission
    def admit(self, now: float) -> None:
        """Queue new rows, drop vanished ones, run the cycle, record why jobs wait.

        The queue is read from an index (ids and cancel marks); only a row new to the
        agent is read, once, and without its spec (which is read when the job starts):
        a tick costs the same however big the queued specs are."""
        node, sched, store = self.node, self.sched, self.host.store
        assert node is not None and sched is not None
        index = store.queue_index()
        live = {rid for rid, _ in index}
        for rid in list(self.queued):
            if rid not in live:
                sched.withdraw(self.queued.pop(rid))
        for rid in [rid for rid in self.reasons if rid not in live]:
            del self.reasons[rid]
        for rid, cancel in index:
            if cancel:
                # Cancelled while running, then preempted (or its launch interrupted and
                # requeued): the cancel stands; it must not start again.
                if rid in self.host.jobs.suspended:
                    self.suspensions.end(rid, "cancelled", "cancelled")
                else:
                    store.update(
                        rid, state="cancelled", end_t=self.host.wall(), message="cancelled"
                    )
                job = self.queued.pop(rid, None)
                if job is not None:
                    sched.withdraw(job)
                continue
            if rid in self.queued:
                continue
            r = store.queue_entry(rid)
            if r is None or r.state not in ("queued", "suspended"):
                continue
            job = job_of(r)
            never = sched.submit(job)
            if never is not None:
                why = (
                    f"needs {r.gpus} GPUs / {r.cores} cores; node has "
                    f"{node.gpus} / {node.cores} ({never})"
                )
                if rid in self.host.jobs.suspended:  # after a restart with fewer CPUs
                    self.suspensions.end(rid, "failed", why)
                else:
                    store.update(r.id, state="failed", end_t=self.host.wall(), message=why)
                continue
            self.queued[r.id] = job
        harm = self.host.policy.harm
        if harm is not None:
            harm.advance(now)  # a bucket that allows more by now makes the cycle due
        if sched.pending():
            sched.cycle(now, self)
        # Only reasons that changed are written (a row's update rewrites its whole spec).
        changed = {}
        for job, reason in sched.waiting():
            text = str(reason)
            if self.reasons.get(job.idx) != text:
                changed[job.idx] = self.reasons[job.idx] = text
        store.set_wait_reasons(changed)

    def purge(self) -> None:
        """Delete finished jobs past their keeping (time, or the per-user count), their
        decisions and job directories, at most PURGE_BATCH a pass; a pass every
        PURGE_EVERY_S seconds, or at once after a full one."""
        host = self.host
        t = host.clock()
        if t < self.next_purge:
            return
        lim = host.config.limits
        before = host.wall() - lim.keep_finished_s
        t0 = time.perf_counter()
        batch = self.purge_batch
        ids = host.store.purge(before, lim.finished_per_user, batch)
        n = host.store.purge_decisions(before, batch)
        if ids or n:
            host.store.compact(COMPACT_PAGES)
        # A pass that took long is made smaller next time, a quick one bigger again:
        # a purge never makes a tick long, whatever the disk.
        took = time.perf_counter() - t0
        if took > PURGE_PASS_S:
            self.purge_batch = max(10, batch // 2)
        elif took < PURGE_PASS_S / 4:
            self.purge_batch = min(PURGE_BATCH, batch * 2)
        # Users past their logs' share, once a minute (not counted in the pass's cost).
        gone = set(ids)
        too_much = [j for j in self.log_quota.over(host.store, lim.user_log_bytes, t)
                    if j not in gone][:batch]  # fmt: skip
        host.store.delete_finished(too_much)
        ids = [*ids, *too_much]
        for jid in ids:
            if jid not in host.jobs.running:
                shutil.rmtree(self.supervisor.job_dir(jid), ignore_errors=True)
        if ids:
            host.decisions.count("agent:purged", len(ids))
        full = len(ids) >= batch or n >= batch
        self.next_purge = t if full else t + PURGE_EVERY_S

    # ------------------------------------------------- the cycle's executor
    def bind(self, start: Start) -> bool:
        """The cycle's start: launch the job (the cycle has booked its cores). Its row,
        spec and all, is read now, once."""
        jid = start.job.idx
        if jid in self.host.jobs.suspended:
            self.queued.pop(jid, None)
            row = self.host.store.job(jid)
            if row is None or row.cancel or row.state != "suspended":
                return False  # cancelled since the queue was read: admit ends it
            return self.suspensions.resume(jid, start.job, start.cores_pn, self.host.clock())
        r = self.host.store.job(jid)
        ok = False
        if r is not None and r.state == "queued" and not r.cancel:
            ok = self.supervisor.launch(r, start.job, start.cores_pn, self.host.clock())
        # Started, or failed (its row says why), or claimed by nobody: the next tick
        # looks at its row again either way.
        self.queued.pop(jid, None)
        return ok

    def apply(self, action: Action) -> bool:
        """A reclaim action of the cycle (shrink or preempt a CPU job); False if it could
        not be carried out (a process that would not die, a cpuset write refused)."""
        job = action.job
        self.host.actuator.carry_out(
            [action], self.host.clock(), "reclaim", reason={"for": "a DNN job's start"}
        )
        if isinstance(action, SetCores):
            # Its cpuset was narrowed outside the node book: its bucket learns it here.
            harm = self.host.policy.harm
            if harm is not None:
                harm.changed(job)
            return bool(job.cores_pn == action.cores_pn)
        return not job.placement

    # ------------------------------------------------------------ books
    def room(self, m: Managed) -> int:
        # Free cores only, as in the simulator: never cores CPU jobs hold (free_room).
        return free_room([self.node]) if self.node is not None else 0

    def take(self, m: Managed, k: int) -> list[int]:
        return self.host.jobs.take_cpus(k, m.job.kind)

    def hold(self, m: Managed, sign: int) -> None:
        """In the scheduler's ledger (a job the cycle started is booked already; one
        adopted after a restart is booked here)."""
        node, sched = self.node, self.sched
        assert node is not None and sched is not None
        job = m.job
        if sign > 0:
            if not job.placement:
                sched.occupy(job, [node], len(m.cpus), self.host.clock())
        else:
            if job.placement:
                sched.vacate(job, self.host.clock())
            self.host.jobs.give_back(m.cpus, m.gpu_ids)

    def books_changed(self, grew: bool) -> None:
        if self.sched is not None and self.node is not None:
            self.sched.node_capacity_changed(self.node, grew)

    def freeze(self, m: Managed) -> str | None:
        """Freeze and wait (1 s at most) for the kernel to say frozen: a task stuck in
        a system call may take a moment, and the cores go to a DNN job at once. One not
        frozen by then is thawed, and requeued as without suspension."""
        try:
            self.cg.freeze(m.cgroup)
            deadline = time.monotonic() + 1.0
            while not self.cg.frozen(m.cgroup):
                if time.monotonic() >= deadline:
                    self.cg.thaw(m.cgroup)
                    return "not frozen within 1 s"
                time.sleep(0.01)
        except CgroupError as e:
            quietly(lambda: self.cg.thaw(m.cgroup))
            return str(e)
        return None

    def bus_eased(self) -> None:
        if self.sched is not None and self.node is not None:
            self.sched.node_eased(self.node)

    def requeue(self, job_id: int, job: Job) -> None:
        """A preempted job queued again at once, as the simulator does: behind no one."""
        if self.sched is not None:
            self.queued[job_id] = job
            self.sched.requeue(job)

    def read_progress(self, m: Managed) -> Progress | None:
        return self.supervisor.read_progress(m)


def local_agent(
    store: Store,
    cgroups: CgroupDriver,
    state_dir: str | os.PathLike[str],
    config: AgentConfig | None = None,
    resctrl: ResctrlControl | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    log: Callable[[str], None] | None = None,
    node_name: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
) -> NodeAgent[LocalQueue]:
    """A node agent for the node's own queue, its job groups under ``cgroups``'s parent."""

    def source(host: AgentHost) -> LocalQueue:
        return LocalQueue(host, cgroups, run_dir)

    return NodeAgent(store, cgroups, state_dir, source, config, resctrl, clock, wall, log,
                     node_name)  # fmt: skip
