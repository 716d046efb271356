"""What every trace loader shares: CSV reading, typed fields, bad-row and treatment rules.

A format module only says how one row maps to a job. Everything that must be the
same across formats lives here once: header checks, line numbers in errors, the
skip-bad-rows switch, the fractional-GPU / censored / zero-duration rules and the
bookkeeping that makes `rows_read == jobs_loaded + excluded + skipped` hold.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

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

# Excluded-reason keys shared by the formats (format modules may add their own).
NEVER_STARTED = "never_started"
ZERO_DURATION = "zero_duration"
FRACTIONAL_GPU = "fractional_gpu"
CENSORED = "censored"

# Adjusted-treatment keys.
FRACTIONAL_ROUNDED_UP = "fractional_gpu_rounded_up"
CENSORED_KEPT = "censored_kept"
CORES_RAISED = "cores_raised_to_1"
# Extra jobs made when one row becomes several (PAI CPU tasks): the identity
# rows_read == jobs_loaded - adjusted[EXTRA_JOBS] + sum(excluded) + skipped holds.
EXTRA_JOBS = "extra_jobs_from_instances"

# (id, submit, duration, gpus, cores, mem_mib, nodes, flags), as JobTable.from_rows takes.
JobRow = tuple[str, float, float, int, int, int, int, int]
# What one row became: a job, several jobs, or the name of the reason it was excluded.
Outcome = JobRow | list[JobRow] | str


def check_options(fractional: str, censored: str) -> None:
    if fractional not in FRACTIONAL_CHOICES:
        raise ValueError(f"fractional must be one of {FRACTIONAL_CHOICES}, not {fractional!r}")
    if censored not in CENSORED_CHOICES:
        raise ValueError(f"censored must be one of {CENSORED_CHOICES}, not {censored!r}")


def _norm(name: str) -> str:
    return name.strip().lower()


def read_header(path: str | Path) -> list[str]:
    """The first CSV record of a file, normalised (stripped, lower case); [] if empty."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        for fields in csv.reader(f):
            if fields and any(x.strip() for x in fields):
                return [_norm(x) for x in fields]
    return []


def iter_rows(
    path: str | Path,
    required: Sequence[str],
    optional: Sequence[str] = (),
    *,
    headerless: Sequence[str] | None = None,
) -> Iterator[tuple[int, dict[str, str] | TraceFormatError]]:
    """Yield (line, row) for each data record; line is 1-based and the header is line 1.

    A record with the wrong number of fields is yielded as a TraceFormatError in place
    of the row, so that the caller decides whether it is fatal (skip_bad_rows).
    A missing header or missing required column raises at once: that is a wrong
    file, not a bad row. Blank lines are not records and are not counted.
    With `headerless` (column names of a format that ships without a header, like
    PAI), a first record naming none of the known columns is read as data.
    """
    path = str(path)
    known = {*required, *optional}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            first = next((r for r in reader if r and any(x.strip() for x in r)), None)
            if first is None:
                raise TraceFormatError(path, 1, None, "file is empty: expected a header line")
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
                        f"header is {','.join(header)!r}",
                    )
                names = header
            width = len(names)
            if pending is not None:
                yield _record(path, reader.line_num, names, pending)
            for fields in reader:
                if len(fields) == width:  # the common case first: it is the hot loop
                    yield reader.line_num, dict(zip(names, fields, strict=False))
                elif fields and (len(fields) > 1 or fields[0].strip()):
                    yield _record(path, reader.line_num, names, fields)
        except UnicodeDecodeError as e:
            raise TraceFormatError(path, reader.line_num + 1, None, f"not UTF-8 text: {e}") from e
        except csv.Error as e:
            raise TraceFormatError(path, reader.line_num, None, f"unreadable CSV: {e}") from e


def _record(
    path: str, line: int, names: list[str], fields: list[str]
) -> tuple[int, dict[str, str] | TraceFormatError]:
    if len(fields) != len(names):
        msg = f"expected {len(names)} fields, found {len(fields)}"
        return line, TraceFormatError(path, line, None, msg)
    return line, dict(zip(names, fields, strict=False))


def _empty(s: str | None) -> bool:
    return s is None or not s.strip()


