"""Why a job waits, where people see it: the node's database (Store.set_wait_reasons,
cleared when a job leaves the queue) and `coda slurm status` (the `wait` field of the
controller's AdminComment mark). `coda status`'s columns are in test_runtime_cli.py."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from coda.cli import main
from coda.runtime.store import MAX_WAIT_REASON, JobSpec, Store


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "s" / "coda.db")
    yield s
    s.close()


def _queue(store: Store, tmp_path: Path, n: int) -> list[int]:
    return [store.submit(JobSpec(argv=["true"], cwd=str(tmp_path))) for _ in range(n)]


def _reasons(store: Store) -> dict[int, str]:
    return {r.id: r.wait_reason for r in store.jobs()}


def _writes(db: Path):
    """A reader's view of how often the database was written (PRAGMA data_version moves
    on every commit by another connection that changed something)."""
    con = sqlite3.connect(db)
    return lambda: con.execute("PRAGMA data_version").fetchone()[0]


# ------------------------------------------------------------------ the store
def test_reasons_land_on_queued_rows_only(store: Store, tmp_path: Path) -> None:
    a, b, c = _queue(store, tmp_path, 3)
    assert store.claim(b, state="starting")
    store.set_wait_reasons({a: "reservation:12", b: "cores", c: "filter:IdleGpuReserve"})
    assert _reasons(store) == {a: "reservation:12", b: "", c: "filter:IdleGpuReserve"}
    store.set_wait_reasons({99: "cores"})  # no such job: nothing to do
    store.set_wait_reasons({})
    assert _reasons(store) == {a: "reservation:12", b: "", c: "filter:IdleGpuReserve"}


def test_an_unchanged_queue_writes_nothing(store: Store, tmp_path: Path) -> None:
    a, b = _queue(store, tmp_path, 2)
    version = _writes(store.path)
    store.set_wait_reasons({a: "cores", b: "gpus"})
    first = version()
    store.set_wait_reasons({a: "cores", b: "gpus"})  # what the last cycle said already
    assert version() == first
    store.set_wait_reasons({a: "cores", b: "fifo:1"})
    assert version() > first
    assert _reasons(store) == {a: "cores", b: "fifo:1"}


def test_reasons_are_one_printable_line_of_bounded_length(store: Store, tmp_path: Path) -> None:
    a, b, c = _queue(store, tmp_path, 3)
    store.set_wait_reasons({a: "x" * 500, b: "two\nlines\x1b[31m\u200b", c: "caf\u00e9 \u2713"})
    got = _reasons(store)
    assert got[a] == "x" * MAX_WAIT_REASON
    assert got[b] == "two?lines?[31m?"  # control and invisible characters: '?'
    assert got[c] == "caf\u00e9 \u2713"  # printable text of any script is kept


@pytest.mark.parametrize("bad", [{"1": "cores"}, {True: "cores"}, {-1: "cores"}, {2**63: "x"}])
def test_a_key_that_is_not_a_job_id_is_refused_and_nothing_is_written(
    store: Store, tmp_path: Path, bad: dict
) -> None:
    a, b = _queue(store, tmp_path, 2)  # b: an id no bad key equals (True == 1)
    with pytest.raises(ValueError, match="not a job id"):
        store.set_wait_reasons({b: "cores", **bad})
    assert _reasons(store) == {a: "", b: ""}


def test_a_reason_that_is_not_text_is_refused(store: Store, tmp_path: Path) -> None:
    (a,) = _queue(store, tmp_path, 1)
    with pytest.raises(TypeError, match="wait reason is text"):
        store.set_wait_reasons({a: 7})  # type: ignore[dict-item]


def test_leaving_the_queue_clears_the_reason_in_the_same_update(
    store: Store, tmp_path: Path
) -> None:
    a, b, c, d = _queue(store, tmp_path, 4)
    store.set_wait_reasons({j: "cores" for j in (a, b, c, d)})
    assert store.claim(a, state="starting", message="")
    store.update(b, state="running")
    store.request_cancel(c)  # cancelled while queued
    store.update(d, message="still waiting")  # no state change: the reason stays
    assert _reasons(store) == {a: "", b: "", c: "", d: "cores"}
    assert store.job(c).state == "cancelled"  # type: ignore[union-attr]
    # A job put back in the queue (a requeue) waits afresh: no stale reason.
    store.update(a, state="queued")
    assert store.job(a).wait_reason == ""  # type: ignore[union-attr]
    store.set_wait_reasons({a: "reservation:4"})
    assert store.job(a).wait_reason == "reservation:4"  # type: ignore[union-attr]


def test_a_claim_that_fails_leaves_the_reason(store: Store, tmp_path: Path) -> None:
    (a,) = _queue(store, tmp_path, 1)
    store.set_wait_reasons({a: "cores"})
    store.update(a, cancel=1)  # cancelled between the agent's read and its launch
    assert not store.claim(a, state="starting")
    assert store.job(a).wait_reason == "cores"  # type: ignore[union-attr]


def test_reasons_join_a_transaction_the_caller_holds(store: Store, tmp_path: Path) -> None:
    a, b = _queue(store, tmp_path, 2)
    with pytest.raises(RuntimeError, match="abandoned"):
        with store.tx():
            store.set_wait_reasons({a: "cores"})
            raise RuntimeError("abandoned")
    assert _reasons(store) == {a: "", b: ""}  # rolled back with the rest
    with store.tx():
        store.set_wait_reasons({a: "cores"})
        store.update(b, state="running")
    assert _reasons(store) == {a: "cores", b: ""}


def test_a_written_reason_is_cleaned_like_a_set_one(store: Store, tmp_path: Path) -> None:
    (a,) = _queue(store, tmp_path, 1)
    store.update(a, wait_reason="bad\tline" + "y" * 300)
    got = store.job(a).wait_reason  # type: ignore[union-attr]
    assert got.startswith("bad?line") and len(got) == MAX_WAIT_REASON


# ------------------------------------------------------------------ coda slurm status
def _sq(job_id: int, state: str, comment: str, **kw: object) -> dict[str, object]:
    return {
        "job_id": job_id,
        "name": f"j{job_id}",
        "user_id": 1000,
        "job_state": state,
        "cpus": 2,
        "node_count": 1,
        "nodes": "n1" if state == "RUNNING" else "",
        "priority": 0 if state == "PENDING" else 1,
        "admin_comment": comment,
        "state_reason": "JobHeldUser" if state == "PENDING" else "None",
        **kw,
    }


JOBS = [
    _sq(1, "PENDING", "coda:held,req=4,wait=reservation:12", time_limit=60),
    _sq(2, "PENDING", "coda:held,wait=filter:IdleGpuReserve", tres_per_node="gres:gpu:1"),
    _sq(3, "PENDING", "coda:held"),  # not looked at yet: no reason
    _sq(4, "RUNNING", "coda:placed,req=2,grant=2,nodes=n1,wait=cores"),  # stale: started
    _sq(5, "PENDING", "coda:placed,req=2,grant=2,nodes=n1,wait=cores"),  # Slurm's now
    _sq(6, "PENDING", "coda:passed,why=array,wait=fifo:1"),
    _sq(7, "PENDING", "", priority=1),  # never CODA's
]


@pytest.fixture
def fake_squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "jobs.json").write_text(json.dumps({"jobs": JOBS}))
    f = bin_dir / "squeue"
    f.write_text(f"#!/bin/sh\ncat {tmp_path / 'jobs.json'}\n")
    f.chmod(f.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_slurm_status_shows_why_each_held_job_waits(fake_squeue: Path) -> None:
    r = CliRunner().invoke(main, ["slurm", "status", "--all", "--json"])
    assert r.exit_code == 0, r.output
    wait = {row["job"]: row["wait"] for row in json.loads(r.output)["jobs"]}
    assert wait == {
        1: "reservation:12",
        2: "filter:IdleGpuReserve",
        3: "-",
        4: "-",  # running: it waits for nothing, whatever an old mark says
        5: "-",  # placed and released: Slurm's own reason column says why
        6: "-",  # handed to Slurm
        7: "-",
    }


def test_slurm_status_table_has_a_wait_column(fake_squeue: Path) -> None:
    r = CliRunner().invoke(main, ["slurm", "status"], terminal_width=250)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    head = next(ln for ln in lines if "reason" in ln and "job" in ln)
    assert head.rstrip(" │┃").split()[-1].strip("┃│") == "wait"
    row1 = next(ln for ln in lines if " j1 " in ln)
    assert "reservation:12" in row1
    row4 = next(ln for ln in lines if " j4 " in ln)
    assert "cores" not in row4
