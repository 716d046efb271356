"""Jobs the node agent suspended for a DNN job (``take_back = "suspend"``): frozen with
the cgroup freezer, holding no CPUs, their rows ``suspended`` and their places in the
queue kept. The cycle starts such a job as any queued one; here it is thawed where it
was, on the CPUs the cycle gave it, having lost no work. A cancel, the agent's stop with
its jobs, or a restart (the frozen job found again) end or keep it here too."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

from coda.policy.state import Job
from coda.runtime.actions import Actuator
from coda.runtime.cgroups import CgroupDriver, CgroupError, format_cpus
from coda.runtime.decision_log import DecisionLog
from coda.runtime.managed import Managed
from coda.runtime.node_ledger import NodeLedger
from coda.runtime.processes import JobProcesses, quietly
from coda.runtime.row_job import job_of
from coda.runtime.shim import alive
from coda.runtime.store import JobRow, Store
from coda.runtime.supervisor import BookedNode, Supervisor, uid_of


class Suspensions:
    """Resumes, ends and re-adopts the node's suspended jobs (``NodeLedger.suspended``)."""

    def __init__(
        self,
        books: BookedNode,
        store: Store,
        cgroups: CgroupDriver,
        actuator: Actuator,
        jobs: NodeLedger,
        processes: JobProcesses,
        decisions: DecisionLog,
        supervisor: Supervisor,
        wall: Callable[[], float],
        log: Callable[[str], None],
    ) -> None:
        self.books = books
        self.store = store
        self.cg = cgroups
        self.actuator = actuator
        self.jobs = jobs
        self.processes = processes
        self.decisions = decisions
        self.supervisor = supervisor
        self.wall = wall
        self.log = log
        # Jobs whose end was asked while processes were left: the state and message
        # they end with once those are gone (not ``lost``, as one that died unasked).
        self._ending: dict[int, tuple[str, str]] = {}

    def resume(self, job_id: int, job: Job, cores: int, now: float) -> bool:
        """Thaw a suspended job on ``cores`` free CPUs (the cycle booked them); False if
        the kernel refused (it stays suspended and queued; the next tick tries again).
        Its time limit does not count the time it was frozen."""
        m = self.jobs.suspended[job_id]
        cpus = self.jobs.take_cpus(cores, job.kind)
        try:
            self.cg.set_cpus(m.cgroup, cpus)  # before the thaw: never a moment on others'
            self.cg.set_quota(m.cgroup, None)
            self.cg.thaw(m.cgroup)
        except (CgroupError, OSError) as e:
            self.jobs.give_back(cpus, [])
            quietly(lambda: self.cg.freeze(m.cgroup))
            if not self._alive(m):  # it died while frozen (its group with it): over
                self.end(job_id, "lost", "ended while suspended")
                return False
            if not m.resume_failed:  # said once; the next ticks try again quietly
                self.decisions.record(now, job_id, "agent", "resume-failed", {"error": str(e)})
                self.log(f"job {job_id}: not resumed: {e}")
            m.resume_failed = True
            return False
        del self.jobs.suspended[job_id]
        wall = self.wall()
        frozen_s = max(0.0, wall - m.suspended_wall) if m.suspended_wall is not None else 0.0
        if m.started_wall is not None:
            m.started_wall += frozen_s
        m.suspended_wall, m.resume_failed = None, False
        m.job, m.cpus = job, cpus
        job.quota = 1.0
        if m.mb is not None:  # a memory-bandwidth cap of its throttled days follows
            quietly(lambda: self.actuator.write_quota(m))
        self.books.place(m, now)
        self.store.update(
            job_id, state="running", cpus=format_cpus(cpus), quota=1.0, message="",
            start_t=m.started_wall,
        )  # fmt: skip
        self.decisions.record(
            now, job_id, "scheduler", "resume",
            {"cores": cores, "cpus": format_cpus(cpus), "frozen_s": round(frozen_s, 1)},
        )  # fmt: skip
        self.log(f"job {job_id}: resumed on CPUs {format_cpus(cpus)} after {frozen_s:.0f} s")
        return True

    def end(self, job_id: int, state: str, message: str) -> bool:
        """Stop a suspended job for good (cancelled, failed, lost, or the agent stopping
        its jobs): SIGKILL while frozen (it dies as it thaws, never running on others'
        CPUs), its groups removed, its row final. False while processes are left (a
        thaw refused): it stays suspended, and the next call tries again."""
        m = self.jobs.suspended.get(job_id)
        if m is None:
            return True
        self.processes.signal(m, signal.SIGKILL)
        quietly(lambda: self.cg.thaw(m.cgroup))
        self.processes.kill_until_gone(m)
        # SIGKILLed above: its supervisor exits within moments; waited for, not polled
        # once before it has (a loaded host left the job suspended for another tick).
        if m.popen is not None:
            try:
                m.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 1.0
        while alive(m.shim_pid, m.shim_start) and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._alive(m):
            self.log(f"job {job_id}: still has processes after SIGKILL; tried again later")
            self._ending[job_id] = (state, message)
            return False
        self._ending.pop(job_id, None)
        del self.jobs.suspended[job_id]
        self.supervisor.progress_file(job_id).unlink(missing_ok=True)
        self.books.remove_groups(m)
        self.store.update(job_id, state=state, end_t=self.wall(), message=message)
        self.log(f"job {job_id} ({m.job.job_id}) {state} while suspended")
        return True

    def reap(self) -> None:
        """End each suspended job whose processes are gone (killed while frozen: a frozen
        job holding memory is the one the OOM killer picks): ``lost``, as a running job
        that vanishes without an exit status is."""
        for job_id, m in list(self.jobs.suspended.items()):
            if not self._alive(m):
                state, message = self._ending.get(job_id, ("lost", "ended while suspended"))
                self.end(job_id, state, message)

    def _alive(self, m: Managed) -> bool:
        return bool(self.processes.pids(m)) or alive(m.shim_pid, m.shim_start)

    def end_all(self, state: str, message: str) -> None:
        for job_id in list(self.jobs.suspended):
            self.end(job_id, state, message)

    def adopt(self, r: JobRow) -> None:
        """A suspended job found by a restarted agent: kept frozen (frozen again, should
        anyone have thawed it) and queued to resume; one whose processes are gone ended
        while nobody watched and is ``lost``."""
        name = f"job-{r.id}"
        has_cg = self.cg.exists(name)
        pids = self.cg.pids(name) if has_cg else []
        if not pids and not alive(r.shim_pid, r.shim_start):
            if has_cg:
                quietly(lambda: self.cg.remove(name))
            self.store.update(
                r.id, state="lost", end_t=self.wall(), message="ended while suspended"
            )
            self.log(f"job {r.id}: ended while suspended: lost")
            return
        jdir = self.supervisor.job_dir(r.id)
        m = Managed(r.id, job_of(r), name, jdir, [], [], r.shim_pid, r.shim_start,
                    uid=uid_of(r), started_wall=r.start_t,
                    suspended_wall=self.wall())  # fmt: skip
        self.jobs.suspended[r.id] = m
        try:
            self.cg.freeze(name)
        except CgroupError as e:
            # Not frozen, it would run unbooked, maybe on a DNN job's CPUs: stopped.
            self.log(f"job {r.id}: could not freeze it again ({e}): stopped")
            self.end(r.id, "lost", f"suspended, and could not be frozen again: {e}")
            return
        self.log(f"job {r.id}: found suspended; queued to resume")
