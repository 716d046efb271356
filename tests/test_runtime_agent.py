"""The node agent on a fake cgroup tree with real processes: launch, reap, cancel,
the allocator's cpuset changes, the eliminator's throttles, stalls, reclaim,
crash and re-adoption, spec validation, metrics. Real-kernel versions are in
tests/test_runtime_kernel.py."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import CG, LOOSE_HARM, fake_v1_driver, tick_until

from coda.policy.framework import SetCores, SetQuota
from coda.runtime.agent import AgentConfig, Managed, NodeAgent
from coda.runtime.cgroups import parse_cpus
from coda.runtime.local_queue import local_agent
from coda.runtime.metrics import render
from coda.runtime.progress import read_progress
from coda.runtime.shim import alive, proc_start_time
from coda.runtime.store import JobSpec, SpecError, Store

HERE = Path(__file__).parent
SYNTH = str(HERE / "synthetic_job.py")


make_driver = fake_v1_driver


FAST = dict(period_s=0.1, window_s=0.3, settle_s=0.15, stall_s=1.5, gpus=1)


@pytest.fixture
def env(tmp_path: Path):
    drv = make_driver(tmp_path)
    store = Store(tmp_path / "state" / "coda.db")
    agents: list[NodeAgent] = []

    def new_agent(**cfg) -> NodeAgent:
        a = local_agent(store, drv, tmp_path / "state", AgentConfig(**{**FAST, **cfg}))
        for old in agents:  # the old one "crashed": the kernel dropped its parent lock
            old.source.parent.release()
        a.start()
        agents.append(a)
        return a

    yield tmp_path, drv, store, new_agent
    for a in agents:  # kill whatever a test left running, by the pids the cgroups hold
        for m in list(a.jobs.running.values()):
            a.processes.signal(m, 9)
    time.sleep(0.05)
    store.close()


def cg_file(tmp_path: Path, job_id: int, ctl: str, name: str) -> Path:
    return tmp_path / CG.lstrip("/") / ctl / "coda" / f"job-{job_id}" / name


def leftover_job_dir(tmp: Path, jid: int) -> Path:
    """A job directory as a crashed agent leaves it (0700, inside its 0700 jobs dir),
    whatever the umask."""
    jobs = tmp / "state" / "jobs"
    jobs.mkdir(mode=0o700, exist_ok=True)
    (jobs / str(jid)).mkdir(mode=0o700)
    return jobs / str(jid)


def submit(store: Store, argv: list[str], **kw) -> int:
    return store.submit(JobSpec(argv=argv, **kw))


def py(*args: str) -> list[str]:
    return [sys.executable, *args]


# ------------------------------------------------------------------ lifecycle
@pytest.mark.slow
def test_job_runs_in_its_cgroup_and_is_reaped(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    code = (
        "import os, time; print(os.environ['CODA_JOB_ID'], os.environ['CODA_PROGRESS_FILE']);"
        " time.sleep(1)"
    )
    jid = submit(store, py("-c", code), name="hello", cores=2)
    agent.tick()
    row = store.job(jid)
    assert row.state == "running" and row.launches == 1
    assert cg_file(tmp, jid, "cpuset", "cpuset.cpus").read_text().strip() in ("2-3", "2,3")
    procs_file = cg_file(tmp, jid, "cpuset", "cgroup.procs")
    tick_until(agent, lambda: procs_file.exists() and procs_file.read_text().split() != [])
    assert procs_file.read_text().split() == [str(row.shim_pid)]  # the shim joined first
    tick_until(agent, lambda: store.job(jid).state == "done")
    row = store.job(jid)
    assert row.exit_code == 0 and row.message == "exited 0"
    out = (tmp / "state" / "jobs" / str(jid) / "stdout").read_text().split()
    assert out[0] == str(jid) and out[1] == str(agent.source.supervisor.progress_file(jid))
    assert not cg_file(tmp, jid, "cpuset", "").exists()  # cgroup removed
    assert agent.node.free_cores == 4


def test_failing_and_missing_programs(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    bad = submit(store, py("-c", "raise SystemExit(3)"), name="bad")
    missing = submit(store, ["/nonexistent/program"], name="missing")
    tick_until(
        agent, lambda: store.job(bad).state == "failed" and store.job(missing).state == "failed"
    )
    assert store.job(bad).exit_code == 3
    assert store.job(missing).exit_code == 127
    err = (tmp / "state" / "jobs" / str(missing) / "stderr").read_text()
    assert "cannot start '/nonexistent/program'" in err


def test_cancel_stops_every_process(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    jid = submit(store, ["sleep", "60"], name="sleeper")
    agent.tick()
    shim = store.job(jid).shim_pid
    store.request_cancel(jid)
    tick_until(agent, lambda: store.job(jid).state == "cancelled")
    assert not alive(shim, store.job(jid).shim_start)


def test_queued_job_cancels_at_once(env) -> None:
    tmp, drv, store, new_agent = env
    jid = submit(store, ["sleep", "1"], name="q")
    assert store.request_cancel(jid).state == "cancelled"


def test_cpu_jobs_queue_fifo_when_cores_run_out(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent(gpus=0)
    a = submit(store, ["sleep", "30"], name="a", cores=3)
    b = submit(store, ["sleep", "30"], name="b", cores=2)
    c = submit(store, ["sleep", "30"], name="c", cores=1)
    agent.tick()
    # FIFO within the CPU array: c fits but waits behind b.
    assert [store.job(j).state for j in (a, b, c)] == ["running", "queued", "queued"]
    store.request_cancel(a)
    tick_until(agent, lambda: store.job(b).state == "running" and store.job(c).state == "running")


def test_oversized_job_fails_with_reason(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    jid = submit(store, ["sleep", "1"], name="big", cores=8)
    agent.tick()
    row = store.job(jid)
    assert row.state == "failed" and "node has 1 / 4" in row.message


# ------------------------------------------------------------------ allocator
def synth(tmp: Path, jid: int, *extra: str) -> list[str]:
    return py(SYNTH, "--cpuset-file", str(cg_file(tmp, jid, "cpuset", "cpuset.cpus")), *extra)


@pytest.mark.slow
def test_allocator_slims_to_the_optimum_and_frees_cores(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    jid = 1
    assert (
        submit(
            store,
            synth(tmp, jid, "--optimum", "2", "--seconds", "60"),
            name="train",
            cores=4,
            gpus=1,
            model="synth",
        )
        == jid
    )
    tick_until(agent, lambda: store.job(jid).phase == "converged", timeout=40)
    row = store.job(jid)
    assert row.cpus == "0-1"
    assert agent.node.free_cores == 2
    decisions = store.decisions(limit=50, job_id=jid)
    moves = [d for d in decisions if d["action"] == "set-cores"]
    assert moves and moves[-1]["detail"]["to"] == 2
    assert moves[-1]["detail"]["why"]["levels"]  # the measurements behind it
    assert row.reference == pytest.approx(1000, rel=0.1)
    # What it learned is kept: the next agent starts jobs of this model at 2 cores.
    assert json.loads(store.meta("learned_profiles"))["profiles"][0]["cores"] == [[2, 1]]


@pytest.mark.slow
def test_eliminator_throttles_a_corunner_that_slows_training(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent(tune=LOOSE_HARM)  # the hog is seconds old: a loose harm budget
    dnn = 1
    cpu_job = 2
    extra = [
        "--optimum",
        "2",
        "--seconds",
        "90",
        "--contention",
        "0.4",
        "--corunner",
        str(cg_file(tmp, cpu_job, "cpu", "")),
        "--corunner-cpuset",
        str(cg_file(tmp, cpu_job, "cpuset", "cpuset.cpus")),
    ]
    submit(store, synth(tmp, dnn, *extra), name="train", cores=4, gpus=1, model="synth")
    tick_until(agent, lambda: store.job(dnn).phase == "converged", timeout=40)
    submit(store, ["sleep", "60"], name="hog", cores=2)
    tick_until(agent, lambda: store.job(cpu_job).state == "running")
    assert store.job(cpu_job).cpus == "2-3"  # on the cores slimming freed
    tick_until(agent, lambda: store.job(cpu_job).quota < 1.0, timeout=15)
    quota = int(cg_file(tmp, cpu_job, "cpu", "cpu.cfs_quota_us").read_text())
    assert 0 < quota < 200_000
    throttles = [d for d in store.decisions(limit=50, job_id=cpu_job) if d["action"] == "set-quota"]
    assert throttles[0]["component"] == "eliminator"
    assert throttles[0]["detail"]["min_ratio"] < 0.9
    # The training job's throughput comes back.
    ref = store.job(dnn).reference
    tick_until(agent, lambda: (store.job(dnn).throughput or 0) > 0.9 * ref, timeout=10)


@pytest.mark.slow
def test_a_silent_job_is_not_trusted(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    jid = 1
    submit(
        store,
        synth(tmp, jid, "--optimum", "2", "--seconds", "60", "--silent-after", "1.0"),
        name="quiet",
        cores=2,
        gpus=1,
        model="q",
    )
    tick_until(agent, lambda: store.job(jid).phase == "stalled", timeout=10)
    kinds = [d["action"] for d in store.decisions(limit=20, job_id=jid)]
    assert "stalled" in kinds
    assert agent.jobs.running[jid].job.cores_pn == 2  # back to / kept at its request
    assert render(agent).count('coda_job_stalled{job="1"') == 1


@pytest.mark.slow
@pytest.mark.parametrize("gpus", [0, 1])
def test_a_restarted_progress_count_gives_no_rate_and_stops_nothing(env, gpus: int) -> None:
    """A second Reporter in one job (e.g. one per epoch) counts from 0 again: the rate
    across it would be negative, which the agent must not record (its rows would read
    as damaged and stop every command)."""
    tmp, drv, store, new_agent = env
    agent = new_agent()
    code = (
        "import time\nfrom coda.runtime.progress import Reporter\n"
        "for n in (1000, 10):\n"
        "    r = Reporter()\n"
        "    for _ in range(6):\n"
        "        r.step(n // 6); time.sleep(0.25)\n"
        "    r.close()\n"
    )
    jid = submit(store, py("-c", code), name="epochs", cores=1, gpus=gpus, model="e")
    seen: list[float] = []

    def done() -> bool:
        row = store.job(jid)
        if row.throughput is not None:
            seen.append(row.throughput)
        return row.state == "done"

    tick_until(agent, done)
    assert seen and min(seen) >= 0, seen
    assert store.jobs() and store.job(jid).state == "done"


def test_dnn_job_reclaims_cores_from_cpu_jobs(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent(tune=LOOSE_HARM)  # the hog is seconds old: a loose budget
    hog = submit(store, ["sleep", "60"], name="hog", cores=4)
    agent.tick()
    # IdleGpuReserve: a 4-core CPU job cannot fit beside the idle GPU's reserve, so it
    # may go; the DNN job arriving later takes cores back (shrink to half, then preempt).
    assert store.job(hog).state == "running"
    dnn = submit(store, ["sleep", "60"], name="train", cores=3, gpus=1)
    agent.tick()
    assert store.job(dnn).state == "running"
    row = store.job(hog)
    assert row.state == "queued" and row.preemptions == 1
    acts = [d["action"] for d in store.decisions(limit=20, job_id=hog)]
    assert "preempt" in acts


# Writes its checkpoint (argv[1]) and stops on SIGTERM, or (argv[3] "ignore") ignores
# it; says it is ready (argv[2]) once its handler is in place.
CHECKPOINTER = (
    "import pathlib, signal, sys, time\n"
    "def stop(*_):\n"
    "    pathlib.Path(sys.argv[1]).write_text('saved')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[3] == 'ignore' else stop)\n"
    "pathlib.Path(sys.argv[2]).write_text('ready')\n"
    "time.sleep(60)\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("stops", [True, False])
def test_a_job_that_checkpoints_is_told_before_it_is_taken_back(env, tmp_path, stops) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent(tune=LOOSE_HARM, kill_grace_s=3.0)
    saved, ready = tmp_path / f"ckpt-{stops}", tmp_path / f"ready-{stops}"
    argv = py("-c", CHECKPOINTER, str(saved), str(ready), "stop" if stops else "ignore")
    hog = submit(store, argv, name="hog", cores=4, checkpoints=True)
    agent.tick()
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:  # its handler is in place
        time.sleep(0.02)
    dnn = submit(store, ["sleep", "60"], name="train", cores=3, gpus=1)
    agent.tick()
    # Told, not stopped: the DNN job waits for its cores.
    acts = [d["action"] for d in store.decisions(limit=20, job_id=hog)]
    assert "preempt-warned" in acts and "preempt" not in acts, store.job(hog)
    assert store.job(dnn).state == "queued" and store.job(hog).state == "running"
    tick_until(agent, lambda: store.job(dnn).state == "running", timeout=10)
    row = store.job(hog)
    assert row.state == "queued" and row.preemptions == 1  # requeued, never "done"
    assert saved.exists() is stops  # the one that handled it wrote its checkpoint
    at = {d["action"]: d["detail"]["mono"] for d in store.decisions(limit=20, job_id=hog)}
    assert "finish" not in at
    # The cores came back when it stopped, or at the end of its grace if it did not.
    waited = at["preempt"] - at["preempt-warned"]
    assert waited < 3.0 if stops else waited >= 3.0


@pytest.mark.slow
def test_a_job_told_to_checkpoint_can_still_be_cancelled(env, tmp_path) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent(tune=LOOSE_HARM, kill_grace_s=3.0)
    saved, ready = tmp_path / "ckpt", tmp_path / "ready"
    hog = submit(store, py("-c", CHECKPOINTER, str(saved), str(ready), "ignore"), name="hog",
                 cores=4, checkpoints=True)  # fmt: skip
    agent.tick()
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    submit(store, ["sleep", "60"], name="train", cores=3, gpus=1)
    agent.tick()
    assert "preempt-warned" in [d["action"] for d in store.decisions(limit=20, job_id=hog)]
    store.request_cancel(hog)
    tick_until(agent, lambda: store.job(hog).state == "cancelled", timeout=15)
    assert store.job(hog).preemptions == 0  # its owner's cancel wins: not requeued


def test_shrink_before_preempt(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent(tune=LOOSE_HARM)
    hog = submit(store, ["sleep", "60"], name="hog", cores=4)
    agent.tick()
    dnn = submit(store, ["sleep", "60"], name="train", cores=2, gpus=1)
    agent.tick()
    assert store.job(dnn).state == "running"
    row = store.job(hog)
    assert row.state == "running" and row.cpus == "2-3"  # shrunk to half its request
    assert cg_file(tmp, hog, "cpuset", "cpuset.cpus").read_text().strip() in ("2-3", "2,3")


# ------------------------------------------------------------------ suspend
def running_hog(env, **cfg):
    """An agent that suspends, and a 4-core CPU job running under it."""
    tmp, drv, store, new_agent = env
    agent = new_agent(tune=LOOSE_HARM, take_back="suspend", **cfg)
    hog = submit(store, ["sleep", "60"], name="hog", cores=4)
    tick_until(agent, lambda: store.job(hog).shim_pid is not None)
    return agent, hog


def suspend_for_dnn(agent, store: Store, hog: int, dnn_s: int = 60) -> int:
    """A 3-core DNN job of ``dnn_s`` seconds that takes the hog's cores: the hog is
    suspended for it."""
    dnn = submit(store, ["sleep", str(dnn_s)], name="train", cores=3, gpus=1)
    agent.tick()
    assert store.job(hog).state == "suspended"
    return dnn


def wait_gone(pid: int, start: int) -> bool:
    """Whether the process is gone within 5 s."""
    deadline = time.monotonic() + 5
    while alive(pid, start) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid, start)


@pytest.mark.slow
def test_a_suspended_job_is_frozen_and_thawed_where_it_was(env) -> None:
    tmp, drv, store, new_agent = env
    agent, hog = running_hog(env)
    shim = store.job(hog).shim_pid
    dnn = suspend_for_dnn(agent, store, hog, dnn_s=1)
    assert store.job(dnn).state == "running"
    row = store.job(hog)
    assert (row.state, row.preemptions, row.cpus) == ("suspended", 1, "")
    assert cg_file(tmp, hog, "freezer", "freezer.state").read_text().strip() == "FROZEN"
    assert alive(shim, row.shim_start)  # kept, not killed
    assert hog in agent.jobs.suspended and hog not in agent.jobs.running
    assert agent.node.free_cores == 1  # its cores went to the DNN job
    # The DNN job ends: the same process is thawed, on the cores the cycle gave it.
    tick_until(agent, lambda: store.job(hog).state == "running")
    row = store.job(hog)
    assert row.shim_pid == shim and row.launches == 1 and row.cpus != ""
    assert cg_file(tmp, hog, "freezer", "freezer.state").read_text().strip() == "THAWED"
    acts = [d["action"] for d in store.decisions(limit=20, job_id=hog)]
    assert "suspend" in acts and "resume" in acts and "preempt" not in acts


def test_take_back_is_checked() -> None:
    with pytest.raises(ValueError, match="take_back must be requeue or suspend"):
        AgentConfig(take_back="pause")


def test_a_suspended_job_can_be_cancelled(env) -> None:
    tmp, drv, store, new_agent = env
    agent, hog = running_hog(env)
    shim, start = store.job(hog).shim_pid, store.job(hog).shim_start
    suspend_for_dnn(agent, store, hog)
    store.request_cancel(hog)
    agent.tick()
    assert store.job(hog).state == "cancelled" and hog not in agent.jobs.suspended
    assert wait_gone(shim, start)
    assert not cg_file(tmp, hog, "cpuset", "").exists()


@pytest.mark.slow
def test_a_suspended_job_is_found_again_by_a_restarted_agent(env) -> None:
    tmp, drv, store, new_agent = env
    agent, hog = running_hog(env)
    shim = store.job(hog).shim_pid
    dnn = suspend_for_dnn(agent, store, hog, dnn_s=2)
    again = new_agent(tune=LOOSE_HARM, take_back="suspend")  # the first one "crashed"
    assert hog in again.jobs.suspended and store.job(hog).state == "suspended"
    tick_until(again, lambda: store.job(dnn).state == "done")
    tick_until(again, lambda: store.job(hog).state == "running")
    assert store.job(hog).shim_pid == shim and store.job(hog).launches == 1


def test_a_job_the_freezer_refuses_is_requeued(env) -> None:
    tmp, drv, store, new_agent = env
    agent, hog = running_hog(env)
    state = cg_file(tmp, hog, "freezer", "freezer.state")
    state.unlink(missing_ok=True)
    state.mkdir()  # a directory where the file should be: the freezer's write fails
    dnn = submit(store, ["sleep", "60"], name="train", cores=3, gpus=1)
    agent.tick()
    assert store.job(dnn).state == "running"
    assert store.job(hog).state == "queued" and store.job(hog).preemptions == 1
    acts = [d["action"] for d in store.decisions(limit=20, job_id=hog)]
    assert "suspend-failed" in acts and "preempt" in acts


def test_a_suspended_job_that_can_no_longer_fit_is_ended_not_left_frozen(env) -> None:
    tmp, drv, store, new_agent = env
    agent, hog = running_hog(env)
    shim, start = store.job(hog).shim_pid, store.job(hog).shim_start
    suspend_for_dnn(agent, store, hog)
    again = new_agent(tune=LOOSE_HARM, take_back="suspend", cpus=[0, 1])  # 2 of its 4
    # Ended at the first tick whose SIGKILL leaves nothing behind (its shim must exit
    # too; on a loaded machine that may take past one tick's wait): each tick tries.
    tick_until(again, lambda: store.job(hog).state != "suspended")
    row = store.job(hog)
    assert row.state == "failed" and "needs 0 GPUs / 4 cores" in row.message, row
    assert hog not in again.jobs.suspended
    assert wait_gone(shim, start)


def test_a_suspended_job_that_died_is_lost(env) -> None:
    tmp, drv, store, new_agent = env
    agent, hog = running_hog(env)
    suspend_for_dnn(agent, store, hog)
    m = agent.jobs.suspended[hog]
    agent.processes.signal(m, signal.SIGKILL)  # the OOM killer's pick, say
    if m.popen is not None:
        m.popen.wait(timeout=5)
    tick_until(agent, lambda: store.job(hog).state == "lost")
    assert hog not in agent.jobs.suspended and store.job(hog).message == "ended while suspended"


def test_a_running_job_found_frozen_is_thawed(env) -> None:
    """An agent that died between freezing a job and writing its row: the next one
    finds the job running, and frozen, and thaws it."""
    tmp, drv, store, new_agent = env
    agent = new_agent()
    jid = submit(store, ["sleep", "60"], name="cpu", cores=1)
    tick_until(agent, lambda: store.job(jid).shim_pid is not None)
    state = cg_file(tmp, jid, "freezer", "freezer.state")
    state.write_text("FROZEN\n")
    new_agent()
    assert store.job(jid).state == "running"
    assert state.read_text().strip() == "THAWED"


# ------------------------------------------------------------------ restart
@pytest.mark.slow
def test_crashed_agent_is_replaced_and_jobs_readopted(env) -> None:
    tmp, drv, store, new_agent = env
    first = new_agent()
    jid = submit(store, py("-c", "import time; time.sleep(2.5)"), name="long", cores=2)
    first.tick()
    row = store.job(jid)
    # The first agent dies without a word: no shutdown, its in-memory state is gone
    # (and the kernel drops its lock on the cgroup parent).
    first.source.parent.release()
    second = local_agent(store, drv, tmp / "state", AgentConfig(**FAST))
    second.start()
    assert jid in second.jobs.running and second.jobs.running[jid].shim_pid == row.shim_pid
    assert second.node.free_cores == 2
    tick_until(second, lambda: store.job(jid).state == "done", timeout=10)
    assert store.job(jid).launches == 1  # never started twice
    acts = [d["action"] for d in store.decisions(limit=20, job_id=jid)]
    assert acts.count("start") == 1 and "adopt" in acts


@pytest.mark.slow
@pytest.mark.parametrize(("runs_s", "state"), [(1.6, "timeout"), (0.2, "done")])
def test_a_job_that_ended_while_no_agent_ran_is_judged_by_its_limit(env, runs_s, state) -> None:
    """Ended while the agent was down: past its time limit it is stopped at it (as the
    agent would have done), before it an ordinary end."""
    tmp, drv, store, new_agent = env
    first = new_agent()
    jid = submit(store, py("-c", f"import time; time.sleep({runs_s})"), name="q",
                 time_limit_s=1.0)  # fmt: skip
    first.tick()
    m: Managed = first.jobs.running[jid]
    first.source.parent.release()  # it died before the limit came
    m.popen.wait(timeout=10)
    second = local_agent(store, drv, tmp / "state", AgentConfig(**FAST))
    second.start()
    assert store.job(jid).state == state


def test_job_that_ended_while_no_agent_ran_is_recorded(env) -> None:
    tmp, drv, store, new_agent = env
    first = new_agent()
    jid = submit(store, py("-c", "raise SystemExit(4)"), name="quick")
    first.tick()
    m: Managed = first.jobs.running[jid]
    m.popen.wait(timeout=10)
    first.source.parent.release()  # it died
    second = local_agent(store, drv, tmp / "state", AgentConfig(**FAST))
    second.start()
    row = store.job(jid)
    assert row.state == "failed" and row.exit_code == 4
    assert not cg_file(tmp, jid, "cpuset", "").exists()


def test_interrupted_launch_is_requeued_not_doubled(env) -> None:
    tmp, drv, store, new_agent = env
    jid = submit(store, ["sleep", "1"], name="x")
    store.update(jid, state="starting", launches=1)  # crashed before the process existed
    agent = new_agent()
    assert store.job(jid).state == "queued"
    agent.tick()
    assert store.job(jid).state == "running" and store.job(jid).launches == 2


def test_vanished_supervisor_is_lost_not_restarted(env) -> None:
    tmp, drv, store, new_agent = env
    jid = submit(store, ["sleep", "1"], name="x")
    leftover_job_dir(tmp, jid)
    (tmp / "state" / "jobs" / str(jid) / "shim.pid").write_text('{"pid": 1, "start": -5}')
    store.update(jid, state="running", launches=1, shim_pid=1, shim_start=-5, cpus="0")
    new_agent()
    row = store.job(jid)
    assert row.state == "lost" and row.launches == 1


def test_shutdown_keeps_jobs_and_releases_throttles(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    jid = submit(store, ["sleep", "30"], name="s", cores=1)
    agent.tick()
    m = agent.jobs.running[jid]
    agent.actuator.set_quota(m, 0.3, time.monotonic(), "test", None)
    assert int(cg_file(tmp, jid, "cpu", "cpu.cfs_quota_us").read_text()) == 30_000
    agent.shutdown()
    assert int(cg_file(tmp, jid, "cpu", "cpu.cfs_quota_us").read_text()) == -1
    assert alive(m.shim_pid, m.shim_start)  # still running, for the next agent
    assert cg_file(tmp, jid, "cpuset", "").exists()
    agent.shutdown(stop_jobs=True)
    assert store.job(jid).state == "cancelled"
    assert not (tmp / CG.lstrip("/") / "cpuset" / "coda").exists()  # parent removed too


# ------------------------------------------------------------------ specs
@pytest.mark.parametrize(
    "spec, msg",
    [
        (dict(argv=[]), "command is empty"),
        (dict(argv=["x"], name="../etc"), "not allowed"),
        (dict(argv=["x"], name="a/b"), "not allowed"),
        (dict(argv=["x"], name="-rf"), "not allowed"),
        (dict(argv=["x"], cores=0), "cores must be"),
        (dict(argv=["x"], gpus=-1), "gpus must be"),
        (dict(argv=["x"], cwd="relative"), "working directory"),
        (dict(argv=["x"], env={"CODA_JOB_ID": "7"}), "set by the agent"),
        (dict(argv=["x"], env={"A B": "1"}), "not allowed"),
        (dict(argv=["x\0y"]), "NUL"),
        (dict(argv=["x"], model="../m"), "model name"),
        # A program whose name is no job name: the error says so, and how to name it.
        (dict(argv=["./my job.sh"]), r"program's name 'my job.sh' .*give a name \(--name"),
        (dict(argv=["/bin/-rf"]), "program's name '-rf'"),
    ],
)
def test_bad_specs_are_refused(spec: dict, msg: str) -> None:
    with pytest.raises(SpecError, match=msg):
        JobSpec(**spec).validate()


def test_spec_from_json_rejects_unknown_keys() -> None:
    with pytest.raises(SpecError, match="unknown key"):
        JobSpec.from_dict({"argv": ["x"], "shell": True})
    with pytest.raises(SpecError, match="needs 'argv'"):
        JobSpec.from_dict({"name": "x"})


def test_spec_limits_from_the_node() -> None:
    with pytest.raises(SpecError, match="this node has 2"):
        JobSpec(argv=["x"], cores=3).validate(node_cores=2)


def test_commands_never_go_through_a_shell(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    marker = tmp / "pwned"
    jid = submit(store, ["echo", f"hi; touch {marker}"], name="echo")
    tick_until(agent, lambda: store.job(jid).state == "done")
    assert not marker.exists()
    assert (
        tmp / "state" / "jobs" / str(jid) / "stdout"
    ).read_text().strip() == f"hi; touch {marker}"


def test_metrics_render(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    submit(store, ["sleep", "5"], name="m", cores=1)
    agent.tick()
    from prometheus_client.parser import text_string_to_metric_families

    text = render(agent)
    assert "# TYPE coda_job_cores gauge" in text
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert got[("coda_job_cores", (("job", "1"), ("kind", "cpu"), ("name", "m#1")))] == 1
    assert got[("coda_node_free_cores", ())] == 3
    decision = (("action", "start"), ("component", "scheduler"))
    assert got[("coda_agent_decisions_total", decision)] == 1


@pytest.mark.slow
def test_progress_file_is_where_the_job_writes(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    code = (
        "import time; from coda.runtime.progress import Reporter; r = Reporter(); "
        "r.step(42); r.close(); time.sleep(1.5)"
    )
    jid = submit(store, py("-c", code), name="p")
    path = agent.source.supervisor.progress_file(jid)
    assert path == tmp / "state.run" / "progress" / str(jid)

    def record():
        return read_progress(path, owner=os.geteuid())

    tick_until(agent, lambda: record() is not None)
    assert os.stat(path).st_mode & 0o777 == 0o600
    rec = record()
    assert rec is not None and rec.samples == 42 and rec.pid != os.getpid()
    tick_until(agent, lambda: store.job(jid).state == "done")
    assert not path.exists()  # an ended job's file goes with it


# ------------------------------------------------------------------ tuning
def test_tune_policy_overrides_and_validates() -> None:
    from coda.policy import make_policy
    from coda.policy.tune import tune_policy

    pol = make_policy("coda")
    tune_policy(
        pol,
        {
            "eliminator.step_down": "0.5",
            "allocator.max_windows": "24",
            "allocator.search": "false",
            "eliminator.period_s": "2",
        },
    )
    assert pol.node_control.config.step_down == 0.5 and pol.node_control.period_s == 2.0
    assert pol.job_control.config.max_windows == 24 and pol.job_control.config.search is False
    with pytest.raises(ValueError, match="unknown field"):
        tune_policy(pol, {"eliminator.nope": "1"})
    with pytest.raises(ValueError, match="expected a finite float"):
        tune_policy(pol, {"eliminator.step_down": "fast"})
    for odd in ("\u0660.\u0665", "1_6", "\uff11"):  # Arabic-Indic, a separator, full-width
        with pytest.raises(ValueError, match="expected a finite"):
            tune_policy(pol, {"allocator.max_windows": odd, "eliminator.step_down": "0.5"})
        with pytest.raises(ValueError, match="expected a finite"):
            tune_policy(pol, {"eliminator.step_down": odd})
    with pytest.raises(ValueError, match=r"step_down must be in \(0, 1\]"):
        tune_policy(pol, {"eliminator.step_down": "1.5"})
    with pytest.raises(ValueError, match="has no 'eliminator'"):
        tune_policy(make_policy("static-separate"), {"eliminator.window": "3"})


# ----------------------------------------- shims, cancels, restarts and the books when a step fails


def test_a_shim_that_cannot_join_fails_the_job_not_the_agent(env) -> None:
    # The shim could not join the job's cgroup: it never starts the job, records exit
    # 125 and says why in the job's stderr; the agent reaps it like any ended job.
    tmp, drv, store, new_agent = env
    agent = new_agent()
    drv.procs_files = lambda name: [str(tmp / "missing" / "cgroup.procs")]
    jid = submit(store, ["sleep", "5"], name="nojoin")
    tick_until(agent, lambda: store.job(jid).state == "failed")
    row = store.job(jid)
    assert row.exit_code == 125
    assert "cannot set the job up" in (agent.source.supervisor.job_dir(jid) / "stderr").read_text()
    assert not agent.jobs.running and agent.node.free_cores == 4 and len(agent.jobs.free_cpus) == 4
    assert not cg_file(tmp, jid, "cpuset", "").exists()


def test_a_cancelled_job_never_starts_again(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    # Cancelled while running, then preempted (or its launch requeued): queued + cancel.
    jid = submit(store, ["sleep", "30"], name="c")
    store.update(jid, cancel=1)
    agent.tick()
    row = store.job(jid)
    assert row.state == "cancelled" and row.launches == 0 and not agent.jobs.running
    # `coda cancel` lands between _admit reading the queued row and the launch.
    jid2 = submit(store, ["sleep", "30"], name="d")
    real = agent.source.bind

    def racing(start):
        store.request_cancel(start.job.idx)
        return real(start)

    agent.source.bind = racing
    agent.tick()
    row = store.job(jid2)
    assert row.state == "cancelled" and row.launches == 0 and not agent.jobs.running
    assert agent.node.free_cores == 4 and len(agent.jobs.free_cpus) == 4


def test_readoption_restores_the_quota_the_database_has(env) -> None:
    tmp, drv, store, new_agent = env
    first = new_agent()
    jid = submit(store, ["sleep", "30"], name="q", cores=1)
    first.tick()
    # The first agent throttled the job in the kernel and died before its flush.
    cg_file(tmp, jid, "cpu", "cpu.cfs_quota_us").write_text("10000")
    assert store.job(jid).quota == 1.0
    second = new_agent()
    assert second.jobs.running[jid].job.quota == 1.0
    assert int(cg_file(tmp, jid, "cpu", "cpu.cfs_quota_us").read_text()) == -1


def test_restart_with_fewer_cpus_keeps_the_books(env) -> None:
    tmp, drv, store, new_agent = env
    first = new_agent(gpus=0)
    run = submit(store, ["sleep", "30"], name="run", cores=1)  # CPU jobs: from CPU 3 down
    first.tick()
    assert store.job(run).cpus == "3"
    dead = submit(store, ["sleep", "30"], name="dead", cores=1)
    store.update(dead, state="running", launches=1, shim_pid=1, shim_start=-5, cpus="2")
    second = new_agent(gpus=0, cpus=[0, 1])  # restarted managing CPUs 0-1 only
    assert store.job(dead).state == "lost"
    m = second.jobs.running[run]
    assert m.cpus == [1]  # moved onto a CPU it manages, in the kernel too
    assert cg_file(tmp, run, "cpuset", "cpuset.cpus").read_text().strip() == "1"
    assert second.jobs.free_cpus == {0} and second.node.free_cores == 1  # 2 and 3 are not ours


def test_a_forged_shim_pid_file_is_not_signalled(env, tmp_path: Path) -> None:
    # Crash between starting the shim and recording its pid: the agent reads the pid
    # file, which the job itself can write. A pid outside the job's cgroup is ignored.
    tmp, drv, store, new_agent = env
    decoy = subprocess.Popen(["sleep", "30"])
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"
    stubborn = subprocess.Popen([sys.executable, "-c", code])
    try:
        jid = submit(store, ["sleep", "30"], name="forged")
        drv.setup()
        drv.create(f"job-{jid}")
        drv.set_cpus(f"job-{jid}", [3])
        drv.add_pid(f"job-{jid}", stubborn.pid)
        jdir = leftover_job_dir(tmp, jid)
        forged = {"pid": decoy.pid, "start": proc_start_time(decoy.pid)}
        (jdir / "shim.pid").write_text(json.dumps(forged))
        store.update(jid, state="starting", launches=1, cpus="3")
        time.sleep(0.2)  # let the stubborn job install its handler
        agent = new_agent(kill_grace_s=0.3)
        m = agent.jobs.running[jid]
        assert m.shim_pid is None  # adopted by its cgroup, not by the forged file
        store.request_cancel(jid)
        # Adopted without a supervisor and deaf to SIGTERM: SIGKILL after the grace.
        tick_until(agent, lambda: store.job(jid).state == "cancelled", timeout=10)
        assert stubborn.wait(timeout=5) == -9
        assert decoy.poll() is None  # never signalled
    finally:
        for p in (decoy, stubborn):
            p.kill()
            p.wait()


def test_started_job_with_untrusted_pid_file_is_lost_not_requeued(env) -> None:
    tmp, drv, store, new_agent = env
    jid = submit(store, ["sleep", "30"], name="gone")
    jdir = leftover_job_dir(tmp, jid)
    (jdir / "shim.pid").write_text('{"pid": 1, "start": -5}')  # it started, then vanished
    store.update(jid, state="starting", launches=1, cpus="3")
    new_agent()
    row = store.job(jid)
    assert row.state == "lost" and row.launches == 1


def test_the_shim_does_not_import_from_the_jobs_cwd(env, tmp_path: Path) -> None:
    # `python -m` puts the cwd first on sys.path: a json.py there replaced the shim's.
    tmp, drv, store, new_agent = env
    work = tmp_path / "work"
    work.mkdir()
    (work / "json.py").write_text("raise SystemExit(42)\n")
    agent = new_agent()
    jid = submit(store, py("-c", "pass"), name="cwd", cwd=str(work))
    tick_until(agent, lambda: store.job(jid).state in ("done", "failed", "lost"))
    assert store.job(jid).state == "done"


def check_invariants(agent: NodeAgent, tmp: Path, store: Store) -> None:
    node = agent.node
    assert node is not None
    managed = set(range(node.cores))  # the fake tree has CPUs 0-3, all managed
    held: list[int] = [c for m in agent.jobs.running.values() for c in m.cpus]
    assert len(held) == len(set(held)), f"a CPU held twice: {sorted(held)}"
    assert not set(held) & agent.jobs.free_cpus, "a held CPU is also free"
    assert set(held) | agent.jobs.free_cpus == managed
    assert len(held) == node.cores - node.free_cores
    assert node.cpu_job_cores == sum(
        len(m.cpus) for m in agent.jobs.running.values() if m.job.kind == "cpu"
    )
    gpus = [g for m in agent.jobs.running.values() for g in m.gpu_ids]
    assert len(gpus) == len(set(gpus)) and not set(gpus) & agent.jobs.free_gpus
    assert node.free_gpus == node.gpus - len(gpus) == len(agent.jobs.free_gpus)
    assert set(node.jobs) == {m.job for m in agent.jobs.running.values()}
    for m in agent.jobs.running.values():
        assert m.job.cores_pn == len(m.cpus) >= 1
        assert parse_cpus(cg_file(tmp, m.row_id, "cpuset", "cpuset.cpus").read_text()) == sorted(
            m.cpus
        )
        q = int(cg_file(tmp, m.row_id, "cpu", "cpu.cfs_quota_us").read_text())
        want = -1 if m.job.quota >= 1.0 else max(1000, round(m.job.quota * len(m.cpus) * 100_000))
        assert q == want, (m.row_id, q, want)
    active = {r.id for r in store.jobs(("starting", "running"))}
    assert active == set(agent.jobs.running), (active, set(agent.jobs.running))


@pytest.mark.slow
def test_random_sequences_keep_the_books(tmp_path: Path) -> None:
    drv = make_driver(tmp_path)
    store = Store(tmp_path / "state" / "coda.db")
    cfg = AgentConfig(**{**FAST, "gpus": 2})
    agents: list[NodeAgent] = []

    def new_agent() -> NodeAgent:
        a = local_agent(store, drv, tmp_path / "state", cfg)
        for old in agents:  # the old one "crashed": the kernel dropped its parent lock
            old.source.parent.release()
        a.start()
        agents.append(a)
        return a

    rng = random.Random(7)
    agent = new_agent()
    end = time.monotonic() + 12
    try:
        step = 0
        while time.monotonic() < end:
            step += 1
            op = rng.random()
            jobs = list(agent.jobs.running.values())
            if op < 0.3:
                gpus = 1 if rng.random() < 0.4 else 0
                secs = rng.choice(["0.2", "30"])
                submit(store, ["sleep", secs], name=f"j{step}", cores=rng.randint(1, 4), gpus=gpus)
            elif op < 0.4 and jobs:
                store.request_cancel(rng.choice(jobs).row_id)
            elif op < 0.55 and jobs:
                m = rng.choice(jobs)
                agent.actuator.carry_out(
                    [SetCores(m.job, rng.randint(1, 4))], time.monotonic(), "test"
                )
            elif op < 0.65 and jobs:
                cpu = [j for j in jobs if j.job.kind == "cpu"]
                if cpu:  # the eliminator throttles CPU jobs only
                    q = rng.choice([0.1, 0.5, 1.0])
                    agent.actuator.carry_out(
                        [SetQuota(rng.choice(cpu).job, q)], time.monotonic(), "test"
                    )
            elif op < 0.7 and jobs:
                for p in drv.pids(rng.choice(jobs).cgroup):
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            elif op < 0.75:
                agent = new_agent()  # the old one "crashed": no shutdown
            agent.tick()
            check_invariants(agent, tmp_path, store)
    finally:
        for a in agents:
            for m in list(a.jobs.running.values()):
                a.processes.signal(m, 9)
        time.sleep(0.1)
        store.close()


def test_a_fifo_in_the_job_dir_cannot_stall_the_agent(tmp_path: Path) -> None:
    from coda.runtime.shim import read_regular

    fifo = tmp_path / "progress"
    os.mkfifo(fifo)
    assert read_progress(fifo) is None  # returns at once: no writer, no block
    with pytest.raises(OSError, match="not a regular file"):
        read_regular(fifo)


def test_a_failed_cpuset_change_leaves_kernel_and_books_as_they_were(env) -> None:
    from coda.policy.framework import SetCores
    from coda.runtime.cgroups import CgroupError

    tmp, drv, store, new_agent = env
    agent = new_agent()
    jid = submit(store, ["sleep", "30"], name="w", cores=1, gpus=1)
    agent.tick()
    m = agent.jobs.running[jid]
    real = drv._inner.set_cpus
    calls: list[list[int]] = []

    def half_works(name: str, cpus) -> None:  # writes the cpuset, then affinity fails
        cpus = list(cpus)
        calls.append(cpus)
        real(name, cpus)
        if len(calls) == 1:
            raise CgroupError("sched_setaffinity failed")

    drv._inner.set_cpus = half_works
    agent.actuator.carry_out([SetCores(m.job, 3)], time.monotonic(), "test")
    assert m.cpus == [0] and agent.node.free_cores == 3 and len(agent.jobs.free_cpus) == 3
    assert cg_file(tmp, jid, "cpuset", "cpuset.cpus").read_text().strip() == "0"
    assert calls == [[0, 1, 2], [0]]


# ------------------------------------------------------------------ reclaim edge cases
def test_reclaim_requeues_only_the_cpu_jobs_it_needs_and_loses_none(env) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent(cpus=list(range(4)), gpus=2, reclaim="requeue", tune=LOOSE_HARM)
    j2 = submit(store, ["sleep", "60"], name="j2", cores=2)
    agent.tick()
    j1 = submit(store, ["sleep", "60"], name="j1", cores=1, time_limit_s=60.0)
    agent.tick()
    dnn = submit(store, ["sleep", "60"], name="train", cores=3, gpus=1)
    agent.tick()
    assert store.job(dnn).state == "running"
    # One core was free and the training job needs 3: requeueing j2 (2 cores) covers it,
    # so j1, the newer, keeps running; j2 waits with a reason and is not lost.
    assert store.job(j1).state == "running" and store.job(j1).preemptions == 0
    row = store.job(j2)
    assert row.state == "queued" and row.wait_reason and row.preemptions == 1
    assert agent.source.sched is not None and agent.source.sched.is_queued(agent.source.queued[j2])
    # Once the training job is gone, the requeued job starts again.
    store.request_cancel(dnn)
    tick_until(agent, lambda: store.job(j2).state == "running", timeout=5)
    assert store.job(j2).preemptions == 1 and store.job(j1).state == "running"


def test_a_preemption_that_cannot_happen_leaves_the_dnn_job_waiting(env, monkeypatch) -> None:
    tmp, drv, store, new_agent = env
    agent = new_agent()
    hog = submit(store, ["sleep", "60"], name="hog", cores=4)
    agent.tick()
    assert store.job(hog).state == "running"
    real = agent.processes.pids
    # The CPU job will not die (a process stuck in the kernel): its cgroup keeps a pid.
    monkeypatch.setattr(agent.processes, "pids", lambda m: [2**22 + 12345])
    monkeypatch.setattr(agent.processes, "kill_until_gone", lambda m, seconds=1.0: None)
    dnn = submit(store, ["sleep", "60"], name="train", cores=3, gpus=1)
    agent.tick()  # no InvariantError out of the tick
    assert store.job(dnn).state == "queued" and "cores" in store.job(dnn).wait_reason
    assert store.job(hog).state == "running"
    node = agent.node
    assert node is not None and node.free_cores >= 0
    monkeypatch.setattr(agent.processes, "pids", real)
