"""Writing a file the user named: an error while writing says which file, and a FIFO
that no process reads is an error, not a wait.

``open`` names its file in the OSError it raises, but a failed write or close does not
(``[Errno 28] No space left on device``, nothing more): with many files written per
run, the message must say which one. And ``open`` of a FIFO for writing waits for a
reader, for ever if none comes: outputs are opened without waiting (a FIFO that some
process reads, such as ``--out /dev/stdout`` into a pipe, still works).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from os import PathLike
from typing import IO


@contextmanager
def naming(path: str | PathLike[str]) -> Iterator[None]:
    """Run the body; an OSError that names no file is raised again naming ``path``."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from None


def _open_fd(path: str | PathLike[str]) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ENXIO and _is_fifo(path):  # ENXIO: no reader yet
            raise OSError(e.errno, "a FIFO that no process reads", str(path)) from None
        raise
    os.set_blocking(fd, True)  # opened: writes wait for the reader as usual
    return fd


def _is_fifo(path: str | PathLike[str]) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


@contextmanager
def text_output(path: str | PathLike[str], newline: str | None = None) -> Iterator[IO[str]]:
    """The file ``path`` opened to be written as UTF-8 text (created or emptied)."""
    with naming(path):
        with os.fdopen(_open_fd(path), "w", encoding="utf-8", newline=newline) as f:
            yield f


@contextmanager
def seekable_output(path: str | PathLike[str]) -> Iterator[IO[bytes]]:
    """The file ``path`` opened to be written as bytes, refused unless it can seek (a
    PNG writer seeks: a FIFO or device would fail half-way, naming no file)."""
    with naming(path):
        with os.fdopen(_open_fd(path), "wb") as f:
            if not f.seekable():
                raise OSError(errno.ESPIPE, "not a regular file (a FIFO or device)", str(path))
            yield f


def write_text(path: str | PathLike[str], text: str) -> None:
    """``text`` into the file ``path`` as UTF-8; an error names the file."""
    with text_output(path) as f:
        f.write(text)
