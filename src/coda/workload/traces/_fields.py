"""Typed, range-checked fields of one trace row (numbers, whole numbers, exact time
stamps, job ids, cores); a bad value raises a TraceFormatError naming file, line and
column. These parsers are the loaders' hot path."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Literal, overload

from coda.text import clip
from coda.workload import limits
from coda.workload.jobs import TraceFormatError
from coda.workload.limits import plain_number as _plain_number
from coda.workload.traces._rules import Time


def _empty(s: str | None) -> bool:
    return s is None or not s.strip()


_EPOCH = datetime(1970, 1, 1)
# Longest user or model name a trace may give: names are labels in reports, and a bound
# keeps a hostile row from making every message or table cell huge.
MAX_NAME_CHARS = 128
_UNBOUNDED = (-math.inf, math.inf)
_TIME_BOUNDS = (limits.TIME.lo, limits.TIME.hi)


class FieldParser:
    """Typed, range-checked fields of one CSV row; errors name file, line and column.

    `fields` maps a column to its Limit (coda.workload.limits.FIELDS[format]); a column
    not in it has no bound beyond being finite.
    """

    _ANY = limits.Limit(-math.inf, math.inf, "")

    def __init__(self, path: str | Path, fields: dict[str, limits.Limit]) -> None:
        self.path = str(path)
        self.fields = fields
        self._bounds = {c: (lim.lo, lim.hi) for c, lim in fields.items()}  # fast to unpack
        self.line = 0  # line of the row being parsed, for error messages
        self.all_int = True  # every time stamp so far was an int (see time())

    def error(self, column: str | None, message: str) -> TraceFormatError:
        return TraceFormatError(self.path, self.line, column, message)

    def limit(self, col: str) -> limits.Limit:
        return self.fields.get(col, self._ANY)

    def text(self, row: dict[str, str], col: str) -> str:
        return row.get(col, "").strip()

    def ident(self, row: dict[str, str], col: str) -> str:
        """A job id: any non-empty text."""
        s = row.get(col, "").strip()
        if not s:
            raise self.error(col, "job id is missing")
        return s

    def name(self, row: dict[str, str], col: str) -> str | None:
        """A user or model name: printable text of at most MAX_NAME_CHARS characters
        (surrounding spaces dropped); empty or absent gives None (not given)."""
        s = row.get(col, "").strip()
        if not s:
            return None
        if len(s) > MAX_NAME_CHARS:
            raise self.error(col, f"longer than {MAX_NAME_CHARS} characters: {clip(s)}")
        if not s.isprintable():
            raise self.error(col, f"not printable text: {clip(s)}")
        return s

    def _bad_number(self, col: str, s: str) -> TraceFormatError:
        """The precise complaint about a value the fast path refused."""
        if _empty(s):
            return self.error(col, "value is missing")
        if not _plain_number(s):
            return self.error(col, f"not a plain ASCII number: {clip(s)}")
        try:
            v = float(s)
        except ValueError:
            return self.error(col, f"not a number: {clip(s)}")
        if not math.isfinite(v):
            return self.error(col, f"not a finite number: {clip(s)}")
        return self.out_of_range(col, s.strip())

    def out_of_range(self, col: str, shown: object) -> TraceFormatError:
        lim = self.limit(col)
        return self.error(
            col, f"must be in [{lim.lo:g}, {lim.hi:g}] ({lim.unit}), got {clip(shown)}"
        )

    # The parsers below are on the hot path (a million rows means millions of calls):
    # the common case is one float()/int() and a range test, errors are worked out
    # afterwards by _bad_number. A range test is False for nan, so it also rejects it.

    def num(self, row: dict[str, str], col: str, *, allow_empty: bool = False) -> float | None:
        """A number in the column's range; an empty value gives None if allow_empty."""
        s = row.get(col, "")
        try:
            v = float(s)
        except (TypeError, ValueError):
            if allow_empty and _empty(s):
                return None
            raise self._bad_number(col, s) from None
        lo, hi = self._bounds.get(col, _UNBOUNDED)
        if not lo <= v <= hi or not _plain_number(s):
            raise self._bad_number(col, s)
        return v

    def number(self, row: dict[str, str], col: str) -> float:
        """A required number in the column's range."""
        s = row.get(col, "")
        try:
            v = float(s)
        except (TypeError, ValueError):
            raise self._bad_number(col, s) from None
        lo, hi = self._bounds.get(col, _UNBOUNDED)
        if not lo <= v <= hi or not _plain_number(s):
            raise self._bad_number(col, s)
        return v

    def integer(self, row: dict[str, str], col: str, *, empty: int | None = None) -> int:
        """A whole number ("3" or "3.0") in range; empty gives `empty` if given, else an error."""
        s = row.get(col, "")
        try:
            v = int(s)
        except (TypeError, ValueError):
            if _empty(s):
                if empty is not None:
                    return empty
                raise self.error(col, "value is missing") from None
            f = self.number(row, col)  # range-checked first, so int(f) cannot overflow
            if not f.is_integer():
                raise self.error(col, f"not a whole number: {clip(s)}") from None
            v = int(f)
        if not _plain_number(s):
            raise self._bad_number(col, s)
        lo, hi = self._bounds.get(col, _UNBOUNDED)
        if not lo <= v <= hi:
            raise self.out_of_range(col, v)
        return v

    @overload
    def time(
        self, row: dict[str, str], col: str, *, allow_empty: Literal[False] = False
    ) -> Time: ...
    @overload
    def time(self, row: dict[str, str], col: str, *, allow_empty: bool) -> Time | None: ...
    def time(self, row: dict[str, str], col: str, *, allow_empty: bool = False) -> Time | None:
        """An exact time stamp: int for integer text, else Decimal; never rounded here, so
        subtracting the first arrival later loses nothing at any magnitude or unit."""
        s = row.get(col, "")
        try:
            v: Time = int(s)
        except (TypeError, ValueError):
            if _empty(s):
                if allow_empty:
                    return None
                raise self.error(col, "value is missing") from None
            self.all_int = False  # finish() must subtract in Python, not int64
            try:
                v = Decimal(s)
            except (InvalidOperation, ValueError):
                raise self.error(col, f"not a number: {clip(s)}") from None
            if not v.is_finite():
                raise self.error(col, f"not a finite number: {clip(s)}") from None
        if not _plain_number(s):
            raise self._bad_number(col, s)
        lo, hi = self._bounds.get(col, _TIME_BOUNDS)
        if not lo <= v <= hi:
            raise self.out_of_range(col, s.strip())
        return v

    def epoch_seconds(self, dt: datetime) -> Time:
        """Exact seconds since 1970-01-01 of a naive (UTC) datetime: int, or Decimal (µs)."""
        td = dt - _EPOCH
        s = td.days * 86_400 + td.seconds
        if not td.microseconds:
            return s
        self.all_int = False
        return s + Decimal(td.microseconds).scaleb(-6)

    def cores(self, value: float) -> int:
        """Whole cores from a (possibly fractional) core count, rounded up.

        A request of no CPU gives 0 here; job() then raises it to one core per node
        and counts that, so the adjustment is never silent.
        """
        c = math.ceil(value - 1e-9)  # 11.9999999 from unit conversion is still 12
        return c if c >= 1 else 0  # 0 is raised to 1 in job(), where it is counted
