"""What one user may store in and cost a node agent (issue 39, item 7): the per-spec and
per-user byte caps, finished jobs kept for a stated time, a tick that reads no queued
spec, bounded status answers and each user's share of the socket's time.

No root needed: the agent runs on a fake cgroup tree, peers are made up. The same
attack replayed against a root agent by a real unprivileged user is in
tests/test_runtime_load.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import fake_v1_driver

from coda.cli import main
from coda.cli.node_status import retention
from coda.runtime.agent import AgentConfig
from coda.runtime.control import Peer
from coda.runtime.limits import (
    Limits,
    TimeBudget,
    check_spec_bytes,
    format_span,
)
from coda.runtime.local_queue import local_agent
from coda.runtime.service import AgentService
from coda.runtime.store import JobSpec, Owner, SpecError, Store

FAST = dict(period_s=0.1, window_s=0.3, settle_s=0.15, stall_s=1.5, gpus=0)
ME = Peer(os.getpid(), os.geteuid(), os.getegid())


def spec(tmp_path: Path, env_bytes: int = 0, **kw: object) -> dict[str, object]:
    env = {"PAD": "x" * env_bytes} if env_bytes else {}
    return {"argv": ["/bin/true"], "cwd": str(tmp_path), "env": env, **kw}


# ------------------------------------------------------------------ limits
@pytest.mark.parametrize(
    "bad",
    [
        {"spec_bytes": 10},
        {"spec_bytes": 2 << 20},
        {"spec_bytes": True},
        {"user_bytes": 1 << 40},
        {"spec_bytes": 1 << 20, "user_bytes": 512 << 10},  # a user could not hold one
        {"keep_finished_s": float("nan")},
        {"keep_finished_s": float("inf")},
        {"keep_finished_s": 0},
        {"finished_per_user": -1},
        {"status_rows": 1},
        {"user_share": 0.0},
        {"user_share": "0.5"},
    ],
)
def test_limits_refuse_values_out_of_range(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must be"):
        Limits(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-spec-bytes", "10"],
        ["--max-spec-bytes", "1e9"],
        ["--max-user-bytes", "-1"],
        ["--keep-finished", "nan"],
        ["--keep-finished", "0"],
        ["--keep-finished-per-user", "x"],
        ["--status-rows", "0"],
        ["--user-share", "2"],
        ["--max-spec-bytes", "1048576", "--max-user-bytes", "65536"],
    ],
)
def test_bad_limit_options_are_one_line_errors(tmp_path: Path, argv: list[str]) -> None:
    res = CliRunner().invoke(main, ["agent", "--state-dir", str(tmp_path / "s"), *argv])
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert lines[-1].startswith("Error: Invalid value"), res.output


def test_format_span_and_retention_line() -> None:
    assert format_span(86400) == "24 h" and format_span(5400) == "90 min"
    assert format_span(2) == "2 s"
    assert retention({"keep_finished_s": 86400, "finished_per_user": 500}) == (
        "(finished jobs are kept 24 h after they end, at most 500 per user)"
    )
    for bad in ({}, {"keep_finished_s": "1", "finished_per_user": 1},
                {"keep_finished_s": float("nan"), "finished_per_user": 1},
                {"keep_finished_s": 5, "finished_per_user": True}):  # fmt: skip
        assert retention(bad) == ""


def test_an_oversize_spec_is_one_line_naming_its_biggest_field(tmp_path: Path) -> None:
    s = JobSpec.from_dict(spec(tmp_path, env_bytes=100_000))
    s.validate(probe_cwd=False)
    with pytest.raises(SpecError) as e:
        check_spec_bytes(s, 64 << 10)
    msg = str(e.value)
    assert "\n" not in msg and "'env'" in msg and "65536 per job" in msg, msg
    big_argv = JobSpec(argv=["/bin/echo", "y" * 70_000], cwd=str(tmp_path))
    big_argv.validate(probe_cwd=False)
    with pytest.raises(SpecError, match="'argv' alone"):
        check_spec_bytes(big_argv, 64 << 10)
    assert check_spec_bytes(JobSpec(argv=["/bin/true"], cwd="/tmp", name="t"), 1024) > 0


# ---------------------------------------------------------- the service's caps
def test_the_service_refuses_an_oversize_spec_and_a_users_bytes_past_the_cap(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state" / "coda.db"
    Store(db).close()
    limits = Limits(spec_bytes=16 << 10, user_bytes=64 << 10)
    svc = AgentService(db, limits)
    got = svc({"op": "submit", "spec": spec(tmp_path, env_bytes=20_000)}, ME)
    assert got["ok"] is False and "'env' alone holds" in got["error"], got
    ids = []
    while True:
        got = svc({"op": "submit", "spec": spec(tmp_path, env_bytes=15_000)}, ME)
        if not got["ok"]:
            break
        ids.append(got["id"])
    assert len(ids) == 4, ids  # 4 x ~15 KiB fit in 64 KiB, a fifth does not
    assert "would pass the 65536 a user may hold" in got["error"], got
    store = Store(db)
    assert store.usage(ME.uid)[1] <= limits.user_bytes
    # Cancelled (finished) jobs no longer count: the user may submit again.
    assert svc({"op": "cancel", "ids": ids[:2]}, ME)["ok"]
    assert svc({"op": "submit", "spec": spec(tmp_path, env_bytes=15_000)}, ME)["ok"]
    store.close()
    svc.close()


def test_status_lists_a_bounded_number_and_says_how_many_more(tmp_path: Path) -> None:
    db = tmp_path / "state" / "coda.db"
    store = Store(db)
    for _ in range(30):
        store.submit(JobSpec(argv=["true"], cwd=str(tmp_path), env={"T": "secret"}))
    svc = AgentService(db, Limits(status_rows=10))
    got = svc({"op": "status"}, ME)
    assert got["ok"] and len(got["jobs"]) == 10 and got["more"] == 20
    assert [j["id"] for j in got["jobs"]] == list(range(1, 11))  # the queue's head
    assert all(j["env"] == {} and j["argv"] == [] for j in got["jobs"])
    got = svc({"op": "status", "limit": 3}, ME)
    assert len(got["jobs"]) == 3 and got["more"] == 27
    got = svc({"op": "status", "limit": 11}, ME)
    assert got["ok"] is False and "limit must be" in got["error"]
    got = svc({"op": "status", "all": True}, ME)
    assert [j["id"] for j in got["jobs"]] == list(range(21, 31)) and got["more"] == 20
    one = svc({"op": "status", "job_id": 5}, ME)["jobs"][0]
    assert one["env"] == {"T": "secret"}  # one's own job, in full
    store.close()
    svc.close()


def test_a_users_loop_of_requests_gets_busy_answers_not_anothers(tmp_path: Path) -> None:
    db = tmp_path / "state" / "coda.db"
    Store(db).close()
    now = [100.0]
    svc = AgentService(db, Limits(user_share=0.25))
    svc.budget = TimeBudget(0.25, clock=lambda: now[0])
    hostile, other = Peer(1, 4242, 4242), Peer(2, 4343, 4343)
    svc.budget.charge(hostile.uid, 2.0)  # as if its requests had taken 2 s of the thread
    got = svc({"op": "status"}, hostile)
    assert got["ok"] is False and got.get("busy") and "try again in 4.0 s" in got["error"]
    assert svc({"op": "status"}, other)["ok"]  # another user is served
    assert svc({"op": "status"}, Peer(3, 0, 0))["ok"]  # root has no budget
    now[0] += 4.1  # refilled at 0.25 s a second
    assert svc({"op": "status"}, hostile)["ok"]
    svc.close()


def test_the_time_budget_forgets_full_budgets_and_stays_bounded() -> None:
    now = [0.0]
    b = TimeBudget(0.5, burst=1.0, clock=lambda: now[0])
    b.charge(7, 0.2)
    assert b.wait_s(7) == 0.0
    b.charge(7, 1.0)
    assert b.wait_s(7) == pytest.approx(0.2 / 0.5, abs=0.01)  # -0.2 s, at 0.5 s/s
    now[0] += 10
    b.charge(7, 0.0)
    assert 7 not in b._left  # full again: forgotten
    for uid in range(TimeBudget.MAX_UIDS + 100):
        b.charge(uid, 0.1)
    assert len(b._left) <= TimeBudget.MAX_UIDS


# -------------------------------------------------------------- the database
def test_purge_takes_old_finished_rows_then_each_users_oldest_and_never_active_ones(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "coda.db")
    a, b = Owner(1001, 1001, (1001,)), Owner(1002, 1002, (1002,))
    js = JobSpec(argv=["true"], cwd=str(tmp_path))
    old = [store.submit(js, a, now=1.0) for _ in range(3)]
    for j in old:
        store.update(j, state="done", end_t=10.0)
        store.log_decision(10.0, j, "agent", "start", {})
    recent = [store.submit(js, b, now=1.0) for _ in range(5)]
    for j in recent:
        store.update(j, state="failed", end_t=1000.0)
    queued = store.submit(js, a, now=1.0)
    running = store.submit(js, a, now=1.0)
    store.update(running, state="running", end_t=5.0)  # an odd end_t: still never purged
    assert store.purge(before=500.0, per_user=3, batch=2) == old[:2]  # bounded
    assert store.purge(before=500.0, per_user=3, batch=100) == [old[2], *recent[:2]]
    assert store.purge(before=500.0, per_user=3, batch=100) == []
    left = {r.id for r in store.jobs()}
    assert left == {*recent[2:], queued, running}
    assert store.decisions(limit=100) == []  # the purged jobs' decisions went with them
    store.log_decision(1.0, None, "agent", "x", {})
    store.log_decision(900.0, None, "agent", "y", {})
    assert store.purge_decisions(before=500.0, batch=10) == 1
    assert [d["action"] for d in store.decisions()] == ["y"]
    store.close()


# ------------------------------------------------------------------ the agent
def test_the_agent_purges_finished_jobs_and_their_directories(tmp_path: Path) -> None:
    drv = fake_v1_driver(tmp_path)
    store = Store(tmp_path / "state" / "coda.db")
    wall = [1000.0]
    cfg = AgentConfig(**FAST, limits=Limits(keep_finished_s=60, finished_per_user=1000))
    agent = local_agent(store, drv, tmp_path / "state", cfg, wall=lambda: wall[0])
    agent.start()
    info = store.agent_info()
    assert info["keep_finished_s"] == 60 and info["finished_per_user"] == 1000
    jid = store.submit(JobSpec(argv=["true"], cwd=str(tmp_path)))
    store.request_cancel(jid)
    store.update(jid, end_t=wall[0])
    jdir = agent.source.supervisor.job_dir(jid)
    jdir.mkdir(parents=True)
    (jdir / "stdout").write_text("out")
    agent.tick()
    assert store.job(jid) is not None  # kept: it ended just now
    wall[0] += 61
    agent.source.next_purge = 0.0  # the next pass now, not in PURGE_EVERY_S
    agent.tick()
    assert store.job(jid) is None and not jdir.exists()
    assert agent.decisions.counters["agent:purged"] == 1
    agent.shutdown()
    store.close()


def test_a_tick_reads_no_queued_spec_and_rewrites_no_unchanged_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drv = fake_v1_driver(tmp_path)
    store = Store(tmp_path / "state" / "coda.db")
    agent = local_agent(store, drv, tmp_path / "state", AgentConfig(**FAST))
    agent.start()
    # More cores than the node has free once the first holds them: the rest wait.
    hold = store.submit(JobSpec(argv=["sleep", "30"], cwd=str(tmp_path), cores=4))
    pad = {"PAD": "x" * 60_000}
    waiting = [store.submit(JobSpec(argv=["true"], cwd=str(tmp_path), env=pad)) for _ in range(50)]
    agent.tick()
    assert store.job(hold).state in ("starting", "running")
    assert all(store.job(j).wait_reason for j in waiting)
    reads: list[int] = []
    written: list[int] = []
    real_job, real_entry, real_reasons = Store.job, Store.queue_entry, Store.set_wait_reasons
    monkeypatch.setattr(Store, "job", lambda s, j: reads.append(j) or real_job(s, j))
    monkeypatch.setattr(Store, "queue_entry", lambda s, j: reads.append(j) or real_entry(s, j))
    monkeypatch.setattr(
        Store,
        "set_wait_reasons",
        lambda s, r: written.extend(r) or real_reasons(s, r),
    )
    for _ in range(3):
        agent.tick()
    assert not set(reads) & set(waiting), reads  # no queued row read again
    assert written == []  # the reasons did not change: nothing rewritten
    late = store.submit(JobSpec(argv=["true"], cwd=str(tmp_path), env=pad))
    agent.tick()
    assert late in reads and written == [late]  # a new row: read once, its reason once
    agent.shutdown(stop_jobs=True)
    store.close()


def test_a_status_answer_stays_small_however_big_the_queued_specs(tmp_path: Path) -> None:
    db = tmp_path / "state" / "coda.db"
    store = Store(db)
    for _ in range(40):
        store.submit(JobSpec(argv=["true"], cwd=str(tmp_path), env={"P": "x" * 60_000}))
    svc = AgentService(db, Limits(status_rows=10))
    got = svc({"op": "status", "decisions": 0}, ME)
    assert len(json.dumps(got)) < 20_000 and got["more"] == 30
    store.close()
    svc.close()


def test_a_users_cancel_of_many_ids_stops_at_its_share_of_the_time(tmp_path: Path) -> None:
    """The cancel attack: one request naming 10,000 ids (duplicates allowed, each a row
    to read) held the socket for 52 s. Now the ids are capped and de-duplicated, and the
    request stops once its user's budget is spent; the rest are said, not done."""
    db = tmp_path / "state" / "coda.db"
    store = Store(db)
    hostile, other = Peer(1, 4242, 4242), Peer(2, 4343, 4343)
    ids = [store.submit(JobSpec(argv=["true"], cwd=str(tmp_path)), Owner.of_user(4242, 4242))
           for _ in range(300)]  # fmt: skip
    store.close()
    now = [100.0]
    ticks = [0.0]

    def request_clock() -> float:  # every look costs 10 ms: one id's work
        ticks[0] += 0.01
        return ticks[0]

    svc = AgentService(db, Limits(user_share=0.25), clock=request_clock)
    svc.budget = TimeBudget(0.25, clock=lambda: now[0])
    got = svc({"op": "cancel", "ids": ids * 40}, hostile)  # 12,000 ids
    assert got["ok"] is False and "1 to 1000 job ids" in got["error"]
    got = svc({"op": "cancel", "ids": (ids * 4)[:1000]}, hostile)  # 300 ids, each 3 times
    assert got["ok"]
    done = [r for r in got["jobs"] if "state" in r]
    refused = [r for r in got["jobs"] if r.get("busy")]
    assert len(done) == 99, len(done)  # its 1 s of budget, no more
    assert len(done) + len(refused) == 300  # each id once
    assert "ask again in 4 s" in refused[0]["error"]
    assert svc({"op": "status"}, hostile).get("busy")  # its budget is spent ...
    assert svc({"op": "status"}, other)["ok"]  # ... another user's is not
    svc.close()


