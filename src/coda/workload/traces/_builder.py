"""Rows to a Trace: the TraceBuilder applies the shared rules (zero duration, fractional
GPUs, censored jobs, job-size caps, cores raised to one per node, duplicate ids, exact
time origin) and counts every outcome, so that
`rows_read == jobs_loaded + excluded + skipped` holds in the report. It also carries the
optional per-job values a format may give (time limit, user, model, CPU-job bandwidth;
JobTable.OPTIONAL_COLUMNS) from each kept row to the finished table."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from coda.text import clip, shown
from coda.workload import limits
from coda.workload.jobs import (
    FLAG_CENSORED,
    FLAG_FRACTIONAL,
    OPTIONAL_COLUMNS,
    JobTable,
    Trace,
    TraceFormatError,
    TraceReport,
)
from coda.workload.traces._fields import FieldParser
from coda.workload.traces._reading import iter_rows
from coda.workload.traces._rules import (
    CENSORED,
    CENSORED_KEPT,
    CORES_RAISED,
    DUPLICATE_IDS,
    EXTRA_JOBS,
    FRACTIONAL_GPU,
    FRACTIONAL_ROUNDED_UP,
    MAX_BAD_ROW_EXAMPLES,
    MAX_DUPLICATE_EXAMPLES,
    ZERO_DURATION,
    Outcome,
    Time,
    TraceRow,
    check_options,
)

# limits.JOB caps as plain module constants: job() runs once per kept job.
_MAX_DURATION = limits.JOB["duration"].hi
_MAX_GPUS = limits.JOB["gpus"].hi
_MAX_CORES = limits.JOB["cores"].hi
_MAX_MEM = limits.JOB["mem_mib"].hi
_MAX_NODES = limits.JOB["nodes"].hi
_NO_TIME = 10 * limits.MAX_ABS_TIME

# What a row that does not give an optional value holds in that column.
_MISSING: dict[str, float | str] = {
    "time_limit": math.nan,
    "user": "",
    "model": "",
    "cpu_bw": math.nan,
}
assert tuple(_MISSING) == OPTIONAL_COLUMNS, "one missing value per optional column"
Extras = dict[str, float | str]  # optional column -> the value one row gives


class TraceBuilder(FieldParser):
    """Turns rows into a Trace, applying the shared rules and counting every outcome.

    A format module calls `load(parse_row, ...)` with a function that maps one row
    dict to an Outcome (use `job()` to build kept jobs so the fractional, censored,
    zero-duration and job-size rules apply) or raises TraceFormatError via the field
    parsers. `parse_row` may return None only if it keeps the row to settle later
    with `settle()` (PAI rows that need the trace's end time). `sources` names, per
    job total (gpus, cores, mem_mib, nodes, duration), the column(s) it comes from,
    for the message when a total is out of range, and may name the columns of the
    optional values (`model`, `cpu_bw`) for the messages about them.

    Optional per-job values (`time_limit`, `user`, `model`, `cpu_bw` of `job()`) end in
    the finished table's optional columns: a column exists only if some kept row gave a
    value, rows that gave none hold NaN or "" there, and every value stays with its row
    through sorting, id renaming, exclusions and skipped bad rows.
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
        extra_fields: dict[str, limits.Limit] | None = None,
    ) -> None:
        check_options(fractional, censored)
        # extra_fields: ranges of a format's optional columns beside limits.FIELDS[fmt].
        super().__init__(path, {**limits.FIELDS.get(fmt, {}), **(extra_fields or {})})
        self.skip_bad_rows = skip_bad_rows
        self.fractional = fractional
        self.censored = censored
        self.sources = sources or {}
        self.submit_column = submit_column
        self.report = TraceReport(path=self.path, format=fmt)
        self._rows: list[TraceRow] = []
        # Optional columns some kept row gave, one value per kept row (aligned with _rows).
        self._optional: dict[str, list[float | str]] = {}
        # Values job() was given, held by row identity until settle() keeps the row; the
        # row object is held too, so its id cannot be reused meanwhile.
        self._pending: dict[int, tuple[TraceRow, Extras]] = {}
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
        time_limit: float | None = None,
        user: str | None = None,
        model: str | None = None,
        cpu_bw: float | None = None,
    ) -> TraceRow | str:
        """A kept job row, or the reason it is excluded under the shared rules.

        Rules apply in this order, so each row lands in exactly one bucket:
        zero duration, fractional GPU (when dropped), censored (when dropped).
        Adjustments are counted only for rows that are kept. A total out of its
        range (limits.JOB) raises TraceFormatError (a bad row), and so does a model
        named for a CPU job or a bandwidth given for a GPU job (checked first: a bad
        value makes a bad row even where the row would be excluded).

        The optional values (None, "" or NaN: not given) are the format's own, already
        range-checked; they reach the table if the row is kept.
        """
        extras: Extras | None = None
        if time_limit is not None or user or model or cpu_bw is not None:
            extras = self._extras(gpus, time_limit, user, model, cpu_bw)
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
        row = (job_id, submit, float(duration), gpus, cores, mem_mib, nodes, flags)
        if extras:
            self._pending[id(row)] = (row, extras)
        return row

    def _extras(
        self,
        gpus: int,
        time_limit: float | None,
        user: str | None,
        model: str | None,
        cpu_bw: float | None,
    ) -> Extras:
        """The optional values one row gives, after the checks every format shares."""
        extras: Extras = {}
        if time_limit is not None and not math.isnan(time_limit):
            extras["time_limit"] = float(time_limit)
        if user:
            extras["user"] = user
        if model:
            if gpus == 0:
                raise self.error(
                    self.sources.get("model"),
                    f"a CPU job (0 GPUs) cannot name a model, got {clip(model)}",
                )
            extras["model"] = model
        if cpu_bw is not None and not math.isnan(cpu_bw):
            if gpus > 0:
                raise self.error(
                    self.sources.get("cpu_bw"),
                    "only a CPU job (0 GPUs) has a bandwidth per core here; a GPU job's "
                    "comes from its model",
                )
            extras["cpu_bw"] = float(cpu_bw)
        return extras

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
            self._rows.append(outcome)
            if self._pending or self._optional:
                self._keep_extras(outcome)
        elif isinstance(outcome, str):
            self.report.count(self.report.excluded, outcome)
        else:
            assert isinstance(outcome, list) and outcome, "a row must become something"
            if len(self._rows) + len(outcome) > limits.MAX_TRACE_JOBS:
                # Not a bad row: a file of a few kB could otherwise make millions of jobs.
                raise self.error(
                    None, f"the trace makes more than {limits.MAX_TRACE_JOBS} jobs; split it"
                )
            if self._pending or self._optional:
                for row in outcome:
                    self._rows.append(row)
                    self._keep_extras(row)
            else:
                self._rows.extend(outcome)
            if len(outcome) > 1:
                self.report.count(self.report.adjusted, EXTRA_JOBS, len(outcome) - 1)

    def _keep_extras(self, row: TraceRow) -> None:
        """Give the row just appended its optional values (or the missing ones)."""
        held = self._pending.pop(id(row), None)
        extras = held[1] if held is not None and held[0] is row else {}
        n = len(self._rows)
        optional = self._optional
        for name, col in optional.items():
            col.append(extras.get(name, _MISSING[name]))
        if not optional.keys() >= extras.keys():  # (a set test in C: rows are many)
            for name, value in extras.items():
                if name not in optional:  # first row to give it: the earlier rows lack it
                    optional[name] = [*([_MISSING[name]] * (n - 1)), value]

    def bad_row(self, err: TraceFormatError) -> None:
        self._pending.clear()  # values a bad row gave must not reach a later row
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
                if isinstance(row, TraceFormatError):
                    self.bad_row(row)
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
        )
        # Set before sorting, which carries every optional column with its rows.
        opt = self._optional
        if "time_limit" in opt:
            table.time_limit = np.array(opt["time_limit"], dtype=np.float64)
        if "user" in opt:
            table.user = [str(u) for u in opt["user"]]
        if "model" in opt:
            table.model = [str(m) for m in opt["model"]]
        if "cpu_bw" in opt:
            table.cpu_bw = np.array(opt["cpu_bw"], dtype=np.float64)
        table = table.sorted_by_submit()
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
