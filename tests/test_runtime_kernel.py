"""The node agent on the real kernel: `coda agent` as a process, real cgroup v1
cpusets and CFS quotas, real jobs, the agent killed and restarted mid-run.

Needs root and cgroup v1 cpuset/cpu mounts; runs in CI (root) and skips
elsewhere. The same logic is tested on a fake tree in test_runtime_agent.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coda.runtime.cgroups import CgroupError, detect, parse_cpus
from coda.runtime.cli import spawn_agent
from coda.runtime.shim import alive
from coda.runtime.store import Store


def _real_v1() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux (runs in CI as root)"
    try:
        drv = detect()
    except CgroupError as e:
        return f"needs cgroup v1/v2 cpuset and cpu controllers: {e}"
    if drv.version != 1:
        return "written for cgroup v1 paths (the machines CI runs on)"
    if len(os.sched_getaffinity(0)) < 2:
        return "needs at least 2 CPUs"
    return None


SKIP = _real_v1()
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

CG = Path("/sys/fs/cgroup")
SYNTH = str(Path(__file__).parent / "synthetic_job.py")


class Agent:
    """One `coda agent` process, started and stopped by its PID."""

    def __init__(self, state: Path, parent: str, log: Path) -> None:
        self.state, self.parent, self.log = state, parent, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [
            "--cgroup-parent",
            self.parent,
            "--gpus",
            "1",
            "--period",
            "0.2",
            "--window",
            "0.5",
            "--stall",
            "10",
        ]
        self.proc = spawn_agent(self.state, args, self.log)

    def kill(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Agent, Callable[..., int], Store]]:
    parent = f"coda-kt-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    state = tmp_path / "state"
    agent = Agent(state, parent, tmp_path / "agent.log")
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
    # Whatever is left: stop it by the pids its cgroups hold, then remove the groups.
    drv = detect(parent=parent)
    for name in drv.names():
        for p in drv.pids(name):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda n=name: not drv.pids(n), 10, "job processes to exit")
        drv.remove(name)
    drv.teardown()
    store.close()
    print((tmp_path / "agent.log").read_text())


def cpuset_file(parent: str, job: int) -> Path:
    return CG / "cpuset" / parent / f"job-{job}" / "cpuset.cpus"


def job_pids(parent: str, job: int) -> list[int]:
    try:
        return [
            int(x)
            for x in (CG / "cpuset" / parent / f"job-{job}" / "cgroup.procs").read_text().split()
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


def test_eliminator_writes_a_real_quota(node) -> None:
    agent, submit, store = node
    corunner = [
        "--contention",
        "0.4",
        "--corunner",
        str(CG / "cpu" / agent.parent / "job-2"),
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
    quota_us = int((CG / "cpu" / agent.parent / f"job-{hog}" / "cpu.cfs_quota_us").read_text())
    assert 0 < quota_us < 100_000
    ref = store.job(dnn).reference
    wait_for(lambda: (store.job(dnn).throughput or 0) > 0.9 * ref, 20, "training to recover")


def test_agent_killed_mid_run_readopts_its_jobs(node) -> None:
    agent, submit, store = node
    long_job = submit("--name", "long", "--cores", "1", "--", "sleep", "8")
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
    assert not (CG / "cpuset" / agent.parent).exists()
    assert not (CG / "cpu" / agent.parent).exists()


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