@pytest.mark.parametrize("char", ["a", "\u00e9", "\u4e2d", "\x01"])
def test_every_cap_counts_the_bytes_the_database_stores(tmp_path: Path, char: str) -> None:
    """Caps counted UTF-8 while rows were stored JSON-escaped: a control character took 6
    bytes (500 kept rows held 196 MB), non-ASCII text was refused at a third of the cap,
    and an ASCII user ended 11 bytes over it. Now one measure, the stored one, serves the
    spec cap, the user cap and the row's own size."""
    db = tmp_path / "state" / "coda.db"
    Store(db).close()
    limits = Limits(spec_bytes=16 << 10, user_bytes=64 << 10)
    svc = AgentService(db, limits)
    s = spec(tmp_path)
    s["env"] = {"PAD": char * 2000}
    job = JobSpec.from_dict(s)
    job.validate(probe_cwd=False)  # as the agent does: a name from the command
    sizes = job.stored_sizes()
    one = sum(sizes.values())
    while svc({"op": "submit", "spec": s}, ME)["ok"]:
        pass
    store = Store(db)
    held = store.usage(ME.uid)[1]
    assert limits.user_bytes - one < held <= limits.user_bytes  # full, never over
    stored = store._db.execute("SELECT argv, env, cwd, name, model, spec_bytes FROM jobs")
    for *texts, counted in stored.fetchall():
        assert sum(len(t.encode()) for t in texts) == counted == one  # counted is kept
    store.close()
    svc.close()
    if char == "\x01":
        assert sizes["env"] >= 6 * 2000  # an escaped control character costs its 6 bytes
    elif char != "a":
        assert sizes["env"] < 4 * 2000  # UTF-8 text as UTF-8, not as \\uXXXX escapes


def test_the_database_gives_purged_space_back(tmp_path: Path) -> None:
    """coda.db never shrank after a purge; now freed pages go back a bounded step at a
    time (compact), and an older database is rewritten once at open to allow it."""
    import sqlite3

    db = tmp_path / "coda.db"
    Store(db).close()
    con = sqlite3.connect(db)  # as an older CODA left it: no incremental auto-vacuum
    con.execute("PRAGMA auto_vacuum=NONE")
    con.execute("VACUUM")
    assert con.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    con.close()
    store = Store(db)
    assert store._db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    ids = [store.submit(JobSpec(argv=["true"], cwd=str(tmp_path), env={"P": "x" * 20_000}))
           for _ in range(300)]  # fmt: skip
    for j in ids:
        store.update(j, state="done", end_t=1.0)

    def size() -> int:
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return db.stat().st_size

    full = size()
    assert len(store.purge(before=2.0, per_user=0, batch=500)) == 300
    steps = 0
    while store.compact(256):
        steps += 1
    assert steps >= 2  # a bounded step at a time
    assert size() < full / 4, (size(), full)
    store.close()
