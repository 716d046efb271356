"""A job's log files in the state directory: the end of its stdout or stderr."""

from __future__ import annotations

import os
from pathlib import Path

MAX_LOG_TAIL = 1 << 20  # bytes of a job's log one request may read


def read_log(state_dir: str | os.PathLike[str], job_id: int, stream: str, tail: int) -> str:
    """The last ``tail`` bytes (at most MAX_LOG_TAIL) of a job's stdout or stderr."""
    if stream not in ("stdout", "stderr"):
        raise ValueError(f"no log {stream!r}: stdout or stderr")
    tail = max(0, min(int(tail), MAX_LOG_TAIL))
    path = Path(state_dir) / "jobs" / str(int(job_id)) / stream
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return ""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - tail), os.SEEK_SET)
        return os.read(fd, tail).decode("utf-8", "replace")
    finally:
        os.close(fd)
