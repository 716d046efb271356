"""The node agent on the real kernel: `coda agent` as a process, real cpusets and
CFS quotas, real jobs, the agent killed and restarted mid-run.

Needs root and cgroup v1 cpuset/cpu mounts (CI's host) or a cgroup v2 hierarchy with
cpuset and cpu (deploy/cgroup2-guest); skips elsewhere. The same logic is tested on
a fake tree in test_runtime_agent.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from coda.cli.node_commands import spawn_agent
from coda.runtime.cgroups import CgroupError, detect, parse_cpus
from coda.runtime.jobrow import FINAL as FINAL_STATES
from coda.runtime.shim import alive
from coda.runtime.store import Store
from tests.bench_module import load_bench
from tests.fakes import LOOSE_HARM, OPEN_PROBE
from tests.time_scale import WAIT_SCALE, WORK_SCALE


def _real() -> tuple[str | None, int]:
    """(why the tests cannot run here or None, the cgroup version they run on)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux (runs in CI as root)", 0
    try:
        drv = detect()
    except CgroupError as e:
        return f"needs cgroup v1/v2 cpuset and cpu controllers: {e}", 0
    if len(os.sched_getaffinity(0)) < 2:
        return "needs at least 2 CPUs", drv.version
    return None, drv.version


SKIP, VERSION = _real()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]

CG = Path("/sys/fs/cgroup")


def parent_dirs(parent: str) -> list[Path]:
    """The agent's parent group(s): one per controller (v1), one in all (v2)."""
    return [CG / "cpuset" / parent, CG / "cpu" / parent] if VERSION == 1 else [CG / parent]


def cpu_dir(parent: str, job: int) -> Path:
    """A job's group of the cpu controller (its CPU quota)."""
    return (CG / "cpu" if VERSION == 1 else CG) / parent / f"job-{job}"


def quota_us(parent: str, job: int) -> int:
    """A job's CPU quota per 100 ms period in microseconds, -1 for none."""
    if VERSION == 1:
        return int((cpu_dir(parent, job) / "cpu.cfs_quota_us").read_text())
    q = (cpu_dir(parent, job) / "cpu.max").read_text().split()[0]
    return -1 if q == "max" else int(q)


SYNTH = str(Path(__file__).parent / "synthetic_job.py")


class Agent:
    """One `coda agent` process, started and stopped by its PID."""

    def __init__(self, state: Path, parent: str, log: Path, gpus: Sequence[str] = ()) -> None:
        self.state, self.parent, self.log = state, parent, log
        self.gpus = list(gpus) or ["--gpus", "1"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [
            "--cgroup-parent",
            self.parent,
            *self.gpus,
            "--period",
            "0.2",
            "--window",
            "0.5",
            "--stall",
            "10",
            # The eliminator and reclaim on the real kernel, on jobs seconds old: a loose
            # harm budget (its own tests: tests/test_harm_budget.py).
            *(a for k, v in LOOSE_HARM.items() for a in ("--tune", f"{k}={v}")),
        ]
        self.proc = spawn_agent(self.state, args, self.log)

    def kill(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout * WAIT_SCALE
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Agent, Callable[..., int], Store]]:
    yield from running_node(tmp_path)


# Two "GPUs" whose device files every kernel has: a job granted GPU 0 may open
# /dev/full and not /dev/zero (the devices controller or eBPF program says so).
GPU_FILES = ("/dev/full", "/dev/zero")


@pytest.fixture
def gpu_node(tmp_path: Path) -> Iterator[tuple[Agent, Callable[..., int], Store]]:
    yield from running_node(tmp_path, [a for f in GPU_FILES for a in ("--gpu-device", f)])


