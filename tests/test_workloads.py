"""The real workloads (train, membw, spin) and the progress helper ``track()``.

The workloads run as subprocesses for a short time with ``CODA_PROGRESS_FILE`` set;
no timing assertions (machines are shared and noisy): only that progress advances,
the summaries are consistent, signals stop them cleanly with no process left
behind, and bad options are refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from coda.runtime import progress
from coda.runtime.progress import read_progress
from coda.runtime.workloads import membw, spin, train

SRC = Path(__file__).resolve().parents[1] / "src"
# Small batches so that every run is quick on two cores.
TINY = ["--batch-images", "4", "--image-px", "48", "--gpu-ms", "5", "--workers", "2"]


def _env(progress_file: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    env.pop(progress.ENV_FILE, None)
    if progress_file is not None:
        env[progress.ENV_FILE] = str(progress_file)
    return env


def _start(module: str, args: list[str], progress_file: Path | None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", f"coda.runtime.workloads.{module}", *args],
        env=_env(progress_file),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(module: str, args: list[str], progress_file: Path | None, timeout: float = 30):
    proc = _start(module, args, progress_file)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _summary(out: str) -> dict:
    last = json.loads(out.strip().splitlines()[-1])
    assert last["event"] == "summary"
    return last


def _wait_for(predicate, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _samples(path: Path) -> int:
    rec = read_progress(path)
    return rec.samples if rec else -1


def _gone(pid: int) -> bool:
    """No such process (or only a zombie left for init to reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _assert_all_gone(pids: list[int], timeout: float = 3.0) -> None:
    for pid in pids:
        _wait_for(lambda pid=pid: _gone(pid), timeout, f"process {pid} to exit")


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[str, str]:
    proc.send_signal(sig)
    return proc.communicate(timeout=15)


# ---------------------------------------------------------------------------
# train: the per-batch preparation


def test_prep_batch_shape_dtype_and_normalisation():
    pool = train.make_pool(64, seed=3)
    assert len(pool.compressed) == train.POOL_SIZE
    assert len(set(pool.compressed)) == train.POOL_SIZE  # distinct images
    assert all(len(c) < 64 * 64 * 3 for c in pool.compressed)  # they compress
    batch = train.prep_batch(pool, train.batch_rng(3, 0), 32)
    assert batch.shape == (32, 3, 56, 56) == pool.batch_shape(32)
    assert batch.dtype == np.float32
    assert np.all(np.isfinite(batch))
    per_channel_mean = batch.mean(axis=(0, 2, 3))
    per_channel_std = batch.std(axis=(0, 2, 3))
    assert np.all(np.abs(per_channel_mean) < 0.25), per_channel_mean
    assert np.all((per_channel_std > 0.7) & (per_channel_std < 1.3)), per_channel_std


def test_prep_batch_is_deterministic_per_batch_and_fills_out():
    pool = train.make_pool(32, seed=0)
    out = np.zeros(pool.batch_shape(5), dtype=np.float32)
    got = train.prep_batch(pool, train.batch_rng(0, 7), 5, out=out)
    assert got is out
    again = train.prep_batch(pool, train.batch_rng(0, 7), 5)
    np.testing.assert_array_equal(out, again)
    other = train.prep_batch(pool, train.batch_rng(0, 8), 5)
    assert not np.array_equal(out, other)
    with pytest.raises(ValueError, match="float32 of shape"):
        train.prep_batch(pool, train.batch_rng(0, 7), 4, out=out)


def test_crop_is_seven_eighths_and_pool_refuses_tiny_images():
    assert train.crop_size(224) == 196
    with pytest.raises(ValueError):
        train.make_pool(8)


# ---------------------------------------------------------------------------
# train: the job


def test_train_runs_batches_and_reports_progress(tmp_path):
    pf = tmp_path / "progress"
    rc, out, err = _run("train", [*TINY, "--batches", "12", "--gpu", "off"], pf)
    assert rc == 0, err
    lines = out.strip().splitlines()
    start = json.loads(lines[0])
    assert start["event"] == "start" and len(start["worker_pids"]) == 2
    s = _summary(out)
    assert s["batches"] == 12 and s["samples"] == 12 * 4 == s["batch_images"] * s["batches"]
    assert s["stopped_by"] == "batches" and s["gpu"] == "sleep"
    assert s["seconds"] > 0 and s["samples_per_s"] > 0
    assert s["prep_ms"] > 0 and s["worker_pids"] == start["worker_pids"]
    rec = read_progress(pf)
    assert rec is not None and rec.samples == s["samples"] and rec.pid == s["pid"]
    _assert_all_gone(s["worker_pids"])


def test_train_sigterm_stops_cleanly_with_no_worker_left(tmp_path):
    pf = tmp_path / "progress"
    proc = _start("train", [*TINY, "--gpu", "off", "--prefetch", "3"], pf)
    start = json.loads(proc.stdout.readline())
    first = _wait_for(lambda: _samples(pf) > 0 and _samples(pf), what="first progress")
    _wait_for(lambda: _samples(pf) > first, what="progress to advance")
    out, err = _stop(proc)
    assert proc.returncode == 0, err
    s = _summary(out)
    assert s["stopped_by"] == "SIGTERM"
    assert s["samples"] == s["batches"] * 4 and s["batches"] > 0
    assert _samples(pf) == s["samples"]
    assert s["worker_pids"] == start["worker_pids"]
    _assert_all_gone(start["worker_pids"])


def test_train_sigint_and_seconds_limit(tmp_path):
    proc = _start("train", [*TINY, "--gpu", "off", "--quiet"], tmp_path / "p")
    _wait_for(lambda: _samples(tmp_path / "p") > 0, what="progress")
    out, err = _stop(proc, signal.SIGINT)
    assert proc.returncode == 0, err
    s = _summary(out)
    assert s["stopped_by"] == "SIGINT" and len(out.strip().splitlines()) == 1  # --quiet
    _assert_all_gone(s["worker_pids"])

    rc, out, err = _run("train", [*TINY, "--gpu", "off", "--seconds", "0.5", "--quiet"], None)
    assert rc == 0, err
    assert _summary(out)["stopped_by"] == "seconds"


def test_train_exits_nonzero_when_a_worker_dies(tmp_path):
    proc = _start("train", [*TINY, "--gpu", "off"], tmp_path / "p")
    start = json.loads(proc.stdout.readline())
    _wait_for(lambda: _samples(tmp_path / "p") > 0, what="progress")
    os.kill(start["worker_pids"][0], signal.SIGKILL)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 1
    assert "data worker 0" in err and "SIGKILL" in err
    assert _summary(out)["stopped_by"] == "error"
    _assert_all_gone(start["worker_pids"])


@pytest.mark.slow
def test_train_workers_exit_when_the_main_process_is_killed(tmp_path):
    proc = _start("train", [*TINY, "--gpu", "off"], tmp_path / "p")
    start = json.loads(proc.stdout.readline())
    _wait_for(lambda: _samples(tmp_path / "p") > 0, what="progress")
    proc.kill()
    proc.communicate(timeout=15)
    _assert_all_gone(start["worker_pids"], timeout=5.0)


def test_train_reports_a_failing_worker(monkeypatch, capsys):
    def boom(*_args, **_kwargs):
        raise RuntimeError("boom in prep")

    monkeypatch.setattr(train, "prep_batch", boom)  # the forked workers inherit it
    monkeypatch.delenv(progress.ENV_FILE, raising=False)
    rc = train.main([*TINY, "--gpu", "off", "--batches", "5", "--quiet"])
    captured = capsys.readouterr()
    assert rc == 1
    assert "data worker" in captured.err and "RuntimeError: boom in prep" in captured.err
    s = _summary(captured.out)
    assert s["batches"] == 0 and s["stopped_by"] == "error"
    _assert_all_gone(s["worker_pids"])


def test_train_gpu_auto_falls_back_to_a_wait_without_cuda(monkeypatch, capsys):
    try:
        import torch

        cuda = torch.cuda.is_available()
    except Exception:  # no usable torch
        cuda = False
    monkeypatch.delenv(progress.ENV_FILE, raising=False)
    rc = train.main([*TINY, "--gpu", "auto", "--batches", "3", "--quiet"])
    s = _summary(capsys.readouterr().out)
    assert rc == 0 and s["batches"] == 3
    assert s["gpu"] == ("cuda" if cuda else "sleep")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "--workers: must be >= 1"),
        (["--batch-images", "x"], "--batch-images: not an integer"),
        (["--image-px", "8"], "--image-px: must be >= 16"),
        (["--gpu-ms", "-1"], "--gpu-ms: must be >= 0"),
        (["--gpu-ms", "nan"], "--gpu-ms: must be >= 0"),
        (["--prefetch", "0"], "--prefetch: must be >= 1"),
        (["--seconds", "0"], "--seconds: must be > 0"),
        (["--batches", "-2"], "--batches: must be >= 1"),
        (["--gpu", "on"], "--gpu: invalid choice"),
        (["--batch-images", "100000"], "the batch ring would need"),
    ],
)
def test_train_bad_options(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        train.parse_args(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_options_exit_nonzero_from_the_command_line():
    for module, args, message in [
        ("train", ["--workers", "-1"], "--workers"),
        ("membw", ["--mib", "0"], "--mib"),
        ("spin", ["--rate", "-5"], "--rate"),
    ]:
        rc, out, err = _run(module, args, None)
        assert rc == 2 and message in err and "error:" in err, (module, err)
        assert out == ""


# ---------------------------------------------------------------------------
# membw


def test_membw_copies_and_reports_mib(tmp_path):
    pf = tmp_path / "progress"
    rc, out, err = _run("membw", ["--mib", "8", "--seconds", "0.5", "--reduce"], pf)
    assert rc == 0, err
    s = _summary(out)
    assert s["stopped_by"] == "seconds" and s["reduce"] is True
    assert s["mib_copied"] > 0 and s["mib_copied"] % 8 == 0 and s["gb_per_s"] > 0
    assert _samples(pf) == s["mib_copied"]


def test_membw_processes_stop_on_sigterm(tmp_path):
    pf = tmp_path / "progress"
    proc = _start("membw", ["--mib", "8", "--threads", "2"], pf)
    start = json.loads(proc.stdout.readline())
    assert len(start["child_pids"]) == 1
    first = _wait_for(lambda: _samples(pf) > 0 and _samples(pf), what="first progress")
    _wait_for(lambda: _samples(pf) > first, what="progress to advance")
    out, err = _stop(proc)
    assert proc.returncode == 0, err
    s = _summary(out)
    assert s["stopped_by"] == "SIGTERM" and s["threads"] == 2
    assert _samples(pf) == s["mib_copied"] >= first
    _assert_all_gone(start["child_pids"])


def test_membw_bad_options(capsys):
    for args, message in [
        (["--mib", "-4"], "--mib: must be >= 1"),
        (["--threads", "two"], "--threads: not an integer"),
        (["--mib", str(2**40)], "more than the machine"),
    ]:
        with pytest.raises(SystemExit) as exc:
            membw.parse_args(args)
        assert exc.value.code == 2
        assert message in capsys.readouterr().err


def test_membw_copier_alternates_buffers():
    c = membw.Copier(1, reduce=True)
    a, b = c.src, c.dst
    c.step()
    assert c.src is b and c.dst is a and np.all(b == 1.0)
    assert c.checksum == pytest.approx(membw.MIB // 8)


# ---------------------------------------------------------------------------
# spin


def test_spin_reports_progress(tmp_path):
    pf = tmp_path / "progress"
    rc, out, err = _run("spin", ["--rate", "1000", "--seconds", "0.5"], pf)
    assert rc == 0, err
    s = _summary(out)
    assert s["stopped_by"] == "seconds" and s["samples"] > 0
    assert _samples(pf) == s["samples"]


def test_spin_rate_file_changes_the_rate(tmp_path):
    pf, rate_file = tmp_path / "progress", tmp_path / "rate"
    rate_file.write_text("0\n")
    proc = _start("spin", ["--rate", "1000", "--rate-file", str(rate_file)], pf)
    start = json.loads(proc.stdout.readline())
    assert start["rate"] == 0.0  # the file wins over --rate
    t0 = read_progress(pf).t
    _wait_for(lambda: read_progress(pf).t > t0 + 0.5, what="progress records")
    assert _samples(pf) == 0
    rate_file.write_text("500")
    _wait_for(lambda: _samples(pf) > 0, what="progress at the new rate")
    out, err = _stop(proc)
    assert proc.returncode == 0, err
    s = _summary(out)
    assert s["rate"] == 500.0 and s["stopped_by"] == "SIGTERM" and s["samples"] == _samples(pf)


def test_spin_read_rate(tmp_path):
    f = tmp_path / "rate"
    assert spin.read_rate(str(f)) is None
    for text, want in [("12.5\n", 12.5), ("0", 0.0), ("-1", None), ("inf", None), ("x", None)]:
        f.write_text(text)
        assert spin.read_rate(str(f)) == want


# ---------------------------------------------------------------------------
# progress.track()


class FakeTensor:
    def __init__(self, *shape: int):
        self.shape = shape


def test_track_counts_the_leading_dimension(tmp_path, monkeypatch):
    pf = tmp_path / "progress"
    monkeypatch.setenv(progress.ENV_FILE, str(pf))
    batches = [(FakeTensor(8, 3, 32, 32), FakeTensor(8)) for _ in range(5)]
    seen = 0
    for inputs, _labels in progress.track(batches):
        seen += inputs.shape[0]
    assert seen == 40 and _samples(pf) == 40
    assert list(progress.track([FakeTensor(3, 2), FakeTensor(5)])) and _samples(pf) == 8
    list(progress.track([[1, 2, 3], [4]]))  # first elements with no shape or len: 1 each
    assert _samples(pf) == 2
    list(progress.track(range(4), samples=16))
    assert _samples(pf) == 64
    list(progress.track([FakeTensor(2, 9)] * 3, samples=lambda b: b.shape[1]))
    assert _samples(pf) == 27


def test_track_without_a_progress_file_is_a_plain_loop(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.ENV_FILE, raising=False)
    monkeypatch.chdir(tmp_path)
    assert list(progress.track([FakeTensor(4)] * 2)) and not list(tmp_path.iterdir())


def test_track_with_a_torch_dataloader(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    pf = tmp_path / "progress"
    monkeypatch.setenv(progress.ENV_FILE, str(pf))
    data = TensorDataset(torch.zeros(50, 3), torch.arange(50))
    n = 0
    for inputs, labels in progress.track(DataLoader(data, batch_size=8)):
        n += len(labels)
        assert inputs.shape[1] == 3
    assert n == 50 and _samples(pf) == 50
