"""Load real cluster traces into a JobTable, with a report of everything done to them.

    trace = load_trace("openb_pod_list_default.csv")        # format from the header
    trace = load_trace(path, "pai", fractional="drop")
    trace.jobs, trace.report.as_dict()

Formats and their rules are documented in docs/trace-formats.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from coda.workload.jobs import Trace, TraceFormatError
from coda.workload.traces import generic_csv, helios, openb, pai
from coda.workload.traces._common import check_options, clip, read_header

__all__ = [
    "FORMATS",
    "bundled_nodes_path",
    "bundled_trace_path",
    "detect_format",
    "load_trace",
]

FORMATS = ("openb", "helios", "helios-derived", "pai", "csv")

_LOADERS: dict[str, Callable[..., Trace]] = {
    "openb": openb.load,
    "helios": helios.load,
    "helios-derived": helios.load_derived,
    "pai": pai.load,
    "csv": generic_csv.load,
}

# Header columns that identify each format, checked in this order.
_SIGNATURES = (
    ("openb", openb.SIGNATURE),
    ("helios", helios.SIGNATURE),
    ("helios-derived", helios.DERIVED_SIGNATURE),
    ("pai", pai.SIGNATURE),
    ("csv", generic_csv.SIGNATURE),
)

_DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "alibaba-openb-2023"


def bundled_trace_path() -> Path:
    """The vendored Alibaba openb 2023 pod list (8,152 pods)."""
    return _DATA_DIR / "openb_pod_list_default.csv"


def bundled_nodes_path() -> Path:
    """The vendored Alibaba openb 2023 node list (1,523 nodes) of the same cluster."""
    return _DATA_DIR / "openb_node_list_all_node.csv"


def _is_whole_number(s: str) -> bool:
    try:
        return float(s).is_integer()
    except ValueError:
        return False


def detect_format(path: str | Path) -> str:
    """The trace format of a file, from its first line.

    PAI's task table ships without a header, so a first line of 10 fields whose
    3rd is a whole number (inst_num) and 4th a word (status) is taken as PAI data.
    """
    header = read_header(path)
    if not header:
        raise TraceFormatError(str(path), 1, None, "file is empty: expected a header line")
    names = set(header)
    for fmt, signature in _SIGNATURES:
        if names.issuperset(signature):
            return fmt
    if len(header) == len(pai.COLUMNS) and _is_whole_number(header[2]) and header[3].isalpha():
        return "pai"
    raise TraceFormatError(
        str(path),
        1,
        None,
        f"cannot tell the trace format from the first line {clip(','.join(header), 120)}; "
        f"pass format= one of {', '.join(FORMATS)}",
    )


def load_trace(
    path: str | Path,
    format: str | None = None,
    *,
    skip_bad_rows: bool = False,
    fractional: str = "whole",
    censored: str = "keep",
) -> Trace:
    """Read a trace file into a Trace (jobs sorted by submit time, plus a report).

    fractional: "whole" gives a fractional-GPU job whole GPUs and flags it; "drop"
    leaves it out. censored: "keep" keeps a job still running at the trace end,
    flagged; "drop" leaves it out. skip_bad_rows: skip and count malformed rows
    instead of raising TraceFormatError at the first one.
    """
    check_options(fractional, censored)
    if format is None:
        format = detect_format(path)
    elif format not in _LOADERS:
        raise ValueError(f"unknown trace format {clip(format)}; known: {', '.join(FORMATS)}")
    return _LOADERS[format](
        path, skip_bad_rows=skip_bad_rows, fractional=fractional, censored=censored
    )
