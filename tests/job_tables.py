"""Small job tables written as rows, for simulations a test sets up by hand."""

from __future__ import annotations

from coda.workload.jobs import JobTable
from coda.workload.perf import load_profile_set

PROFILES = load_profile_set("coda")


def table(rows: list[tuple]) -> JobTable:
    """rows: (submit, duration, gpus, cores[, mem, nodes]); ids j0, j1, ... in row order."""
    full = []
    for i, r in enumerate(rows):
        submit, duration, gpus, cores = r[:4]
        mem = r[4] if len(r) > 4 else 0
        nodes = r[5] if len(r) > 5 else 1
        full.append((f"j{i}", submit, duration, gpus, cores, mem, nodes, 0))
    return JobTable.from_rows(full).sorted_by_submit()
