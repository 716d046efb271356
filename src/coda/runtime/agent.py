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
import pwd
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda.cycle import Scheduler, Start
from coda.policy import PolicyOptions, make_policy
from coda.policy.allocator import AdaptiveAllocator, LearnedProfiles, free_room
from coda.policy.eliminator import ContentionEliminator
from coda.policy.framework import Action, Policy, Preempt, SetCores, SetQuota
from coda.policy.state import CPU, DNN, Job, Node
from coda.runtime import shim
from coda.runtime.cgroups import CgroupDriver, CgroupError, format_cpus, parse_cpus
from coda.runtime.progress import ENV_FILE, Progress, read_progress
from coda.runtime.shim import LAUNCH_FILE, SHIM_ENV, alive, proc_start_time, read_regular
from coda.runtime.statedir import PUBLIC_DIR_MODE, run_dir_of, secure_dir
from coda.runtime.store import FINAL, JobRow, Store
from coda.workload.perf import load_profile_set

# The shim runs from its file with `python -I`: the standard library only, nothing from
# a job's environment or working directory (see shim.main).
SHIM_PATH = str(Path(shim.__file__).resolve())
# What a job's environment starts from besides its own variables: the agent's locale,
# never the rest of the agent's (root's) environment; `coda submit` sends the user's PATH.
PASSED_ENV = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
PARENT_MADE_KEY = "cgroup_parent_made"

LEARNED_KEY = "learned_profiles"


@dataclass
class AgentConfig:
    period_s: float = 1.0  # control period: eliminator ticks, reaping, admission
    window_s: float = 2.0  # throughput window: one allocator sample per window
    settle_s: float = 1.0  # after a core or quota change, ignore this long (buffers drain)
    stall_s: float = 15.0  # no progress for this long: the job's samples are not trusted
    policy: str = "coda"
    reclaim: str = "shrink"  # how a DNN job's start takes cores back: shrink | requeue
    gpus: int = 0  # GPUs on this node (fake ones are fine: jobs see CUDA_VISIBLE_DEVICES)
    cpus: list[int] | None = None  # CPUs to manage (None: all the cgroup parent may use)
    kill_grace_s: float = 5.0  # cancel: SIGTERM, then SIGKILL after this long
    # Policy knobs for this node, e.g. {"eliminator.step_down": "0.5"} (see tune_policy).
    tune: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.period_s <= 0 or self.window_s < self.period_s:
            raise ValueError("need period_s > 0 and window_s >= period_s")
        if self.gpus < 0 or self.stall_s <= 0 or self.settle_s < 0:
            raise ValueError("need gpus >= 0, stall_s > 0, settle_s >= 0")


