"""The agent's supervisor side: launching a job's shim in its cgroup as its
user, reaping it, killing it (by the pids its cgroup holds, never by name)."""

from __future__ import annotations

import json
import math
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coda.policy.state import CPU, Job
from coda.runtime import shim
from coda.runtime.cgroups import CgroupError, format_cpus
from coda.runtime.managed import Managed
from coda.runtime.progress import ENV_FILE, Progress, read_progress
from coda.runtime.shim import LAUNCH_FILE, SHIM_ENV, alive, proc_start_time, read_regular
from coda.runtime.store import JobRow

if TYPE_CHECKING:
    from coda.runtime.agent import NodeAgent


# The shim runs from its file with `python -I`: the standard library only, nothing from
# a job's environment or working directory (see shim.main).
SHIM_PATH = str(Path(shim.__file__).resolve())
# What a job's environment starts from besides its own variables: the agent's locale,
# never the rest of the agent's (root's) environment; `coda submit` sends the user's PATH.
PASSED_ENV = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


# ------------------------------------------------------------- reaping
def _reap(self: NodeAgent, now: float, final_state: str | None = None) -> None:
    for m in list(self.running.values()):
        if m.popen is not None:
            m.popen.poll()  # reap our own child, so it is not a zombie
        code = self.exit_code(m)
        if code is None:
            if m.shim_pid is not None and alive(m.shim_pid, m.shim_start):
                if m.kill_at is not None and now >= m.kill_at:
                    self._kill(m, signal.SIGKILL)
                continue
            if m.shim_pid is None and self.cgroup_pids(m):
                # Adopted without a supervisor: ends when its cgroup empties (a cancel
                # still escalates to SIGKILL after the grace period).
                if m.kill_at is not None and now >= m.kill_at:
                    self._kill(m, signal.SIGKILL)
                continue
        self.finish(m, now, code, final_state)


def exit_code(self: NodeAgent, m: Managed) -> int | None:
    try:
        return int(read_regular(m.job_dir / "exit").strip())
    except (OSError, ValueError):
        return None


def finish(
    self: NodeAgent, m: Managed, now: float, code: int | None, final_state: str | None
) -> None:
    # Anything the job left behind (a daemonised grandchild) belongs to it: stop it too.
    self.kill_until_gone(m)
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
    self.release(m, now)
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
    self.decide(now, m.row_id, "agent", "finish", {"state": state, "exit_code": code})
    self.log(f"job {m.row_id} ({m.job.job_id}) {state}: {msg}")


def release(self: NodeAgent, m: Managed, now: float) -> None:
    """Give a job's resources back and forget it everywhere."""
    node = self.node
    assert node is not None
    self.running.pop(m.row_id, None)
    job = m.job
    self.loop.finish(job, now)
    if self.policy.node_control is not None:
        self.policy.node_control.forget_job(job)
    self._hold(m, -1)
    job.cores_pn = 0
    resctrl = self.resctrl
    if resctrl is not None and m.mb is not None:
        quietly(lambda: resctrl.remove(m.cgroup))
    try:
        self.cg.remove(m.cgroup)
    except CgroupError as e:
        self.log(f"cgroup {m.cgroup} not removed: {e}")


def cgroup_pids(self: NodeAgent, m: Managed) -> list[int]:
    try:
        return self.cg.pids(m.cgroup) if self.cg.exists(m.cgroup) else []
    except CgroupError:
        return []


def _cancels(self: NodeAgent, now: float) -> None:
    # Ids from an index: no row (and no spec) is read unless it is being cancelled.
    for job_id in self.store.cancelled_ids(("starting", "running")):
        m = self.running.get(job_id)
        if m is None or m.kill_at is not None:
            continue
        self._kill(m, signal.SIGTERM)
        m.kill_at = now + self.config.kill_grace_s
        self.decide(now, job_id, "agent", "cancel", {"signal": "SIGTERM"})


def _time_limits(self: NodeAgent, now: float) -> None:
    """Stop a job at its time limit, as Slurm does: SIGTERM, then SIGKILL after the
    grace period. Backfill plans with the limits, so a job must not outlive its own.
    The limit counts from the job's start (its row's start_t, wall time), across an
    agent's restart."""
    wall = self.wall()
    for m in self.running.values():
        limit = m.job.time_limit
        if m.kill_at is not None or m.started_wall is None or not math.isfinite(limit):
            continue
        if wall - m.started_wall < limit:
            continue
        m.timed_out = True
        self._kill(m, signal.SIGTERM)
        m.kill_at = now + self.config.kill_grace_s
        self.decide(now, m.row_id, "agent", "time-limit", {"limit_s": limit})
        self.log(f"job {m.row_id} ({m.job.job_id}): time limit of {limit:g} s reached")


