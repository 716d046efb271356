"""SenseTime Helios traces: the original per-cluster cluster_log.csv and the derived
interval-based subsets that circulate with columns u_id,...,interval,run_time,...
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from coda.workload import limits
from coda.workload.jobs import Trace
from coda.workload.traces._common import (
    NEVER_STARTED,
    Outcome,
    Time,
    TraceBuilder,
    clip,
)

FORMAT = "helios"
REQUIRED = (
    "job_id",
    "gpu_num",
    "cpu_num",
    "node_num",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
)
OPTIONAL = ("user", "vc", "queue")
SIGNATURE = ("job_id", "gpu_num", "state", "submit_time")

DERIVED_FORMAT = "helios-derived"
DERIVED_REQUIRED = ("u_id", "gpu_num", "cpu_num", "node_num", "interval", "run_time")
DERIVED_OPTIONAL = ("user", "wall_time", "new_status")
DERIVED_SIGNATURE = ("u_id", "gpu_num", "interval", "run_time")

_EPOCH = datetime(1970, 1, 1)
# Where each job total comes from, for the message when one is above its cap.
SOURCES = {"gpus": "gpu_num", "cores": "cpu_num", "nodes": "node_num", "duration": "duration"}
DERIVED_SOURCES = {**SOURCES, "duration": "run_time"}
# wall_time, read as the time limit the user asked for (0 or empty: none); a limit above
# what a user may ask for (the cap of `coda submit --time`) is a bad row.
DERIVED_EXTRA_FIELDS = {
    "wall_time": limits.Limit(0, limits.MAX_TIME_LIMIT_S, "s, requested time limit (0 = none)")
}
_USER = "user = the user column where the file has one (the job's owner; empty = unknown)"

_RESOURCES = (
    "gpus = gpu_num and cores = ceil(cpu_num) are the job's totals; nodes = max(1, "
    "node_num); mem_mib = 0 (the trace does not record memory)"
)


def load(
    path: str | Path,
    *,
    skip_bad_rows: bool = False,
    fractional: str = "whole",
    censored: str = "keep",
) -> Trace:
    """The original cluster_log.csv (times as seconds or 'YYYY-MM-DD HH:MM:SS')."""
    b = TraceBuilder(
        path,
        FORMAT,
        skip_bad_rows=skip_bad_rows,
        fractional=fractional,
        censored=censored,
        sources=SOURCES,
        submit_column="submit_time",
    )
    b.treat(
        NEVER_STARTED,
        "a job with no start_time or a duration of 0 never ran (Slurm jobs cancelled "
        f"while queued); it is left out (excluded[{NEVER_STARTED!r}])",
    )
    b.treat(
        "times",
        "submit = submit_time, duration = the duration column (end_time - start_time "
        "in seconds); times are seconds or date-times (naive ones are UTC), and submit "
        "counts from the first kept job's submit_time; state RUNNING counts as censored",
    )
    b.treat("resources", _RESOURCES)
    b.treat("user", _USER)
    # The first submit_time decides whether the file's times are numbers or
    # date-times; a file mixing both is malformed, not guessable.
    datetimes: bool | None = None

    def time(row: dict[str, str], col: str) -> Time | None:
        nonlocal datetimes
        s = row.get(col, "").strip()
        if not s:
            return None
        if datetimes is None:
            try:
                float(s)
                datetimes = False
            except ValueError:
                datetimes = True
        if not datetimes:
            return b.time(row, col)
        try:
            dt = datetime.fromisoformat(s)
            if dt.tzinfo is not None:
                dt = dt.astimezone(UTC).replace(tzinfo=None)
        except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 moved by a zone
            msg = f"not a time 'YYYY-MM-DD HH:MM:SS' like earlier rows: {clip(s)}"
            raise b.error(col, msg) from None
        return b.epoch_seconds(dt)

    def parse(row: dict[str, str]) -> Outcome:
        job_id = b.ident(row, "job_id")
        gpus = b.integer(row, "gpu_num")
        cpus = b.number(row, "cpu_num")
        nodes = b.integer(row, "node_num")
        submit = time(row, "submit_time")
        if submit is None:
            raise b.error("submit_time", "value is missing")
        start = time(row, "start_time")
        end = time(row, "end_time")
        duration = b.number(row, "duration")
        if start is not None and start < submit:
            raise b.error("start_time", "start is before submit")
        if start is not None and end is not None and end < start:
            raise b.error("end_time", "end is before start")
        if start is None or duration == 0:
            return NEVER_STARTED
        return b.job(
            job_id,
            submit,
            duration,
            gpus,
            b.cores(cpus),
            0,
            nodes,
            censored=b.text(row, "state").upper() == "RUNNING",
            user=b.name(row, "user"),
        )

    b.load(parse, REQUIRED, OPTIONAL)
    return b.finish(origin_text=_as_datetime if datetimes else str)


def _as_datetime(seconds: Time) -> str:
    """The time origin of a date-time file as the date-time it was written as (UTC)."""
    # Whole seconds and microseconds apart: float(Decimal) would round 23:59:59.999999
    # up into year 10000, or drop microseconds from a far-future origin.
    whole = int(seconds)
    micro = int((Decimal(seconds) - whole) * 1_000_000)
    try:
        return str(_EPOCH + timedelta(seconds=whole, microseconds=micro))
    except OverflowError:
        return f"{seconds} s after {_EPOCH}"


def load_derived(
    path: str | Path,
    *,
    skip_bad_rows: bool = False,
    fractional: str = "whole",
    censored: str = "keep",
) -> Trace:
    """A derived subset: arrivals as `interval` (seconds since the previous arrival)."""
    b = TraceBuilder(
        path,
        DERIVED_FORMAT,
        skip_bad_rows=skip_bad_rows,
        fractional=fractional,
        censored=censored,
        sources=DERIVED_SOURCES,
        submit_column="interval",
        extra_fields=DERIVED_EXTRA_FIELDS,
    )
    b.treat(
        "times",
        "arrival = running sum of interval (seconds since the previous row's arrival; "
        "the first row's counts from 0, sums are exact) and submit counts from the first "
        "kept job's arrival; a row's interval advances the clock whenever it "
        "parses, even if the row is then excluded or skipped as bad, so later arrivals "
        "keep their times; duration = run_time; new_status 'running' (any case) counts "
        "as censored",
    )
    b.treat("resources", _RESOURCES)
    b.treat("user", _USER)
    b.treat(
        "time_limit",
        "time_limit = wall_time, read as the time limit the user asked for (as the "
        "Standard Workload Format's requested time; no authoritative description of "
        "these subsets was found); 0 or empty = no limit; a job may have run past it",
    )
    clock: list[Time] = [0]

    def parse(row: dict[str, str]) -> Outcome:
        # Exact sum, so no run of intervals rounds or overflows to inf; the span is capped.
        clock[0] += b.time(row, "interval")
        submit = clock[0]
        job_id = b.ident(row, "u_id")
        gpus = b.integer(row, "gpu_num")
        cpus = b.number(row, "cpu_num")
        nodes = b.integer(row, "node_num")
        run_time = b.number(row, "run_time")
        wall_time = b.num(row, "wall_time", allow_empty=True)
        return b.job(
            job_id,
            submit,
            run_time,
            gpus,
            b.cores(cpus),
            0,
            nodes,
            censored=b.text(row, "new_status").lower() == "running",
            time_limit=wall_time or None,
            user=b.name(row, "user"),
        )

    b.load(parse, DERIVED_REQUIRED, DERIVED_OPTIONAL)
    return b.finish()
