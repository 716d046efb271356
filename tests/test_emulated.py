"""Emulated jobs (coda.runtime.workloads.emulated): in virtual time, a job's work takes
what the performance model says for the cores it has and its co-runners' draw; it
publishes its own draw, reports progress, resumes from its checkpoint, and refuses a
bad environment with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coda.runtime.board import Board, Grant, Use, UseWriter
from coda.runtime.progress import Reporter, read_progress
from coda.runtime.workloads import emulated as E
from coda.workload import speed_model
from coda.workload.perf import load_profile_set

PROFILES = load_profile_set()


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += dt


def _dnn(board: Board | None, job_id: int, work: float, model: str = "ResNet50") -> E.EmulatedJob:
    perf = PROFILES.job_perf(model, 1, 1)
    return E.EmulatedJob(
        "dnn", job_id, work,
        E.dnn_speed_of(perf, 40.0, PROFILES.pcie_pair_slowdown, model),
        lambda c, q: speed_model.dnn_bandwidth(perf, c, q),
        board, model=model, pcie_heavy=perf.pcie_heavy, fallback_cores=lambda: 8.0,
    )  # fmt: skip


def _board(tmp_path: Path, *job_ids: int) -> Board:
    board = Board(tmp_path, agent_uid=os.getuid())
    for j in job_ids:
        (tmp_path / f"job_{j}.use").touch()  # what the Prolog makes
    return board


def test_a_job_alone_with_the_cores_it_needs_takes_its_work_in_seconds(tmp_path: Path) -> None:
    clock = Clock()
    job = _dnn(_board(tmp_path, 1), 1, 30.0)
    took = E.run(job, 0.25, clock=clock, sleep=clock.sleep)
    assert took == pytest.approx(30.0) and job.done == 30.0
    u = Board(tmp_path).uses()
    assert [x.job_id for x in u] == [1] and u[0].bw_gbps > 0  # its draw, published


def test_the_agents_grant_and_a_co_runners_draw_slow_it_as_the_model_says(tmp_path: Path) -> None:
    board = _board(tmp_path, 1)
    board.write_grant(1, Grant((3,), 0.5))
    w = UseWriter(board, 2, create=True)
    w.publish(Use(2, "cpu", 30.0, False, "-", os.getpid()))
    perf = PROFILES.job_perf("ResNet50", 1, 1)
    want = speed_model.dnn_speed(perf, 1.0, 0.5, 30.0, 40.0)
    assert want < 0.9
    clock = Clock()
    job = _dnn(board, 1, 10.0)
    took = E.run(job, 0.25, clock=clock, sleep=clock.sleep)
    assert took == pytest.approx(10.0 / want)
    # The co-runner leaves: full speed from the next tick on.
    w.close()
    (tmp_path / "job_2.use").unlink()
    board.remove_grant(1)
    job2 = _dnn(board, 1, 10.0)
    assert E.run(job2, 0.25, clock=clock, sleep=clock.sleep) == pytest.approx(10.0)


def test_progress_is_reported_at_the_rate_per_second_of_work(tmp_path: Path) -> None:
    clock = Clock()
    rep = Reporter(tmp_path / "progress", min_interval_s=0)
    E.run(_dnn(None, 1, 12.0), 0.25, rep, rate=50.0, clock=clock, sleep=clock.sleep)
    rep.close()
    got = read_progress(tmp_path / "progress")
    assert got is not None and got.samples == 600


def test_a_run_again_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    clock = Clock()
    job = _dnn(None, 1, 100.0)
    stop_at = 35.0
    E.run(job, 0.25, checkpoint=ckpt, checkpoint_s=10.0, stop=lambda: clock.t >= stop_at,
          clock=clock, sleep=clock.sleep)  # fmt: skip
    assert E.read_checkpoint(ckpt) == pytest.approx(30.0)  # the last one, at 30 s
    job = _dnn(None, 1, 100.0)
    job.done = E.read_checkpoint(ckpt)
    assert E.run(job, 0.25, clock=clock, sleep=clock.sleep) == pytest.approx(70.0)


def test_a_checkpoint_that_is_not_a_plain_number_of_this_user_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_text("lots\n")
    with pytest.raises(E.EnvError, match="not a number"):
        E.read_checkpoint(str(bad))
    (tmp_path / "neg").write_text("-5\n")
    with pytest.raises(E.EnvError, match="not a number"):
        E.read_checkpoint(str(tmp_path / "neg"))
    os.symlink(tmp_path / "bad", tmp_path / "link")
    with pytest.raises(E.EnvError):
        E.read_checkpoint(str(tmp_path / "link"))
    assert E.read_checkpoint(str(tmp_path / "absent")) == 0.0


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CODA_"))}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "coda.runtime.workloads.emulated", *args],
        capture_output=True, text=True, timeout=60, env=full, check=False,
    )  # fmt: skip


def test_the_command_runs_a_short_cpu_job_and_says_so_in_json(tmp_path: Path) -> None:
    (tmp_path / "job_4.use").touch()
    env = {"SLURM_JOB_ID": "4", "SLURM_CPUS_ON_NODE": "1"}
    p = _cli("cpu", "--cores", "1", "--work", "0.3", "--node-bw", "10", "--tick", "0.05",
             "--board", str(tmp_path), env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr
    start, end = (json.loads(x) for x in p.stdout.splitlines())
    assert start["event"] == "start" and start["job"] == 4 and start["done"] == 0.0
    assert end["event"] == "end" and end["done"] == pytest.approx(0.3)
    assert 0.3 <= end["seconds"] < 5


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (("dnn", "--model", "Nope", "--gpus", "1"), {"SLURM_JOB_ID": "3"}, "--model 'Nope'"),
        (("cpu", "--cores", "2"), {}, "no job id"),
        (("cpu", "--cores", "2"), {"SLURM_JOB_ID": "x1"}, "SLURM_JOB_ID='x1'"),
        (("cpu", "--cores", "2"), {"SLURM_JOB_ID": "3", "SLURM_CPUS_ON_NODE": "0"},
         "SLURM_CPUS_ON_NODE=0"),
        (("dnn", "--model", "VGG16", "--gpus", "1", "--profiles", "/nonexistent.json"),
         {"SLURM_JOB_ID": "3"}, "--profiles"),
    ],
)  # fmt: skip
def test_bad_options_or_environment_get_one_line_and_status_2(
    args: tuple[str, ...], env: dict[str, str], says: str
) -> None:
    p = _cli(*args, "--work", "1", "--node-bw", "10", env=env)
    assert p.returncode == 2
    assert says in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 or "usage:" in p.stderr


def test_a_fifo_in_place_of_its_files_never_stalls_the_job(tmp_path: Path) -> None:
    # A FIFO as the progress file, its board record or its checkpoint's temp file would
    # block an open for writing until someone reads it: each is refused, the job ends.
    os.mkfifo(tmp_path / "progress")
    os.mkfifo(tmp_path / "job_4.use")
    os.mkfifo(tmp_path / "ckpt.tmp")
    env = {"SLURM_JOB_ID": "4", "CODA_PROGRESS_FILE": str(tmp_path / "progress")}
    p = _cli("dnn", "--model", "ResNet50", "--gpus", "1", "--work", "0.3", "--node-bw", "10",
             "--tick", "0.05", "--board", str(tmp_path), env=env)  # fmt: skip
    # Opened without blocking: no reader, no open (ENXIO); the job runs unreported.
    assert p.returncode == 0 and "progress not reported" in p.stderr
    assert "bandwidth not published" in p.stderr
    p = _cli("cpu", "--cores", "1", "--work", "0.3", "--node-bw", "10", "--tick", "0.05",
             "--checkpoint", str(tmp_path / "ckpt"), "--checkpoint-s", "0.1",
             env={"SLURM_JOB_ID": "4"})  # fmt: skip
    assert p.returncode == 2 and "checkpoint" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "args",
    [("--rate", "1.7e308"), ("--tick", "100"), ("--node-bw", "1e308")],
)
def test_options_out_of_range_are_refused(args: tuple[str, str]) -> None:
    p = _cli("dnn", "--model", "ResNet50", "--gpus", "1", "--work", "1", "--node-bw", "10",
             *args, env={"SLURM_JOB_ID": "3"})  # fmt: skip
    assert p.returncode == 2 and "must be <=" in p.stderr


@pytest.mark.parametrize("value", ["\u0663", "1_000", " 7 ", "1" * 13])
def test_a_job_id_is_ascii_digits_only(value: str) -> None:
    p = _cli("cpu", "--cores", "1", "--work", "1", "--node-bw", "10", env={"SLURM_JOB_ID": value})
    assert p.returncode == 2 and "SLURM_JOB_ID" in p.stderr


def test_a_stopped_job_does_not_progress_while_stopped() -> None:
    clock = Clock()
    job = _dnn(None, 1, 10.0)

    def sleep(dt: float) -> None:
        clock.t += dt + (30.0 if 2.0 <= clock.t < 2.3 else 0.0)  # SIGSTOP for 30 s

    took = E.run(job, 0.25, clock=clock, sleep=sleep)
    assert took == pytest.approx(10.0 + 30.0 - 1.0, abs=0.3)  # a second's grace only