def kill_until_gone(self: NodeAgent, m: Managed, seconds: float = 1.0) -> None:
    """SIGKILL the job's cgroup members until none is left (forks included), for at
    most ``seconds``."""
    end = time.monotonic() + seconds
    while (pids := self.cgroup_pids(m)) and time.monotonic() < end:
        for p in pids:
            send_signal(p, signal.SIGKILL)
        time.sleep(0.01)


def _kill(self: NodeAgent, m: Managed, sig: int) -> None:
    """Signal every process of the job: the cgroup is the list (never names)."""
    for p in self.cgroup_pids(m):
        send_signal(p, sig)
    if m.shim_pid is not None and alive(m.shim_pid, m.shim_start):
        send_signal(m.shim_pid, sig)


def read_job_progress(self: NodeAgent, m: Managed) -> Progress | None:
    # The job's user owns its file; a file anyone else made there is not trusted.
    return read_progress(self.progress_file(m.row_id), owner=m.uid)


def progress_file(self: NodeAgent, job_id: int) -> Path:
    return self.progress_dir / str(int(job_id))


def _make_progress_file(self: NodeAgent, job_id: int, uid: int, gid: int) -> Path:
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


def take_cpus(self: NodeAgent, n: int, kind: str) -> list[int]:
    # DNN jobs from the low end, CPU jobs from the high end: they stay apart.
    ids = sorted(self._free_cpus, reverse=kind == CPU)[:n]
    self._free_cpus.difference_update(ids)
    return sorted(ids)


def _launch(self: NodeAgent, r: JobRow, job: Job, cores: int, now: float) -> bool:
    """Start the job's supervisor; False if it could not be started."""
    node = self.node
    assert node is not None
    cpus = self.take_cpus(cores, job.kind)
    gpu_ids = sorted(self._free_gpus)[: job.gpus]
    self._free_gpus.difference_update(gpu_ids)
    name = f"job-{r.id}"
    jdir = self.job_dir(r.id)
    if self.cg.exists(name) and self.cg.pids(name):
        # Not this agent's group (it has no running job r.id): never join or take it.
        self._free_cpus.update(cpus)
        self._free_gpus.update(gpu_ids)
        self.store.update(
            r.id, state="failed", end_t=self.wall(), message=f"cgroup {name} is in use"
        )
        self._queued_jobs.pop(r.id, None)
        self.log(f"job {r.id}: not started: cgroup {name} has processes of another owner")
        return False
    jdir.mkdir(mode=0o700, exist_ok=True)  # inside the state dir start() checked
    for f in ("exit", "shim.pid", LAUNCH_FILE):
        (jdir / f).unlink(missing_ok=True)
    # Recorded before the process exists: a crash from here on is re-adopted or
    # found never started (no shim.pid, empty cgroup), never run twice. Only a row
    # still queued and not cancelled is claimed: `coda cancel` may have marked it
    # cancelled since _admit read it.
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
        self._free_cpus.update(cpus)
        self._free_gpus.update(gpu_ids)
        self._queued_jobs.pop(r.id, None)
        return False
    m = Managed(r.id, job, name, jdir, cpus, gpu_ids, None, None, uid=uid_of(r),
                started_wall=started)  # fmt: skip
    self.place(m, now)
    try:
        self.cg.create(name)
        self.cg.set_cpus(name, cpus)
        self.cg.set_quota(name, None)
        m.popen = self._spawn(r, m)
    except (CgroupError, OSError, subprocess.SubprocessError) as e:
        self.release(m, now)
        self.store.update(r.id, state="failed", end_t=self.wall(), message=f"launch failed: {e}")
        self.decide(now, r.id, "agent", "launch-failed", {"error": str(e)})
        self.log(f"job {r.id}: launch failed: {e}")
        self._queued_jobs.pop(r.id, None)
        return False
    m.shim_pid, m.shim_start = m.popen.pid, proc_start_time(m.popen.pid)
    self.store.update(r.id, state="running", shim_pid=m.shim_pid, shim_start=m.shim_start)
    self._queued_jobs.pop(r.id, None)
    job.start = now
    self.decide(
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


def job_dir(self: NodeAgent, job_id: int) -> Path:
    return self.state_dir / "jobs" / str(int(job_id))


def _spawn(self: NodeAgent, r: JobRow, m: Managed) -> subprocess.Popen[bytes]:
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
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, m.gpu_ids)),
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


def place(self: NodeAgent, m: Managed, now: float) -> None:
    node = self.node
    assert node is not None
    job = m.job
    job.start = now
    self._hold(m, +1)
    m.last_change = now
    self.running[m.row_id] = m


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


def send_signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def quietly(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except (OSError, CgroupError):
        pass
