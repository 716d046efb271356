"""Re-adoption after a restart: jobs the database says run are found again by
their supervisor's pid (checked against their cgroup) and cgroup; leftovers of
ended jobs are removed, groups the agent did not make are left alone."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from coda.policy.state import Job
from coda.runtime.actions import Actuator
from coda.runtime.cgroups import CgroupDriver, CgroupError, format_cpus, parse_cpus
from coda.runtime.managed import Managed
from coda.runtime.shim import alive, read_regular
from coda.runtime.store import FINAL, JobRow, Store
from coda.runtime.supervisor import quietly, uid_of


class AdoptingNode(Protocol):
    """What adoption reads and books on the node it adopts jobs on (the node agent)."""

    store: Store
    running: dict[int, Managed]

    @property
    def free_cpus(self) -> set[int]: ...

    @property
    def free_gpus(self) -> set[int]: ...

    def job_dir(self, job_id: int) -> Path: ...

    def job_from_row(self, r: JobRow) -> Job: ...

    def take_cpus(self, n: int, kind: str) -> list[int]: ...

    def place(self, m: Managed, now: float) -> None: ...

    def exit_code(self, m: Managed) -> int | None: ...

    def finish(self, m: Managed, now: float, code: int | None, final_state: str | None) -> None: ...

    def decide(
        self, now: float, job_id: int | None, component: str, action: str, detail: dict[str, Any]
    ) -> None: ...


class Adoption:
    """A restarted agent's running jobs found again, ended jobs' groups removed."""

    def __init__(
        self,
        node: AdoptingNode,
        cgroups: CgroupDriver,
        actuator: Actuator,
        clock: Callable[[], float],
        wall: Callable[[], float],
        log: Callable[[str], None],
    ) -> None:
        self.node = node
        self.cg = cgroups
        self.actuator = actuator
        self.clock = clock
        self.wall = wall
        self.log = log

    def adopt_all(self) -> None:
        now = self.clock()
        for r in self.node.store.jobs(("starting", "running")):
            self.adopt(r, now)

    def adopt(self, r: JobRow, now: float) -> None:
        jdir = self.node.job_dir(r.id)
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
            self.node.store.update(r.id, state="queued", message="requeued: never started")
            self.node.decide(now, r.id, "agent", "requeue", {"why": "launch interrupted"})
            return
        job = self.node.job_from_row(r)
        cpus = (self.cg.cpus(name) if has_cg else []) or parse_cpus(r.cpus)
        # Only CPUs this agent manages and no other job holds go into the books: after a
        # restart with other --cpus, or a clash, a CPU must neither count twice nor, once
        # the job ends, be handed out although it is not ours.
        cpus_ok = [c for c in cpus if c in self.node.free_cpus]
        if running:
            if not cpus_ok:
                cpus_ok = self.node.take_cpus(1, job.kind)
            if cpus_ok != cpus:
                self.log(f"job {r.id}: CPUs {format_cpus(cpus)} -> {format_cpus(cpus_ok)}")
                if has_cg and cpus_ok:
                    quietly(lambda: self.cg.set_cpus(name, cpus_ok))
        # Only GPUs this node has and nobody holds (a restart may declare fewer).
        gpu_ids = [int(g) for g in r.gpu_ids.split(",") if g and int(g) in self.node.free_gpus]
        m = Managed(r.id, job, name, jdir, cpus_ok, gpu_ids, pid, start, uid=uid_of(r),
                    started_wall=r.start_t if r.start_t is not None else self.wall())  # fmt: skip
        self.node.free_cpus.difference_update(cpus_ok)
        self.node.free_gpus.difference_update(gpu_ids)
        self.node.place(m, now)
        job.quota = r.quota
        if not running:
            code = self.node.exit_code(m)
            # Ended while the agent was down: at its time limit if its exit came after it
            # (the shim's exit file is written when the job ends), as the agent would have
            # stopped it there. The grace an agent gives survives no restart: a job still
            # running past its limit is stopped at the next tick, with a fresh grace.
            m.timed_out = _exited_past_limit(m)
            self.node.finish(m, now, code, None)
            return
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
        self.node.store.update(r.id, state="running", shim_pid=pid, shim_start=start)
        self.node.decide(
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
        mine = {m.cgroup for m in self.node.running.values()}
        ended = {f"job-{i}" for i in self.node.store.job_ids(("queued", *FINAL))}
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
