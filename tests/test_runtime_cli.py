"""`coda submit / status / cancel` without an agent: validation, clear errors, output."""

from __future__ import annotations

import json
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
    assert row.state == "queued" and row.kind == "dnn" and row.env == {"A": "1"}
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
    assert code != 0 and "unknown key(s) in job spec: shell" in out
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


def test_agent_refuses_a_second_instance(tmp_path: Path) -> None:
    from coda.runtime.cli import AgentLock

    lock = AgentLock(tmp_path)
    lock.acquire()
    try:
        assert AgentLock.held(tmp_path)
        code, out = run("agent", "--state-dir", str(tmp_path))
        assert code != 0 and "another agent is running" in out
    finally:
        lock.release()
    assert not AgentLock.held(tmp_path)
