"""What every trace loader shares: CSV reading, typed fields, bad-row and treatment rules.

A format module only says how one row maps to a job. Everything that must be the
same across formats lives here once: header checks, line numbers in errors, the
skip-bad-rows switch, field ranges (from coda.workload.limits), undecodable or
overlong lines, exact time stamps made relative to the first arrival, duplicate ids,
the fractional-GPU / censored / zero-duration rules and the bookkeeping that makes
`rows_read == jobs_loaded + excluded + skipped` hold.
"""

from __future__ import annotations

import csv
import math
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import IO

import numpy as np

from coda.workload import limits
from coda.workload.jobs import (
    FLAG_CENSORED,
    FLAG_FRACTIONAL,
    JobTable,
    Trace,
    TraceFormatError,
    TraceReport,
)

FRACTIONAL_CHOICES = ("whole", "drop")
CENSORED_CHOICES = ("keep", "drop")
MAX_BAD_ROW_EXAMPLES = 20
MAX_DUPLICATE_EXAMPLES = 5

# Excluded-reason keys shared by the formats (format modules may add their own).
NEVER_STARTED = "never_started"
ZERO_DURATION = "zero_duration"
FRACTIONAL_GPU = "fractional_gpu"
CENSORED = "censored"

# Adjusted-treatment keys.
FRACTIONAL_ROUNDED_UP = "fractional_gpu_rounded_up"
CENSORED_KEPT = "censored_kept"
CORES_RAISED = "cores_raised_to_1"
DUPLICATE_IDS = "duplicate_id_renamed"
# Extra jobs made when one row becomes several (PAI CPU tasks): the identity
# rows_read == jobs_loaded - adjusted[EXTRA_JOBS] + sum(excluded) + skipped holds.
EXTRA_JOBS = "extra_jobs_from_instances"

# An exact time stamp: int for integer text (the common case), Decimal otherwise.
Time = int | Decimal
# (id, submit, duration, gpus, cores, mem_mib, nodes, flags); submit is exact until finish().
JobRow = tuple[str, Time, float, int, int, int, int, int]
# What one row became: a job, several jobs, or the name of the reason it was excluded.
Outcome = JobRow | list[JobRow] | str


def check_options(fractional: str, censored: str) -> None:
    if fractional not in FRACTIONAL_CHOICES:
        raise ValueError(f"fractional must be one of {FRACTIONAL_CHOICES}, not {fractional!r}")
    if censored not in CENSORED_CHOICES:
        raise ValueError(f"censored must be one of {CENSORED_CHOICES}, not {censored!r}")


def clip(value: object, n: int = 60) -> str:
    """repr() of a value cut to n characters: messages stay one short line."""
    r = repr(value)
    return r if len(r) <= n else r[: n - 3] + "..."


def shown(value: object, n: int = 40) -> str:
    """str() of a value (a time stamp, say) cut to n characters, for messages."""
    t = str(value)
    return t if len(t) <= n else t[: n - 3] + "..."


def _norm(name: str) -> str:
    return name.strip().lower()


# ---- reading lines and records --------------------------------------------------------


