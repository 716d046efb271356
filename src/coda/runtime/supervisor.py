"""The stand-alone agent's supervisor: launching a job's shim in its cgroup as its
user, reaping it, stopping it at a cancel or its time limit (by the pids its cgroup
holds, never by name), and the job's files (its directory, its progress file)."""

from __future__ import annotations

import json
import math
import os
import pwd
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from coda.policy.state import Job
from coda.runtime import shim
from coda.runtime.cgroups import CgroupDriver, CgroupError, format_cpus
from coda.runtime.decision_log import DecisionLog
from coda.runtime.devices import denied
from coda.runtime.managed import AgentConfig, Managed
from coda.runtime.node_ledger import NodeLedger
from coda.runtime.processes import JobProcesses
from coda.runtime.progress import ENV_FILE, Progress, read_progress
from coda.runtime.shim import LAUNCH_FILE, SHIM_ENV, alive, proc_start_time, read_regular
from coda.runtime.store import JobRow, Store

# The shim runs from its file with `python -I`: the standard library only, nothing from
# a job's environment or working directory (see shim.main).
SHIM_PATH = str(Path(shim.__file__).resolve())
# What a job's environment starts from besides its own variables: the agent's locale,
# never the rest of the agent's (root's) environment; `coda submit` sends the user's PATH.
PASSED_ENV = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class BookedNode(Protocol):
    """What the supervisor books on its node agent: a started job placed on the node,
    an ended one released (its cores, GPUs, cgroup and control state given back)."""

    def place(self, m: Managed, now: float) -> None: ...

    def release(self, m: Managed, now: float) -> None: ...

    def remove_groups(self, m: Managed) -> None: ...


