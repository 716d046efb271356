"""One user's made-up progress against another user's CPU job, on the real kernel.

A "training job" of one user reports progress that falls whenever another user's CPU
job on the node runs at full quota and recovers whenever it is throttled (the
synthetic job reads the CPU job's real CFS quota from its cgroup): every judgement
the eliminator makes from that claim passes. Nothing the job cannot forge agrees
(this machine has no memory-bandwidth counters), so what the claim may cost the
other user's job is bounded (policy/eliminator.py, ``victim_share``). Needs root and
cgroup v1 (CI's host); skips elsewhere. The bound's logic is tested without a kernel
in test_eliminator.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from coda.cli.node_commands import spawn_agent
from coda.runtime.cgroups import CgroupError, detect
from coda.runtime.store import Store
from tests.fakes import LOOSE_HARM
from tests.test_runtime_kernel import as_user, clear_parent


def _why_not() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux (runs in CI as root)"
    try:
        if detect().version != 1:
            return "the synthetic job reads a cgroup v1 quota file (CI's host)"
    except CgroupError as e:
        return f"needs cgroup cpuset and cpu controllers: {e}"
    if len(os.sched_getaffinity(0)) < 2:
        return "needs at least 2 CPUs"
    return None


SKIP = _why_not()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]
CG = Path("/sys/fs/cgroup")
SYNTH = str(Path(__file__).parent / "synthetic_job.py")
NOBODY = 65534
SHARE, GRACE = 0.2, 4.0  # the bound this test sets: 20% of core-time plus 4 core-s
QUIET_S = 20.0  # the forger reports honestly this long first


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Path, str, Store]]:
    base = Path(tempfile.mkdtemp(prefix="coda-forged-", dir="/tmp"))
    os.chmod(base, 0o755)  # the victim's user reaches its run directory
    parent = f"coda-forged-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "agent.log"
    args = ["--cgroup-parent", parent, "--gpus", "1", "--period", "0.2", "--window", "0.5",
            "--tune", f"eliminator.victim_share={SHARE}",
            "--tune", f"eliminator.victim_grace_core_s={GRACE}",
            # The victim's allowance is what binds here, not its harm budget.
            *(a for k, v in LOOSE_HARM.items() for a in ("--tune", f"{k}={v}"))]  # fmt: skip
    proc = spawn_agent(base / "state", args, log)
    store = Store(base / "state" / "coda.db")
    try:
        yield base / "state", parent, store
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        clear_parent(parent)
        store.close()
        shutil.rmtree(base)
        print(log.read_text())


def submit(state: Path, *args: str, uid: int | None = None) -> int:
    """`coda submit` as root, or as ``uid`` through the socket (a forked child that drops
    to it first: this machine's Python is not readable by other users)."""
    argv = ["submit", "--state-dir", str(state), *args]
    if uid is None:
        out = subprocess.run([sys.executable, "-m", "coda.cli", *argv],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return int(out.stdout.strip().splitlines()[-1])
    code, said = as_user(uid, uid, argv)
    assert code == 0, said
    return int(said.strip().splitlines()[-1])


def test_made_up_progress_costs_another_users_job_at_most_its_allowance(agent) -> None:
    state, parent, store = agent
    victim = submit(state, "--cwd", "/tmp", "--name", "busy", "--cores", "1", "--",
                    "/bin/sh", "-c", "while :; do :; done", uid=NOBODY)  # fmt: skip
    end = time.monotonic() + 15
    while store.job(victim).state != "running":
        assert time.monotonic() < end, "the victim did not start"
        time.sleep(0.1)
    forger_id = victim + 1
    forger = submit(
        state, "--name", "forger", "--cores", "1", "--gpus", "1", "--model", "forged", "--",
        sys.executable, SYNTH,
        "--cpuset-file", str(CG / "cpuset" / parent / f"job-{forger_id}" / "cpuset.cpus"),
        "--optimum", "1", "--seconds", "120", "--contention", "0.7",
        # Honest for a while first: the victim's allowance since first seen grows, and
        # must not then be spent in one block.
        "--contention-after", str(QUIET_S),
        "--corunner", str(CG / "cpu" / parent / f"job-{victim}"),
        "--corunner-cpuset", str(CG / "cpuset" / parent / f"job-{victim}" / "cpuset.cpus"),
    )  # fmt: skip
    assert forger == forger_id
    # Watch the victim's quota for QUIET_S + 45 s: what it lost, in core-seconds, and
    # each unbroken throttle (seconds, core-s lost in it).
    t0 = last = time.monotonic()
    quota, lost, lowest = 1.0, 0.0, 1.0
    blocks: list[list[float]] = []
    while (now := time.monotonic()) - t0 < QUIET_S + 45:
        lost += (1.0 - quota) * (now - last)
        if quota < 1.0:
            blocks[-1][0] += now - last
            blocks[-1][1] += (1.0 - quota) * (now - last)
        last = now
        was, quota = quota, store.job(victim).quota
        if quota < 1.0 <= was:
            blocks.append([0.0, 0.0])
        lowest = min(lowest, quota)
        time.sleep(0.1)
    elapsed = last - t0
    kinds = [(d["detail"] or {}).get("decision") for d in store.decisions(limit=500, job_id=victim)]
    longest = max(blocks, default=[0.0, 0.0])
    print(
        f"victim lost {lost:.1f} core-s in {elapsed:.1f} s (allowed "
        f"{SHARE * elapsed + GRACE:.1f}); lowest quota {lowest}; {kinds.count('budget_release')} "
        f"budget releases; longest unbroken throttle {longest[0]:.1f} s, {longest[1]:.1f} "
        f"core-s lost in it; decisions {kinds}"
    )
    assert lowest < 0.5, "the forger's claim never throttled the victim: nothing was tested"
    assert "budget_release" in kinds, kinds
    # At most its allowance, plus a second of lag (the agent's ticks and this poll).
    assert lost <= SHARE * elapsed + GRACE + 1.0, (lost, elapsed, kinds)
    # No block spends the quiet spell's banked allowance: each costs at most the grace
    # and the share of its own length (plus the same second of lag).
    for seconds, cost in blocks:
        assert cost <= GRACE + SHARE * seconds + 1.0, (blocks, kinds)
    assert store.job(victim).state == "running"