def running_node(
    tmp_path: Path, gpus: Sequence[str] = ()
) -> Iterator[tuple[Agent, Callable[..., int], Store]]:
    parent = f"coda-kt-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    state = tmp_path / "state"
    agent = Agent(state, parent, tmp_path / "agent.log", gpus)
    agent.start()
    store = Store(state / "coda.db")

    def submit(*args: str) -> int:
        out = subprocess.run(
            [sys.executable, "-m", "coda.cli", "submit", "--state-dir", str(state), *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.strip().splitlines()[-1])

    yield agent, submit, store
    agent.kill(signal.SIGKILL)
    clear_parent(parent)
    store.close()
    print((tmp_path / "agent.log").read_text())


def clear_parent(parent: str) -> None:
    """Whatever a test left: stop it by the pids its cgroups hold, remove the groups."""
    drv = detect(parent=parent)
    for name in drv.names():
        for p in drv.pids(name):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda n=name: not drv.pids(n), 10, "job processes to exit")
        drv.remove(name)
    if parent_dirs(parent)[0].exists():
        drv.teardown()


def cpuset_file(parent: str, job: int) -> Path:
    return parent_dirs(parent)[0] / f"job-{job}" / "cpuset.cpus"


def job_pids(parent: str, job: int) -> list[int]:
    try:
        return [
            int(x)
            for x in (parent_dirs(parent)[0] / f"job-{job}" / "cgroup.procs").read_text().split()
        ]
    except OSError:
        return []


