"""What the node runtime trusts: state directories and databases, job specs, the control
socket's peers, the supervisor's environment, the cgroup parent, and the probe rule.

Everything here runs without root on a fake cgroup tree, except where a test needs
another user's files (it skips with its reason). The same properties on the real
kernel, with a real non-root submitter, are in tests/test_runtime_kernel.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import fake_v1_driver, tick_until, v1_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda.cli import main
from coda.policy.framework import SetCores
from coda.runtime.agent import AgentConfig
from coda.runtime.cgroups import CgroupError
from coda.runtime.control import ControlError, ControlServer, Peer, request
from coda.runtime.local_queue import local_agent
from coda.runtime.service import AgentService, visible
from coda.runtime.statedir import StateDirError, secure_dir, secure_file
from coda.runtime.store import JobSpec, Owner, SpecError, Store, StoreError

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root to make files of another user")


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def one_line_error(code: int, out: str) -> bool:
    lines = [x for x in out.strip().splitlines() if x.strip()]
    return code != 0 and "Traceback" not in out and len(lines) == 1


# ------------------------------------------------------------ state directory
def test_state_dir_is_made_0700_and_an_open_one_is_tightened(tmp_path: Path) -> None:
    sd = tmp_path / "new"
    secure_dir(sd)
    assert os.stat(sd).st_mode & 0o777 == 0o700
    old = tmp_path / "old"
    old.mkdir(mode=0o755)
    os.chmod(old, 0o755)
    secure_dir(old)
    assert os.stat(old).st_mode & 0o777 == 0o700
    db = old / "coda.db"
    Store(db).close()
    os.chmod(db, 0o644)
    Store(db).close()
    assert os.stat(db).st_mode & 0o777 == 0o600


def test_state_dir_writable_by_others_or_a_symlink_is_refused(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(StateDirError, match="writable by its group or others"):
        secure_dir(open_dir)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(StateDirError, match="not a directory"):
        secure_dir(link)
    f = tmp_path / "f.db"
    f.symlink_to(tmp_path / "real.db")
    with pytest.raises(StateDirError, match="not a regular file"):
        secure_file(f)


@needs_root
def test_a_state_dir_or_database_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(StateDirError, match="owned by .*uid 65534"):
        secure_dir(theirs)
    code, out = run("agent", "--state-dir", str(theirs), "--gpus", "0")
    assert one_line_error(code, out) and "not by this process's user" in out, out
    mine = tmp_path / "mine"
    Store(mine / "coda.db").close()
    os.chown(mine / "coda.db", 65534, 65534)
    with pytest.raises(StoreError, match="owned by"):
        Store(mine / "coda.db")


# ------------------------------------------------------------ the database
def _corrupt(sd: Path) -> None:
    sd.mkdir(mode=0o700)
    (sd / "coda.db").write_bytes(b"this is not a database, just bytes\x00" * 100)


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["status", "3"],
        ["cancel", "1"],
        ["submit", "--", "true"],
        ["agent", "--gpus", "0"],
    ],
)
def test_a_corrupt_database_is_one_line_in_every_command(tmp_path: Path, argv) -> None:
    sd = tmp_path / "s"
    _corrupt(sd)
    code, out = run(argv[0], "--state-dir", str(sd), *argv[1:])
    assert one_line_error(code, out) and "coda.db" in out and "not a usable" in out, out


def test_a_newer_or_foreign_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "s" / "coda.db"
    Store(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="schema version 99 is newer"):
        Store(db)
    code, out = run("status", "--state-dir", str(db.parent))
    assert one_line_error(code, out) and "newer" in out
    foreign = tmp_path / "f" / "coda.db"
    foreign.parent.mkdir()
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE photos (id INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="not CODA's"):
        Store(foreign)


# The columns each older schema lacks (what its agent left behind).
OLDER_SCHEMAS = {
    1: ("uid", "gid", "groups", "time_limit_s", "wait_reason", "spec_bytes", "checkpoints"),
    2: ("time_limit_s", "wait_reason", "spec_bytes", "checkpoints"),
    3: ("spec_bytes", "checkpoints"),
    4: ("checkpoints",),
}


@pytest.mark.parametrize("version", sorted(OLDER_SCHEMAS))
def test_an_older_database_is_upgraded_in_place_and_keeps_its_jobs(
    tmp_path: Path, version: int
) -> None:
    db = tmp_path / "coda.db"
    store = Store(db)
    jid = store.submit(JobSpec(argv=["true"], cwd=str(tmp_path)))
    running = store.submit(JobSpec(argv=["true"], cwd=str(tmp_path)))
    store.update(running, state="running")
    store.close()
    con = sqlite3.connect(db)
    if version < 4:
        for index in ("jobs_queue", "jobs_user", "jobs_ended", "decisions_job"):  # version 4's
            con.execute(f"DROP INDEX {index}")
        con.execute("CREATE INDEX jobs_state ON jobs (state)")
    for col in OLDER_SCHEMAS[version]:
        con.execute(f"ALTER TABLE jobs DROP COLUMN {col}")
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(version),))
    con.commit()
    con.close()
    store = Store(db)
    assert store.meta("schema") == "5"
    row = store.job(jid)
    assert row is not None and row.state == "queued" and row.argv == ["true"]
    assert row.time_limit_s is None and row.wait_reason == ""  # no limit, no reason yet
    assert row.checkpoints == 0  # an old job said nothing: it is taken not to checkpoint
    if version == 1:
        assert row.uid is None and row.owner is None  # the agent's user, as before
    else:
        assert row.uid == os.geteuid()
    # The new columns work at once: a reason for the queued job, a limit on a new one.
    store.set_wait_reasons({jid: "cores", running: "cores"})
    assert store.job(jid).wait_reason == "cores"  # type: ignore[union-attr]
    assert store.job(running).wait_reason == ""  # type: ignore[union-attr]
    spec = JobSpec(argv=["true"], cwd=str(tmp_path), time_limit_s=60, checkpoints=True)
    later = store.submit(spec)
    assert store.job(later).time_limit_s == 60.0  # type: ignore[union-attr]
    assert store.job(later).checkpoints == 1  # type: ignore[union-attr]
    # The old rows' specs are counted against their user's cap (their size as stored),
    # the new one's as every cap counts it.
    if version > 1:
        old = len(json.dumps(["true"]) + "{}" + str(tmp_path))
        new = sum(spec.stored_sizes().values())
        # Rows before version 4 are sized by the migration (command, environment and
        # directory); version 4's kept the size they were written with.
        olds = 2 * old if version < 4 else 2 * new
        assert store.usage(os.geteuid()) == (2, olds + new)
    store.close()
    store = Store(db)  # a second open finds version 5 and changes nothing
    assert store.meta("schema") == "5" and len(store.jobs()) == 3
    store.close()


def test_job_ids_sqlite_cannot_hold_are_refused_by_the_option(tmp_path: Path) -> None:
    sd = tmp_path / "s"
    Store(sd / "coda.db").close()
    for cmd in ("status", "cancel"):
        code, out = run(cmd, "--state-dir", str(sd), "9" * 30)
        assert code == 2 and "Traceback" not in out and "JOB_ID" in out, out
    assert Store(sd / "coda.db").job(2**70) is None


# ------------------------------------------------------------ job specs
SPEC_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
SPEC_KEYS = st.sampled_from(
    ["argv", "name", "cores", "gpus", "model", "cwd", "env", "time_limit_s", "uid", "x"]
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(SPEC_KEYS, SPEC_VALUES, max_size=7) | SPEC_VALUES)
def test_any_json_spec_is_a_spec_or_a_spec_error(data) -> None:
    try:
        spec = JobSpec.from_dict(data)
        spec.validate()
    except SpecError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(spec.cores, int) and not isinstance(spec.cores, bool)
    assert all(isinstance(a, str) for a in spec.argv) and spec.argv
    t = spec.time_limit_s
    assert t is None or (type(t) is float and 0 < t <= 366 * 86400)


@pytest.mark.parametrize(
    "spec, why",
    [
        ({"argv": "true"}, "list of strings"),
        ({"argv": ["true"], "cores": "4"}, "whole number"),
        ({"argv": ["true"], "cores": True}, "whole number"),
        ({"argv": ["true"], "cores": 4.5}, "whole number"),
        ({"argv": ["true"], "cores": 10**30}, "whole number"),
        ({"argv": ["true"], "gpus": -1}, "whole number"),
        ({"argv": ["true"], "name": 7}, "must be a string"),
        ({"argv": ["true"], "cwd": ["/"]}, "must be a string"),
        ({"argv": ["true"], "env": {"A": 1}}, "object of strings"),
        ({"argv": ["true"], "env": ["A=1"]}, "object of strings"),
        ({"argv": [1, 2]}, "list of strings"),
        ({"argv": ["true"], "uid": 0}, "unknown key(s) in job spec: 'uid'"),
        ({"argv": ["true"], "time_limit_s": "1:00"}, "'time_limit_s' must be seconds"),
        ({"argv": ["true"], "time_limit_s": True}, "'time_limit_s' must be seconds"),
        ({"argv": ["true"], "time_limit_s": 0}, "'time_limit_s' must be seconds"),
        ({"argv": ["true"], "time_limit_s": -60}, "'time_limit_s' must be seconds"),
        ({"argv": ["true"], "time_limit_s": float("nan")}, "'time_limit_s' must be seconds"),
        ({"argv": ["true"], "time_limit_s": float("inf")}, "'time_limit_s' must be seconds"),
        ({"argv": ["true"], "time_limit_s": 10**400}, "'time_limit_s' must be seconds"),
        ({"argv": ["true"], "time_limit_s": 366 * 86400 + 1}, "'time_limit_s' must be seconds"),
        ({"argv": ["true"], "time_limit_s": [60]}, "'time_limit_s' must be seconds"),
        ({"argv": ["true"], "checkpoints": 1}, "'checkpoints' must be true or false"),
        ({"argv": ["true"], "checkpoints": "yes"}, "'checkpoints' must be true or false"),
        ([1, 2], "JSON object"),
    ],
)
def test_submit_spec_with_wrong_types_is_one_line(tmp_path: Path, spec, why: str) -> None:
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(spec))
    code, out = run("submit", "--state-dir", str(tmp_path / "s"), "--spec", str(f))
    assert one_line_error(code, out) and why in out, out


def test_submit_spec_file_that_is_not_text_or_too_deep_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "spec.json"
    f.write_bytes(b'{"argv": ["\xff\xfe"]}')
    code, out = run("submit", "--state-dir", str(tmp_path / "s"), "--spec", str(f))
    assert one_line_error(code, out) and "not UTF-8" in out, out
    f.write_text("[" * 100000 + "]" * 100000)
    code, out = run("submit", "--state-dir", str(tmp_path / "s"), "--spec", str(f))
    assert one_line_error(code, out), out


def test_a_spec_naming_a_key_twice_is_refused(tmp_path: Path) -> None:
    """json keeps the last copy: '{"cores": 1, "cores": 64}' would ask for 64."""
    f = tmp_path / "spec.json"
    f.write_text('{"argv": ["true"], "env": {"A": "1"}, "cores": 1, "cores": 64}')
    code, out = run("submit", "--state-dir", str(tmp_path / "s"), "--spec", str(f))
    assert one_line_error(code, out) and "key 'cores' is given twice" in out, out


def test_huge_specs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="arguments; at most"):
        JobSpec(argv=["x"] * 5000, cwd=str(tmp_path)).validate()
    with pytest.raises(SpecError, match="bytes as stored"):
        JobSpec(argv=["x", "y" * (2 << 20)], cwd=str(tmp_path)).validate()


# ------------------------------------------------------------ the control socket
@pytest.fixture
def service(tmp_path: Path):
    db = tmp_path / "state" / "coda.db"
    Store(db).close()
    sock = tmp_path / "agent.sock"
    svc = AgentService(db)
    server = ControlServer(sock, svc, on_exit=svc.close)
    yield sock, db
    server.close()


def test_submit_over_the_socket_records_the_kernels_word_for_who(service, tmp_path) -> None:
    sock, db = service
    spec = {"argv": ["true"], "cwd": str(tmp_path), "env": {"A": "1"}}
    jid = request(sock, {"op": "submit", "spec": spec})["id"]
    row = Store(db).job(jid)
    assert (row.uid, row.gid) == (os.geteuid(), os.getegid())
    assert os.getegid() in row.groups
    # A spec that names a user is refused, not obeyed.
    with pytest.raises(ControlError, match="unknown key"):
        request(sock, {"op": "submit", "spec": {**spec, "uid": 0}})


@pytest.mark.parametrize("limit", [90.5, 3600, None])
def test_a_time_limit_goes_through_the_socket_onto_the_row(service, tmp_path, limit) -> None:
    sock, db = service
    spec = {"argv": ["true"], "cwd": str(tmp_path), "time_limit_s": limit}
    jid = request(sock, {"op": "submit", "spec": spec})["id"]
    row = Store(db).job(jid)
    assert row is not None and row.time_limit_s == limit
    listed = request(sock, {"op": "status"})["jobs"]
    assert [(j["id"], j["time_limit_s"], j["wait_reason"]) for j in listed] == [(jid, limit, "")]


@pytest.mark.parametrize("bad", [0, -1, "60", True, 1e300, [1], {"s": 1}])
def test_the_service_checks_a_time_limit_like_every_spec_field(service, tmp_path, bad) -> None:
    sock, db = service
    spec = {"argv": ["true"], "cwd": str(tmp_path), "time_limit_s": bad}
    with pytest.raises(ControlError, match="'time_limit_s' must be seconds"):
        request(sock, {"op": "submit", "spec": spec})
    assert Store(db).jobs() == []  # nothing queued


@pytest.mark.slow
@pytest.mark.parametrize(
    "raw",
    [
        b"not json\n",
        b"[1, 2]\n",
        b'{"op": "format-disk"}\n',
        b'{"op": "submit", "spec": 5}\n',
        b'{"op": "status", "job_id": 99999999999999999999999}\n',
        b'{"op": "status", "decisions": -1}\n',
        b'{"op": "cancel", "ids": "all"}\n',
        b'{"op": "cancel", "ids": [true]}\n',
        b"\xff\xfe\n",
    ],
)
def test_bad_requests_get_an_error_answer_and_the_server_lives_on(service, raw: bytes) -> None:
    import socket

    sock, _ = service
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock))
    s.sendall(raw)
    answer = json.loads(s.makefile("rb").readline())
    s.close()
    assert answer["ok"] is False and answer["error"]
    assert request(sock, {"op": "status"})["ok"]  # still serving


def test_a_silent_or_flooding_client_does_not_block_others(service) -> None:
    import socket

    sock, _ = service
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(str(sock))  # says nothing
    flood = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    flood.connect(str(sock))
    try:
        flood.sendall(b"x" * (5 << 20))  # past MAX_REQUEST, no newline
    except OSError:
        pass  # the server cut it off
    t0 = time.monotonic()
    assert request(sock, {"op": "status"})["ok"]
    assert time.monotonic() - t0 < 2.0
    silent.close()
    flood.close()


def test_other_users_see_no_command_or_environment_and_cancel_nothing(tmp_path: Path) -> None:
    db = tmp_path / "coda.db"
    store = Store(db)
    theirs = store.submit(
        JobSpec(argv=["secret-tool", "--token=abc"], cwd=str(tmp_path), env={"TOKEN": "abc"}),
        Owner(4242, 4242, (4242,)),
    )
    row = store.job(theirs)
    store.close()
    shown = visible(row, 5151)
    assert shown["argv"] == [] and shown["env"] == {} and shown["cwd"] == ""
    assert visible(row, 4242)["env"] == {"TOKEN": "abc"}
    svc = AgentService(db)
    got = svc({"op": "cancel", "ids": [theirs]}, Peer(1, 5151, 5151))
    if os.geteuid() not in (5151,):
        assert "not yours" in got["jobs"][0]["error"]
    assert Store(db).job(theirs).cancel == 0
    assert svc({"op": "cancel", "ids": [theirs]}, Peer(1, 4242, 4242))["jobs"][0]["state"]


def test_a_non_root_agent_runs_only_its_own_users_jobs(tmp_path: Path, monkeypatch) -> None:
    db = tmp_path / "coda.db"
    Store(db).close()
    me = os.geteuid()
    monkeypatch.setattr("os.geteuid", lambda: me if me != 0 else 1000)
    if me == 0:
        os.chown(db, 1000, 1000)
    other = Peer(1, 777, 777)
    got = AgentService(db)(
        {"op": "submit", "spec": {"argv": ["true"], "cwd": str(tmp_path)}}, other
    )
    assert got["ok"] is False and "runs only its own user's jobs" in got["error"]


# ------------------------------------------------------------ the agent
_driver = fake_v1_driver


FAST = dict(period_s=0.1, window_s=0.3, settle_s=0.15, stall_s=1.5, gpus=1)


def test_one_agent_per_cgroup_parent_whatever_its_state_dir(tmp_path: Path) -> None:
    drv = _driver(tmp_path)
    s1, s2 = Store(tmp_path / "a" / "coda.db"), Store(tmp_path / "b" / "coda.db")
    first = local_agent(s1, drv, tmp_path / "a", AgentConfig(**FAST))
    first.start()
    second = local_agent(s2, drv, tmp_path / "b", AgentConfig(**FAST))
    with pytest.raises(CgroupError, match="another agent manages cgroup parent"):
        second.start()
    parent = drv.parent_path()
    first.shutdown()  # it made the parent, nothing is left in it: it removes it
    assert not parent.exists()
    second.start()  # the parent is free now (and second makes it anew)
    # A group that is not second's (left by some other agent, or an operator's) stays,
    # empty or not, and so does a parent second did not make.
    (drv.parent_path() / "job-1").mkdir()
    for d in ("cpu", "cpuacct", "freezer"):
        (drv.parent_path().parent.parent / d / "coda" / "job-1").mkdir(parents=True)
    s2.set_meta("cgroup_parent_made", "")
    second.shutdown()
    assert (drv.parent_path() / "job-1").is_dir() and drv.parent_path().is_dir()
    s1.close()
    s2.close()


@pytest.mark.slow
def test_the_supervisor_gets_none_of_the_jobs_environment(tmp_path: Path) -> None:
    drv = _driver(tmp_path)
    store = Store(tmp_path / "state" / "coda.db")
    agent = local_agent(store, drv, tmp_path / "state", AgentConfig(**FAST))
    agent.start()
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "json.py").write_text("open(__file__ + '.loaded', 'w').write('x')\n")
    code = (
        "import os, time; print(os.environ.get('PYTHONPATH'), os.environ.get('EXTRA'));"
        " time.sleep(3)"
    )
    jid = store.submit(
        JobSpec(
            argv=[sys.executable, "-c", code],
            cwd=str(evil),
            env={"PYTHONPATH": str(evil), "LD_PRELOAD": "/nonexistent/lib.so", "EXTRA": "1"},
        )
    )
    tick_until(agent, lambda: jid in agent.jobs.running)  # a loaded host: maybe not at once
    m = agent.jobs.running[jid]

    def proc_file(name: str) -> list[bytes]:
        # Popen returns once the shim's exec has begun; the kernel fills in its
        # environment and arguments a moment later (read before, they are empty).
        end = time.monotonic() + 10
        while not (raw := Path(f"/proc/{m.shim_pid}/{name}").read_bytes()):
            assert time.monotonic() < end, f"/proc/{m.shim_pid}/{name} stayed empty"
            time.sleep(0.01)
        return raw.split(b"\0")

    shim_env = proc_file("environ")
    assert not [e for e in shim_env if e.startswith((b"PYTHON", b"LD_", b"EXTRA"))], shim_env
    assert b"PATH=/usr/sbin:/usr/bin:/sbin:/bin" in shim_env
    shim_cmd = proc_file("cmdline")
    assert b"-I" in shim_cmd
    tick_until(agent, lambda: store.job(jid).state == "done")
    out = (agent.source.supervisor.job_dir(jid) / "stdout").read_text().split()
    assert out == [str(evil), "1"]  # the job itself got its environment
    assert not (evil / "json.py.loaded").exists()  # and the shim never imported its json.py
    # The job's files are the agent's alone.
    for f in ("stdout", "stderr", "launch.json", "exit"):
        assert os.stat(agent.source.supervisor.job_dir(jid) / f).st_mode & 0o077 == 0, f
    agent.shutdown()
    store.close()


def test_probes_take_free_cores_only_never_a_cpu_jobs(tmp_path: Path) -> None:
    # A DNN job beside a CPU job on a full node: the allocator (or anyone) asking to
    # grow it gets a refusal, and the CPU job keeps its cores and its work.
    drv = _driver(tmp_path)
    store = Store(tmp_path / "state" / "coda.db")
    agent = local_agent(store, drv, tmp_path / "state", AgentConfig(**FAST))
    agent.start()
    dnn = store.submit(JobSpec(argv=["sleep", "30"], cores=2, gpus=1, cwd=str(tmp_path)))
    cpu = store.submit(JobSpec(argv=["sleep", "30"], cores=2, cwd=str(tmp_path)))
    agent.tick()
    assert store.job(dnn).state == "running" and store.job(cpu).state == "running"
    assert agent.node.free_cores == 0
    m = agent.jobs.running[dnn]
    agent.actuator.carry_out([SetCores(m.job, 3)], agent.clock(), "allocator")
    assert len(agent.jobs.running[dnn].cpus) == 2  # refused: no free core
    assert store.job(cpu).state == "running" and store.job(cpu).preemptions == 0
    acts = [d["action"] for d in store.decisions(limit=20)]
    assert "refused" in acts and "preempt" not in acts
    for mm in list(agent.jobs.running.values()):
        agent.processes.signal(mm, 9)
    agent.shutdown()
    store.close()


# ------------------------------------------------------------ a corpus of bad options
BAD_OPTIONS = [
    ["agent", "--period", "nan"],
    ["agent", "--period", "inf"],
    ["agent", "--period", "0"],
    ["agent", "--window", "-1"],
    ["agent", "--window", "1e400"],
    ["agent", "--stall", "nan"],
    ["agent", "--gpus", "-1"],
    ["agent", "--gpus", "100000000000000000000"],
    ["agent", "--cpus", "0-99999999999"],
    ["agent", "--cpus", "3-1"],
    ["agent", "--cpus", "a-b"],
    ["agent", "--cpus", ""],
    ["agent", "--metrics-port", "70000"],
    ["agent", "--metrics-port", "-5"],
    ["agent", "--cgroup-parent", "../etc"],
    ["agent", "--cgroup-parent", "a/b"],
    ["agent", "--cgroup-version", "3"],
    ["agent", "--policy", "nope"],
    ["agent", "--tune", "allocator.tolerance=nan"],
    ["agent", "--tune", "allocator.max_windows=1" + "0" * 40],
    ["agent", "--tune", "eliminator.step_down=inf"],
    ["agent", "--tune", "nodot=1"],
    ["agent", "--tune", "allocator.nosuch=1"],
    ["agent", "--period", "2", "--window", "1"],
    ["submit", "--cores", "0", "--", "true"],
    ["submit", "--cores", "nan", "--", "true"],
    ["submit", "--cores", "99999999999999999999", "--", "true"],
    ["submit", "--gpus", "65", "--", "true"],
    ["submit", "--name", "a b", "--", "true"],
    ["submit", "--name", "x" * 100, "--", "true"],
    ["submit", "--model", "../m", "--", "true"],
    ["submit", "--env", "CODA_JOB_ID=1", "--", "true"],
    ["submit", "--env", "1BAD=x", "--", "true"],
    ["submit", "--env", "NOEQ", "--", "true"],
    ["submit", "--cwd", "/nonexistent/dir", "--", "true"],
    ["submit", "--time", "0", "--", "true"],
    ["submit", "--time", "1:60", "--", "true"],
    ["submit", "--time", "367-00", "--", "true"],
    ["submit", "--time", "UNLIMITED", "--", "true"],
    ["run", "--time", "soon", "--", "true"],
    ["submit", "--", ""],
    ["submit"],
    ["run", "--poll", "nan", "--", "true"],
    ["run", "--poll", "0", "--", "true"],
    ["status", "-1"],
    ["status", "abc"],
    ["status", "--decisions", "-3"],
    ["status", "--decisions", "99999999999"],
    ["cancel"],
    ["cancel", "0"],
    ["cancel", "1e3"],
]


@pytest.mark.parametrize("argv", BAD_OPTIONS, ids=lambda a: " ".join(a)[:60])
def test_bad_runtime_options_are_one_line_errors(tmp_path: Path, argv: list[str]) -> None:
    sd = tmp_path / "s"
    Store(sd / "coda.db").close()
    code, out = run(argv[0], "--state-dir", str(sd), *argv[1:])
    assert code in (1, 2) and "Traceback" not in out, out
    assert [x for x in out.splitlines() if x.startswith("Error")], out


@pytest.mark.parametrize("content", [b"[1, 2]", b"\xff\xfe", b"{" * 5000, b'{"schema": 99}'])
def test_a_corrupt_controller_state_is_one_line(tmp_path: Path, content: bytes) -> None:
    from coda.slurm.controller import STATE_FILE

    sd = tmp_path / "ctl"
    sd.mkdir(mode=0o700)
    (sd / STATE_FILE).write_bytes(content)
    code, out = run("slurm", "controller", "--state-dir", str(sd), "--once")
    assert one_line_error(code, out) and STATE_FILE in out, out


def test_a_corrupt_slurm_agent_database_is_one_line(tmp_path: Path) -> None:
    sd = tmp_path / "sa"
    _corrupt(sd)
    code, out = run("slurm", "agent", "--node", "n1", "--state-dir", str(sd))
    assert one_line_error(code, out) and "not a usable" in out, out


# ----------------------------------- slow clients, planted sockets, shared state dirs, damaged rows
def test_a_trickling_client_is_cut_off_at_one_deadline(service, monkeypatch) -> None:
    import socket

    from coda.runtime import control

    monkeypatch.setattr(control, "TIMEOUT_S", 0.6)
    sock, _ = service
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock))
    t0 = time.monotonic()
    closed = False
    while time.monotonic() - t0 < 5:
        try:
            s.send(b"{")  # one byte at a time: every read is quick, the request never ends
        except OSError:
            closed = True
            break
        s.settimeout(0.1)
        try:
            if s.recv(1) == b"":
                closed = True
                break
        except TimeoutError:
            pass
    s.close()
    assert closed and time.monotonic() - t0 < 2.0


def test_connections_are_capped_per_user_and_cost_no_threads(service) -> None:
    import socket
    import threading

    from coda.runtime import control

    sock, _ = service
    before = threading.active_count()
    silent = []
    for _ in range(control.MAX_PER_USER):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(str(sock))
        silent.append(c)
    time.sleep(0.3)
    assert threading.active_count() == before  # one serving thread, whatever the load
    with pytest.raises(ControlError, match="closed the connection"):
        request(sock, {"op": "status"}, timeout=3)
    for c in silent:
        c.close()
    time.sleep(0.3)
    assert request(sock, {"op": "status"})["ok"]


@needs_root
def test_a_socket_planted_by_another_user_gets_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "state.run"
    run_dir.mkdir(mode=0o755)
    fake = run_dir / "agent.sock"
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(fake))
    listener.listen(1)
    os.chown(fake, 65534, 65534)  # as if nobody had made it
    try:
        code, out = run(
            "submit", "--state-dir", str(tmp_path / "state"), "--env", "TOKEN=x", "--", "true"
        )
        assert one_line_error(code, out) and "not an agent's" in out, out
    finally:
        listener.close()


def test_a_state_dir_below_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # not sticky: anyone could rename what is in it
    with pytest.raises(StateDirError, match="which others can write"):
        secure_dir(shared / "state")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # like /tmp: entries are their owners' to move
    secure_dir(sticky / "state")


@needs_root
def test_a_state_dir_below_another_users_directory_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chown(home, 65534, 65534)
    code, out = run("agent", "--state-dir", str(home / "state"), "--gpus", "0")
    assert one_line_error(code, out) and "could swap the path" in out, out
    assert not (home / "state").exists()


def test_a_directory_with_other_files_is_not_taken_over(tmp_path: Path) -> None:
    d = tmp_path / "etc-like"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    (d / "passwd").write_text("precious\n")
    code, out = run("submit", "--state-dir", str(d), "--", "true")
    assert one_line_error(code, out) and "not taking it over" in out, out
    assert os.stat(d).st_mode & 0o777 == 0o755 and not (d / "coda.db").exists()


@pytest.mark.parametrize(
    "spec, why",
    [
        ({"argv": ["true", "\ud800"]}, "not valid UTF-8"),
        ({"argv": ["true"], "env": {"A": "\udcff"}}, "not valid UTF-8"),
        ({"argv": ["true"], "name": "evil\n"}, "is not allowed"),
        ({"argv": ["true"], "model": "m\n"}, "is not allowed"),
        ({"argv": ["true"], "env": {"A\n": "1"}}, "is not allowed"),
    ],
)
def test_text_that_is_not_text_is_refused(tmp_path: Path, spec, why: str) -> None:
    with pytest.raises(SpecError, match=why):
        JobSpec.from_dict({**spec, "cwd": str(tmp_path)}).validate()


@pytest.mark.parametrize(
    "column, value",
    [
        ("argv", "not json"),
        ("env", "[1]"),
        ("uid", "abc"),
        ("groups", '["x"]'),
        ("cores", "four"),
        ("time_limit_s", "soon"),
        ("time_limit_s", -5.0),
        ("time_limit_s", 1e300),
        ("wait_reason", "two\nlines"),
        ("wait_reason", "x" * 201),
        # Numbers the agent never writes: shown as inf, -inf/s or invalid JSON before.
        ("quota", float("inf")),
        ("throughput", float("inf")),
        ("reference", float("-inf")),
        ("quota", -5.0),
        ("throughput", -1.0),
        ("submit_t", float("inf")),
    ],
)
def test_damaged_job_rows_are_one_line_in_every_command(tmp_path: Path, column, value) -> None:
    sd = tmp_path / "s"
    store = Store(sd / "coda.db")
    store.submit(JobSpec(argv=["true"], cwd=str(tmp_path)))
    store.close()
    con = sqlite3.connect(sd / "coda.db")
    con.execute(f"UPDATE jobs SET {column} = ?", (value,))
    con.commit()
    con.close()
    # The job list reads no spec (argv, env, cwd: its cost is bounded whatever they
    # hold); every command that reads one job whole says its damage in one line.
    listed = [] if column in ("argv", "env", "cwd") else [["status"]]
    for argv in (*listed, ["status", "1"], ["cancel", "1"], ["logs", "1"]):
        code, out = run(argv[0], "--state-dir", str(sd), *argv[1:])
        assert one_line_error(code, out) and "coda.db" in out and "job 1" in out, (argv, out)


def test_users_read_only_their_own_logs_and_queue_a_bounded_number(
    tmp_path: Path, monkeypatch
) -> None:
    from coda.runtime import service as svc_mod

    db = tmp_path / "state" / "coda.db"
    store = Store(db)
    mine = store.submit(JobSpec(argv=["true"], cwd=str(tmp_path)), Owner(4242, 4242, (4242,)))
    store.close()
    log = tmp_path / "state" / "jobs" / str(mine)
    log.mkdir(parents=True)
    (log / "stdout").write_text("x" * 100 + "the end\n")
    svc = AgentService(db)
    got = svc({"op": "logs", "job_id": mine, "tail": 8}, Peer(1, 4242, 4242))
    assert got == {"ok": True, "text": "the end\n"}
    other = svc({"op": "logs", "job_id": mine}, Peer(1, 5151, 5151))
    if os.geteuid() != 5151:
        assert other["ok"] is False and "not yours" in other["error"]
    monkeypatch.setattr(svc_mod, "MAX_QUEUED_PER_USER", 1)
    spec = {"argv": ["true"], "cwd": str(tmp_path)}
    if os.geteuid() == 0:
        got = svc({"op": "submit", "spec": spec}, Peer(1, 4242, 4242))
        assert got["ok"] is False and "jobs waiting already" in got["error"]


def test_a_progress_record_with_a_non_finite_time_is_ignored() -> None:
    from coda.runtime.progress import RECORD_SIZE, decode

    for t in ("nan", "inf", "1e300"):
        raw = f"coda1 5 {t} 7".ljust(RECORD_SIZE - 1).encode() + b"\n"
        assert decode(raw) is None


def test_an_agent_on_damaged_rows_says_so_in_one_line_and_lets_go(tmp_path: Path) -> None:
    from coda.cli.node_commands import AgentLock

    sd = tmp_path / "s"
    store = Store(sd / "coda.db")
    jid = store.submit(JobSpec(argv=["true"], cwd=str(tmp_path)))
    store.update(jid, state="running")  # adoption reads it at start
    store.close()
    con = sqlite3.connect(sd / "coda.db")
    con.execute("UPDATE jobs SET env = 'not json'")
    con.commit()
    con.close()
    mounts = v1_tree(tmp_path / "tree")
    args = ["--cgroup-mounts", str(mounts), "--cgroup-prefix", str(tmp_path / "tree")]
    code, out = run("agent", "--state-dir", str(sd), "--gpus", "0", *args)
    assert one_line_error(code, out) and "job 1" in out, out
    assert not AgentLock.held(sd)


@pytest.mark.parametrize(
    "argv",
    [
        ["slurm", "controller", "--period", "nan"],
        ["slurm", "controller", "--period", "inf"],
        ["slurm", "controller", "--metrics-port", "99999"],
        ["slurm", "agent", "--node", "n1", "--period", "nan"],
        ["slurm", "agent", "--node", "n1", "--stall", "-1"],
        ["slurm", "agent", "--node", "n1", "--cgroup-version", "3"],
    ],
    ids=lambda a: " ".join(a),
)
def test_bad_slurm_daemon_options_are_one_line(argv: list[str]) -> None:
    code, out = run(*argv)
    assert code == 2 and "Traceback" not in out, out
    assert [x for x in out.splitlines() if x.startswith("Error")], out


def test_coda_logs_escapes_a_jobs_terminal_controls_for_a_terminal(
    tmp_path: Path, monkeypatch
) -> None:
    from types import SimpleNamespace

    from click.testing import CliRunner

    from coda.cli import main, node_commands
    from coda.text import terminal_safe

    nasty = "ok\tcol\n\x1b]0;owned\x07\x1b[2J\rover\u202eevil\n"
    assert terminal_safe(nasty) == "ok\tcol\n\\x1b]0;owned\\x07\\x1b[2J\\rover\\u202eevil\n"
    sd = tmp_path / "state"
    store = Store(sd / "coda.db")
    jid = store.submit(JobSpec(argv=["true"], cwd=str(tmp_path)))
    store.close()
    (sd / "jobs" / str(jid)).mkdir(parents=True)
    (sd / "jobs" / str(jid) / "stdout").write_text(nasty)
    args = ["logs", "--state-dir", str(sd), str(jid)]
    piped = CliRunner().invoke(main, args)
    assert piped.exit_code == 0 and piped.output == nasty  # to a file or a pipe: as it is
    tty = SimpleNamespace(stdout=SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(node_commands, "sys", tty)
    shown = CliRunner().invoke(main, args)
    assert shown.exit_code == 0 and shown.output == terminal_safe(nasty), shown.output
    assert "\x1b" not in shown.output and "\r" not in shown.output
    raw = CliRunner().invoke(main, [*args, "--raw"])
    assert raw.output == nasty


@pytest.mark.slow
def test_a_jobs_logs_are_capped_and_a_users_logs_too(tmp_path: Path) -> None:
    """The log attack: a job's stdout grew 314 MB in 3 s in root's state directory.
    Now its shim keeps at most log_bytes of each stream and says how much it dropped;
    and once a user's logs pass user_log_bytes, their oldest finished jobs go first."""
    from coda.runtime.limits import Limits

    drv = _driver(tmp_path)
    store = Store(tmp_path / "state" / "coda.db")
    cap = 64 << 10
    limits = Limits(log_bytes=cap, user_log_bytes=5 * cap)
    agent = local_agent(store, drv, tmp_path / "state", AgentConfig(**FAST, limits=limits))
    agent.start()
    flood = (
        "import os\nfor _ in range(80):\n    os.write(1, b'x' * 65536); os.write(2, b'y' * 4096)"
    )
    ids = [store.submit(JobSpec(argv=[sys.executable, "-c", flood], cwd=str(tmp_path)))
           for _ in range(4)]  # fmt: skip
    tick_until(agent, lambda: all(store.job(j).state == "done" for j in ids), timeout=60)
    first = agent.source.supervisor.job_dir(ids[0])
    out = (first / "stdout").read_bytes()
    assert len(out) < cap + 200 and out.startswith(b"x" * 1000)
    assert f"first {cap} bytes; {80 * 65536 - cap} more were dropped".encode() in out
    err = (first / "stderr").read_bytes()
    assert err.startswith(b"y" * cap) and b"dropped" in err
    assert store.job(ids[0]).exit_code == 0  # the job itself ran to its end
    # Four jobs of ~128 KiB of logs each against the user's 320 KiB: the oldest go.
    agent.source.log_quota.next_check = 0.0
    tick_until(agent, lambda: store.job(ids[0]) is None, timeout=10)
    assert not first.exists()
    assert store.job(ids[-1]) is not None  # the newest stay
    agent.shutdown()
    store.close()
