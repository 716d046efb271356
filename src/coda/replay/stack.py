"""The real stack a replay runs on: the test cluster (deploy/slurm-test-cluster), CODA's
controller and one agent per node as child processes tracked by PID, and the jobs,
submitted with plain ``sbatch`` as their users. No shell anywhere: every command is an
argv list.
"""

from __future__ import annotations

import os
import pwd
import random
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coda.replay.outcome import Outcome, read_output
from coda.replay.plan import ClusterShape, ReplayJob

ROOT = Path(__file__).resolve().parents[3]
CLUSTER_SCRIPT = ROOT / "deploy" / "slurm-test-cluster"
JOB_PYTHON = "/usr/bin/python3"  # readable by every user (a venv under /root may not be)
PROBE_TIMEOUT_S = 60.0  # for one probe job to start and end on an idle cluster


class StackError(RuntimeError):
    """The real stack could not be had or driven: one line for the user."""


def run_checked(argv: Sequence[str], env: dict[str, str], timeout: float = 120.0) -> str:
    try:
        p = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise StackError(f"{argv[0]}: {e}") from None
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [""]
        raise StackError(f"{' '.join(argv[:3])}: exit {p.returncode}: {tail[0][:300]}")
    return p.stdout


def parse_exports(text: str) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines ``slurm-test-cluster up`` and ``env`` print."""
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            k, _, v = line[len("export ") :].partition("=")
            out[k] = v.strip("'")
    return out


def node_names(env: dict[str, str], count: int) -> list[str]:
    """The test cluster's node names, in order (GPU nodes first), as ``up`` and ``env``
    print them: each cluster's carry its own prefix, so two clusters' nodes (and the
    cgroups Slurm names after them) never collide."""
    names = env.get("CODA_SLURM_NODE_NAMES", "").split()
    if len(names) != count:
        raise StackError(f"the test cluster named {len(names)} nodes, not {count}")
    return names


@dataclass
class TestCluster:
    """deploy/slurm-test-cluster in its own directory, one mode at a time."""

    directory: Path
    shape: ClusterShape
    users: int
    env: dict[str, str] = field(default_factory=dict)

    def up(self, coda_off: bool) -> dict[str, str]:
        if os.geteuid() != 0:
            raise StackError("a replay needs root (it runs a Slurm cluster: slurmd, cgroups)")
        base = {**os.environ, "CODA_SLURM_DIR": str(self.directory)}
        self.down(base)
        s = self.shape
        argv = [str(CLUSTER_SCRIPT), "up", "--nodes", str(s.nodes), "--gpu-nodes",
                str(s.gpu_nodes), "--gpus", str(s.gpus), "--cores", str(s.cores),
                "--users", str(self.users), "--replay"]  # fmt: skip
        if coda_off:
            argv.append("--coda-off")
        self.env = {**base, **parse_exports(run_checked(argv, base, timeout=180))}
        return self.env

    def down(self, env: dict[str, str] | None = None) -> None:
        e = env or self.env or {**os.environ, "CODA_SLURM_DIR": str(self.directory)}
        run_checked([str(CLUSTER_SCRIPT), "down"], e, timeout=180)

    def restart_slurmd(self, node: str) -> None:
        """Stop one slurmd by its pidfile's PID and start it again (its jobs run on)."""
        pidfile = self.directory / "run" / f"slurmd-{node}.pid"
        pid = _pid_in(pidfile, "slurmd")
        if pid is None:
            raise StackError(f"slurmd on {node}: no live PID in {pidfile}")
        os.kill(pid, signal.SIGTERM)
        _wait_gone(pid, 15.0)
        run_checked(["slurmd", "-N", node], self.env, timeout=60)

    @property
    def local_users(self) -> list[str]:
        return [u for u in self.env.get("CODA_SLURM_USERS", "").split() if u]


def _pid_in(pidfile: Path, comm: str) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
        if Path(f"/proc/{pid}/comm").read_text().strip() != comm:
            return None
    except (OSError, ValueError):
        return None
    return pid


def _wait_gone(pid: int, timeout: float) -> None:
    """Until ``pid`` has exited: TERM was sent; KILL after ``timeout``, then wait again
    (a new slurmd must not find its port still held)."""
    for sig in (None, signal.SIGKILL):
        if sig is not None:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
        t = time.monotonic() + timeout
        while time.monotonic() < t:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
    raise StackError(f"pid {pid} did not exit after SIGKILL")


