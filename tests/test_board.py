"""The node's board for emulated jobs (coda.runtime.board): records round-trip, and a
reader trusts only regular files, grants of the agent's uid, records that name their
own file's job and come from a live process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coda.runtime.board import (
    RECORD_SIZE,
    Board,
    BoardError,
    Grant,
    Use,
    UseWriter,
    decode_grant,
    decode_use,
    encode_grant,
    encode_use,
)

use_st = st.builds(
    Use,
    job_id=st.integers(1, 10**12 - 1),
    kind=st.sampled_from(["dnn", "cpu"]),
    bw_gbps=st.floats(0, 1e5, allow_nan=False).map(lambda x: round(x, 6)),
    pcie_heavy=st.booleans(),
    model=st.from_regex(r"[A-Za-z0-9_.+-]{1,48}", fullmatch=True),
    pid=st.integers(1, 4_194_304),
)


@given(use_st)
def test_a_use_record_round_trips_in_one_fixed_size_record(u: Use) -> None:
    raw = encode_use(u)
    assert len(raw) == RECORD_SIZE
    assert decode_use(raw) == u


@given(st.binary(max_size=RECORD_SIZE))
def test_any_bytes_decode_to_a_valid_record_or_none(raw: bytes) -> None:
    u = decode_use(raw)
    assert u is None or (u.kind in ("dnn", "cpu") and u.bw_gbps >= 0 and u.pid > 0)
    g = decode_grant(raw)
    assert g is None or (g.cores > 0 and 0 < g.quota <= 1)


@given(st.sets(st.integers(0, 4095), min_size=1, max_size=300), st.floats(0.01, 1.0))
def test_a_grant_round_trips(cpus: set[int], quota: float) -> None:
    g = Grant(tuple(sorted(cpus)), round(quota, 6))
    assert decode_grant(encode_grant(g).encode()) == g


@pytest.mark.parametrize(
    "bad",
    [
        Use(1, "gpu", 1.0, False, "-", 1),
        Use(1, "dnn", float("nan"), False, "-", 1),
        Use(1, "dnn", -1.0, False, "-", 1),
        Use(1, "dnn", 1.0, False, "a b", 1),
        Use(0, "dnn", 1.0, False, "-", 1),
    ],
)
def test_a_bad_use_record_is_refused_when_written(bad: Use) -> None:
    with pytest.raises(BoardError):
        encode_use(bad)


@pytest.mark.parametrize("g", [Grant(()), Grant((1,), 0), Grant((1,), 1.5), Grant((-1,))])
def test_a_bad_grant_is_refused_when_written(g: Grant) -> None:
    with pytest.raises(BoardError):
        encode_grant(g)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"coda-grant1 nan 1",
        b"coda-grant1 2 0",
        b"coda-grant1 -2 1",
        b"x 2 1",
        b"coda-grant1 3-1 1",
        b"coda-grant1 0-99999999999 1",
        b"coda-grant1 , 1",
    ],  # fmt: skip
)
def test_a_malformed_grant_reads_as_none(raw: bytes) -> None:
    assert decode_grant(raw) is None


def _publish(board: Board, u: Use) -> None:
    w = UseWriter(board, u.job_id, create=True)
    w.publish(u)
    w.close()


def test_a_grant_is_trusted_only_from_the_agents_uid(tmp_path: Path) -> None:
    mine = Board(tmp_path, agent_uid=os.getuid())
    mine.write_grant(7, Grant((0, 1, 2), 0.5))
    assert mine.grant(7) == Grant((0, 1, 2), 0.5)
    assert (tmp_path / "job_7.grant").stat().st_mode & 0o777 == 0o644
    assert Board(tmp_path, agent_uid=os.getuid() + 1).grant(7) is None
    assert mine.grant(8) is None
    mine.write_grant(7, Grant((4, 7), 1.0))  # replaced in one step
    assert mine.grant(7) == Grant((4, 7), 1.0)
    mine.remove_grant(7)
    assert mine.grant(7) is None


def test_uses_skip_the_caller_symlinks_fifos_and_mismatched_or_dead_records(
    tmp_path: Path,
) -> None:
    board = Board(tmp_path, agent_uid=os.getuid())
    me = os.getpid()
    _publish(board, Use(1, "dnn", 5.0, True, "ResNet50", me))
    _publish(board, Use(2, "cpu", 9.0, False, "-", me))
    # A record naming another job than its file, a symlink to a good record, a FIFO,
    # garbage, a stray name: none is read.
    (tmp_path / "job_3.use").write_bytes(encode_use(Use(4, "cpu", 99.0, False, "-", me)))
    os.symlink(tmp_path / "job_2.use", tmp_path / "job_5.use")
    os.mkfifo(tmp_path / "job_6.use")
    (tmp_path / "job_7.use").write_bytes(b"\xff" * 200)
    (tmp_path / "other.use").write_bytes(encode_use(Use(8, "cpu", 99.0, False, "-", me)))
    # A record of a process that has exited.
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                       capture_output=True, text=True, check=True)  # fmt: skip
    _publish(board, Use(9, "cpu", 99.0, False, "-", int(p.stdout)))
    got = sorted(board.uses(exclude=1), key=lambda u: u.job_id)
    assert [(u.job_id, u.bw_gbps) for u in got] == [(2, 9.0)]
    assert sorted(u.job_id for u in board.uses()) == [1, 2]


def test_a_missing_board_reads_as_empty(tmp_path: Path) -> None:
    board = Board(tmp_path / "absent")
    assert board.uses() == [] and board.grant(1) is None


def test_a_job_cannot_make_its_record_where_the_prolog_made_none(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        UseWriter(Board(tmp_path), 5)


def test_a_pid_beyond_any_kernels_is_not_a_live_process(tmp_path: Path) -> None:
    # One job's record must not crash its co-runners' readers (os.kill overflows).
    (tmp_path / "job_8.use").write_bytes(b"coda-use1 8 cpu 1 0 - 4294967297".ljust(127) + b"\n")
    assert Board(tmp_path).uses() == []
