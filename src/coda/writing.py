"""Writing a file the user named: an error while writing says which file.

``open`` names its file in the OSError it raises, but a failed write or close does not
(``[Errno 28] No space left on device``, nothing more): with many files written per
run, the message must say which one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path


@contextmanager
def naming(path: str | PathLike[str]) -> Iterator[None]:
    """Run the body; an OSError that names no file is raised again naming ``path``."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from None


def write_text(path: Path, text: str) -> None:
    """``text`` into the file ``path`` as UTF-8; an error names the file."""
    with naming(path):
        path.write_text(text, encoding="utf-8")
