"""The node agent: the simulator's policies, driven by real processes.

Each control period the agent
1. reaps jobs that ended (their shim left an exit status) and acts on cancels;
2. starts queued jobs by running the one scheduling cycle (``coda.cycle``) the
   simulator and the Slurm controller run: arrays, queue order, core count (the
   allocator's learned value for DNN jobs), backfill from users' time limits,
   filters and reclaim; every job left waiting gets its reason in the database;
3. turns each job's progress record into throughput samples, one per window,
   and feeds them to the allocator (``JobControl``), applying its ``SetCores`` as
   cpuset changes;
4. ticks the contention eliminator (``NodeControl``) on the node and applies its
   ``SetQuota`` as CFS quota (and MBA where resctrl has it);
5. writes what changed to SQLite, the decision log and the metrics file.

Jobs run under a shim in their own cgroup and session, so they outlive the
agent; a restarted agent re-adopts them from the database, the shim's pid file
and the cgroup (``start``). Policies see plain ``Job``/``Node`` objects and a
clock; they never learn that they run on a real node.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coda.control import ControlLoop
from coda.cycle import Scheduler, Start
from coda.policy import PolicyOptions, make_policy
from coda.policy.allocator import free_room
from coda.policy.framework import (
    Action,
    ExplainsSearch,
    LearnsProfiles,
    Policy,
    SetCores,
    SetQuota,
    learner_of,
    search_of,
)
from coda.policy.state import Job, Node
from coda.runtime import supervisor
from coda.runtime.actions import Actuator
from coda.runtime.adoption import Adoption
from coda.runtime.cgroups import CgroupDriver, CgroupError, format_cpus
from coda.runtime.learned_store import LEARNED_KEY as LEARNED_KEY  # where bench/ reads it
from coda.runtime.learned_store import LearnedStore
from coda.runtime.limits import PURGE_BATCH, PURGE_EVERY_S
from coda.runtime.managed import AgentConfig as AgentConfig
from coda.runtime.managed import Managed as Managed
from coda.runtime.sampler import Sampler
from coda.runtime.statedir import PUBLIC_DIR_MODE, run_dir_of, secure_dir
from coda.runtime.store import JobRow, Store
from coda.runtime.supervisor import SHIM_PATH, quietly, send_signal, uid_of  # noqa: F401
from coda.workload.perf import ProfileSet, load_profile_set

PARENT_MADE_KEY = "cgroup_parent_made"


class NodeAgent:
    """Drives one node. ``tick()`` is one control period; ``run()`` loops."""

    def __init__(
        self,
        store: Store,
        cgroups: CgroupDriver,
        state_dir: str | os.PathLike[str],
        config: AgentConfig | None = None,
        resctrl: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
        node_name: str | None = None,
        run_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.store = store
        self.cg = cgroups
        self.state_dir = Path(state_dir)
        # Public (0755): the control socket and the jobs' progress files, which jobs
        # running as their submitters must reach. The state directory stays 0700.
        self.run_dir = Path(run_dir) if run_dir is not None else run_dir_of(self.state_dir)
        self.progress_dir = self.run_dir / "progress"
        self._parent_lock: int | None = None
        self.config = config or AgentConfig()
        self.resctrl = (
            resctrl if resctrl is not None and getattr(resctrl, "available", False) else None
        )
        self.clock = clock
        self.wall = wall
        self.log = log or (lambda msg: None)
        # Users' time limits (`coda submit --time`) are what backfill knows here.
        self.policy: Policy = make_policy(
            self.config.policy,
            PolicyOptions(
                estimates="time-limits", reclaim=self.config.reclaim, tune=self.config.tune
            ),
        )
        # The control loop every body runs: samples and ticks in, actions (with the
        # component that decided and why) out, through ``carry_out``.
        self.loop = ControlLoop(self.policy, self)
        self.actuator = Actuator(self, cgroups, self.resctrl, self.config, self.log)
        self.adoption = Adoption(self, cgroups, self.actuator, clock, wall, self.log)
        self.sampler = Sampler(self, self.config, self.policy, self.loop)
        self.learned = LearnedStore(store, self.learner, self.log)
        self.sched: Scheduler | None = None  # made in start(), once the node is known
        self._reasons: dict[int, str] = {}  # wait reasons as last written, by job id
        self._next_purge = -math.inf
        self.node_name = node_name or os.uname().nodename
        self.node: Node | None = None
        self.running: dict[int, Managed] = {}
        self._queued_jobs: dict[int, Job] = {}
        self._free_cpus: set[int] = set()
        self._free_gpus: set[int] = set()
        self.ticks = 0
        self.counters: dict[str, int] = {}
        self.last_tick_s = 0.0
        self.lock = threading.Lock()

    def carry_out(
        self, actions: list[Action], now: float, component: str, reason: dict[str, Any] | None
    ) -> None:
        """The control loop's actions on this node's jobs (``ControlSink``)."""
        self.actuator.carry_out(actions, now, component, reason=reason)

    # ------------------------------------------------------------ lifecycle
    @property
    def learner(self) -> LearnsProfiles | None:
        """The job control's learned profiles, which the node keeps across restarts."""
        return learner_of(self.policy.job_control)

    @property
    def search(self) -> ExplainsSearch | None:
        """The job control's account of each job's core search, where it gives one."""
        return search_of(self.policy.job_control)

    def start(self) -> None:
        """Set up the cgroup parent, the node, learned profiles; re-adopt running jobs."""
        parent = self.cg.parent_path()
        made = not parent.is_dir()
        self.cg.setup()
        self._lock_parent(parent)
        if made:
            self.store.set_meta(PARENT_MADE_KEY, str(parent))
        cpus = self.config.cpus if self.config.cpus is not None else self.cg.available_cpus()
        if not cpus:
            raise CgroupError("no CPUs available to manage")
        avail = set(self.cg.available_cpus())
        missing = sorted(set(cpus) - avail)
        if missing:
            raise CgroupError(f"CPUs {format_cpus(missing)} are not available to the cgroup parent")
        self.node = Node(0, self.node_name, self.config.gpus, len(cpus), 0, 0.0)
        self._free_cpus = set(cpus)
        self._free_gpus = set(range(self.config.gpus))
        self.policy.observe_cluster([self.node])
        self.sched = Scheduler(self.policy, [self.node])
        self.learned.load()
        secure_dir(self.state_dir / "jobs")
        secure_dir(self.run_dir, PUBLIC_DIR_MODE, "run directory")
        secure_dir(self.progress_dir, PUBLIC_DIR_MODE, "progress directory")
        self.adoption.adopt_all()
        self.remove_orphan_cgroups()
        self.store.set_meta(
            "agent",
            json.dumps(
                {
                    "pid": os.getpid(),
                    "node": self.node_name,
                    "cpus": format_cpus(cpus),
                    "gpus": self.config.gpus,
                    "policy": self.policy.name,
                    "period_s": self.config.period_s,
                    "keep_finished_s": self.config.limits.keep_finished_s,
                    "finished_per_user": self.config.limits.finished_per_user,
                    "started": self.wall(),
                }
            ),
        )

    def shutdown(self, stop_jobs: bool = False) -> None:
        """Leave the node. Jobs keep running (a later agent re-adopts them) unless
        ``stop_jobs``; throttled CPU jobs get their full quota back either way, since
        nobody would restore it; cgroups of ended jobs and an empty parent are removed."""
        now = self.clock()
        for m in list(self.running.values()):
            if stop_jobs:
                self._kill(m, signal.SIGKILL)
            elif m.job.quota < 1.0:
                self.actuator.carry_out(
                    [SetQuota(m.job, 1.0)], now, "agent", reason={"why": "agent leaving"}
                )
        if stop_jobs:
            deadline = time.monotonic() + 10
            while self.running and time.monotonic() < deadline:
                self._reap(now, final_state="cancelled")
                if self.running:
                    time.sleep(0.05)
        self._flush()
        self.learned.save()
        self.remove_orphan_cgroups()
        # The parent goes only if an agent of this state directory made it: another
        # agent's (or an operator's) parent stays, whatever is in it.
        made = self.store.meta(PARENT_MADE_KEY)
        if not self.running and made and made == str(self.cg.parent_path()):
            try:
                self.cg.teardown()
                self.store.set_meta(PARENT_MADE_KEY, "")
            except CgroupError as e:
                self.log(f"cgroup parent kept: {e}")
        self.release_parent()

    def _lock_parent(self, parent: Path) -> None:
        """One agent per cgroup parent: an exclusive flock on the parent group's own
        directory (the kernel drops it when the agent dies), whatever state directory
        each agent was given. Two agents on one parent would adopt, throttle and
        remove each other's job groups."""
        import fcntl

        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CgroupError(
                f"another agent manages cgroup parent {parent} (its lock is held): "
                "give this one another --cgroup-parent"
            ) from None
        self._parent_lock = fd

    def release_parent(self) -> None:
        if self._parent_lock is not None:
            os.close(self._parent_lock)
            self._parent_lock = None

    def run(
        self,
        should_stop: Callable[[], bool],
        idle: Callable[[float], None] = time.sleep,
        after_tick: Callable[[], None] | None = None,
    ) -> None:
        """Tick every period until ``should_stop()``; a slow tick does not pile up.
        ``idle(seconds)`` fills the time between ticks (a metrics server's ``wait`` may
        answer requests there; the daemons serve them from a thread instead);
        ``after_tick()`` follows each tick (the metrics file)."""
        period = self.config.period_s
        nxt = time.monotonic()
        while not should_stop():
            self.tick()
            if after_tick is not None:
                after_tick()
            nxt += period
            delay = nxt - time.monotonic()
            if delay < 0:
                nxt = time.monotonic()
                continue
            end = time.monotonic() + delay
            while not should_stop() and time.monotonic() < end:
                idle(min(0.1, max(0.0, end - time.monotonic())))

    # ----------------------------------------------------------------- tick
    def tick(self) -> None:
        with self.lock:  # a metrics scrape (another thread) sees whole ticks only
            t0 = time.perf_counter()
            now = self.clock()
            self.ticks += 1
            self._reap(now)
            self._cancels(now)
            self._time_limits(now)
            self._admit(now)
            self.sampler.sample(now)
            self.sampler.control(now)
            self._flush()
            self.last_tick_s = time.perf_counter() - t0

    # ------------------------------------------------------------ admission
    def _admit(self, now: float) -> None:
        """Queue new rows, drop vanished ones, run the cycle, record why jobs wait.

        The queue is read from an index (ids and cancel marks); only a row new to the
        agent is read, once, and without its spec (which is read when the job starts):
        a tick costs the same however big the queued specs are."""
        node, sched = self.node, self.sched
        assert node is not None and sched is not None
        index = self.store.queue_index()
        live = {rid for rid, _ in index}
        for rid in list(self._queued_jobs):
            if rid not in live:
                sched.withdraw(self._queued_jobs.pop(rid))
        for rid in [rid for rid in self._reasons if rid not in live]:
            del self._reasons[rid]
        for rid, cancel in index:
            if cancel:
                # Cancelled while running, then preempted (or its launch interrupted and
                # requeued): the cancel stands; it must not start again.
                self.store.update(rid, state="cancelled", end_t=self.wall(), message="cancelled")
                job = self._queued_jobs.pop(rid, None)
                if job is not None:
                    sched.withdraw(job)
                continue
            if rid in self._queued_jobs:
                continue
            r = self.store.queue_entry(rid)
            if r is None or r.state != "queued":
                continue
            job = self.job_from_row(r)
            never = sched.submit(job)
            if never is not None:
                self.store.update(
                    r.id,
                    state="failed",
                    end_t=self.wall(),
                    message=f"needs {r.gpus} GPUs / {r.cores} cores; node has "
                    f"{node.gpus} / {node.cores} ({never})",
                )
                continue
            self._queued_jobs[r.id] = job
        if sched.pending():
            sched.cycle(now, self)
        # Only reasons that changed are written (a row's update rewrites its whole spec).
        changed = {}
        for job, why in sched.waiting():
            text = str(why)
            if self._reasons.get(job.idx) != text:
                changed[job.idx] = self._reasons[job.idx] = text
        self.store.set_wait_reasons(changed)
        self._purge()

    def _purge(self) -> None:
        """Delete finished jobs past their keeping (time, or the per-user count), their
        decisions and job directories, at most PURGE_BATCH a pass; a pass every
        PURGE_EVERY_S seconds, or at once after a full one."""
        t = self.clock()
        if t < self._next_purge:
            return
        lim = self.config.limits
        before = self.wall() - lim.keep_finished_s
        ids = self.store.purge(before, lim.finished_per_user, PURGE_BATCH)
        n = self.store.purge_decisions(before, PURGE_BATCH)
        for jid in ids:
            if jid not in self.running:
                shutil.rmtree(self.job_dir(jid), ignore_errors=True)
        if ids:
            self.counters["agent:purged"] = self.counters.get("agent:purged", 0) + len(ids)
        full = len(ids) >= PURGE_BATCH or n >= PURGE_BATCH
        self._next_purge = t if full else t + PURGE_EVERY_S

    def bind(self, start: Start) -> bool:
        """The cycle's start: launch the job (the cycle has booked its cores). Its row,
        spec and all, is read now, once."""
        jid = start.job.idx
        r = self.store.job(jid)
        if r is None or r.state != "queued" or r.cancel:
            self._queued_jobs.pop(jid, None)
            return False
        ok = self._launch(r, start.job, start.cores_pn, self.clock())
        if not ok:
            self._queued_jobs.pop(jid, None)  # the next tick looks at its row again
        return ok

    def apply(self, action: Action) -> bool:
        """A reclaim action of the cycle (shrink or preempt a CPU job); False if it could
        not be carried out (a process that would not die, a cpuset write refused)."""
        job = action.job
        self.actuator.carry_out(
            [action], self.clock(), "reclaim", reason={"for": "a DNN job's start"}
        )
        if isinstance(action, SetCores):
            return bool(job.cores_pn == action.cores_pn)
        return not job.placement

    def job_from_row(self, r: JobRow) -> Job:
        model = r.model or r.name
        job = Job(
            r.id,
            f"{r.name}#{r.id}",
            r.submit_t,
            r.gpus,
            r.cores,
            0,
            1,
            float("inf"),
            model=model,
            # The tenant fair share shares between: its owner (no uid: the agent's own
            # user, as the row's run does), as in the Slurm controller.
            user=str(r.uid if r.uid is not None else os.geteuid()),
            time_limit=r.time_limit_s if r.time_limit_s is not None else math.inf,
            pcie_heavy=pcie_heavy(model, r.gpus) if r.gpus else False,
        )
        job.preemptions = r.preemptions
        return job

    def room(self, m: Managed) -> int:
        """How many more cores ``m`` could get now."""
        # Free cores only, as in the simulator: never cores CPU jobs hold (free_room).
        return free_room([self.node]) if self.node is not None else 0

    def cpus_to_add(self, m: Managed, k: int) -> list[int] | None:
        """``k`` more CPUs for a growing job, or None if it has not got the room."""
        return self._take_for(m, k) if self.room(m) >= k else None

    def _take_for(self, m: Managed, k: int) -> list[int]:
        return self.take_cpus(k, m.job.kind)

    def _hold(self, m: Managed, sign: int) -> None:
        """Book a job's CPUs and GPUs as taken (+1) or given back (-1) on the node, in
        the scheduler's ledger (a job the cycle started is booked already)."""
        node, sched = self.node, self.sched
        assert node is not None and sched is not None
        job = m.job
        if sign > 0:
            if not job.placement:  # adopted after a restart
                sched.occupy(job, [node], len(m.cpus), self.clock())
        else:
            if job.placement:
                sched.vacate(job, self.clock())
            self._free_cpus.update(m.cpus)
            self._free_gpus.update(m.gpu_ids)

    @property
    def free_cpus(self) -> set[int]:
        """The node's CPUs no job holds (the actuator gives back and takes from them)."""
        return self._free_cpus

    @property
    def free_gpus(self) -> set[int]:
        """The node's GPUs no job holds."""
        return self._free_gpus

    def remove_orphan_cgroups(self) -> None:
        """Ended jobs' groups removed (the Slurm agent removes its own quota groups)."""
        self.adoption.remove_orphan_cgroups()

    def requeue(self, job_id: int, job: Job) -> None:
        """A preempted job queued again at once, as the simulator does: behind no one."""
        if self.sched is not None:
            self._queued_jobs[job_id] = job
            self.sched.requeue(job)

    def books_changed(self, grew: bool) -> None:
        """The node's free cores changed outside the ledger (a cpuset resize)."""
        if self.sched is not None and self.node is not None:
            self.sched.node_capacity_changed(self.node, grew)

    # -------------------------------------------------------- persistence
    def _flush(self) -> None:
        self.learned.save_if_changed()
        alloc = self.search
        dirty = [m for m in self.running.values() if m.dirty]
        if not dirty:
            return
        with self.store.tx():
            for m in dirty:
                ref = self.policy_reference(m.job)
                phase = (
                    "stalled"
                    if m.stalled
                    else (alloc.state(m.job) if alloc and m.controlled else "")
                )
                self.store.update(
                    m.row_id,
                    cpus=format_cpus(m.cpus),
                    quota=m.job.quota,
                    throughput=m.throughput,
                    reference=ref,
                    phase=phase,
                )
                m.dirty = False

    def policy_reference(self, job: Job) -> float | None:
        alloc = self.search
        return alloc.book.reference(job) if alloc is not None else None

    def decide(
        self, now: float, job_id: int | None, component: str, action: str, detail: dict[str, Any]
    ) -> None:
        self.counters[f"{component}:{action}"] = self.counters.get(f"{component}:{action}", 0) + 1
        detail = {"mono": round(now, 3), **detail}
        self.store.log_decision(self.wall(), job_id, component, action, detail)

    # The parts of the driver that live in modules of their own (one idea each).
    # supervisor.py
    finish = supervisor.finish
    _reap = supervisor._reap
    exit_code = supervisor.exit_code
    release = supervisor.release
    cgroup_pids = supervisor.cgroup_pids
    _cancels = supervisor._cancels
    _time_limits = supervisor._time_limits
    kill_until_gone = supervisor.kill_until_gone
    _kill = supervisor._kill
    read_job_progress = supervisor.read_job_progress
    progress_file = supervisor.progress_file
    _make_progress_file = supervisor._make_progress_file
    take_cpus = supervisor.take_cpus
    _launch = supervisor._launch
    job_dir = supervisor.job_dir
    _spawn = supervisor._spawn
    place = supervisor.place


def pcie_heavy(model: str, gpus: int) -> bool:
    """A model's PCIe class from the bundled profiles by name (False if unknown), so
    the PCIe score plugin sees on a real node what it sees in the simulator."""
    profiles = _profiles()
    if model not in profiles.models:
        return False
    return profiles.job_perf(model, max(1, gpus), 1).pcie_heavy


@functools.cache
def _profiles() -> ProfileSet:
    return load_profile_set("coda")
