"""squeue's answers to the controller's listing, written from job records in
``squeue --json``'s shape (22.05): what the fake Slurms of the tests and of
``bench/bench_slurm_controller.py`` print, so one record feeds both readers.

Only for fakes. What real Slurm prints is checked against the parser on a real
cluster (``tests/test_slurm_e2e.py``) and in recorded output
(``tests/test_slurm_listing.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from coda.slurm.client import SlurmError
from coda.slurm.listing import LISTING


def _na(v: Any, empty: str = "N/A") -> str:
    return empty if v in (None, "", 0) else str(v)


def _when(v: Any) -> str:
    if not v:
        return "N/A"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(v)))


def _limit(minutes: Any) -> str:
    if minutes is None or minutes == 0:
        return "UNLIMITED"
    h, m = divmod(int(minutes), 60)
    d, h = divmod(h, 24)
    if d:
        return f"{d}-{h:02d}:{m:02d}:00"
    return f"{h}:{m:02d}:00" if h else f"{m}:00"


def line_of(d: dict[str, Any]) -> str:
    """One job's line of the listing."""
    jid = d["job_id"]
    array = d.get("array_job_id") or 0
    task = d.get("array_task_id")
    fields = [
        str(jid),
        str(array or jid),
        "N/A" if not array else str(task) if task is not None else "0-1",
        _na(d.get("het_job_id")),
        str(d.get("user_id") or 0),
        str(d.get("job_state") or ""),
        str(d.get("state_reason") or "None"),
        str(d.get("cpus") or 1),
        str(d.get("node_count") or 1),
        str(d.get("tasks") or 1),
        _na(d.get("tres_per_node")),
        _na(d.get("tres_per_job")),
        _na(d.get("tres_per_task")),
        str(d.get("nodes") or ""),
        str(d.get("required_nodes") or ""),
        _na(d.get("dependency"), "(null)"),
        str(d.get("priority") or 0),
        _when(d.get("submit_time")),
        _when(d.get("start_time")),
        _when(d.get("end_time")),
        str(d.get("exit_code") or 0),
        str(d.get("restart_cnt") or 0),
        _limit(d.get("time_limit")),
        "1" if d.get("requeue") else "0",
        "0" if d.get("batch_flag") is False else "1",
        str(d.get("partition") or ""),
        _na(d.get("admin_comment"), "(null)"),
    ]
    return "|".join(fields)


def answer(argv: Sequence[str], records: Iterable[dict[str, Any]]) -> str | None:
    """squeue's output for the listing or a names query; None for other argv."""
    argv = list(argv)
    if argv == list(LISTING):
        rows = sorted(records, key=lambda d: int(d["job_id"]))
        return "".join(line_of(d) + "\n" for d in rows)
    if len(argv) == len(LISTING) + 1 and argv[:5] + argv[6:] == list(LISTING):
        ids = {int(x) for x in argv[5].removeprefix("--jobs=").split(",")}
        rows = sorted((d for d in records if int(d["job_id"]) in ids), key=lambda d: d["job_id"])
        if not rows and len(ids) == 1:
            raise SlurmError("squeue: slurm_load_jobs error: Invalid job id specified")
        return "".join(line_of(d) + "\n" for d in rows)
    if argv[:4] == ["squeue", "--noheader", "--all", "--states=all"] and len(argv) == 6:
        ids = {int(x) for x in argv[4].removeprefix("--jobs=").split(",")}
        fmt = argv[5].removeprefix("--format=")
        rows = [d for d in records if int(d["job_id"]) in ids]
        if not rows and len(ids) == 1:
            raise SlurmError("squeue: slurm_load_jobs error: Invalid job id specified")
        out = []
        for d in sorted(rows, key=lambda d: int(d["job_id"])):
            exc, name = str(d.get("excluded_nodes") or ""), str(d.get("name") or "")
            out.append(f"{d['job_id']}|{exc}|{name}" if fmt == "%A|%x|%j" else f"{exc}|{name}")
        return "".join(x + "\n" for x in out)
    return None