def _open(path: str) -> IO[str]:
    # Regular files only: a FIFO would block the open (and detection opens the file
    # twice), /dev/zero never ends, /proc files lie about their size.
    try:
        st = os.stat(path)
    except OSError as e:
        raise TraceFormatError(path, 1, None, f"cannot read it: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TraceFormatError(path, 1, None, "not a regular file (a device, FIFO or directory)")
    # surrogateescape: an undecodable byte becomes a lone surrogate that _lines() spots,
    # so the line (not the whole file) is bad. utf-8-sig drops a byte-order mark.
    try:
        return open(path, newline="", encoding="utf-8-sig", errors="surrogateescape")
    except OSError as e:
        raise TraceFormatError(path, 1, None, f"cannot read it: {e.strerror or e}") from None


def _lines(f: IO[str], bad: list[tuple[int, str]]) -> Iterator[str]:
    """Physical lines of f for csv.reader; a line that cannot be a record is recorded in
    `bad` as (line, reason) and replaced by a blank line, so line numbers stay right."""
    readline = f.readline
    limit = limits.MAX_LINE_CHARS
    n = 0
    while True:
        line = readline(limit)
        if not line:
            return
        n += 1
        if len(line) == limit and line[-1] not in "\r\n":
            while line and line[-1] not in "\r\n":  # drop the rest, a bounded read at a time
                line = readline(limit)
            bad.append((n, f"line longer than {limit} characters"))
            yield "\n"
            continue
        if not line.isascii():
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:
                bad.append((n, "not UTF-8 text (undecodable bytes)"))
                yield "\n"
                continue
        if "\x00" in line:
            bad.append((n, "contains a NUL byte"))
            yield "\n"
            continue
        if '"' in line and line.count('"') & 1:
            # A record is one line: an unbalanced quote would make the reader swallow
            # the lines after it into one field (thousands of rows lost as one bad row).
            bad.append((n, "unbalanced quote (a quoted field must end on its line)"))
            yield "\n"
            continue
        yield line


def read_header(path: str | Path) -> list[str]:
    """The first CSV record of a file, normalised (stripped, lower case); [] if empty."""
    path = str(path)
    bad: list[tuple[int, str]] = []
    with _open(path) as f:
        reader = csv.reader(_lines(f, bad))
        try:
            for fields in reader:
                if bad:
                    raise TraceFormatError(path, bad[0][0], None, bad[0][1])
                if fields and any(x.strip() for x in fields):
                    return [_norm(x) for x in fields]
        except csv.Error as e:
            raise TraceFormatError(path, reader.line_num, None, f"unreadable CSV: {e}") from None
    if bad:
        raise TraceFormatError(path, bad[0][0], None, bad[0][1])
    return []


def iter_rows(
    path: str | Path,
    required: Sequence[str],
    optional: Sequence[str] = (),
    *,
    headerless: Sequence[str] | None = None,
) -> Iterator[tuple[int, dict[str, str] | TraceFormatError]]:
    """Yield (line, row) for each data record; line is 1-based and the header is line 1.

    A record that cannot be a row (wrong number of fields, undecodable bytes, a NUL
    byte, an overlong line, broken CSV quoting) is yielded as a TraceFormatError in
    place of the row, so that the caller decides whether it is fatal (skip_bad_rows).
    A missing header or missing required column raises at once: that is a wrong
    file, not a bad row. Blank lines are not records and are not counted.
    With `headerless` (column names of a format that ships without a header, like
    PAI), a first record naming none of the known columns is read as data.
    """
    path = str(path)
    known = {*required, *optional}
    bad: list[tuple[int, str]] = []
    with _open(path) as f:
        reader = csv.reader(_lines(f, bad))
        first = None
        while first is None:
            try:
                r = next(reader)
            except StopIteration:
                raise TraceFormatError(
                    path, 1, None, "file is empty: expected a header line"
                ) from None
            except csv.Error as e:
                raise TraceFormatError(
                    path, reader.line_num, None, f"unreadable CSV: {e}"
                ) from None
            if r and any(x.strip() for x in r):
                first = r
        header = [_norm(x) for x in first]
        pending: list[str] | None = None
        if headerless is not None and not known.intersection(header):
            names = list(headerless)
            pending = first  # the first record is data
        else:
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceFormatError(
                    path,
                    reader.line_num,
                    ", ".join(missing),
                    f"missing required column(s) {', '.join(missing)}; "
                    f"header is {clip(','.join(header), 200)}",
                )
            names = header
        width = len(names)
        for line, why in bad:  # bad lines before the first record
            yield line, TraceFormatError(path, line, None, why)
        bad.clear()
        if pending is not None:
            yield _record(path, reader.line_num, names, pending)
        while True:  # one pass of the for loop, resumed after each broken CSV record
            try:
                for fields in reader:
                    if bad:
                        yield from _flush(path, bad)
                    if len(fields) == width:  # the common case first: it is the hot loop
                        yield reader.line_num, dict(zip(names, fields, strict=False))
                    elif fields and (len(fields) > 1 or fields[0].strip()):
                        yield _record(path, reader.line_num, names, fields)
                break
            except csv.Error as e:
                line_num = reader.line_num
                yield from _flush(path, bad)
                err = TraceFormatError(path, line_num, None, f"unreadable CSV: {e}")
                yield line_num, err
        yield from _flush(path, bad)


def _flush(
    path: str, bad: list[tuple[int, str]]
) -> Iterator[tuple[int, dict[str, str] | TraceFormatError]]:
    for line, why in bad:
        yield line, TraceFormatError(path, line, None, why)
    bad.clear()


def _record(
    path: str, line: int, names: list[str], fields: list[str]
) -> tuple[int, dict[str, str] | TraceFormatError]:
    if len(fields) != len(names):
        msg = f"expected {len(names)} fields, found {len(fields)}"
        return line, TraceFormatError(path, line, None, msg)
    return line, dict(zip(names, fields, strict=False))


def _empty(s: str | None) -> bool:
    return s is None or not s.strip()


# ---- typed fields ---------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1)
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

    def _bad_number(self, col: str, s: str | None) -> TraceFormatError:
        """The precise complaint about a value the fast path refused."""
        if _empty(s):
            return self.error(col, "value is missing")
        try:
            v = float(s)  # type: ignore[arg-type]
        except ValueError:
            return self.error(col, f"not a number: {clip(s)}")
        if not math.isfinite(v):
            return self.error(col, f"not a finite number: {clip(s)}")
        return self.out_of_range(col, s.strip())  # type: ignore[union-attr]

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
        s = row.get(col)
        try:
            v = float(s)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            if allow_empty and _empty(s):
                return None
            raise self._bad_number(col, s) from None
        lo, hi = self._bounds.get(col, _UNBOUNDED)
        if not lo <= v <= hi:
            raise self._bad_number(col, s)
        return v

    def number(self, row: dict[str, str], col: str) -> float:
        """A required number in the column's range."""
        s = row.get(col)
        try:
            v = float(s)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise self._bad_number(col, s) from None
        lo, hi = self._bounds.get(col, _UNBOUNDED)
        if not lo <= v <= hi:
            raise self._bad_number(col, s)
        return v

    def integer(self, row: dict[str, str], col: str, *, empty: int | None = None) -> int:
        """A whole number ("3" or "3.0") in range; empty gives `empty` if given, else an error."""
        s = row.get(col)
        try:
            v = int(s)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            if _empty(s):
                if empty is not None:
                    return empty
                raise self.error(col, "value is missing") from None
            f = self.number(row, col)  # range-checked first, so int(f) cannot overflow
            if not f.is_integer():
                raise self.error(col, f"not a whole number: {clip(s)}") from None
            v = int(f)
        lo, hi = self._bounds.get(col, _UNBOUNDED)
        if not lo <= v <= hi:
            raise self.out_of_range(col, v)
        return v

    def time(self, row: dict[str, str], col: str, *, allow_empty: bool = False) -> Time | None:
        """An exact time stamp: int for integer text, else Decimal; never rounded here, so
        subtracting the first arrival later loses nothing at any magnitude or unit."""
        s = row.get(col)
        try:
            v: Time = int(s)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            if _empty(s):
                if allow_empty:
                    return None
                raise self.error(col, "value is missing") from None
            self.all_int = False  # finish() must subtract in Python, not int64
            try:
                v = Decimal(s)  # type: ignore[arg-type]
            except (InvalidOperation, ValueError):
                raise self.error(col, f"not a number: {clip(s)}") from None
            if not v.is_finite():
                raise self.error(col, f"not a finite number: {clip(s)}") from None
        lo, hi = self._bounds.get(col, _TIME_BOUNDS)
        if not lo <= v <= hi:
            raise self.out_of_range(col, s.strip())  # type: ignore[union-attr]
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


# limits.JOB caps as plain module constants: job() runs once per kept job.
_MAX_DURATION = limits.JOB["duration"].hi
_MAX_GPUS = limits.JOB["gpus"].hi
_MAX_CORES = limits.JOB["cores"].hi
_MAX_MEM = limits.JOB["mem_mib"].hi
_MAX_NODES = limits.JOB["nodes"].hi
_NO_TIME = 10 * limits.MAX_ABS_TIME


class TraceBuilder(FieldParser):
    """Turns rows into a Trace, applying the shared rules and counting every outcome.

    A format module calls `load(parse_row, ...)` with a function that maps one row
    dict to an Outcome (use `job()` to build kept jobs so the fractional, censored,
    zero-duration and job-size rules apply) or raises TraceFormatError via the field
    parsers. `parse_row` may return None only if it keeps the row to settle later
    with `settle()` (PAI rows that need the trace's end time). `sources` names, per
    job total (gpus, cores, mem_mib, nodes, duration), the column(s) it comes from,
    for the message when a total is out of range.
    """

    def __init__(
        self,
        path: str | Path,
        fmt: str,
        *,
        skip_bad_rows: bool,
        fractional: str,
        censored: str,
        sources: dict[str, str] | None = None,
        submit_column: str | None = None,
    ) -> None:
        check_options(fractional, censored)
        super().__init__(path, limits.FIELDS.get(fmt, {}))
        self.skip_bad_rows = skip_bad_rows
        self.fractional = fractional
        self.censored = censored
        self.sources = sources or {}
        self.submit_column = submit_column
        self.report = TraceReport(path=self.path, format=fmt)
        self._rows: list[JobRow] = []
        # Earliest and latest kept arrival with their lines: the time origin and the span.
        # The sentinels lie outside limits.TIME, so the first kept job replaces both.
        self._first: Time = _NO_TIME
        self._first_line = 0
        self._last: Time = -_NO_TIME
        self._last_line = 0
        self._shared_treatments()

    # ---- treatments --------------------------------------------------------------

    def treat(self, rule: str, sentence: str) -> None:
        self.report.treatments[rule] = sentence

    def _shared_treatments(self) -> None:
        if self.fractional == "whole":
            self.treat(
                FRACTIONAL_GPU,
                "a job asking for a fraction of a GPU is given whole GPUs (rounded up; the "
                "simulator does not share GPUs); flagged FRACTIONAL and counted in "
                f"adjusted[{FRACTIONAL_ROUNDED_UP!r}]",
            )
        else:
            self.treat(
                FRACTIONAL_GPU,
                f"a job asking for a fraction of a GPU is left out (excluded[{FRACTIONAL_GPU!r}])",
            )
        if self.censored == "keep":
            self.treat(
                CENSORED,
                "a job still running when the trace ends is kept with its runtime up to "
                "the end of the trace (a lower bound); flagged CENSORED and counted in "
                f"adjusted[{CENSORED_KEPT!r}]",
            )
        else:
            self.treat(
                CENSORED,
                f"a job still running when the trace ends is left out (excluded[{CENSORED!r}])",
            )
        self.treat(
            ZERO_DURATION,
            f"a job whose runtime is zero is left out (excluded[{ZERO_DURATION!r}])",
        )
        self.treat(
            "cores",
            "fractional CPU requests are rounded up to whole cores; a job asking for no "
            f"CPU is given 1 core per node (adjusted[{CORES_RAISED!r}]); nodes < 1 "
            "becomes 1",
        )
        self.treat(
            "bad_rows",
            "a row with a malformed, out-of-range (see docs/trace-formats.md, Ranges) or "
            "impossible value, undecodable bytes, a NUL byte or a line over "
            f"{limits.MAX_LINE_CHARS} characters stops loading with an error naming file, "
            "line and column; with skip_bad_rows it is skipped and counted in "
            f"skipped_bad_rows (first {MAX_BAD_ROW_EXAMPLES} messages in bad_row_examples)",
        )
        self.treat(
            "time_origin",
            "time stamps are read exactly and submit times are seconds since the first "
            "kept job's arrival (report.time_origin holds that raw value), so the same "
            "trace shifted in time gives the same table; arrivals may span at most "
            f"{limits.MAX_SPAN_S // limits.YEAR_S} years",
        )
        self.treat(
            "duplicate_ids",
            "a job id seen before in the file is kept with '#2', '#3', ... appended (the "
            "first unused), so ids identify jobs; counted in duplicate_ids (examples in "
            f"duplicate_id_examples) and adjusted[{DUPLICATE_IDS!r}]",
        )

    # ---- outcomes ----------------------------------------------------------------

    def job(
        self,
        job_id: str,
        submit: Time,
        duration: Time | float,
        gpus: int,
        cores: int,
        mem_mib: int,
        nodes: int,
        *,
        fractional: bool = False,
        censored: bool = False,
    ) -> JobRow | str:
        """A kept job row, or the reason it is excluded under the shared rules.

        Rules apply in this order, so each row lands in exactly one bucket:
        zero duration, fractional GPU (when dropped), censored (when dropped).
        Adjustments are counted only for rows that are kept. A total out of its
        range (limits.JOB) raises TraceFormatError (a bad row).
        """
        if duration <= 0:
            return ZERO_DURATION
        if nodes < 1:
            nodes = 1
        raised = cores < 1
        if raised:
            cores = nodes  # one core per node: a job must hold some CPU wherever it runs
        if not (
            duration <= _MAX_DURATION
            and gpus <= _MAX_GPUS
            and cores <= _MAX_CORES
            and mem_mib <= _MAX_MEM
            and nodes <= _MAX_NODES
        ):
            self._too_big(duration, gpus, cores, mem_mib, nodes)
        flags = 0
        if fractional:
            if self.fractional == "drop":
                return FRACTIONAL_GPU
            flags |= FLAG_FRACTIONAL
        if censored:
            if self.censored == "drop":
                return CENSORED
            flags |= FLAG_CENSORED
        adjusted = self.report.adjusted
        if fractional:
            adjusted[FRACTIONAL_ROUNDED_UP] = adjusted.get(FRACTIONAL_ROUNDED_UP, 0) + 1
        if censored:
            adjusted[CENSORED_KEPT] = adjusted.get(CENSORED_KEPT, 0) + 1
        if raised:
            adjusted[CORES_RAISED] = adjusted.get(CORES_RAISED, 0) + 1
        if submit < self._first:
            self._first, self._first_line = submit, self.line
        if submit > self._last:
            self._last, self._last_line = submit, self.line
        return (job_id, submit, float(duration), gpus, cores, mem_mib, nodes, flags)

    def _too_big(self, duration: Time | float, gpus: int, cores: int, mem: int, nodes: int) -> None:
        values = {"duration": duration, "gpus": gpus, "cores": cores, "mem_mib": mem}
        values["nodes"] = nodes
        for key, v in values.items():
            lim = limits.JOB[key]
            if not v <= lim.hi:
                col = self.sources.get(key)
                raise self.error(
                    col, f"job {key} {clip(v)} is above the cap {lim.hi:g} ({lim.unit})"
                )

    def settle(self, outcome: Outcome) -> None:
        """Record what one row became."""
        if type(outcome) is tuple:
            if len(self._rows) >= limits.MAX_TRACE_JOBS:
                raise self.error(
                    None, f"the trace makes more than {limits.MAX_TRACE_JOBS} jobs; split it"
                )
            self._rows.append(outcome)  # type: ignore[arg-type]
        elif isinstance(outcome, str):
            self.report.count(self.report.excluded, outcome)
        else:
            assert isinstance(outcome, list) and outcome, "a row must become something"
            if len(self._rows) + len(outcome) > limits.MAX_TRACE_JOBS:
                # Not a bad row: a file of a few kB could otherwise make millions of jobs.
                raise self.error(
                    None, f"the trace makes more than {limits.MAX_TRACE_JOBS} jobs; split it"
                )
            self._rows.extend(outcome)
            if len(outcome) > 1:
                self.report.count(self.report.adjusted, EXTRA_JOBS, len(outcome) - 1)

    def bad_row(self, err: TraceFormatError) -> None:
        if not self.skip_bad_rows:
            raise err
        self.report.skipped_bad_rows += 1
        if len(self.report.bad_row_examples) < MAX_BAD_ROW_EXAMPLES:
            self.report.bad_row_examples.append(str(err))

    def load(
        self,
        parse_row: Callable[[dict[str, str]], Outcome | None],
        required: Sequence[str],
        optional: Sequence[str] = (),
        *,
        headerless: Sequence[str] | None = None,
    ) -> None:
        """Read the file and settle every row (parse_row -> job, jobs, reason or error)."""
        report = self.report
        settle = self.settle
        n = 0
        try:
            for line, row in iter_rows(self.path, required, optional, headerless=headerless):
                n += 1
                self.line = line
                if type(row) is not dict:
                    self.bad_row(row)  # type: ignore[arg-type]
                    continue
                try:
                    outcome = parse_row(row)
                except TraceFormatError as e:
                    self.bad_row(e)
                    continue
                if outcome is not None:
                    settle(outcome)
        finally:
            report.rows_read = n

    def finish(self, origin_text: Callable[[Time], str] = str) -> Trace:
        """The finished Trace: submit times relative to the first kept arrival (exact
        subtraction, then float64), ids made unique, jobs sorted by submit."""
        rows = self._rows
        if not rows:
            self.report.jobs_loaded = 0
            return Trace(jobs=JobTable.empty(), report=self.report)
        first, last = self._first, self._last
        if last - first > limits.MAX_SPAN_S:
            years = float(last - first) / limits.YEAR_S
            self.line = self._last_line
            raise self.error(
                self.submit_column,
                f"arrival {shown(last)} is {years:.3g} years after the first arrival "
                f"{shown(first)} (line {self._first_line}); arrivals may span at most "
                f"{limits.MAX_SPAN_S // limits.YEAR_S} years",
            )
        self.report.time_origin = origin_text(first)
        ids, submit, duration, gpus, cores, mem, nodes, flags = zip(*rows, strict=True)
        table = JobTable.from_columns(
            self._unique(list(ids)),
            _relative(submit, first, last, self.all_int),
            duration,
            gpus,
            cores,
            mem,
            nodes,
            flags,
        ).sorted_by_submit()
        self.report.jobs_loaded = len(table)
        return Trace(jobs=table, report=self.report)

    def _unique(self, ids: list[str]) -> list[str]:
        """ids with every repeat renamed id#k (k = 2, 3, ... not used by any other id)."""
        if len(set(ids)) == len(ids):
            return ids
        taken = set(ids)
        seen: set[str] = set()
        next_k: dict[str, int] = {}
        report = self.report
        for i, x in enumerate(ids):
            if x not in seen:
                seen.add(x)
                continue
            k = next_k.get(x, 2)
            while f"{x}#{k}" in taken:
                k += 1
            new = f"{x}#{k}"
            next_k[x] = k + 1
            taken.add(new)
            ids[i] = new
            report.duplicate_ids += 1
            if len(report.duplicate_id_examples) < MAX_DUPLICATE_EXAMPLES and (
                x not in report.duplicate_id_examples
            ):
                report.duplicate_id_examples.append(x)
        report.adjusted[DUPLICATE_IDS] = report.duplicate_ids
        return ids


def _relative(submit: Sequence[Time], origin: Time, last: Time, all_int: bool) -> np.ndarray:
    """float64 seconds since origin, subtracted exactly before rounding to float."""
    if all_int and -(2**63) < origin and last < 2**63:
        # Exact in int64: the span is capped far below 2^63. (numpy would truncate a
        # Decimal silently, hence the all_int flag rather than a try.)
        return (np.array(submit, dtype=np.int64) - np.int64(origin)).astype(np.float64)
    return np.array([float(s - origin) for s in submit], dtype=np.float64)
