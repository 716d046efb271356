"""Re-adoption after a restart: jobs the database says run are found again by
their supervisor's pid (checked against their cgroup) and cgroup; leftovers of
ended jobs are removed, groups the agent did not make are left alone."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable

from coda.runtime.actions import Actuator
from coda.runtime.cgroups import CgroupDriver, CgroupError, format_cpus, parse_cpus
from coda.runtime.decision_log import DecisionLog
from coda.runtime.managed import Managed
from coda.runtime.node_ledger import NodeLedger
from coda.runtime.processes import quietly
from coda.runtime.row_job import job_of
from coda.runtime.shim import alive, read_regular
from coda.runtime.store import FINAL, JobRow, Store
from coda.runtime.supervisor import BookedNode, Supervisor, uid_of


class Adoption:
    """A restarted agent's running jobs found again, ended jobs' groups removed."""

    def __init__(
        self,
        books: BookedNode,
        store: Store,
        cgroups: CgroupDriver,
        jobs: NodeLedger,
        supervisor: Supervisor,
        actuator: Actuator,
        decisions: DecisionLog,
        clock: Callable[[], float],
        wall: Callable[[], float],
        log: Callable[[str], None],
    ) -> None:
        self.books = books
        self.store = store
        self.cg = cgroups
        self.jobs = jobs
        self.supervisor = supervisor
        self.actuator = actuator
        self.decisions = decisions
        self.clock = clock
        self.wall = wall
        self.log = log

    def adopt_all(self) -> None:
        now = self.clock()
        for r in self.store.jobs(("starting", "running")):
            self.adopt(r, now)

    def adopt(self, r: JobRow, now: float) -> None:
        jdir = self.supervisor.job_dir(r.id)
        name = f"job-{r.id}"
        has_cg = self.cg.exists(name)
        pids = self.cg.pids(name) if has_cg else []
        pid, start = r.shim_pid, r.shim_start
        pid_file = jdir / "shim.pid"
        if pid is None:
            # Crashed between starting the shim and recording it: its pid file says. The
            # job can write that file too, so the pid counts only if it is in the job's
            # cgroup (the shim joins it before exec); else it could name any process.
            try:
                info = json.loads(read_regular(pid_file))
                if int(info["pid"]) in pids:
                    pid, start = int(info["pid"]), info["start"]
            except (OSError, ValueError, KeyError, TypeError):
                pass
        exit_file = (jdir / "exit").exists()
        running = alive(pid, start) or (not exit_file and bool(pids))
        if not running and r.state == "starting" and not pid_file.exists() and not exit_file:
            # Crashed between recording the launch and starting the process: it never ran.
            if has_cg:
                quietly(lambda: self.cg.remove(name))
            self.store.update(r.id, state="queued", message="requeued: never started")
            self.decisions.record(now, r.id, "agent", "requeue", {"why": "launch interrupted"})
            return
        job = job_of(r)
        cpus = (self.cg.cpus(name) if has_cg else []) or parse_cpus(r.cpus)
        # Only CPUs this agent manages and no other job holds go into the books: after a
        # restart with other --cpus, or a clash, a CPU must neither count twice nor, once
        # the job ends, be handed out although it is not ours.
        cpus_ok = [c for c in cpus if c in self.jobs.free_cpus]
        if running:
            if not cpus_ok:
                cpus_ok = self.jobs.take_cpus(1, job.kind)
            if cpus_ok != cpus:
                self.log(f"job {r.id}: CPUs {format_cpus(cpus)} -> {format_cpus(cpus_ok)}")
                if has_cg and cpus_ok:
                    quietly(lambda: self.cg.set_cpus(name, cpus_ok))
        # Only GPUs this node has and nobody holds (a restart may declare fewer).
        gpu_ids = [int(g) for g in r.gpu_ids.split(",") if g and int(g) in self.jobs.free_gpus]
        m = Managed(r.id, job, name, jdir, cpus_ok, gpu_ids, pid, start, uid=uid_of(r),
                    started_wall=r.start_t if r.start_t is not None else self.wall())  # fmt: skip
        self.jobs.claim(cpus_ok, gpu_ids)
        self.books.place(m, now)
        job.quota = r.quota
        if not running:
            code = self.supervisor.exit_code(m)
            # Ended while the agent was down: at its time limit if its exit came after it
            # (the shim's exit file is written when the job ends), as the agent would have
            # stopped it there. The grace an agent gives survives no restart: a job still
            # running past its limit is stopped at the next tick, with a fresh grace.
            m.timed_out = _exited_past_limit(m)
            self.supervisor.finish(m, now, code, None)
            return
        if has_cg:
            # A running job is never frozen: one frozen by an agent that died before its
            # row said so runs again (suspension writes the row first; this is the rest).
            quietly(lambda: self.cg.thaw(name))
        if has_cg and cpus_ok:
            # The kernel may hold a quota the database never saw (a crash between the
            # write and the flush): put the adopted one back, or nobody would restore it.
            try:
                if job.quota < 1.0:
                    self.actuator.write_quota(m)
                else:
                    self.cg.set_quota(name, None)
            except (CgroupError, OSError) as e:
                self.log(f"job {r.id}: quota not rewritten: {e}")
        self.store.update(r.id, state="running", shim_pid=pid, shim_start=start)
        self.decisions.record(
            now,
            r.id,
            "agent",
            "adopt",
            {"shim_pid": pid, "cpus": format_cpus(cpus_ok), "quota": r.quota},
        )
        self.log(f"job {r.id}: re-adopted (shim pid {pid}, CPUs {format_cpus(cpus_ok)})")

    def remove_orphan_cgroups(self) -> None:
        """Remove empty groups of this agent's ended jobs. A group it did not make (no
        job of this state directory by that name, or one still active) stays."""
        mine = {m.cgroup for m in self.jobs.running.values()}
        ended = {f"job-{i}" for i in self.store.job_ids(("queued", *FINAL))}
        for name in self.cg.names():
            if name in mine or name not in ended:
                continue
            try:
                if self.cg.pids(name):
                    self.log(f"cgroup {name} has processes but no running job: left alone")
                    continue
                self.cg.remove(name)
            except CgroupError as e:
                self.log(f"cgroup {name}: {e}")


def _exited_past_limit(m: Managed) -> bool:
    limit = m.job.time_limit
    if m.started_wall is None or not math.isfinite(limit):
        return False
    try:
        ended = os.stat(m.job_dir / "exit", follow_symlinks=False).st_mtime
    except OSError:
        return False
    return ended - m.started_wall >= limit
