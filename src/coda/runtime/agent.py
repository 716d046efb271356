"""The node agent: the simulator's policies, driven by real processes.

Each control period the agent
1. asks its job source (``JobSource``) what changed: the node's own queue
   (``LocalQueue``: jobs reaped, cancels and time limits acted on, queued jobs
   started by the one scheduling cycle) or Slurm's jobs (``SlurmJobs``);
2. turns each job's progress record into throughput samples, one per window, and
   runs the control loop every body runs (``coda.control.ControlLoop``): the
   allocator's ``SetCores`` become cpuset changes, the eliminator's ``SetQuota`` CFS
   quota (and MBA where resctrl has it), each carried out with its reason;
3. writes what changed to SQLite, the decision log and the metrics file.

It is built from collaborators that own their state: the job table, the sampler,
the actuator, the decision log, the learned profiles' store, and the source. Policies
see plain ``Job``/``Node`` objects and a clock; they never learn that they run on a
real node.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from coda.control import ControlLoop
from coda.policy import PolicyOptions, make_policy
from coda.policy.framework import (
    Action,
    ExplainsSearch,
    LearnsProfiles,
    Policy,
    SetQuota,
    learner_of,
    search_of,
)
from coda.policy.state import Job, Node
from coda.runtime.actions import Actuator
from coda.runtime.bus_meter import FIRST_SPAN_S, BusMeter
from coda.runtime.cgroups import CgroupError, JobGroups, format_cpus
from coda.runtime.decision_log import DecisionLog
from coda.runtime.job_source import AgentHost, JobSource
from coda.runtime.learned_store import LEARNED_KEY as LEARNED_KEY  # where bench/ reads it
from coda.runtime.learned_store import LearnedStore
from coda.runtime.managed import AgentConfig as AgentConfig
from coda.runtime.managed import Managed as Managed
from coda.runtime.node_ledger import NodeLedger
from coda.runtime.processes import JobProcesses, quietly
from coda.runtime.resctrl import NoResctrl, ResctrlControl
from coda.runtime.sampler import Sampler
from coda.runtime.store import Store

S = TypeVar("S", bound=JobSource)


class NodeAgent(Generic[S]):
    """Drives one node's jobs from one source. ``tick()`` is one control period;
    ``run()`` loops."""

    def __init__(
        self,
        store: Store,
        cgroups: JobGroups,
        state_dir: str | os.PathLike[str],
        source: Callable[[AgentHost], S],
        config: AgentConfig | None = None,
        resctrl: ResctrlControl | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
        node_name: str | None = None,
    ) -> None:
        self.store = store
        self.cg = cgroups
        self.state_dir = Path(state_dir)
        self.config = config or AgentConfig()
        self.resctrl: ResctrlControl = (
            resctrl if resctrl is not None and resctrl.available else NoResctrl()
        )
        self.clock = clock
        self.wall = wall
        self.log = log or (lambda msg: None)
        self.node_name = node_name or os.uname().nodename
        self.node: Node | None = None
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
        self.jobs = NodeLedger()
        self.decisions = DecisionLog(store, wall)
        self.processes = JobProcesses(cgroups)
        self.actuator = Actuator(self, cgroups, self.resctrl, self.config, self.log)
        self.bus = BusMeter(self.resctrl, min_span_s=self.config.period_s / 2)
        self.sampler = Sampler(self, self.config, self.policy, self.loop)
        self.learned = LearnedStore(store, self.learner, self.log)
        self.source: S = source(self)
        self.ticks = 0
        self.last_tick_s = 0.0
        self.lock = threading.Lock()

    @property
    def learner(self) -> LearnsProfiles | None:
        """The job control's learned profiles, which the node keeps across restarts."""
        return learner_of(self.policy.job_control)

    @property
    def search(self) -> ExplainsSearch | None:
        """The job control's account of each job's core search, where it gives one."""
        return search_of(self.policy.job_control)

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """The node from the source, learned profiles loaded, running jobs found again."""
        self.node = self.source.open()
        if self.config.bus_gbps > 0:
            if not self.bus.counting:
                self.log(
                    "no memory-traffic counters here (resctrl monitoring): the bus rule "
                    f"stands aside, whatever the bus's {self.config.bus_gbps:g} GB/s"
                )
            elif self.bus.read(self.clock()) is None:
                time.sleep(FIRST_SPAN_S)  # so that the first tick, at once, has a rate
        self.policy.observe_cluster([self.node])
        self.learned.load()
        self.source.resume(self.clock())

    def shutdown(self, stop_jobs: bool = False) -> None:
        """Leave the node. Jobs keep running (a later agent re-adopts them) unless
        ``stop_jobs``; throttled CPU jobs get their full quota back either way, since
        nobody would restore it; the source then removes what it no longer needs."""
        now = self.clock()
        self.source.leave(stop_jobs, now)
        for m in list(self.jobs.running.values()):  # a job that would not die included
            if m.job.quota < 1.0:
                self.actuator.carry_out(
                    [SetQuota(m.job, 1.0)], now, "agent", reason={"why": "agent leaving"}
                )
        self.flush()
        self.learned.save()
        self.source.close()

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

    def tick(self) -> None:
        with self.lock:  # a metrics scrape (another thread) sees whole ticks only
            t0 = time.perf_counter()
            now = self.clock()
            self.ticks += 1
            self.meter_bus(now)
            self.source.intake(now)
            self.sampler.sample(now)
            self.sampler.control(now)
            self.flush()
            self.source.after_control(now)
            self.last_tick_s = time.perf_counter() - t0

    def meter_bus(self, now: float) -> None:
        """The node's memory traffic onto its policy view, before the cycle and the
        eliminator read it; a calmer bus lets the cycle retry the jobs it refused."""
        node = self.node
        if node is None or self.config.bus_gbps <= 0:
            return
        was_on = node.bw_gbps > 0
        if self.bus.update(node, self.config.bus_gbps, now):
            self.source.bus_eased()
        if was_on != (node.bw_gbps > 0) and self.bus.counting:
            self.log(
                f"the bus rule acts: {node.bw_used:.1f} of {node.bw_gbps:g} GB/s in use"
                if node.bw_gbps > 0
                else "memory-traffic counters unreadable: the bus rule stands aside"
            )

    # ------------------------------------------------------------ the node's books
    def place(self, m: Managed, now: float) -> None:
        """A job is running here from ``now``: in the source's books and the table."""
        m.job.start = now
        self.source.hold(m, +1)
        m.last_change = now
        self.jobs.running[m.row_id] = m

    def release(self, m: Managed, now: float) -> None:
        """Give a job's resources back and forget it everywhere."""
        self._unbook(m, now)
        self.remove_groups(m)

    def suspend(self, m: Managed, now: float) -> None:
        """A frozen job leaves the node's books as an ended one does, its cgroup and
        processes kept: it holds no CPUs until the cycle starts it again."""
        self._unbook(m, now)
        m.job.quota = 1.0  # what a thawed job starts with (its quota is written then)
        m.cpus, m.gpu_ids = [], []
        m.window = m.last = None
        m.throughput, m.controlled, m.stalled, m.warned_at = None, False, False, None
        m.suspended_wall = self.wall()
        self.jobs.suspended[m.row_id] = m

    def _unbook(self, m: Managed, now: float) -> None:
        """Out of the running table, the control loop and the source's books."""
        self.jobs.running.pop(m.row_id, None)
        job = m.job
        self.loop.finish(job, now)
        if self.policy.node_control is not None:
            self.policy.node_control.forget_job(job)
        self.source.hold(m, -1)
        job.cores_pn = 0

    def remove_groups(self, m: Managed) -> None:
        """An ended job's cgroup (and resctrl group, if it had one) removed."""
        if m.mb is not None:
            quietly(lambda: self.resctrl.remove(m.cgroup))
        try:
            self.cg.remove(m.cgroup)
        except CgroupError as e:
            self.log(f"cgroup {m.cgroup} not removed: {e}")

    # ------------------------------------------------------------ control
    def carry_out(
        self, actions: list[Action], now: float, component: str, reason: dict[str, Any] | None
    ) -> None:
        """The control loop's actions on this node's jobs (``ControlSink``)."""
        self.actuator.carry_out(actions, now, component, reason=reason)

    def flush(self) -> None:
        """Rows of jobs whose cores, quota or throughput changed, and learned profiles."""
        self.learned.save_if_changed()
        dirty = [m for m in self.jobs.running.values() if m.dirty]
        if not dirty:
            return
        with self.store.tx():
            for m in dirty:
                self.store.update(
                    m.row_id,
                    cpus=format_cpus(m.cpus),
                    quota=m.job.quota,
                    throughput=m.throughput,
                    reference=self.policy_reference(m.job),
                    phase=self.phase(m),
                )
                m.dirty = False

    def phase(self, m: Managed) -> str:
        """Where a job's core search stands ("stalled" while its reports are missing)."""
        alloc = self.search
        if m.stalled:
            return "stalled"
        return alloc.state(m.job) if alloc is not None and m.controlled else ""

    def policy_reference(self, job: Job) -> float | None:
        alloc = self.search
        return alloc.book.reference(job) if alloc is not None else None
