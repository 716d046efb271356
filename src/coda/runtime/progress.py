"""Progress reporting for training scripts: the agent's only window into a job.

Standard library only, so any training script can call it. A script calls
``step(samples)`` once per iteration; the reporter keeps a cumulative count and,
at most every ``min_interval_s``, overwrites one fixed-size record in the file the
agent named in ``CODA_PROGRESS_FILE``. The agent reads the record each control
period and turns count deltas into throughput samples. A file (not a socket) so
that a restarted agent picks up where the old one left off; one ``pwrite`` of a
64-byte record so that a reader never sees half a record.

Outside CODA (no ``CODA_PROGRESS_FILE``) every call is a cheap no-op.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

ENV_FILE = "CODA_PROGRESS_FILE"
RECORD_SIZE = 64
_MAGIC = "coda1"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Progress:
    """One record: cumulative samples at monotonic time ``t`` (seconds, CLOCK_MONOTONIC,
    comparable across processes on one machine), written by ``pid``."""

    samples: int
    t: float
    pid: int


def fixed_record(line: str, size: int = RECORD_SIZE) -> bytes:
    """``line`` padded to ``size`` bytes, newline last: one ``pwrite`` replaces it whole."""
    if len(line) >= size:
        raise ValueError("record too long")
    return line.ljust(size - 1).encode("ascii") + b"\n"


def encode(p: Progress) -> bytes:
    return fixed_record(f"{_MAGIC} {p.samples:d} {p.t:.6f} {p.pid:d}")


def decode(raw: bytes) -> Progress | None:
    """The record in ``raw``, or None if it is empty or malformed."""
    try:
        parts = raw.decode("ascii").split()
        if len(parts) != 4 or parts[0] != _MAGIC:
            return None
        samples, t, pid = int(parts[1]), float(parts[2]), int(parts[3])
    except (UnicodeDecodeError, ValueError):
        return None
    if samples < 0 or not 0 <= t < 1e12 or pid < 0:  # also refuses nan and inf
        return None
    return Progress(samples, t, pid)


def read_trusted(
    path: str | os.PathLike[str], owner: int | None = None, size: int = RECORD_SIZE
) -> bytes | None:
    """Up to ``size`` bytes of ``path`` if it is a regular file (``owner``'s, where given);
    None otherwise. Non-blocking, no symlinks: a job must not be able to stall its
    reader with a FIFO, nor point it at another job's file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (owner is not None and st.st_uid != owner):
            return None
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_progress(path: str | os.PathLike[str], owner: int | None = None) -> Progress | None:
    """The latest record in ``path``; None if there is none (yet) or it is unreadable.
    ``owner``: trust the file only if this uid owns it (a shared progress directory)."""
    raw = read_trusted(path, owner)
    return decode(raw) if raw is not None else None


def _open_record(path: str) -> int:
    """The record file for writing: a regular file (made if missing), never a symlink
    nor a FIFO (opening one would block the job until someone reads it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file")
    return fd


class Reporter:
    """Cumulative progress of one job, written for the agent to read.

    ``path=None`` takes ``CODA_PROGRESS_FILE`` from the environment; with neither,
    the reporter does nothing. Under Slurm every task of a job on a node gets the same
    file, so only the node's first task (``SLURM_LOCALID`` 0) reports: in data-parallel
    training each rank does the same work, and one writer keeps the record whole.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, min_interval_s: float = 0.05):
        if min_interval_s < 0:
            raise ValueError("min_interval_s must be >= 0")
        if path is None and os.environ.get("SLURM_LOCALID", "0") != "0":
            path = ""  # another task on this node reports for the job
        path = path if path is not None else os.environ.get(ENV_FILE)
        self.path = os.fspath(path) if path else None
        self.min_interval_s = min_interval_s
        self.samples = 0
        self._written_t = -1e18
        self._fd: int | None = None
        if self.path:
            try:
                self._fd = _open_record(self.path)
            except OSError as e:
                # Reporting is a courtesy to the scheduler: never stop the training.
                why = e.strerror or str(e)
                print(f"coda: progress not reported ({self.path}: {why})", file=sys.stderr)
                return
            self.flush()

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def step(self, samples: int = 1) -> None:
        """Count ``samples`` more samples done (call once per iteration)."""
        if samples < 0:
            raise ValueError("samples must be >= 0")
        self.samples += samples
        if self._fd is not None:
            now = time.monotonic()
            if now - self._written_t >= self.min_interval_s:
                self._write(self._fd, now)

    def flush(self) -> None:
        if self._fd is not None:
            self._write(self._fd, time.monotonic())

    def close(self) -> None:
        if self._fd is not None:
            self.flush()
            os.close(self._fd)
            self._fd = None

    def _write(self, fd: int, now: float) -> None:
        os.pwrite(fd, encode(Progress(self.samples, now, os.getpid())), 0)
        self._written_t = now

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default: Reporter | None = None


def step(samples: int = 1) -> None:
    """Module-level shortcut: report through a reporter made from the environment."""
    global _default
    if _default is None:
        _default = Reporter()
    _default.step(samples)


def track(items: Iterable[T], samples: Any = None) -> Iterator[T]:
    """Yield ``items`` (a data loader), reporting after each one is consumed.

    ``samples``: an int per item, or a function item -> int; default: the length of
    the item's first element when it has one (a (inputs, labels) batch), else 1.
    """
    rep = Reporter()
    try:
        for item in items:
            yield item
            if callable(samples):
                n = samples(item)
            elif samples is not None:
                n = int(samples)
            else:
                n = _batch_len(item)
            rep.step(n)
    finally:
        rep.close()


def _batch_len(item: Any) -> int:
    first = item[0] if isinstance(item, list | tuple) and item else item
    shape = getattr(first, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    try:
        return len(first)
    except TypeError:
        return 1