class Supervisor:
    """Starts, watches and stops the processes of the jobs the node's own queue runs."""

    def __init__(
        self,
        books: BookedNode,
        store: Store,
        cgroups: CgroupDriver,
        jobs: NodeLedger,
        processes: JobProcesses,
        decisions: DecisionLog,
        config: AgentConfig,
        state_dir: Path,
        progress_dir: Path,
        wall: Callable[[], float],
        log: Callable[[str], None],
    ) -> None:
        self.books = books
        self.store = store
        self.cg = cgroups
        self.jobs = jobs
        self.processes = processes
        self.decisions = decisions
        self.config = config
        self.state_dir = state_dir
        self.progress_dir = progress_dir
        self.wall = wall
        self.log = log

    # ------------------------------------------------------------ files
    def job_dir(self, job_id: int) -> Path:
        return self.state_dir / "jobs" / str(int(job_id))

    def progress_file(self, job_id: int) -> Path:
        return self.progress_dir / str(int(job_id))

    def read_progress(self, m: Managed) -> Progress | None:
        # The job's user owns its file; a file anyone else made there is not trusted.
        return read_progress(self.progress_file(m.row_id), owner=m.uid)

    def exit_code(self, m: Managed) -> int | None:
        try:
            return int(read_regular(m.job_dir / "exit").strip())
        except (OSError, ValueError):
            return None

    def _make_progress_file(self, job_id: int, uid: int, gid: int) -> Path:
        """A fresh, empty progress file that the job's user owns (0600)."""
        path = self.progress_file(job_id)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            if (uid, gid) != (os.geteuid(), os.getegid()):
                os.fchown(fd, uid, gid)
        finally:
            os.close(fd)
        return path

    # ------------------------------------------------------------ ending
    def reap(self, now: float, final_state: str | None = None) -> None:
        """Finish every job whose supervisor left (or, adopted without one, whose cgroup
        emptied); a cancel past its grace is escalated to SIGKILL."""
        for m in list(self.jobs.running.values()):
            if m.popen is not None:
                m.popen.poll()  # reap our own child, so it is not a zombie
            if m.warned_at is not None and m.kill_at is None and final_state is None:
                continue  # stopping for a preemption: requeued (LocalQueue), not finished
            code = self.exit_code(m)
            if code is None:
                if m.shim_pid is not None and alive(m.shim_pid, m.shim_start):
                    if m.kill_at is not None and now >= m.kill_at:
                        self.processes.signal(m, signal.SIGKILL)
                    continue
                if m.shim_pid is None and self.processes.pids(m):
                    # Adopted without a supervisor: ends when its cgroup empties (a cancel
                    # still escalates to SIGKILL after the grace period).
                    if m.kill_at is not None and now >= m.kill_at:
                        self.processes.signal(m, signal.SIGKILL)
                    continue
            self.finish(m, now, code, final_state)

    def finish(self, m: Managed, now: float, code: int | None, final_state: str | None) -> None:
        # Anything the job left behind (a daemonised grandchild) belongs to it: stop it too.
        self.processes.kill_until_gone(m)
        row = self.store.job(m.row_id)
        cancelled = row is not None and row.cancel
        if final_state is not None and code != 0:  # SIGKILLed on exit; exit 0 came before
            state = final_state
        elif m.timed_out:  # stopped at its limit, whatever it exited with (Slurm: TIMEOUT)
            state = "timeout"
        elif cancelled:
            state = "cancelled"
        elif code is None:
            state = "lost"
        else:
            state = "done" if code == 0 else "failed"
        msg = {
            "done": "exited 0",
            "failed": f"exited {code}"
            if code is not None and code >= 0
            else f"killed by signal {-code if code else '?'}",
            "cancelled": "cancelled",
            "lost": "its supervisor vanished without an exit status",
            "timeout": f"stopped at its time limit ({m.job.time_limit:g} s)",
        }[state]
        self.books.release(m, now)
        self.progress_file(m.row_id).unlink(missing_ok=True)
        self.store.update(
            m.row_id,
            state=state,
            end_t=self.wall(),
            exit_code=code,
            message=msg,
            throughput=m.throughput,
            phase="",
        )
        self.decisions.record(now, m.row_id, "agent", "finish", {"state": state, "exit_code": code})
        self.log(f"job {m.row_id} ({m.job.job_id}) {state}: {msg}")

    def cancels(self, now: float) -> None:
        """SIGTERM to each running job cancelled since, SIGKILL after the grace period."""
        # Ids from an index: no row (and no spec) is read unless it is being cancelled.
        for job_id in self.store.cancelled_ids(("starting", "running")):
            m = self.jobs.running.get(job_id)
            if m is None or m.kill_at is not None:
                continue
            self.processes.signal(m, signal.SIGTERM)
            m.kill_at = now + self.config.kill_grace_s
            self.decisions.record(now, job_id, "agent", "cancel", {"signal": "SIGTERM"})

    def time_limits(self, now: float) -> None:
        """Stop a job at its time limit, as Slurm does: SIGTERM, then SIGKILL after the
        grace period. Backfill plans with the limits, so a job must not outlive its own.
        The limit counts from the job's start (its row's start_t, wall time), across an
        agent's restart."""
        wall = self.wall()
        for m in self.jobs.running.values():
            limit = m.job.time_limit
            if m.kill_at is not None or m.started_wall is None or not math.isfinite(limit):
                continue
            if wall - m.started_wall < limit:
                continue
            m.timed_out = True
            self.processes.signal(m, signal.SIGTERM)
            m.kill_at = now + self.config.kill_grace_s
            self.decisions.record(now, m.row_id, "agent", "time-limit", {"limit_s": limit})
            self.log(f"job {m.row_id} ({m.job.job_id}): time limit of {limit:g} s reached")

    # ------------------------------------------------------------ starting
    def launch(self, r: JobRow, job: Job, cores: int, now: float) -> bool:
        """Start the job's supervisor on ``cores`` free CPUs; False if it could not be
        started (its row then says why, or another tick looks at it again)."""
        cpus = self.jobs.take_cpus(cores, job.kind)
        gpu_ids = self.jobs.take_gpus(job.gpus)
        name = f"job-{r.id}"
        jdir = self.job_dir(r.id)
        if self.cg.exists(name) and self.cg.pids(name):
            # Not this agent's group (it has no running job r.id): never join or take it.
            self.jobs.give_back(cpus, gpu_ids)
            self.store.update(
                r.id, state="failed", end_t=self.wall(), message=f"cgroup {name} is in use"
            )
            self.log(f"job {r.id}: not started: cgroup {name} has processes of another owner")
            return False
        jdir.mkdir(mode=0o700, exist_ok=True)  # inside the state dir the agent checked
        for f in ("exit", "shim.pid", LAUNCH_FILE):
            (jdir / f).unlink(missing_ok=True)
        # Recorded before the process exists: a crash from here on is re-adopted or
        # found never started (no shim.pid, empty cgroup), never run twice. Only a row
        # still queued and not cancelled is claimed: `coda cancel` may have marked it
        # cancelled since the queue read it.
        started = self.wall()
        claimed = self.store.claim(
            r.id,
            state="starting",
            launches=r.launches + 1,
            cpus=format_cpus(cpus),
            gpu_ids=",".join(map(str, gpu_ids)),
            quota=1.0,
            start_t=started,
            message="",
        )
        if not claimed:
            self.jobs.give_back(cpus, gpu_ids)
            return False
        m = Managed(r.id, job, name, jdir, cpus, gpu_ids, None, None, uid=uid_of(r),
                    started_wall=started)  # fmt: skip
        self.books.place(m, now)
        try:
            self.cg.remove(name)  # empty (checked above): a fresh group keeps no old rules
            self.cg.create(name)
            self.guard_devices(name, gpu_ids)
            self.cg.set_cpus(name, cpus)
            self.cg.set_quota(name, None)
            m.popen = self._spawn(r, m)
        except (CgroupError, OSError, subprocess.SubprocessError) as e:
            self.books.release(m, now)
            self.store.update(
                r.id, state="failed", end_t=self.wall(), message=f"launch failed: {e}"
            )
            self.decisions.record(now, r.id, "agent", "launch-failed", {"error": str(e)})
            self.log(f"job {r.id}: launch failed: {e}")
            return False
        m.shim_pid, m.shim_start = m.popen.pid, proc_start_time(m.popen.pid)
        job.start = now
        with self.store.tx():  # running and its start decision at once: a crash keeps both
            self.store.update(r.id, state="running", shim_pid=m.shim_pid, shim_start=m.shim_start)
            self.decisions.record(
                now,
                r.id,
                "scheduler",
                "start",
                {"cores": cores, "requested": r.cores, "cpus": format_cpus(cpus), "gpus": gpu_ids},
            )
        self.log(
            f"job {r.id} ({job.job_id}) started on CPUs {format_cpus(cpus)}"
            f"{f', GPUs {gpu_ids}' if gpu_ids else ''} ({cores} of {r.cores} cores asked)"
        )
        return True

    def guard_devices(self, name: str, gpu_ids: list[int]) -> None:
        """Refuse group ``name`` the device files of every GPU but ``gpu_ids`` (nothing
        where the node's GPUs are not isolated)."""
        self.cg.deny_devices(name, denied(self.config.gpu_devices, gpu_ids))

    def _gpu_env(self, gpu_ids: list[int]) -> dict[str, str]:
        """CUDA numbers the GPUs a process can open from 0: where the others are refused
        (isolated), a job's are 0..n-1 to CUDA, as under Slurm's ConstrainDevices; the
        node's own numbers are in CODA_GPU_IDS either way."""
        ids = ",".join(map(str, gpu_ids))
        cuda = ",".join(map(str, range(len(gpu_ids)))) if self.config.gpu_devices else ids
        return {"CUDA_VISIBLE_DEVICES": cuda, "CODA_GPU_IDS": ids}

    def _spawn(self, r: JobRow, m: Managed) -> subprocess.Popen[bytes]:
        uid, gid = uid_of(r), (r.gid if r.gid is not None else os.getegid())
        groups = list(r.groups) if r.uid is not None else []
        progress = self._make_progress_file(r.id, uid, gid)
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env["PATH"] = DEFAULT_PATH
        env.update(_user_env(uid))
        env.update(r.env)
        env.update(
            {
                "CODA_JOB_ID": str(r.id),
                "CODA_JOB_NAME": r.name,
                ENV_FILE: str(progress),
                **self._gpu_env(m.gpu_ids),
            }
        )
        launch = {
            "argv": list(r.argv),
            "cwd": r.cwd,
            "env": env,
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "cgroup_procs": list(self.cg.procs_files(m.cgroup)),
            "log_bytes": self.config.limits.log_bytes,
        }
        shim.write_atomic(m.job_dir / LAUNCH_FILE, json.dumps(launch))
        with _private_log(m.job_dir / "stdout") as out, _private_log(m.job_dir / "stderr") as err:
            # The supervisor gets a fixed environment and `-I`: a job's PYTHONPATH or
            # LD_PRELOAD reaches only the job's own exec (the shim puts it there).
            return subprocess.Popen(
                [sys.executable, "-I", SHIM_PATH, str(m.job_dir)],
                cwd="/",
                env=dict(SHIM_ENV),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
                shell=False,
            )


def _private_log(path: Path) -> Any:
    """A job's log, appended to, readable by the agent's user only (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    return os.fdopen(fd, "ab")


def uid_of(r: JobRow) -> int:
    return r.uid if r.uid is not None else os.geteuid()


def _user_env(uid: int) -> dict[str, str]:
    """HOME, USER, LOGNAME and SHELL of the user a job runs as (as login would set)."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return {}
    return {"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name, "SHELL": pw.pw_shell}