@dataclass
class Managed:
    """A running job as the agent tracks it."""

    row_id: int
    job: Job
    cgroup: str
    job_dir: Path
    cpus: list[int]
    gpu_ids: list[int]
    shim_pid: int | None
    shim_start: int | None
    popen: subprocess.Popen[bytes] | None = None
    last: Progress | None = None  # last progress record seen
    last_change: float = 0.0  # agent time it last advanced
    window: Progress | None = None  # record that opened the current window
    settle_until: float = 0.0
    controlled: bool = False  # the allocator knows it (on_start called)
    stalled: bool = False
    throughput: float | None = None
    kill_at: float | None = None  # cancel in progress: SIGKILL at this time
    dirty: bool = True  # DB row needs the latest cpus/quota/throughput
    mb: int | None = None  # MBA percent set through resctrl
    uid: int | None = None  # the user the job runs as (owns its progress file)


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
        self.sched: Scheduler | None = None  # made in start(), once the node is known
        self._rows: dict[int, JobRow] = {}  # queued rows of the running admission
        self.node_name = node_name or os.uname().nodename
        self.node: Node | None = None
        self.running: dict[int, Managed] = {}
        self._queued_jobs: dict[int, Job] = {}
        self._free_cpus: set[int] = set()
        self._free_gpus: set[int] = set()
        self._generation = -1
        self._new_samples = False  # a DNN job produced a sample since the last control tick
        self.ticks = 0
        self.counters: dict[str, int] = {}
        self.last_tick_s = 0.0
        self.lock = threading.Lock()

    # ------------------------------------------------------------ lifecycle
    @property
    def allocator(self) -> AdaptiveAllocator | None:
        jc = self.policy.job_control
        return jc if isinstance(jc, AdaptiveAllocator) else None

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
        self._load_learned()
        secure_dir(self.state_dir / "jobs")
        secure_dir(self.run_dir, PUBLIC_DIR_MODE, "run directory")
        secure_dir(self.progress_dir, PUBLIC_DIR_MODE, "progress directory")
        self._adopt_all()
        self._remove_orphan_cgroups()
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
                self._apply([SetQuota(m.job, 1.0)], now, "agent", reason={"why": "agent leaving"})
        if stop_jobs:
            deadline = time.monotonic() + 10
            while self.running and time.monotonic() < deadline:
                self._reap(now, final_state="cancelled")
                if self.running:
                    time.sleep(0.05)
        self._flush()
        self._save_learned()
        self._remove_orphan_cgroups()
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
        self, should_stop: Callable[[], bool], idle: Callable[[float], None] = time.sleep
    ) -> None:
        """Tick every period until ``should_stop()``; a slow tick does not pile up.
        ``idle(seconds)`` fills the time between ticks (the metrics server answers
        requests there: the agent stays single-threaded, so forking jobs is safe)."""
        period = self.config.period_s
        nxt = time.monotonic()
        while not should_stop():
            self.tick()
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
            self._admit(now)
            self._sample(now)
            self._control(now)
            self._flush()
            self.last_tick_s = time.perf_counter() - t0

    # ------------------------------------------------------------- reaping
    def _reap(self, now: float, final_state: str | None = None) -> None:
        for m in list(self.running.values()):
            if m.popen is not None:
                m.popen.poll()  # reap our own child, so it is not a zombie
            code = self._exit_code(m)
            if code is None:
                if m.shim_pid is not None and alive(m.shim_pid, m.shim_start):
                    if m.kill_at is not None and now >= m.kill_at:
                        self._kill(m, signal.SIGKILL)
                    continue
                if m.shim_pid is None and self._cgroup_pids(m):
                    # Adopted without a supervisor: ends when its cgroup empties (a cancel
                    # still escalates to SIGKILL after the grace period).
                    if m.kill_at is not None and now >= m.kill_at:
                        self._kill(m, signal.SIGKILL)
                    continue
            self._finish(m, now, code, final_state)

    def _exit_code(self, m: Managed) -> int | None:
        try:
            return int(read_regular(m.job_dir / "exit").strip())
        except (OSError, ValueError):
            return None

    def _finish(self, m: Managed, now: float, code: int | None, final_state: str | None) -> None:
        # Anything the job left behind (a daemonised grandchild) belongs to it: stop it too.
        self._kill_until_gone(m)
        row = self.store.job(m.row_id)
        cancelled = row is not None and row.cancel
        if final_state is not None and code != 0:  # SIGKILLed on exit; exit 0 came before
            state = final_state
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
        }[state]
        self._release(m, now)
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
        self._decide(now, m.row_id, "agent", "finish", {"state": state, "exit_code": code})
        self.log(f"job {m.row_id} ({m.job.job_id}) {state}: {msg}")

    def _release(self, m: Managed, now: float) -> None:
        """Give a job's resources back and forget it everywhere."""
        node = self.node
        assert node is not None
        self.running.pop(m.row_id, None)
        job = m.job
        if self.policy.job_control is not None:
            self.policy.job_control.on_finish(job, now)
        if self.policy.node_control is not None:
            self.policy.node_control.forget_job(job)
        self._hold(m, -1)
        job.cores_pn = 0
        if self.resctrl is not None and m.mb is not None:
            _quiet(lambda: self.resctrl.remove(m.cgroup))
        try:
            self.cg.remove(m.cgroup)
        except CgroupError as e:
            self.log(f"cgroup {m.cgroup} not removed: {e}")

    def _cgroup_pids(self, m: Managed) -> list[int]:
        try:
            return self.cg.pids(m.cgroup) if self.cg.exists(m.cgroup) else []
        except CgroupError:
            return []

    def _cancels(self, now: float) -> None:
        for row in self.store.jobs(("starting", "running")):
            m = self.running.get(row.id)
            if m is None or not row.cancel or m.kill_at is not None:
                continue
            self._kill(m, signal.SIGTERM)
            m.kill_at = now + self.config.kill_grace_s
            self._decide(now, row.id, "agent", "cancel", {"signal": "SIGTERM"})

    def _kill_until_gone(self, m: Managed, seconds: float = 1.0) -> None:
        """SIGKILL the job's cgroup members until none is left (forks included), for at
        most ``seconds``."""
        end = time.monotonic() + seconds
        while (pids := self._cgroup_pids(m)) and time.monotonic() < end:
            for p in pids:
                _signal(p, signal.SIGKILL)
            time.sleep(0.01)

    def _kill(self, m: Managed, sig: int) -> None:
        """Signal every process of the job: the cgroup is the list (never names)."""
        for p in self._cgroup_pids(m):
            _signal(p, sig)
        if m.shim_pid is not None and alive(m.shim_pid, m.shim_start):
            _signal(m.shim_pid, sig)

    # ------------------------------------------------------------ admission
    def _admit(self, now: float) -> None:
        """Queue new rows, drop vanished ones, run the cycle, record why jobs wait."""
        node, sched = self.node, self.sched
        assert node is not None and sched is not None
        rows = self.store.jobs(("queued",))
        live = {r.id for r in rows}
        for rid in list(self._queued_jobs):
            if rid not in live:
                sched.withdraw(self._queued_jobs.pop(rid))
        self._rows = {}
        for r in rows:
            if r.cancel:
                # Cancelled while running, then preempted (or its launch interrupted and
                # requeued): the cancel stands; it must not start again.
                self.store.update(r.id, state="cancelled", end_t=self.wall(), message="cancelled")
                job = self._queued_jobs.pop(r.id, None)
                if job is not None:
                    sched.withdraw(job)
                continue
            self._rows[r.id] = r
            if r.id in self._queued_jobs:
                continue
            job = self._job_from_row(r)
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
        self._rows = {}
        self.store.set_wait_reasons({job.idx: str(why) for job, why in sched.waiting()})

    def bind(self, start: Start) -> bool:
        """The cycle's start: launch the job (the cycle has booked its cores)."""
        r = self._rows.get(start.job.idx)
        if r is None:
            return False
        return self._launch(r, start.job, start.cores_pn, self.clock())

    def apply(self, action: Action) -> None:
        """A reclaim action of the cycle (shrink or preempt a CPU job)."""
        self._apply([action], self.clock(), "reclaim", reason={"for": "a DNN job's start"})

    def _job_from_row(self, r: JobRow) -> Job:
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
            time_limit=r.time_limit_s if r.time_limit_s is not None else math.inf,
            pcie_heavy=pcie_heavy(model, r.gpus) if r.gpus else False,
        )
        job.preemptions = r.preemptions
        return job

    def _room(self, m: Managed) -> int:
        """How many more cores ``m`` could get now."""
        # Free cores only, as in the simulator: never cores CPU jobs hold (free_room).
        return free_room([self.node]) if self.node is not None else 0

    def _cpus_to_add(self, m: Managed, k: int) -> list[int] | None:
        """``k`` more CPUs for a growing job, or None if it has not got the room."""
        return self._take_for(m, k) if self._room(m) >= k else None

    def _take_for(self, m: Managed, k: int) -> list[int]:
        return self._take_cpus(k, m.job.kind)

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

    def _books_changed(self, grew: bool) -> None:
        """The node's free cores changed outside the ledger (a cpuset resize)."""
        if self.sched is not None and self.node is not None:
            self.sched.node_capacity_changed(self.node, grew)

    def _read_job_progress(self, m: Managed) -> Progress | None:
        # The job's user owns its file; a file anyone else made there is not trusted.
        return read_progress(self.progress_file(m.row_id), owner=m.uid)

    def progress_file(self, job_id: int) -> Path:
        return self.progress_dir / str(int(job_id))

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

    def _take_cpus(self, n: int, kind: str) -> list[int]:
        # DNN jobs from the low end, CPU jobs from the high end: they stay apart.
        ids = sorted(self._free_cpus, reverse=kind == CPU)[:n]
        self._free_cpus.difference_update(ids)
        return sorted(ids)

    def _launch(self, r: JobRow, job: Job, cores: int, now: float) -> bool:
        """Start the job's supervisor; False if it could not be started."""
        node = self.node
        assert node is not None
        cpus = self._take_cpus(cores, job.kind)
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
        claimed = self.store.claim(
            r.id,
            state="starting",
            launches=r.launches + 1,
            cpus=format_cpus(cpus),
            gpu_ids=",".join(map(str, gpu_ids)),
            quota=1.0,
            start_t=self.wall(),
            message="",
        )
        if not claimed:
            self._free_cpus.update(cpus)
            self._free_gpus.update(gpu_ids)
            self._queued_jobs.pop(r.id, None)
            return False
        m = Managed(r.id, job, name, jdir, cpus, gpu_ids, None, None, uid=_uid_of(r))
        self._place(m, now)
        try:
            self.cg.create(name)
            self.cg.set_cpus(name, cpus)
            self.cg.set_quota(name, None)
            m.popen = self._spawn(r, m)
        except (CgroupError, OSError, subprocess.SubprocessError) as e:
            self._release(m, now)
            self.store.update(
                r.id, state="failed", end_t=self.wall(), message=f"launch failed: {e}"
            )
            self._decide(now, r.id, "agent", "launch-failed", {"error": str(e)})
            self.log(f"job {r.id}: launch failed: {e}")
            self._queued_jobs.pop(r.id, None)
            return False
        m.shim_pid, m.shim_start = m.popen.pid, proc_start_time(m.popen.pid)
        self.store.update(r.id, state="running", shim_pid=m.shim_pid, shim_start=m.shim_start)
        self._queued_jobs.pop(r.id, None)
        job.start = now
        self._decide(
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

    def job_dir(self, job_id: int) -> Path:
        return self.state_dir / "jobs" / str(int(job_id))

    def _spawn(self, r: JobRow, m: Managed) -> subprocess.Popen[bytes]:
        uid, gid = _uid_of(r), (r.gid if r.gid is not None else os.getegid())
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

    def _place(self, m: Managed, now: float) -> None:
        node = self.node
        assert node is not None
        job = m.job
        job.start = now
        self._hold(m, +1)
        m.last_change = now
        self.running[m.row_id] = m

    # ------------------------------------------------------------- sampling
    def _sample(self, now: float) -> None:
        cfg = self.config
        jc = self.policy.job_control
        for m in list(self.running.values()):
            if m.row_id not in self.running:
                continue  # preempted by an action earlier in this loop
            rec = self._read_job_progress(m)
            if rec is not None and (m.last is None or rec.samples != m.last.samples):
                m.last_change = now
                if m.stalled:
                    m.stalled = False
                    m.window = None
                    self._decide(now, m.row_id, "agent", "resumed", {"samples": rec.samples})
            m.last = rec if rec is not None else m.last
            if m.job.kind == DNN and not m.stalled and now - m.last_change > cfg.stall_s:
                self._stall(m, now)
            if m.stalled or rec is None or m.job.kind != DNN or jc is None:
                if rec is not None and m.job.kind == CPU:
                    self._cpu_throughput(m, rec, now)
                continue
            if not m.controlled:
                m.controlled = True
                m.settle_until = now  # the first window opens at the next record
                self._apply(jc.on_start(m.job, now), now, "allocator")
                if m.row_id not in self.running:
                    continue
            if now < m.settle_until or rec.t < m.settle_until:
                m.window = None
                continue
            if m.window is None:
                m.window = rec
                continue
            span = rec.t - m.window.t
            if span < cfg.window_s:
                continue
            m.throughput = (rec.samples - m.window.samples) / span
            m.window = rec
            m.dirty = True
            self._new_samples = True
            self._apply(jc.on_sample(m.job, now, m.throughput), now, "allocator")

    def _cpu_throughput(self, m: Managed, rec: Progress, now: float) -> None:
        if m.window is None:
            m.window = rec
        elif rec.t - m.window.t >= self.config.window_s:
            m.throughput = (rec.samples - m.window.samples) / (rec.t - m.window.t)
            m.window = rec
            m.dirty = True

    def _stall(self, m: Managed, now: float) -> None:
        """Silent too long: stop trusting its throughput. The allocator forgets it (a
        stalled job must neither steer a search nor trigger throttles) and it gets the
        cores it asked for back where they are free."""
        m.stalled = True
        m.window = None
        m.dirty = True
        detail: dict[str, Any] = {"silent_s": round(now - m.last_change, 1)}
        if m.controlled and self.policy.job_control is not None:
            self.policy.job_control.on_finish(m.job, now)
            m.controlled = False
            want = m.job.cores_pn_req
            if want > m.job.cores_pn:
                grow = min(want, m.job.cores_pn + self._room(m))
                if grow > m.job.cores_pn:
                    self._apply(
                        [SetCores(m.job, grow)],
                        now,
                        "agent",
                        reason={"why": "stalled: back to the request"},
                    )
        self._decide(now, m.row_id, "agent", "stalled", detail)
        self.log(
            f"job {m.row_id}: no progress for {detail['silent_s']} s; its samples are not trusted"
        )

    # -------------------------------------------------------------- control
    def _control(self, now: float) -> None:
        nc = self.policy.node_control
        node = self.node
        if nc is None or node is None or not node.jobs:
            return
        if not nc.watching(node):
            return
        # One tick per fresh throughput sample, as in the simulator (where the control
        # period is the sample period): the eliminator counts ticks to judge a throttle,
        # and ticks that saw nothing new would judge it on too few samples.
        if any(j.kind == DNN for j in node.jobs) and not self._new_samples:
            return
        self._new_samples = False
        history = nc.decisions if isinstance(nc, ContentionEliminator) else None
        last = history[-1] if history else None
        acts = nc.control(node, now)
        reason: dict[str, Any] = {}
        if history and history[-1] is not last:  # the eliminator's own record of why
            d = history[-1]
            reason = {"decision": d.get("action"), **d.get("reason", {})}
        if acts:
            self._apply(acts, now, "eliminator", reason=reason)

    # -------------------------------------------------------------- actions
    def _by_job(self, job: Job) -> Managed | None:
        return self.running.get(job.idx)

    def _apply(
        self, acts: list[Action], now: float, source: str, reason: dict[str, Any] | None = None
    ) -> None:
        for a in acts:
            m = self._by_job(a.job)
            if m is None:
                continue
            if isinstance(a, SetCores):
                self._set_cores(m, a.cores_pn, now, source, reason)
            elif isinstance(a, SetQuota):
                self._set_quota(m, a.quota, now, source, reason)
            elif isinstance(a, Preempt):
                self._preempt(m, now, source, reason)

    def _set_cores(
        self, m: Managed, n: int, now: float, source: str, reason: dict[str, Any] | None
    ) -> None:
        node = self.node
        assert node is not None
        job = m.job
        cur = len(m.cpus)
        n = max(1, n)
        if n == cur:
            return
        # Growth (a probe, a climb back, a stalled job's regrow) takes free cores only:
        # cores CPU jobs hold are reclaimed for a DNN job's start, never to measure one.
        add = self._cpus_to_add(m, n - cur) if n > cur else []
        if add is None:
            self._decide(
                now,
                m.row_id,
                source,
                "refused",
                {"asked": n, "holds": cur, "free": node.free_cores},
            )
            return  # the allocator sees cores_pn != asked and treats it as a refusal
        old = list(m.cpus)
        if n < cur:
            # DNN jobs give back their highest CPUs, CPU jobs their lowest: both stay packed.
            keep = sorted(m.cpus)[:n] if job.kind == DNN else sorted(m.cpus)[cur - n :]
            self._free_cpus.update(set(m.cpus) - set(keep))
            new = keep
        else:
            new = sorted(m.cpus + add)
        try:
            self.cg.set_cpus(m.cgroup, new)
        except CgroupError as e:
            self._free_cpus.update(set(new) - set(old))
            self._free_cpus.difference_update(old)
            # The cpuset may have been written before the failure (a widening whose
            # sched_setaffinity failed): put the kernel back where the books are.
            _quiet(lambda: self.cg.set_cpus(m.cgroup, old))
            self._decide(now, m.row_id, source, "error", {"error": str(e)})
            return
        m.cpus = new
        job.cores_pn = n
        node.free_cores -= n - cur
        if job.kind == CPU:
            node.cpu_job_cores += n - cur
        self._books_changed(grew=n < cur)
        if job.kind == CPU and job.quota < 1.0:
            self._write_quota(m)
        m.settle_until = now + self.config.settle_s
        m.window = None
        m.dirty = True
        detail: dict[str, Any] = {"from": cur, "to": n, "cpus": format_cpus(new), **(reason or {})}
        alloc = self.allocator
        if source == "allocator" and alloc is not None:
            detail["why"] = alloc.explain(job)
        self._decide(now, m.row_id, source, "set-cores", detail)
        self.log(f"job {m.row_id}: cores {cur} -> {n} ({source})")

    def _set_quota(
        self, m: Managed, q: float, now: float, source: str, reason: dict[str, Any] | None
    ) -> None:
        q = min(1.0, max(0.0, float(q)))
        if abs(q - m.job.quota) < 1e-9:
            return
        old = m.job.quota
        m.job.quota = q
        try:
            self._write_quota(m)
        except CgroupError as e:
            m.job.quota = old
            self._decide(now, m.row_id, source, "error", {"error": str(e)})
            return
        # Co-runners' samples straddling the change describe neither quota.
        for other in self.running.values():
            if other.job.kind == DNN:
                other.window = None
                other.settle_until = max(other.settle_until, now + self.config.settle_s)
        m.dirty = True
        self.counters[f"quota_{'down' if q < old else 'up'}"] = (
            self.counters.get(f"quota_{'down' if q < old else 'up'}", 0) + 1
        )
        self._decide(
            now,
            m.row_id,
            source,
            "set-quota",
            {"from": round(old, 3), "to": round(q, 3), "mb": m.mb, **(reason or {})},
        )
        self.log(f"job {m.row_id}: quota {old:.2f} -> {q:.2f} ({source})")

    def _write_quota(self, m: Managed) -> None:
        q = m.job.quota
        self.cg.set_quota(m.cgroup, None if q >= 1.0 else q * len(m.cpus))
        if self.resctrl is not None and getattr(self.resctrl, "mba_available", False):
            # Memory bandwidth follows the quota where the hardware can cap it.
            pct = max(10, int(round(q * 100)))
            if m.mb is None:
                self.resctrl.create(m.cgroup)
                self.resctrl.assign(m.cgroup, self._cgroup_pids(m))
            self.resctrl.set_mb(m.cgroup, pct)
            m.mb = pct

    def _preempt(self, m: Managed, now: float, source: str, reason: dict[str, Any] | None) -> None:
        """Stop a CPU job at once and queue it again (it restarts from scratch: its own
        checkpoints are its business). Killed before the database says queued, so a
        crash in between leaves it 'lost', never running twice."""
        self._kill_until_gone(m)
        if m.shim_pid is not None and alive(m.shim_pid, m.shim_start):
            _signal(m.shim_pid, signal.SIGKILL)
        try:
            if m.popen is not None:
                m.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self._cgroup_pids(m) or alive(m.shim_pid, m.shim_start):
            # Not gone (a process stuck in the kernel): requeuing now could run it twice.
            # It keeps its cores; the DNN job waits; the next tick reaps it as usual.
            self._decide(now, m.row_id, source, "preempt-failed", {"why": "still running"})
            return
        self._release(m, now)
        row = self.store.job(m.row_id)
        pre = (row.preemptions if row else 0) + 1
        m.job.preemptions = pre
        self.store.update(
            m.row_id,
            state="queued",
            shim_pid=None,
            shim_start=None,
            cpus="",
            preemptions=pre,
            message=f"preempted {pre}x for a DNN job",
        )
        if self.sched is not None:
            # Queued again at once, as the simulator does: the same job, behind no one.
            self._queued_jobs[m.row_id] = m.job
            self.sched.requeue(m.job)
        self._decide(now, m.row_id, source, "preempt", dict(reason or {}))
        self.log(f"job {m.row_id}: preempted ({source})")

    # ------------------------------------------------------------- adoption
    def _adopt_all(self) -> None:
        now = self.clock()
        for r in self.store.jobs(("starting", "running")):
            self._adopt(r, now)

    def _adopt(self, r: JobRow, now: float) -> None:
        jdir = self.job_dir(r.id)
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
                _quiet(lambda: self.cg.remove(name))
            self.store.update(r.id, state="queued", message="requeued: never started")
            self._decide(now, r.id, "agent", "requeue", {"why": "launch interrupted"})
            return
        job = self._job_from_row(r)
        cpus = (self.cg.cpus(name) if has_cg else []) or parse_cpus(r.cpus)
        # Only CPUs this agent manages and no other job holds go into the books: after a
        # restart with other --cpus, or a clash, a CPU must neither count twice nor, once
        # the job ends, be handed out although it is not ours.
        cpus_ok = [c for c in cpus if c in self._free_cpus]
        if running:
            if not cpus_ok:
                cpus_ok = self._take_cpus(1, job.kind)
            if cpus_ok != cpus:
                self.log(f"job {r.id}: CPUs {format_cpus(cpus)} -> {format_cpus(cpus_ok)}")
                if has_cg and cpus_ok:
                    _quiet(lambda: self.cg.set_cpus(name, cpus_ok))
        # Only GPUs this node has and nobody holds (a restart may declare fewer).
        gpu_ids = [int(g) for g in r.gpu_ids.split(",") if g and int(g) in self._free_gpus]
        m = Managed(r.id, job, name, jdir, cpus_ok, gpu_ids, pid, start, uid=_uid_of(r))
        self._free_cpus.difference_update(cpus_ok)
        self._free_gpus.difference_update(gpu_ids)
        self._place(m, now)
        job.quota = r.quota
        if not running:
            code = self._exit_code(m)
            self._finish(m, now, code, None)
            return
        if has_cg and cpus_ok:
            # The kernel may hold a quota the database never saw (a crash between the
            # write and the flush): put the adopted one back, or nobody would restore it.
            try:
                if job.quota < 1.0:
                    self._write_quota(m)
                else:
                    self.cg.set_quota(name, None)
            except (CgroupError, OSError) as e:
                self.log(f"job {r.id}: quota not rewritten: {e}")
        self.store.update(r.id, state="running", shim_pid=pid, shim_start=start)
        self._decide(
            now,
            r.id,
            "agent",
            "adopt",
            {"shim_pid": pid, "cpus": format_cpus(cpus_ok), "quota": r.quota},
        )
        self.log(f"job {r.id}: re-adopted (shim pid {pid}, CPUs {format_cpus(cpus_ok)})")

    def _remove_orphan_cgroups(self) -> None:
        """Remove empty groups of this agent's ended jobs. A group it did not make (no
        job of this state directory by that name, or one still active) stays."""
        mine = {m.cgroup for m in self.running.values()}
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

    # -------------------------------------------------------- persistence
    def _load_learned(self) -> None:
        alloc = self.allocator
        raw = self.store.meta(LEARNED_KEY)
        if alloc is None or raw is None:
            return
        try:
            alloc.learned = LearnedProfiles.from_dict(json.loads(raw))
        except ValueError as e:
            self.log(f"learned profiles ignored: {e}")
        self._generation = alloc.generation

    def _save_learned(self) -> None:
        alloc = self.allocator
        if alloc is not None:
            self.store.set_meta(LEARNED_KEY, json.dumps(alloc.learned.to_dict()))
            self._generation = alloc.generation

    def _flush(self) -> None:
        alloc = self.allocator
        if alloc is not None and alloc.generation != self._generation:
            self._save_learned()
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
        alloc = self.allocator
        return alloc.book.reference(job) if alloc is not None else None

    def _decide(
        self, now: float, job_id: int | None, component: str, action: str, detail: dict[str, Any]
    ) -> None:
        self.counters[f"{component}:{action}"] = self.counters.get(f"{component}:{action}", 0) + 1
        detail = {"mono": round(now, 3), **detail}
        self.store.log_decision(self.wall(), job_id, component, action, detail)


def _private_log(path: Path) -> Any:
    """A job's log, appended to, readable by the agent's user only (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    return os.fdopen(fd, "ab")


def _uid_of(r: JobRow) -> int:
    return r.uid if r.uid is not None else os.geteuid()


def _user_env(uid: int) -> dict[str, str]:
    """HOME, USER, LOGNAME and SHELL of the user a job runs as (as login would set)."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return {}
    return {"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name, "SHELL": pw.pw_shell}


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _quiet(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except (OSError, CgroupError):
        pass


def pcie_heavy(model: str, gpus: int) -> bool:
    """A model's PCIe class from the bundled profiles by name (False if unknown), so
    the PCIe score plugin sees on a real node what it sees in the simulator."""
    profiles = _profiles()
    if model not in profiles.models:
        return False
    return profiles.job_perf(model, max(1, gpus), 1).pcie_heavy


@functools.cache
def _profiles() -> Any:
    return load_profile_set("coda")