class TraceBuilder:
    """Turns rows into a Trace, applying the shared rules and counting every outcome.

    A format module calls `load(parse_row, ...)` with a function that maps one row
    dict to an Outcome (use `job()` to build kept jobs so the fractional, censored
    and zero-duration rules apply) or raises TraceFormatError via the field
    parsers. `parse_row` may return None only if it keeps the row to settle later
    with `settle()` (PAI rows that need the trace's end time).
    """

    def __init__(
        self,
        path: str | Path,
        fmt: str,
        *,
        skip_bad_rows: bool,
        fractional: str,
        censored: str,
    ) -> None:
        check_options(fractional, censored)
        self.path = str(path)
        self.skip_bad_rows = skip_bad_rows
        self.fractional = fractional
        self.censored = censored
        self.report = TraceReport(path=self.path, format=fmt)
        self.line = 0  # line of the row being parsed, for error messages
        self._rows: list[JobRow] = []
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
            "a row with a malformed or impossible value stops loading with an error naming "
            "file, line and column; with skip_bad_rows it is skipped and counted in "
            "skipped_bad_rows (first 20 messages in bad_row_examples)",
        )

    # ---- field parsers: raise TraceFormatError naming file, line and column ------

    def error(self, column: str | None, message: str) -> TraceFormatError:
        return TraceFormatError(self.path, self.line, column, message)

    def text(self, row: dict[str, str], col: str) -> str:
        return row.get(col, "").strip()

    def ident(self, row: dict[str, str], col: str) -> str:
        """A job id: any non-empty text."""
        s = row.get(col, "").strip()
        if not s:
            raise self.error(col, "job id is missing")
        return s

    def _bad_number(self, col: str, s: str | None, minimum: float | None) -> TraceFormatError:
        """The precise complaint about a value the fast path refused."""
        if _empty(s):
            return self.error(col, "value is missing")
        try:
            v = float(s)  # type: ignore[arg-type]
        except ValueError:
            return self.error(col, f"not a number: {s!r}")
        if not math.isfinite(v):
            return self.error(col, f"not a finite number: {s!r}")
        return self.error(col, f"must be >= {minimum:g}, got {s.strip()!r}")  # type: ignore[union-attr]

    # The parsers below are on the hot path (a million rows means millions of calls):
    # the common case is one float()/int() and a comparison, errors are worked out
    # afterwards by _bad_number.

    def num(
        self,
        row: dict[str, str],
        col: str,
        *,
        minimum: float | None = None,
        allow_empty: bool = False,
    ) -> float | None:
        """A finite number (>= minimum); an empty value gives None if allow_empty."""
        s = row.get(col)
        try:
            v = float(s)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            if allow_empty and _empty(s):
                return None
            raise self._bad_number(col, s, minimum) from None
        # v - v is nan for inf and nan, 0.0 for every finite number.
        if v - v != 0.0 or (minimum is not None and v < minimum):
            raise self._bad_number(col, s, minimum)
        return v

    def number(self, row: dict[str, str], col: str, *, minimum: float | None = None) -> float:
        """A required finite number (>= minimum)."""
        s = row.get(col)
        try:
            v = float(s)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise self._bad_number(col, s, minimum) from None
        if v - v != 0.0 or (minimum is not None and v < minimum):
            raise self._bad_number(col, s, minimum)
        return v

    def integer(
        self,
        row: dict[str, str],
        col: str,
        *,
        minimum: int | None = None,
        empty: int | None = None,
    ) -> int:
        """A whole number ("3" or "3.0"); empty gives `empty` if given, else an error."""
        s = row.get(col)
        try:
            v = int(s)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            if _empty(s):
                if empty is not None:
                    return empty
                raise self.error(col, "value is missing") from None
            f = self.number(row, col)
            if not f.is_integer():
                raise self.error(col, f"not a whole number: {s!r}") from None
            v = int(f)
        if minimum is not None and v < minimum:
            raise self.error(col, f"must be >= {minimum}, got {v}")
        return v

    def cores(self, value: float) -> int:
        """Whole cores from a (possibly fractional) core count, rounded up.

        A request of no CPU gives 0 here; job() then raises it to one core per node
        and counts that, so the adjustment is never silent.
        """
        c = math.ceil(value - 1e-9)  # 11.9999999 from unit conversion is still 12
        return c if c >= 1 else 0  # 0 is raised to 1 in job(), where it is counted

    # ---- outcomes ----------------------------------------------------------------

    def job(
        self,
        job_id: str,
        submit: float,
        duration: float,
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
        Adjustments are counted only for rows that are kept.
        """
        if duration <= 0:
            return ZERO_DURATION
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
        if nodes < 1:
            nodes = 1
        if cores < 1:
            cores = nodes  # one core per node: a job must hold some CPU wherever it runs
            adjusted[CORES_RAISED] = adjusted.get(CORES_RAISED, 0) + 1
        return (job_id, submit, duration, gpus, cores, mem_mib, nodes, flags)

    def settle(self, outcome: Outcome) -> None:
        """Record what one row became."""
        if type(outcome) is tuple:
            self._rows.append(outcome)  # type: ignore[arg-type]
        elif isinstance(outcome, str):
            self.report.count(self.report.excluded, outcome)
        else:
            assert isinstance(outcome, list) and outcome, "a row must become something"
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

    def finish(self, submit_offset: float = 0.0) -> Trace:
        """The finished Trace: jobs sorted by submit, report complete.

        `submit_offset` is subtracted from every submit time (Helios datetimes are
        turned into seconds since the first submission this way).
        """
        table = JobTable.from_rows(self._rows)
        if submit_offset:
            table.submit -= submit_offset
        table = table.sorted_by_submit()
        self.report.jobs_loaded = len(table)
        return Trace(jobs=table, report=self.report)