def allowed(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpus(line.split(":", 1)[1])
    raise AssertionError("no Cpus_allowed_list")


def submit_training(agent: Agent, submit: Callable[..., int], model: str, *extra: str) -> int:
    """Job 1: the synthetic training job (optimum 1 core), asking for 2 cores and a GPU."""
    job = [
        sys.executable,
        SYNTH,
        "--cpuset-file",
        str(cpuset_file(agent.parent, 1)),
        "--optimum",
        "1",
        *extra,
    ]
    return submit("--name", "train", "--cores", "2", "--gpus", "1", "--model", model, "--", *job)


def test_allocator_slims_a_real_cpuset(node) -> None:
    agent, submit, store = node
    jid = submit_training(agent, submit, "synth1", "--seconds", "60")
    assert jid == 1
    wait_for(lambda: store.job(jid).phase == "converged", 60, "the allocator to converge")
    row = store.job(jid)
    assert row.state == "running" and len(parse_cpus(row.cpus)) == 1
    assert parse_cpus(cpuset_file(agent.parent, jid).read_text()) == parse_cpus(row.cpus)
    pids = job_pids(agent.parent, jid)
    assert len(pids) >= 2  # the shim and the job itself
    for p in pids:
        assert allowed(p) == parse_cpus(row.cpus)  # the kernel applies it to every task


def test_a_job_opens_only_the_gpus_it_was_granted(gpu_node, tmp_path: Path) -> None:
    """The attack: a job that ignores CUDA_VISIBLE_DEVICES and opens every GPU."""
    agent, submit, store = gpu_node
    seen = {}
    for name, gpus in (("dnn", "1"), ("cpu", "0")):
        out = tmp_path / f"{name}.json"
        jid = submit("--name", name, "--cores", "1", "--gpus", gpus, "--",
                     sys.executable, "-c", OPEN_PROBE, str(out), *GPU_FILES)  # fmt: skip
        wait_for(lambda j=jid: store.job(j).state in FINAL_STATES, 30, f"job {name} to end")
        assert store.job(jid).state == "done", store.job(jid).message
        seen[name] = json.loads(out.read_text())
    granted = int(seen["dnn"]["CODA_GPU_IDS"])
    for i, path in enumerate(GPU_FILES):
        assert seen["dnn"][path] == ("opened" if i == granted else "Operation not permitted")
        assert seen["cpu"][path] == "Operation not permitted"
    # CUDA numbers what a job can open from 0, as under Slurm's ConstrainDevices.
    assert seen["dnn"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert seen["cpu"]["CUDA_VISIBLE_DEVICES"] == seen["cpu"]["CODA_GPU_IDS"] == ""
    assert "GPUs (isolated)" in agent.log.read_text()


def test_eliminator_writes_a_real_quota(node) -> None:
    agent, submit, store = node
    corunner = [
        "--contention",
        "0.4",
        "--corunner",
        str(cpu_dir(agent.parent, 2)),
        "--corunner-cpuset",
        str(cpuset_file(agent.parent, 2)),
    ]
    dnn = submit_training(agent, submit, "synth2", "--seconds", "90", *corunner)
    wait_for(lambda: store.job(dnn).phase == "converged", 60, "the allocator to converge")
    hog = submit(
        "--name",
        "membw",
        "--cores",
        "1",
        "--",
        sys.executable,
        "-m",
        "coda.runtime.workloads.membw",
        "--mib",
        "64",
        "--seconds",
        "60",
        "--quiet",
    )
    wait_for(lambda: store.job(hog).state == "running", 10, "the CPU job to start")
    assert set(parse_cpus(store.job(hog).cpus)).isdisjoint(parse_cpus(store.job(dnn).cpus))
    wait_for(lambda: store.job(hog).quota < 1.0, 30, "a throttle")
    assert 0 < quota_us(agent.parent, hog) < 100_000
    ref = store.job(dnn).reference
    wait_for(lambda: (store.job(dnn).throughput or 0) > 0.9 * ref, 20, "training to recover")


def test_eliminator_catches_a_co_runner_that_came_first(node) -> None:
    """The CPU job starts before the training job, so the allocator measures the
    training job beside it: that reference is not solo, a probe holds the CPU job at
    the floor for a moment, the solo speed becomes the reference and the CPU job is
    throttled against it (issue: a reference taken under contention hid it for good)."""
    agent, submit, store = node
    hog = submit(
        "--name", "membw", "--cores", "1", "--", sys.executable, "-m",
        "coda.runtime.workloads.membw", "--mib", "64", "--seconds", "90", "--quiet",
    )  # fmt: skip
    wait_for(lambda: store.job(hog).state == "running", 10, "the CPU job to start")
    dnn_id = hog + 1
    job = [
        sys.executable, SYNTH, "--cpuset-file", str(cpuset_file(agent.parent, dnn_id)),
        "--optimum", "1", "--seconds", "90", "--contention", "0.4",
        "--corunner", str(cpu_dir(agent.parent, hog)),
        "--corunner-cpuset", str(cpuset_file(agent.parent, hog)),
    ]  # fmt: skip
    dnn = submit("--name", "train", "--cores", "1", "--gpus", "1", "--model", "synth3", "--", *job)
    assert dnn == dnn_id
    wait_for(lambda: store.job(dnn).state == "running", 10, "the training job to start")
    wait_for(lambda: store.job(dnn).phase == "converged", 60, "the allocator to converge")
    wait_for(lambda: store.job(hog).quota < 1.0, 30, "a probe")
    wait_for(
        lambda: any(
            d["detail"].get("decision") in ("throttle", "fast_path")
            for d in store.decisions(limit=100, job_id=hog)
        ),
        60,
        "a throttle after the probe",
    )
    kinds = [d["detail"].get("decision") for d in store.decisions(limit=100, job_id=hog)]
    assert "solo_probe" in kinds and kinds.index("solo_probe") < kinds.index("probe_end")
    # Contended, the job ran at 600/s (1000 x (1 - 0.4)); alone, about 960/s: the
    # reference is the solo one, and throttled the job runs near it again.
    ref = store.job(dnn).reference
    assert ref is not None and ref > 850
    wait_for(lambda: (store.job(dnn).throughput or 0) > 0.85 * ref, 30, "training to recover")


def test_agent_killed_mid_run_readopts_its_jobs(node) -> None:
    agent, submit, store = node
    # Long enough to outlast the agent's restart (slower where emulated).
    long_job = submit("--name", "long", "--cores", "1", "--", "sleep", str(round(8 * WORK_SCALE)))
    wait_for(lambda: store.job(long_job).state == "running", 10, "the job to start")
    before = store.job(long_job)
    agent.kill(signal.SIGKILL)  # a crash: no cleanup at all
    assert alive(before.shim_pid, before.shim_start)
    queued = submit("--name", "while-down", "--cores", "1", "--", "sleep", "1")
    time.sleep(1)
    assert store.job(queued).state == "queued"  # nobody to start it
    agent.start()
    wait_for(lambda: store.job(queued).state == "done", 20, "the queued job to run")
    wait_for(lambda: store.job(long_job).state == "done", 20, "the long job to finish")
    row = store.job(long_job)
    assert row.launches == 1 and row.shim_pid == before.shim_pid and row.exit_code == 0
    acts = [d["action"] for d in store.decisions(limit=50, job_id=long_job)]
    assert acts.count("start") == 1 and acts.count("adopt") == 1 and acts.count("finish") == 1
    # Leaving cleanly removes what the agent made.
    agent.kill(signal.SIGTERM)
    assert not any(d.exists() for d in parent_dirs(agent.parent))


def test_real_training_job_is_slimmed(node) -> None:
    """The training-like workload (real data-loader worker processes), light on data
    preparation: one core keeps up with its GPU step, so the allocator gives one back."""
    agent, submit, store = node
    jid = submit(
        "--name",
        "light",
        "--cores",
        "2",
        "--gpus",
        "1",
        "--model",
        "light",
        "--",
        sys.executable,
        "-m",
        "coda.runtime.workloads.train",
        "--gpu-ms",
        "60",
        "--batch-images",
        "8",
        "--seconds",
        "120",
        "--quiet",
    )
    wait_for(lambda: store.job(jid).phase == "converged", 90, "the allocator to converge")
    row = store.job(jid)
    assert len(parse_cpus(row.cpus)) == 1, store.decisions(limit=20, job_id=jid)


def test_coda_run_and_status(node, tmp_path: Path) -> None:
    agent, submit, store = node
    base = [sys.executable, "-m", "coda.cli"]
    ok = subprocess.run(
        [
            *base,
            "run",
            "--state-dir",
            str(agent.state),
            "--name",
            "ok",
            "--",
            sys.executable,
            "-c",
            "print('hi')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "done" in ok.stdout
    bad = subprocess.run(
        [
            *base,
            "run",
            "--state-dir",
            str(agent.state),
            "--name",
            "bad",
            "--",
            sys.executable,
            "-c",
            "raise SystemExit(5)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 5
    st = subprocess.run(
        [*base, "status", "--state-dir", str(agent.state), "--all", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(st.stdout)
    assert data["agent"]["running"] is True
    assert [j["state"] for j in data["jobs"]] == ["done", "failed"]
    text = (agent.state / "metrics.prom").read_text()
    assert "coda_agent_ticks_total" in text


# ------------------------------------------------------------ who a job runs as
NOBODY = 65534


def as_user(uid: int, gid: int, argv: list[str]) -> tuple[int, str]:
    """Run `coda ARGV` in a forked child that has dropped to uid/gid (no groups) before
    it does anything: the agent sees that user through the socket's peer credentials.
    In-process, because this machine's Python lives where other users cannot read."""
    from coda.cli import main

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            os.dup2(w, 1)
            os.dup2(w, 2)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - pytest swapped them
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            try:
                main(argv, standalone_mode=True)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(w)
    out = b""
    with os.fdopen(r, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode()


@pytest.fixture
def public_node(tmp_path: Path) -> Iterator[tuple[Agent, Store, Path]]:
    """An agent whose run directory other users can reach (the pytest tmp dir cannot be)."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="coda-kt-", dir="/tmp"))
    os.chmod(base, 0o755)
    parent = f"coda-kt-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    agent = Agent(base / "state", parent, tmp_path / "agent.log")
    agent.start()
    store = Store(base / "state" / "coda.db")
    yield agent, store, base
    agent.kill(signal.SIGTERM)
    clear_parent(parent)
    store.close()
    shutil.rmtree(base)
    print((tmp_path / "agent.log").read_text())


def test_a_non_root_submit_runs_as_that_user_never_root(public_node) -> None:
    agent, store, base = public_node
    sd = str(agent.state)
    assert os.stat(sd).st_mode & 0o777 == 0o700  # nobody cannot read the state itself
    code, out = as_user(NOBODY, NOBODY, ["submit", "--state-dir", sd, "--cwd", "/tmp",
                                         "--name", "who", "--", "/bin/sh", "-c",
                                         "/usr/bin/id; sleep 2"])  # fmt: skip
    assert code == 0, out
    jid = int(out.strip().splitlines()[-1])
    # While it runs, its progress file is nobody's own, in the public run directory.
    pf = Path(f"{agent.state}.run") / "progress" / str(jid)
    wait_for(lambda: pf.exists(), 30, "nobody's job to start")
    assert os.stat(pf).st_uid == NOBODY and os.stat(pf).st_mode & 0o777 == 0o600
    wait_for(lambda: store.job(jid).state in ("done", "failed"), 30, "nobody's job to end")
    row = store.job(jid)
    assert row.state == "done", row
    assert (row.uid, row.gid, row.groups) == (NOBODY, NOBODY, [NOBODY])
    said = (agent.state / "jobs" / str(jid) / "stdout").read_text()
    assert said.startswith(f"uid={NOBODY}(") and f"gid={NOBODY}(" in said, said
    assert "groups=65534(" in said and "(root)" not in said, said
    assert not pf.exists()  # gone with its job
    code, out = as_user(NOBODY, NOBODY, ["logs", "--state-dir", sd, str(jid)])
    assert code == 0 and out == said, out  # its owner reads its output through the agent
    # Root's jobs: nobody sees no command and cancels nothing.
    mine = subprocess.run(
        [sys.executable, "-m", "coda.cli", "submit", "--state-dir", sd, "--name", "roots",
         "--env", "TOKEN=secret", "--", "sleep", "20"],
        capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    code, out = as_user(NOBODY, NOBODY, ["cancel", "--state-dir", sd, mine])
    assert code == 1 and "is not yours" in out, out
    code, out = as_user(NOBODY, NOBODY, ["status", "--state-dir", sd, mine, "--json"])
    assert code == 0 and "secret" not in out and json.loads(out)["jobs"][0]["argv"] == []
    assert store.job(int(mine)).cancel == 0
    subprocess.run([sys.executable, "-m", "coda.cli", "cancel", "--state-dir", sd, mine],
                   check=True, capture_output=True)  # fmt: skip


def test_the_real_supervisor_is_insulated_from_its_job(public_node) -> None:
    agent, store, base = public_node
    sd = str(agent.state)
    out = subprocess.run(
        [sys.executable, "-m", "coda.cli", "submit", "--state-dir", sd, "--name", "ins",
         "--env", "LD_PRELOAD=/nonexistent/evil.so", "--env", "PYTHONPATH=/nonexistent",
         "--", "sleep", "5"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    jid = int(out.stdout.strip().splitlines()[-1])
    wait_for(lambda: store.job(jid).shim_pid is not None, 20, "the job to start")
    shim = store.job(jid).shim_pid
    env = Path(f"/proc/{shim}/environ").read_bytes().split(b"\0")
    assert not [e for e in env if e.startswith((b"LD_", b"PYTHON"))], env
    children = Path(f"/proc/{shim}/task/{shim}/children")
    wait_for(lambda: children.read_text().split() != [], 20, "the shim to start the job")
    kids = children.read_text().split()

    def job_env() -> list[bytes]:
        return Path(f"/proc/{kids[0]}/environ").read_bytes().split(b"\0")

    # Between the fork and the exec the child still has the shim's environment.
    wait_for(lambda: b"LD_PRELOAD=/nonexistent/evil.so" in job_env(), 10, "the job's exec")
    assert b"LD_PRELOAD=/nonexistent/evil.so" in job_env()  # the job's own exec has it


def test_a_second_agent_on_the_same_cgroup_parent_is_refused(public_node, tmp_path) -> None:
    agent, store, base = public_node
    other = subprocess.run(
        [sys.executable, "-m", "coda.cli", "agent", "--state-dir", str(tmp_path / "other"),
         "--cgroup-parent", agent.parent, "--gpus", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert other.returncode == 1, other.stdout + other.stderr
    assert "another agent manages cgroup parent" in other.stderr + other.stdout
    assert "Traceback" not in other.stderr + other.stdout
    assert parent_dirs(agent.parent)[0].is_dir()  # the first one's parent is untouched


def _submit_raw_as(uid: int, sd: str, cwd: str) -> str:
    """A spec sent straight to the agent's socket as ``uid`` (no client-side checks, as
    an attacker would), in a forked child that dropped to that user: the answer's text."""
    from coda.runtime.client import SocketClient, socket_path
    from coda.runtime.jobspec import JobSpec

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            spec = JobSpec(argv=["/bin/true"], name="probe", cores=1, cwd=cwd)
            try:
                said = f"id {SocketClient(socket_path(sd)).submit(spec)}"
            except Exception as e:  # noqa: BLE001 - the answer is what is compared
                said = f"refused: {e}"
            os.write(w, said.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


def test_the_root_agent_is_no_oracle_for_directories_a_user_cannot_see(public_node) -> None:
    """Attack: as an unprivileged user, submit specs whose cwd is a directory only root
    can see into, one that exists and one that does not. The root agent must answer both
    alike (it used to check the cwd with isdir as root), and each job must fail at its
    start as its user, alike."""
    agent, store, base = public_node
    sd = str(agent.state)
    private = base / "private"
    (private / "exists").mkdir(parents=True)
    private.chmod(0o700)  # root's: nobody cannot look inside
    answers = {c: _submit_raw_as(NOBODY, sd, str(private / c)) for c in ("exists", "missing")}
    assert all(a.startswith("id ") for a in answers.values()), answers
    ids = {c: int(a.split()[1]) for c, a in answers.items()}
    for jid in ids.values():
        wait_for(lambda j=jid: store.job(j).state in ("done", "failed"), 30, "the job to end")
    rows = {c: store.job(j) for c, j in ids.items()}
    assert {r.state for r in rows.values()} == {"failed"}, rows
    said = {
        c: (agent.state / "jobs" / str(j) / "stderr").read_text().replace(c, "X")
        for c, j in ids.items()
    }
    assert said["exists"] == said["missing"], said
    assert "cannot enter that directory as the job's user" in said["exists"], said


def test_a_job_is_stopped_at_its_time_limit_even_if_it_ignores_sigterm(public_node) -> None:
    """Attack: a user's job with a one-second limit that ignores SIGTERM (backfill
    planned around that limit). The agent stops it at the limit, SIGKILL after the
    grace period, and records why."""
    agent, store, base = public_node
    sd = str(agent.state)
    t0 = time.monotonic()
    code, out = as_user(NOBODY, NOBODY, ["submit", "--state-dir", sd, "--cwd", "/tmp",
                                         "--name", "overrun", "--time", "0:01", "--",
                                         "/bin/sh", "-c", "trap '' TERM; sleep 120"])  # fmt: skip
    assert code == 0, out
    jid = int(out.strip().splitlines()[-1])
    wait_for(lambda: store.job(jid).state in FINAL_STATES, 40, "the job to be stopped")
    took = time.monotonic() - t0
    row = store.job(jid)
    assert row.state == "timeout" and "time limit (1 s)" in row.message, row
    assert took < 30, f"stopped after {took:.0f} s (limit 1 s, grace 5 s)"
    decisions = [d["action"] for d in store.decisions(limit=50, job_id=jid)]
    assert "time-limit" in decisions, decisions


@pytest.mark.parametrize("mode", ["requeue", "suspend"])
def test_a_suspended_job_loses_no_work(tmp_path: Path, mode: str) -> None:
    """bench/take_back.py's scenario, short: a CPU job doing 4 s of CPU work has its
    cores taken back by a DNN job 1 s in (both stretched alike where processes start
    slower: the job must still be running when the DNN job comes). Requeued, it runs
    twice and loses what it did; suspended (the cgroup freezer), it runs once and loses
    nothing."""
    take_back = load_bench("take_back")
    r = take_back.one_run(mode, 4.0 * WORK_SCALE, 1.0 * WORK_SCALE, 2.0, tmp_path)
    if mode == "suspend":
        assert (r["taken_back"], r["cpu_runs"], r["cpu_launches"]) == ("suspend", 1, 1), r
        assert r["cpu_lost_cpu_s"] == 0.0, r
    else:
        assert (r["taken_back"], r["cpu_runs"], r["cpu_launches"]) == ("preempt", 2, 2), r
        assert r["cpu_lost_cpu_s"] >= 0.3, r
