"""`coda submit / status / cancel` without an agent: validation, clear errors, output."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from click.testing import CliRunner

from coda.cli import main
from coda.runtime.store import Store


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def test_submit_queues_and_warns_without_agent(tmp_path: Path) -> None:
    sd = str(tmp_path / "s")
    code, out = run(
        "submit",
        "--state-dir",
        sd,
        "--cores",
        "2",
        "--gpus",
        "1",
        "--model",
        "m",
        "--env",
        "A=1",
        "--",
        sys.executable,
        "-c",
        "pass",
    )
    assert code == 0, out
    assert "no agent is running" in out
    job_id = int(out.strip().splitlines()[-1])
    row = Store(Path(sd) / "coda.db").job(job_id)
    # The submitter's PATH goes with the job (the agent's own never does).
    assert row.state == "queued" and row.kind == "dnn"
    assert row.env == {"A": "1", "PATH": os.environ["PATH"]}
    assert row.argv == [sys.executable, "-c", "pass"]


def test_submit_errors_are_clear(tmp_path: Path) -> None:
    sd = str(tmp_path / "s")
    code, out = run("submit", "--state-dir", sd, "--", "no-such-program-xyz")
    assert code != 0 and "not on PATH" in out
    code, out = run("submit", "--state-dir", sd, "--", "./missing.sh")
    assert code != 0 and "not an executable file" in out
    code, out = run("submit", "--state-dir", sd, "--name", "../x", "--", "true")
    assert code != 0 and "not allowed" in out
    code, out = run("submit", "--state-dir", sd, "--env", "NOEQUALS", "--", "true")
    assert code != 0 and "KEY=VALUE" in out
    code, out = run("submit", "--state-dir", sd)
    assert code != 0 and "command is empty" in out


def test_submit_spec_file(tmp_path: Path) -> None:
    sd = str(tmp_path / "s")
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"argv": ["true"], "name": "from-file", "cores": 1}))
    code, out = run("submit", "--state-dir", sd, "--spec", str(spec))
    assert code == 0, out
    spec.write_text(json.dumps({"argv": ["true"], "shell": True}))
    code, out = run("submit", "--state-dir", sd, "--spec", str(spec))
    assert code != 0 and "unknown key(s) in job spec: 'shell'" in out
    spec.write_text("{not json")
    code, out = run("submit", "--state-dir", sd, "--spec", str(spec))
    assert code != 0 and "not valid JSON" in out


def test_submit_checks_the_node_the_agent_reported(tmp_path: Path) -> None:
    sd = tmp_path / "s"
    store = Store(sd / "coda.db")
    store.set_meta("agent", json.dumps({"cpus": "0-1", "gpus": 1}))
    store.close()
    code, out = run("submit", "--state-dir", str(sd), "--cores", "3", "--", "true")
    assert code != 0 and "this node has 2" in out
    code, out = run("submit", "--state-dir", str(sd), "--gpus", "2", "--", "true")
    assert code != 0 and "this node has 1" in out


def test_status_and_cancel(tmp_path: Path) -> None:
    sd = str(tmp_path / "s")
    code, out = run("status", "--state-dir", sd)
    assert code != 0 and "no CODA state" in out
    run("submit", "--state-dir", sd, "--name", "waiting", "--", "true")
    code, out = run("status", "--state-dir", sd)
    assert code == 0 and "NO AGENT RUNNING" in out and "waiting" in out and "queued" in out
    code, out = run("cancel", "--state-dir", sd, "1")
    assert code == 0 and "cancelled" in out
    code, out = run("status", "--state-dir", sd, "--all", "--json")
    data = json.loads(out)
    assert data["jobs"][0]["state"] == "cancelled" and data["agent"]["running"] is False
    code, out = run("cancel", "--state-dir", sd, "99")
    assert code != 0 and "no job 99" in out
    code, out = run("cancel", "--state-dir", sd, "1", "1")
    assert code == 0 and out.count("job 1: cancelled") == 1  # named twice, said once


def test_agent_refuses_a_second_instance(tmp_path: Path) -> None:
    from coda.cli.node_commands import AgentLock

    lock = AgentLock(tmp_path)
    lock.acquire()
    try:
        assert AgentLock.held(tmp_path)
        code, out = run("agent", "--state-dir", str(tmp_path))
        assert code != 0 and "another agent is running" in out
    finally:
        lock.release()
    assert not AgentLock.held(tmp_path)


# ----------------------------------------------- agent start-up errors and a killed job's exit code
def test_agent_start_errors_are_clear_and_release_everything(tmp_path: Path, monkeypatch) -> None:
    import shutil
    import signal

    from coda.cli.node_commands import AgentLock
    from coda.runtime.faketree import build_v1_tree

    sd = tmp_path / "state"
    code, out = run("agent", "--state-dir", str(sd), "--cgroup-parent", "../etc")
    assert code != 0 and "invalid group name" in out and "Traceback" not in out
    assert not AgentLock.held(sd)
    # setup() fails with a plain OSError (as mkdir does without root): clear, lock free,
    # and the caller's signal handlers untouched.
    mounts = build_v1_tree(tmp_path / "tree", 2)
    shutil.rmtree(tmp_path / "tree" / "sys" / "fs" / "cgroup" / "cpuset")
    sd.mkdir(exist_ok=True)
    os.chown(sd, 1000, 1000)  # the state directory of the (pretended) user 1000
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    before = signal.getsignal(signal.SIGINT)
    args = ["--cgroup-mounts", str(mounts), "--cgroup-prefix", str(tmp_path / "tree")]
    code, out = run("agent", "--state-dir", str(sd), "--gpus", "0", *args)
    assert code != 0 and "cgroups:" in out and "needs root" in out, out
    assert not AgentLock.held(sd)
    assert signal.getsignal(signal.SIGINT) is before


def test_run_exits_128_plus_signal_for_a_killed_job(tmp_path: Path) -> None:
    import threading
    import time

    sd = tmp_path / "s"
    Store(sd / "coda.db").close()

    def fake_agent() -> None:  # the job gets killed by SIGKILL
        store = Store(sd / "coda.db")
        end = time.monotonic() + 10
        while time.monotonic() < end and store.job(1) is None:
            time.sleep(0.02)
        store.update(1, state="failed", exit_code=-9, message="killed by signal 9")
        store.close()

    t = threading.Thread(target=fake_agent)
    t.start()
    code, out = run("run", "--state-dir", str(sd), "--poll", "0.05", "--", "true")
    t.join()
    assert code == 137, out


# ------------------------------------------------------------------ time limits, wait reasons
def test_submit_time_is_stored_and_status_shows_time_and_wait(tmp_path: Path) -> None:
    sd = tmp_path / "s"
    code, out = run("submit", "--state-dir", str(sd), "--time", "1-02:03:04", "--", "true")
    assert code == 0, out
    limited = int(out.strip().splitlines()[-1])
    code, out = run("submit", "--state-dir", str(sd), "--name", "free", "--", "true")
    free = int(out.strip().splitlines()[-1])
    code, out = run("submit", "--state-dir", str(sd), "--time", "90", "--", "true")
    started = int(out.strip().splitlines()[-1])
    store = Store(sd / "coda.db")
    assert store.job(limited).time_limit_s == 93784.0  # type: ignore[union-attr]
    assert store.job(free).time_limit_s is None  # type: ignore[union-attr]
    store.set_wait_reasons({limited: "reservation:7", free: "cores", started: "fifo:1"})
    store.update(started, state="running")  # leaving the queue clears its reason
    store.close()
    code, out = run("status", "--state-dir", str(sd))
    assert code == 0, out
    lines = out.splitlines()
    head = lines[1].split()
    assert head[4] == "time" and head[-2:] == ["wait", "note"]
    rows = {int(ln.split()[0]): ln.split() for ln in lines[2:] if ln.split()}
    assert rows[limited][4] == "1-02:03:04" and rows[limited][-1] == "reservation:7"
    assert rows[free][4] == "-" and rows[free][-1] == "cores"
    assert rows[started][4] == "1:30:00" and rows[started][-1] == "-"  # running: no wait
    code, out = run("status", "--state-dir", str(sd), "--json")
    jobs = {j["id"]: j for j in json.loads(out)["jobs"]}
    assert (jobs[limited]["time_limit_s"], jobs[limited]["wait_reason"]) == (
        93784.0,
        "reservation:7",
    )
    assert (jobs[free]["time_limit_s"], jobs[started]["wait_reason"]) == (None, "")


def test_submit_time_from_a_spec_file_and_the_option_over_it(tmp_path: Path) -> None:
    sd = tmp_path / "s"
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"argv": ["true"], "time_limit_s": 120}))
    code, out = run("submit", "--state-dir", str(sd), "--spec", str(spec))
    assert code == 0, out
    code, out = run("submit", "--state-dir", str(sd), "--spec", str(spec), "--time", "5:30")
    assert code == 0, out
    store = Store(sd / "coda.db")
    assert [r.time_limit_s for r in store.jobs()] == [120.0, 330.0]
    store.close()


def test_a_job_says_it_checkpoints_in_its_spec_or_with_the_option(tmp_path: Path) -> None:
    from coda.runtime.row_job import job_of

    sd = tmp_path / "s"
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"argv": ["true"], "checkpoints": True}))
    for args in (("--spec", str(spec)), ("--checkpoints", "--", "true"), ("--", "true")):
        code, out = run("submit", "--state-dir", str(sd), *args)
        assert code == 0, out
    store = Store(sd / "coda.db")
    rows = store.jobs()
    assert [r.checkpoints for r in rows] == [1, 1, 0]
    # What the policies see: a job that said nothing loses its whole run when requeued.
    assert [job_of(r).checkpoints for r in rows] == [True, True, False]
    store.close()


def test_spec_file_errors_and_env_options_name_their_place(tmp_path: Path) -> None:
    sd = str(tmp_path / "s")
    spec = tmp_path / "j.json"
    spec.write_text('{"argv": ["true"], "name": "bad name"}')
    code, out = run("submit", "--state-dir", sd, "--spec", str(spec))
    assert code != 0 and f"{spec} (with the options): job name 'bad name'" in out
    spec.write_text('{"argv": ["no-such-program-xyz"]}')
    code, out = run("submit", "--state-dir", sd, "--spec", str(spec))
    assert code != 0 and f"{spec} (with the options): program" in out
    code, out = run("submit", "--state-dir", sd, "--env", "A=1", "--env", "A=2", "--", "true")
    assert code == 2 and "--env 'A' is given twice" in out  # the last won, silently
    code, out = run("submit", "--state-dir", sd, "--env", "=x", "--", "true")
    assert code == 2 and "KEY=VALUE" in out


def test_a_state_dir_whose_socket_path_is_too_long_is_refused(tmp_path: Path) -> None:
    """No agent could bind its socket: a job submitted there waited for ever (exit 0)."""
    sd = str(tmp_path / ("c" * 120))
    code, out = run("submit", "--state-dir", sd, "--", "true")
    assert code == 2 and "a Unix socket's holds at most 107" in out
    assert not Path(sd).exists()


def test_a_bad_state_dir_from_the_environment_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CODA_STATE_DIR", "/")
    code, out = run("status")
    assert code == 2 and "(from $CODA_STATE_DIR)" in out
    code, out = run("status", "--state-dir", "/")
    assert code == 2 and "CODA_STATE_DIR" not in out  # given, not from there


def test_a_spec_fifo_that_nothing_writes_is_an_error_not_a_hang(tmp_path: Path) -> None:
    import subprocess

    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    argv = [sys.executable, "-m", "coda", "submit", "--state-dir", str(tmp_path / "s")]
    done = subprocess.run([*argv, "--spec", str(fifo)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and f"{fifo}: a FIFO that no process writes" in done.stderr


def test_the_old_cgroup_option_still_picks_the_version(tmp_path: Path, monkeypatch) -> None:
    """`coda agent --cgroup v1|v2` (before it was --cgroup-version 1|2, as the Slurm
    agent's) still works, with a deprecation warning; both reach the same driver choice."""
    from coda.runtime import cgroups

    asked: list[str | None] = []

    def detect(*args: object, prefer: str | None = None, **kw: object) -> object:
        asked.append(prefer)
        raise cgroups.CgroupError("stop here")

    monkeypatch.setattr(cgroups, "detect", detect)
    for option, value in (("--cgroup", "v1"), ("--cgroup-version", "1"), ("--cgroup", "v2")):
        res = CliRunner().invoke(
            main, ["agent", "--state-dir", str(tmp_path / value), option, value]
        )
        assert res.exit_code == 1 and "cgroups: stop here" in res.output, res.output
        assert ("deprecated" in res.output) == (option == "--cgroup"), res.output
    assert asked == ["v1", "v1", "v2"]
