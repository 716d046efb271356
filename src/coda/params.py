"""Command-line value types shared by every `coda` command."""

from __future__ import annotations

import math
import os
import stat
import tempfile
from collections.abc import Callable
from typing import Any, NoReturn

import click

from coda.workload.limits import plain_number


def _plain_ascii(
    fail: Callable[[str, click.Parameter | None, click.Context | None], NoReturn],
    value: object,
    param: click.Parameter | None,
    ctx: click.Context | None,
) -> None:
    """A number typed on the command line is ASCII digits and signs: Python's own
    parsers also take other scripts' digits (٣), full-width ones and '_' separators."""
    if isinstance(value, str) and not plain_number(value):
        fail(f"{value!r} is not a plain ASCII number.", param, ctx)


class FiniteFloat(click.FloatRange):
    """A float in a range that is also finite: click.FloatRange lets 'nan' through
    (every comparison with NaN is false), and 'inf' wherever a side is open-ended."""

    name = "finite float"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        _plain_ascii(self.fail, value, param, ctx)
        # click types FloatRange's input as float, but it is given (and parses) the
        # command line's str as well.
        rv = super().convert(value, param, ctx)  # type: ignore[arg-type]
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


class OffOrFiniteFloat(FiniteFloat):
    """0 (off), or a finite float in [min, max]: a period that is either off or at
    least its floor, checked where the option is named."""

    name = "0 or finite float"

    def __init__(self, low: float, high: float) -> None:
        super().__init__(0.0, high)
        self.low = low

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        rv = super().convert(value, param, ctx)
        if rv != 0.0 and rv < self.low:
            self.fail(f"{rv:g} is neither 0 nor at least {self.low:g}.", param, ctx)
        return rv


class AsciiIntRange(click.IntRange):
    """click.IntRange, for ASCII digits only."""

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        _plain_ascii(self.fail, value, param, ctx)
        return int(super().convert(value, param, ctx))  # type: ignore[arg-type]


class NamedDir(click.Path):
    """A directory option that must name one: '' (or blanks) would be read as the
    current directory, which nobody means by giving nothing."""

    def __init__(self, writable: bool = False, readable: bool = True) -> None:
        super().__init__(file_okay=False, dir_okay=True, writable=writable, readable=readable)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip() == "":
            self.fail("is empty: name a directory (. for this one)", param, ctx)
        return super().convert(value, param, ctx)


class OutDir(NamedDir):
    """A directory to write results into: one that exists, or one that can be made
    where nothing else is (checked before a long run, not after it)."""

    def __init__(self) -> None:
        super().__init__(writable=True)

    def convert(
        self,
        value: str | os.PathLike[str],
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> str:
        rv = os.fspath(super().convert(value, param, ctx))
        try:
            st = os.stat(rv)
        except (FileNotFoundError, NotADirectoryError):
            why = _cannot_make(rv)
            if why:
                self.fail(why, param, ctx)
            return str(rv)
        except OSError as e:
            self.fail(f"{rv!r}: {e.strerror or e}", param, ctx)
        if not stat.S_ISDIR(st.st_mode):
            self.fail(f"{rv!r} exists and is not a directory", param, ctx)
        why = _cannot_write_in(rv)
        if why:
            self.fail(why, param, ctx)
        return str(rv)


class OutFile(click.Path):
    """A file to write: one that exists, or one that can be made where nothing else is;
    never a name ending in '/' (a directory meant, whose name the file would take)."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, writable=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = os.fspath(value)
        if isinstance(text, str) and text.strip() == "":
            self.fail("is empty: name a file", param, ctx)
        if isinstance(text, str) and text.endswith("/"):
            self.fail(f"{text!r} names a directory: name the file to write", param, ctx)
        if not os.path.lexists(text):
            why = _cannot_make(text)
            if why:
                self.fail(why, param, ctx)
        return super().convert(value, param, ctx)


def _cannot_make(path: str) -> str | None:
    """Why ``path``, which does not exist, cannot be made: a symlink to nothing, a '..'
    past a directory not made yet, a file where a directory above it would go."""
    if os.path.islink(path):
        return f"{path!r} is a symbolic link to nothing"
    above = os.path.dirname(os.path.realpath(path))  # '..' after a symlink as the kernel reads it
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        return f"{above!r} is not a directory"
    why = _cannot_write_in(above)
    if why:
        return f"{path!r}: {why}"
    parts = path.split(os.sep)
    for i, part in enumerate(parts):
        # 'x/..' with no x: made as it reads, x would be left behind, empty.
        if part == ".." and i > 0 and not os.path.isdir(os.sep.join(parts[:i]) or os.sep):
            return f"{path!r}: '..' after {os.sep.join(parts[:i])!r}, which does not exist"
    return None


def _cannot_write_in(directory: str) -> str | None:
    """Why nothing can be made in ``directory`` (None: something can). Tried, not
    judged from modes: root passes every access check, even on /proc, /sys or a
    read-only mount, and would find out only after the run."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".coda-probe-", dir=directory))
    except OSError as e:
        return f"cannot make anything in {directory!r} ({e.strerror or e})"
    return None
