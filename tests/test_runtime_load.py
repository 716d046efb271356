"""Issue 39, item 7, replayed on the real kernel: an unprivileged user (nobody) against a
root `coda agent`. The attack queued ~1,000 jobs of ~1 MiB environment each (the
state directory grew to 2.2 GB, the tick to 2 s, one status took 9 s) and ran status
loops until another user's submit timed out. Here, smaller, each bound is shown:
an oversize spec is refused, a user's bytes are capped, finished rows go after their
retention, and another user's submit answers quickly while nobody hammers status.

Needs root and cgroup v1 (skips elsewhere, saying why); the logic is tested without
root in tests/test_runtime_limits.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_module import load_bench
from test_runtime_kernel import SKIP, clear_parent, wait_for

from coda.cli.node_commands import spawn_agent
from coda.runtime.client import socket_path
from coda.runtime.control import request
from coda.runtime.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]

NOBODY = 65534
OTHER = 4243  # another unprivileged user (no passwd entry needed)
bench = load_bench("bench_agent_socket")


class Node:
    def __init__(self, base: Path, proc: subprocess.Popen[bytes], parent: str) -> None:
        self.base, self.proc, self.parent = base, proc, parent
        self.state = base / "state"
        self.sock = socket_path(self.state)
        self.store = Store(self.state / "coda.db")


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[object]:
    """Start a root agent (one CPU, public run directory) with extra options; one root
    job holds the CPU, so every other job waits in the queue."""
    made: list[Node] = []

    def start(*args: str) -> Node:
        base = Path(tempfile.mkdtemp(prefix="coda-load-", dir="/tmp"))
        os.chmod(base, 0o755)
        parent = f"coda-kt-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        proc = spawn_agent(
            base / "state",
            ["--cgroup-parent", parent, "--gpus", "0", "--cpus", "0", "--period", "0.5",
             "--window", "1", *args],
            tmp_path / "agent.log",
        )  # fmt: skip
        node = Node(base, proc, parent)
        made.append(node)
        request(node.sock, {"op": "submit", "spec": {"argv": ["sleep", "600"], "cwd": "/tmp"}})
        return node

    yield start
    for node in made:
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(timeout=30)
        clear_parent(node.parent)
        node.store.close()
        shutil.rmtree(node.base, ignore_errors=True)
    print((tmp_path / "agent.log").read_text())


def test_an_oversize_spec_is_refused_and_a_users_bytes_are_capped(start_node) -> None:
    node = start_node("--max-user-bytes", str(256 << 10))
    huge = bench.as_user(NOBODY, lambda: bench.fill_queue(node.sock, 1, 1 << 20))
    assert huge["ids"] == [] and "at most 1048576" in huge["refused"], huge  # the attack's
    big = bench.as_user(NOBODY, lambda: bench.fill_queue(node.sock, 1, 200_000))
    assert big["ids"] == [] and "'env' alone holds" in big["refused"], big
    assert "65536 per job" in big["refused"] and "\n" not in big["refused"]
    got = bench.as_user(NOBODY, lambda: bench.fill_queue(node.sock, 100, 30_000))
    assert len(got["ids"]) == 8, got  # 8 x 30 KB fit in 256 KiB; the 9th does not
    assert "would pass the 262144 a user may hold" in got["refused"], got
    queued, held = node.store.usage(NOBODY)
    assert queued == 8 and held <= 256 << 10
    # Another user is not held to nobody's bytes.
    other = bench.as_user(OTHER, lambda: bench.fill_queue(node.sock, 1, 30_000))
    assert len(other["ids"]) == 1, other


def test_finished_rows_and_their_directories_go_after_their_retention(start_node) -> None:
    node = start_node("--keep-finished", "1")
    got = bench.as_user(NOBODY, lambda: bench.fill_queue(node.sock, 20, 1000))
    ids = got["ids"]
    assert len(ids) == 20, got
    cancelled = bench.as_user(
        NOBODY, lambda: {"jobs": request(node.sock, {"op": "cancel", "ids": ids})["jobs"]}
    )
    assert {j["state"] for j in cancelled["jobs"]} == {"cancelled"}, cancelled
    # Kept 1 s after they ended; a purge pass every 5 s at most.
    wait_for(lambda: all(node.store.job(j) is None for j in ids), 20, "the purge")
    assert not any((node.state / "jobs" / str(j)).exists() for j in ids)
    head = request(node.sock, {"op": "status"})["agent"]
    assert head["keep_finished_s"] == 1 and head["finished_per_user"] == 500


def test_another_users_submit_answers_while_nobody_floods_the_queue_and_status(
    start_node,
) -> None:
    """Defaults: nobody queues as many 60 KB specs as the agent takes, then four status
    loops run; another user's submits and statuses are timed meanwhile."""
    node = start_node()
    filled = bench.as_user(NOBODY, lambda: bench.fill_queue(node.sock, 990, 60_000))
    assert 200 <= len(filled["ids"]) < 300, filled  # 16 MiB / 60 KB
    assert "a user may hold" in filled["refused"]
    assert bench.dir_bytes(node.state) < 64 << 20
    got = bench.under_attack(node.sock, NOBODY, OTHER, loops=4, samples=40, pause=0.02)
    victim = got["victim"]
    assert victim["errors"] == [], victim["errors"][:3]
    for op in ("submit", "status"):
        q = bench.quantiles(victim["latency"][op])
        print(f"another user's {op} under attack: {q}")
        assert q["p99_ms"] < 1000, (op, q)  # the attack timed a submit out (30 s)
    assert sum(h.get("busy", 0) for h in got["hostile"]) > 0, got["hostile"]
    tick = bench.tick_seconds(node.state)
    assert tick < 0.25, f"tick {tick:.3f} s with {len(filled['ids'])} big specs queued"
