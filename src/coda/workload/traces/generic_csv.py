"""CODA's own plain CSV job list, for traces converted by hand or by other tools, and
for generated workloads (`write_csv` writes what `load` reads).

Header (any order, extra columns ignored):
job_id,submit_s,duration_s,gpus,cores[,mem_mib][,nodes][,censored]
[,user][,model][,time_limit_s][,cpu_bw_gbps_per_core]
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from coda.workload import limits
from coda.workload.jobs import FLAG_CENSORED, JobTable, Trace
from coda.workload.traces._common import Outcome, TraceBuilder, clip
from coda.writing import text_output

FORMAT = "csv"
REQUIRED = ("job_id", "submit_s", "duration_s", "gpus", "cores")
OPTIONAL = (
    "mem_mib",
    "nodes",
    "censored",
    "user",
    "model",
    "time_limit_s",
    "cpu_bw_gbps_per_core",
)
SIGNATURE = ("job_id", "submit_s", "duration_s")

# Where each job total comes from, for the message when one is above its cap.
SOURCES = {"gpus": "gpus", "cores": "cores", "mem_mib": "mem_mib", "nodes": "nodes"}
SOURCES["duration"] = "duration_s"
SOURCES["model"] = "model"
SOURCES["cpu_bw"] = "cpu_bw_gbps_per_core"

# Ranges of the optional numeric columns (empty = not given). A time limit is what a
# user may ask for (the cap of `coda submit --time`); bandwidth per core is bounded as
# a profile set's CPU-job classes are.
EXTRA_FIELDS = {
    "time_limit_s": limits.Limit(0, limits.MAX_TIME_LIMIT_S, "s (> 0; empty = none)"),
    "cpu_bw_gbps_per_core": limits.PROFILE["gbps_per_core"],
}

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
        extra_fields=EXTRA_FIELDS,
    )
    b.treat(
        "columns",
        "submit = submit_s, duration = duration_s, gpus/cores/mem_mib are the job's "
        "totals over its nodes (default mem_mib 0 = unknown, nodes 1); censored = 1 marks "
        "a job still running when the trace ended; a non-integer gpus value is a "
        "fractional GPU request; submit counts from the first kept job's submit_s",
    )
    b.treat(
        "optional_columns",
        "user (the job's owner), model (a GPU job's DNN model, matched case-insensitively "
        "against the profile set when the workload is built; a CPU job naming one is a bad "
        "row), time_limit_s (the limit the user asked for, > 0 s) and "
        "cpu_bw_gbps_per_core (a CPU job's memory bandwidth per core, >= 0; on a GPU job a "
        "bad row) are kept where given; empty means not given (the owner is then assigned, "
        "the model and bandwidth drawn, and the job has no limit)",
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
        time_limit = b.num(row, "time_limit_s", allow_empty=True)
        if time_limit == 0:
            raise b.error("time_limit_s", "must be > 0 s (leave it empty for no limit)")
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
            time_limit=time_limit,
            user=b.name(row, "user"),
            model=b.name(row, "model"),
            cpu_bw=b.num(row, "cpu_bw_gbps_per_core", allow_empty=True),
        )

    b.load(parse, REQUIRED, OPTIONAL)
    return b.finish()


def _number(x: float) -> str:
    """Shortest text that reads back as the same float (whole numbers without '.0')."""
    if x.is_integer() and abs(x) < 2**53:
        return str(int(x))
    return repr(x)


def write_csv(table: JobTable, path: str | Path) -> Path:
    """Write `table` in this format, optional columns included where the table has them,
    so that `load` gives the same columns back.

    Submit times are written as they are; `load` counts them from the first job's, so a
    table whose first submit is not 0 comes back shifted by it. FLAG_FRACTIONAL is not
    written (the table holds the whole GPUs a job was given, not the fraction it asked
    for). Text is written as it is (the loader drops surrounding spaces); text that
    cannot stay on one line is a ValueError. Parent folders are made as needed.
    """
    path = Path(path)
    n = len(table)
    for what, texts in (("id", table.ids), ("user", table.user), ("model", table.model)):
        for i, t in enumerate(texts or ()):
            if "\n" in t or "\r" in t:
                raise ValueError(f"job {i}: its {what} {clip(t)} holds a line break")
    columns: list[tuple[str, list[str]]] = [
        ("job_id", list(table.ids)),
        ("submit_s", [_number(x) for x in table.submit.tolist()]),
        ("duration_s", [_number(x) for x in table.duration.tolist()]),
        ("gpus", [str(x) for x in table.gpus.tolist()]),
        ("cores", [str(x) for x in table.cores.tolist()]),
        ("mem_mib", [str(x) for x in table.mem_mib.tolist()]),
        ("nodes", [str(x) for x in table.nodes.tolist()]),
        ("censored", ["1" if f & FLAG_CENSORED else "0" for f in table.flags.tolist()]),
    ]
    if table.user is not None:
        columns.append(("user", list(table.user)))
    if table.model is not None:
        columns.append(("model", list(table.model)))
    if table.time_limit is not None:
        columns.append(("time_limit_s", _optional_numbers(table.time_limit)))
    if table.cpu_bw is not None:
        columns.append(("cpu_bw_gbps_per_core", _optional_numbers(table.cpu_bw)))
    path.parent.mkdir(parents=True, exist_ok=True)
    with text_output(path, newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow([name for name, _ in columns])
        cols = [values for _, values in columns]
        w.writerows(zip(*cols, strict=True) if n else [])
    return path


def _optional_numbers(values: np.ndarray) -> list[str]:
    """NaN (not given) as an empty field, other values as _number does."""
    return ["" if math.isnan(x) else _number(x) for x in np.asarray(values, np.float64).tolist()]
