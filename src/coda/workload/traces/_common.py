"""What every trace loader shares, in one import: CSV reading, typed fields, bad-row and
treatment rules.

A format module only says how one row maps to a job. Everything that must be the
same across formats lives once in the modules re-exported here:

- `_reading`: header checks, line numbers in errors, undecodable or overlong lines;
- `_fields`: typed fields and their ranges (from coda.workload.limits), exact time stamps;
- `_builder`: the skip-bad-rows switch, time stamps made relative to the first arrival,
  duplicate ids, the fractional-GPU / censored / zero-duration rules and the bookkeeping
  that makes `rows_read == jobs_loaded + excluded + skipped` hold;
- `_rules`: the names of those rules (choices, excluded and adjusted keys, row types);
- `_text`: values cut short for one-line messages.
"""

from __future__ import annotations

from coda.text import clip, shown
from coda.workload.traces._builder import TraceBuilder
from coda.workload.traces._fields import FieldParser
from coda.workload.traces._reading import iter_rows, read_header
from coda.workload.traces._rules import (
    CENSORED,
    CENSORED_CHOICES,
    CENSORED_KEPT,
    CORES_RAISED,
    DUPLICATE_IDS,
    EXTRA_JOBS,
    FRACTIONAL_CHOICES,
    FRACTIONAL_GPU,
    FRACTIONAL_ROUNDED_UP,
    MAX_BAD_ROW_EXAMPLES,
    MAX_DUPLICATE_EXAMPLES,
    NEVER_STARTED,
    ZERO_DURATION,
    Outcome,
    Time,
    TraceRow,
    check_options,
)

__all__ = [
    "CENSORED",
    "CENSORED_CHOICES",
    "CENSORED_KEPT",
    "CORES_RAISED",
    "DUPLICATE_IDS",
    "EXTRA_JOBS",
    "FRACTIONAL_CHOICES",
    "FRACTIONAL_GPU",
    "FRACTIONAL_ROUNDED_UP",
    "MAX_BAD_ROW_EXAMPLES",
    "MAX_DUPLICATE_EXAMPLES",
    "NEVER_STARTED",
    "ZERO_DURATION",
    "FieldParser",
    "TraceRow",
    "Outcome",
    "Time",
    "TraceBuilder",
    "check_options",
    "clip",
    "iter_rows",
    "read_header",
    "shown",
]
