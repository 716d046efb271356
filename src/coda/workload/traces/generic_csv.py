"""CODA's own plain CSV job list, for traces converted by hand or by other tools.

Header (any order, extra columns ignored):
job_id,submit_s,duration_s,gpus,cores[,mem_mib][,nodes][,censored]
"""

from __future__ import annotations

import math
from pathlib import Path

from coda.workload.jobs import Trace
from coda.workload.traces._common import Outcome, TraceBuilder, clip

FORMAT = "csv"
REQUIRED = ("job_id", "submit_s", "duration_s", "gpus", "cores")
OPTIONAL = ("mem_mib", "nodes", "censored")
SIGNATURE = ("job_id", "submit_s", "duration_s")

# Where each job total comes from, for the message when one is above its cap.
SOURCES = {"gpus": "gpus", "cores": "cores", "mem_mib": "mem_mib", "nodes": "nodes"}
SOURCES["duration"] = "duration_s"

_TRUE = {"1", "true", "yes"}
_FALSE = {"", "0", "false", "no"}


def load(
    path: str | Path,
    *,
    skip_bad_rows: bool = False,
    fractional: str = "whole",
    censored: str = "keep",
) -> Trace:
    b = TraceBuilder(
        path,
        FORMAT,
        skip_bad_rows=skip_bad_rows,
        fractional=fractional,
        censored=censored,
        sources=SOURCES,
        submit_column="submit_s",
    )
    b.treat(
        "columns",
        "submit = submit_s, duration = duration_s, gpus/cores/mem_mib are the job's "
        "totals over its nodes (default mem_mib 0 = unknown, nodes 1); censored = 1 marks "
        "a job still running when the trace ended; a non-integer gpus value is a "
        "fractional GPU request; submit counts from the first kept job's submit_s",
    )

    def parse(row: dict[str, str]) -> Outcome:
        job_id = b.ident(row, "job_id")
        submit = b.time(row, "submit_s")
        duration = b.number(row, "duration_s")
        gpus = b.number(row, "gpus")
        cores = b.number(row, "cores")
        if cores == 0:
            raise b.error("cores", "must be > 0")
        mem = b.integer(row, "mem_mib", empty=0)
        nodes = b.integer(row, "nodes", empty=1)
        flag = row.get("censored", "").strip().lower()
        if flag not in _FALSE and flag not in _TRUE:
            raise b.error("censored", f"must be 0 or 1, got {clip(flag)}")
        whole_gpus = math.ceil(gpus)
        return b.job(
            job_id,
            submit,
            duration,
            whole_gpus,
            b.cores(cores),
            mem,
            nodes,
            fractional=whole_gpus != gpus,
            censored=flag in _TRUE,
        )

    b.load(parse, REQUIRED, OPTIONAL)
    return b.finish()
