"""The controller's lease: one active controller, a standby that takes over once the
active stops beating (on its own clock), fencing of a controller that lost it, a
controller whose cycles stall giving it up, and the CLI refusing a second active one.
Fake clocks; the real-Slurm failover is in test_slurm_e2e_failover."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from coda.cli import main
from coda.slurm.lease import (
    ControllerLease,
    FencedRunner,
    Heartbeat,
    LeaseError,
    LeaseRecord,
    holder_gone,
    process_start,
    read_lease,
    this_holder,
)

A, B = "hosta:1:100:1", "hostb:1:200:1"


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def pair(tmp_path: Path, ttl: float = 10.0) -> tuple[ControllerLease, ControllerLease, Clock]:
    clock = Clock()
    path = tmp_path / "lease"
    a = ControllerLease(path, ttl, holder=A, wall=clock, mono=clock)
    b = ControllerLease(path, ttl, holder=B, wall=clock, mono=clock)
    return a, b, clock


def test_one_active_a_standby_takes_over_once_the_beat_stops_for_the_ttl(tmp_path: Path) -> None:
    a, b, clock = pair(tmp_path)
    assert a.acquire() and a.epoch == 1
    assert not b.acquire() and b.last_seen is not None and b.last_seen.holder == A
    clock.t += 9
    assert a.renew()
    clock.t += 9  # b saw the beat move 9 s ago: not stale yet
    assert not b.acquire()
    clock.t += 10  # unmoved for 10 s on b's own clock ... and a bit
    assert not b.acquire()
    clock.t += 0.5
    assert b.acquire() and b.epoch == 2  # the fencing token rises
    # a comes back (it was paused): its renewal fails, its writes are refused
    assert not a.renew() and not a.held
    with pytest.raises(LeaseError, match="no lease"):
        a.check()
    assert b.check() == pytest.approx(5.0)
    rec = read_lease(tmp_path / "lease")
    assert rec == LeaseRecord(2, B, clock.t, 10.0)
    assert (tmp_path / "lease").stat().st_mode & 0o777 == 0o644  # slurmctld reads it


def test_a_standby_never_compares_another_hosts_clock(tmp_path: Path) -> None:
    """The holder's wall clock runs an hour behind: its beat looks an hour old, yet it
    moves, and that is all the standby judges by."""
    a, b, clock = pair(tmp_path)
    a.wall = lambda: clock.t - 3600
    assert a.acquire()
    for _ in range(10):
        assert not b.acquire()
        clock.t += 5
        assert a.renew()
    assert a.held and not b.held


def test_a_holder_writes_only_in_what_is_left_of_half_a_ttl(tmp_path: Path) -> None:
    a, _b, clock = pair(tmp_path)
    assert a.acquire()
    calls: list[tuple[list[str], float]] = []

    def runner(argv: object, timeout: float) -> str:
        calls.append((list(argv), timeout))  # type: ignore[call-overload]
        return ""

    run = FencedRunner(a, runner)
    clock.t += 4.0
    run(["scontrol", "update", "JobId=1", "AdminComment=x"])
    assert calls[-1][1] == pytest.approx(1.0)  # a write may take only what is left
    clock.t += 1.1  # 5.1 s: half the ttl passed on its own clock
    with pytest.raises(LeaseError, match="not renewed"):
        run(["scontrol", "release", "1"])
    run(["squeue", "--json"])  # reads always go, with the usual timeout
    run(["scontrol", "show", "-o", "node"])
    assert [c[0][1] for c in calls] == ["update", "--json", "show"]
    assert calls[-1][1] == 30.0
    assert a.renew()
    run(["scontrol", "requeuehold", "1"])


def test_a_released_lease_is_free_at_once_and_keeps_its_epoch(tmp_path: Path) -> None:
    a, b, _clock = pair(tmp_path)
    assert a.acquire()
    a.release()
    assert read_lease(tmp_path / "lease").holder == "-"  # type: ignore[union-attr]
    assert b.acquire() and b.epoch == 2


def test_a_dead_holder_on_this_host_frees_the_lease_at_once(tmp_path: Path) -> None:
    me = this_holder()
    host, ns, pid, start = me.rsplit(":", 3)
    assert int(start) == process_start(os.getpid())
    assert not holder_gone(me)
    assert holder_gone(f"{host}:{ns}:{pid}:{int(start) + 1}")  # the pid, reused by another
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                       capture_output=True, text=True, check=True)  # fmt: skip
    assert holder_gone(f"{host}:{ns}:{p.stdout.strip()}:1")
    assert not holder_gone(f"otherhost:{ns}:{pid}:{int(start) + 1}")  # another host's
    assert not holder_gone(f"{host}:{int(ns) + 1}:{pid}:{int(start) + 1}")  # another pidns
    clock = Clock()
    path = tmp_path / "lease"
    path.write_text(LeaseRecord(7, f"{host}:{ns}:{p.stdout.strip()}:1", clock.t, 10).line())
    new = ControllerLease(path, 10, wall=clock, mono=clock)
    assert new.acquire() and new.epoch == 8


@pytest.mark.parametrize(
    "text",
    [
        "",
        "coda-lease epoch=1 holder=h:1:1:1 beat=1 ttl=0\n",
        "coda-lease epoch=1 holder=h;rm:1:1:1 beat=1 ttl=10\n",
        "coda-lease epoch=99999999999999999999 holder=h:1:1:1 beat=1 ttl=10\n",
        "coda-lease epoch=1 holder=h:1:1:1 beat=1 ttl=10\nmore",
        "x" * 600,
    ],
)
def test_a_garbled_lease_is_named_never_taken(tmp_path: Path, text: str) -> None:
    path = tmp_path / "lease"
    path.write_text(text)
    a = ControllerLease(path, 10, holder="h:1:1:1")
    with pytest.raises(ValueError, match="lease"):
        a.acquire()
    said: list[str] = []
    heart = Heartbeat(a, said.append)
    assert not heart.beat() and not heart.beat()
    assert len(said) == 1 and heart.error
    assert path.read_text() == text  # left as it was


def test_the_heartbeat_says_each_change_once_and_gives_up_a_stalled_lease(
    tmp_path: Path,
) -> None:
    a, b, clock = pair(tmp_path)
    said_a: list[str] = []
    said_b: list[str] = []
    ha, hb = Heartbeat(a, said_a.append, stall_s=60), Heartbeat(b, said_b.append)
    assert ha.beat() and not hb.beat() and not hb.beat()
    assert len(said_a) == 1 and "active" in said_a[0]
    assert len(said_b) == 1 and "standby" in said_b[0]
    for _ in range(20):  # 50 s of beats, cycles completing
        clock.t += 2.5
        ha.cycled()
        assert ha.beat() and ha.active()
        assert not hb.beat()
    clock.t += 61  # no cycle completed for a minute (Slurm unreachable from here)
    assert not ha.beat() and not a.held and "given up" in said_a[-1]
    assert hb.beat() and "taken from" in said_b[-1]  # released: taken at once
    assert not ha.beat() and "standby" in said_a[-1]


def test_ttl_out_of_range_is_refused(tmp_path: Path) -> None:
    for ttl in (0.0, float("nan"), float("inf"), 4000.0):
        with pytest.raises(ValueError, match="ttl"):
            ControllerLease(tmp_path / "lease", ttl)


def test_a_second_active_controller_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "lease"
    path.write_text(LeaseRecord(3, "elsewhere:1:4242:1", time.time(), 1).line())
    stop = threading.Event()

    def other_controller() -> None:  # beats every 0.2 s
        n = 0
        while not stop.wait(0.2):
            n += 1
            path.write_text(LeaseRecord(3, "elsewhere:1:4242:1", time.time() + n, 1).line())

    t = threading.Thread(target=other_controller)
    t.start()
    try:
        r = CliRunner().invoke(
            main,
            ["slurm", "controller", "--once", "--state-dir", str(tmp_path / "sd"),
             "--lease", str(path), "--lease-ttl", "1"],
        )  # fmt: skip
    finally:
        stop.set()
        t.join()
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "elsewhere:1:4242:1 is active (epoch 3" in lines[0], lines
    assert "--standby" in lines[0]
    assert read_lease(path).holder == "elsewhere:1:4242:1"  # type: ignore[union-attr]
    r = CliRunner().invoke(
        main, ["slurm", "controller", "--once", "--standby", "--lease", str(path)]
    )
    assert r.exit_code == 2 and "--once and --standby" in r.output
    r = CliRunner().invoke(main, ["slurm", "controller", "--standby"], env={"CODA_SLURM_LEASE": ""})
    assert r.exit_code == 2 and "--standby needs --lease" in r.output


@pytest.mark.slow
def test_a_lease_nobody_renews_is_taken_after_its_ttl(tmp_path: Path) -> None:
    """A controller that died on another host: the next one waits out the ttl (its
    beat never moves), then takes the lease; Slurm is then asked (and missing here)."""
    path = tmp_path / "lease"
    path.write_text(LeaseRecord(3, "elsewhere:1:4242:1", time.time(), 1).line())
    r = CliRunner().invoke(
        main,
        ["slurm", "controller", "--once", "--state-dir", str(tmp_path / "sd"),
         "--lease", str(path), "--lease-ttl", "1"],
        env={"PATH": str(tmp_path)},  # no squeue: the cycle fails, after the lease
    )  # fmt: skip
    assert "is active" not in r.output, r.output
    assert read_lease(path).epoch == 4  # type: ignore[union-attr]


def test_a_lease_in_a_missing_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        main,
        ["slurm", "controller", "--once", "--state-dir", str(tmp_path / "sd"),
         "--lease", str(tmp_path / "nowhere" / "lease")],
    )  # fmt: skip
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "nowhere" in lines[0] and "No such file" in lines[0], lines


@pytest.mark.slow
def test_a_planted_fifo_or_a_stuck_lock_never_hangs_a_controller(tmp_path: Path) -> None:
    import fcntl

    path = tmp_path / "lease"
    os.mkfifo(tmp_path / "lease.tmp")  # would block an open for writing
    a = ControllerLease(path, 4, holder=A)
    assert a.acquire()  # the FIFO replaced, never opened
    assert read_lease(path).holder == A  # type: ignore[union-attr]
    with open(tmp_path / "lease.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process stuck while holding it
        t0 = time.monotonic()
        with pytest.raises(ValueError, match="held by another process"):
            a.renew()
        assert time.monotonic() - t0 < 3.0  # a quarter of the ttl, not for ever


def test_an_epoch_that_would_not_read_back_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lease"
    path.write_text(LeaseRecord(10**17 - 1, "-", 1.0, 10).line())
    a = ControllerLease(path, 10, holder=A)
    with pytest.raises(ValueError, match="too large"):
        a.acquire()
    assert read_lease(path).epoch == 10**17 - 1  # type: ignore[union-attr]