class Daemon:
    """One CODA process (controller or agent), started and killed by its own PID."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise StackError(f"{self.name} is running already (pid {self.proc.pid})")
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=f, stderr=subprocess.STDOUT
            )
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing is cleaned up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_active(self, env: dict[str, str], timeout_s: float = 60.0) -> None:
        """For the controller: wait until it holds the cluster's lease (job_submit.lua
        holds jobs for CODA only from then on)."""
        from coda.slurm.lease import wait_until_active

        lease = env.get("CODA_SLURM_LEASE", "")
        if self.proc is None or not lease:
            raise StackError(f"{self.name}: not started, or the cluster names no lease")
        try:
            wait_until_active(lease, self.proc.pid, timeout_s, lambda: self.alive)
        except TimeoutError as e:
            raise StackError(f"{self.name}: {e} (its log: {self.log})") from None


def coda_daemons(
    env: dict[str, str], shape: ClusterShape, state: Path, period_s: float, window_s: float
) -> list[Daemon]:
    """The controller and one agent per node, each with its own state directory."""
    coda = [sys.executable, "-m", "coda"]
    state.mkdir(parents=True, exist_ok=True)
    out = [
        Daemon("controller",
               [*coda, "slurm", "controller", "--state-dir", str(state / "controller"),
                "--period", str(period_s)], env, state / "controller.log"),
    ]  # fmt: skip
    board = env.get("CODA_SLURM_BOARD_DIR", "")
    if not board:
        raise StackError("the test cluster did not say where its boards are")
    for node in node_names(env, shape.nodes):
        argv = [*coda, "slurm", "agent", "--node", node,
                "--state-dir", str(state / f"agent-{node}"), "--period", str(period_s),
                "--window", str(window_s), "--board", board]  # fmt: skip
        out.append(Daemon(f"agent-{node}", argv, env, state / f"agent-{node}.log"))
    return out


def fresh_dir(path: Path, user: str, env: dict[str, str]) -> None:
    """An empty directory of ``user``'s for one run's job output: an earlier replay's
    removed (rmtree does not follow the symlinks a user may have left there), the new
    one made by the user (root never chowns in a directory the user can write)."""
    import shutil

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    run_checked(["runuser", "-u", user, "--", "mkdir", "-m", "0755", "--", str(path)], env, 30)


def job_script(out: Path) -> Path:
    """The batch script every replay job runs: the emulated job, its options as its
    arguments (sbatch passes them on; nothing is interpolated into the script)."""
    pypath = f"{ROOT / 'src'}:{sysconfig.get_paths()['purelib']}"
    for part in (JOB_PYTHON, pypath):
        if any(c in part for c in "'\"\\\n$`"):
            raise StackError(f"cannot write a job script for the path {part!r}")
    path = out / "emulated-job.sh"
    path.write_text(
        "#!/bin/sh\n# Written by coda replay: one emulated job (coda.runtime.workloads.emulated).\n"
        f"PYTHONPATH='{pypath}' exec '{JOB_PYTHON}' -m coda.runtime.workloads.emulated \"$@\"\n"
    )
    path.chmod(0o755)
    return path


def probe_job_python(script: Path, user: str, env: dict[str, str]) -> None:
    """The jobs' Python, as one of the users, can run the emulated job (else every job
    would fail at its start, and the replay would measure nothing)."""
    argv = ["runuser", "-u", user, "--", str(script), "--help"]
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise StackError(f"cannot run the job script as {user}: {e}") from None
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or [""])[-1][:200]
        raise StackError(f"{user} cannot run the emulated job with {JOB_PYTHON}: {last}")


def sbatch_argv(
    job: ReplayJob,
    script: Path,
    workdir: Path,
    node_bw: float,
    log_every_s: float,
    nodelist: str | None = None,
) -> list[str]:
    """``runuser -u <user> -- sbatch ...`` for one job: its shape, a time limit, requeue
    for CPU jobs (CODA may take their cores back), output appended (a requeued job's
    starts all stay), the emulated job's options after the script; ``nodelist``: the
    nodes it must run on (``-w``)."""
    argv = ["runuser", "-u", job.user, "--", "sbatch", "--parsable", "-J", job.name,
            "-N", str(job.nodes), "-c", str(job.cores_pn), "-t", str(job.time_limit_min),
            "--open-mode=append", "-o", str(workdir / f"{job.name}-%j.out"),
            "-D", str(workdir), "--requeue" if job.kind == "cpu" else "--no-requeue"]  # fmt: skip
    if job.gpus_pn:
        argv.append(f"--gres=gpu:{job.gpus_pn}")
    if nodelist is not None:
        argv += ["-w", nodelist]
    argv.append(str(script))
    common = ["--work", f"{job.work_s:.6f}", "--node-bw", f"{node_bw:.6f}", "--tick", "0.25",
              "--log-every", str(log_every_s)]  # fmt: skip
    if job.kind == "dnn":
        argv += ["dnn", *common, "--model", job.model, "--gpus", str(job.gpus_pn),
                 "--nodes", str(job.nodes)]  # fmt: skip
    else:
        argv += ["cpu", *common, "--cores", str(job.cores_pn),
                 "--bw-per-core", f"{job.bw_per_core:.6f}",
                 "--checkpoint", str(workdir / f"{job.name}.ckpt")]  # fmt: skip
    return argv


def submit_all(
    jobs: list[ReplayJob],
    env: dict[str, str],
    script: Path,
    workdir_of: Callable[[str], Path],
    node_bw: float,
    log_every_s: float,
    on_tick: Callable[[float], None] = lambda t: None,
) -> tuple[float, dict[int, int]]:
    """Submit every job at its arrival (real seconds from now); (wall time at t=0,
    replay index -> Slurm job id). ``on_tick(t)`` runs between submissions."""
    t0_wall, t0 = time.time(), time.monotonic()
    ids: dict[int, int] = {}
    for job in jobs:
        while (now := time.monotonic() - t0) < job.submit_s:
            on_tick(now)
            time.sleep(min(0.2, job.submit_s - now))
        argv = sbatch_argv(job, script, workdir_of(job.user), node_bw, log_every_s)
        out = run_checked(argv, env, 60)
        try:
            ids[job.idx] = int(out.strip().split(";")[0])
        except ValueError:
            raise StackError(f"sbatch for {job.name}: no job id in {out[:80]!r}") from None
    return t0_wall, ids


def probe_start_latency(
    env: dict[str, str],
    script: Path,
    user: str,
    workdir: Path,
    node_bw: float,
    probes: int,
    rng: random.Random,
    log: Callable[[str], None],
) -> list[float]:
    """The stack's start latency, measured before a run on its idle cluster: ``probes``
    one-core jobs of half a second, one at a time, each from just before its ``sbatch``
    to its own start line (Slurm's or CODA's placement, the prolog, slurmstepd, the
    job's Python). A first, uncounted probe warms the stack (a just-started controller
    or slurmd). Gaps between probes are random (seeded), so the probes meet a periodic
    scheduler at every phase. Seconds, one per counted probe."""
    fresh_dir(workdir, user, env)
    uid = pwd.getpwnam(user).pw_uid
    out: list[float] = []
    for k in range(probes + 1):
        job = ReplayJob(idx=-1 - k, name=f"probe{k}", user=user, submit_s=0.0, kind="cpu",
                        gpus=0, nodes=1, gpus_pn=0, cores_pn=1, model="", work_s=0.5,
                        bw_per_core=0.0, time_limit_min=1)  # fmt: skip
        t0 = time.time()
        jid = run_checked(sbatch_argv(job, script, workdir, node_bw, 1.0), env, 60).strip()
        jid = jid.split(";")[0]
        if not jid.isascii() or not jid.isdigit():
            raise StackError(f"sbatch for a probe job: no job id in {jid[:80]!r}")
        path = workdir / f"{job.name}-{jid}.out"
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        o = Outcome(job.idx)
        while time.monotonic() < deadline:
            o = Outcome(job.idx)
            read_output(path, t0, o, owner=uid)
            if o.starts and o.done >= job.work_s:
                break
            time.sleep(0.05)
        else:
            raise StackError(
                f"probe job {jid} did not start and end within {PROBE_TIMEOUT_S:.0f} s"
            )
        if k:  # the first one warms the stack up
            out.append(o.starts[0])
        log(
            f"probe {k}: started {o.starts[0]:.2f} s after its sbatch" + ("" if k else " (warm-up)")
        )
        time.sleep(rng.uniform(0.5, 1.5))
    return out
