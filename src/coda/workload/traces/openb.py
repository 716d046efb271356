"""Alibaba cluster-trace-gpu-v2023 ("openb") pod lists, as released with the FGD paper.

One pod is one single-node job. Times are seconds; submit times count from the first
kept pod's creation_time (the bundled file's already start at 0).
"""

from __future__ import annotations

import math
from pathlib import Path

from coda.workload.jobs import Trace
from coda.workload.traces._common import NEVER_STARTED, Outcome, TraceBuilder, shown

FORMAT = "openb"
REQUIRED = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
OPTIONAL = ("gpu_spec", "qos")
# Columns that say a header is an openb pod list (for format detection).
SIGNATURE = ("name", "cpu_milli", "num_gpu", "gpu_milli", "pod_phase")
# Where each job total comes from, for the message when one is above its cap.
SOURCES = {
    "gpus": "num_gpu",
    "cores": "cpu_milli",
    "mem_mib": "memory_mib",
    "duration": "deletion_time",
}


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
        submit_column="creation_time",
    )
    b.treat(
        NEVER_STARTED,
        "a pod with no scheduled_time never ran, so it has no runtime; it is left out "
        f"(excluded[{NEVER_STARTED!r}])",
    )
    b.treat(
        "times",
        "submit = creation_time and duration = deletion_time - scheduled_time, in seconds; "
        "submit counts from the first kept pod's creation_time; a pod still Running at the "
        "snapshot end has deletion_time = the snapshot end, so its duration is a lower bound",
    )
    b.treat(
        "resources",
        "each pod is a one-node job: gpus = num_gpu, cores = ceil(cpu_milli / 1000), "
        "mem_mib = memory_mib; Failed and Succeeded pods are both kept (both used the "
        "cluster for their runtime)",
    )

    def parse(row: dict[str, str]) -> Outcome:
        cpu_milli = b.number(row, "cpu_milli")
        mem = b.number(row, "memory_mib")
        num_gpu = b.integer(row, "num_gpu")
        gpu_milli = b.integer(row, "gpu_milli")  # <= 1000: a share of one whole GPU
        if num_gpu == 0 and gpu_milli:
            raise b.error("gpu_milli", f"is {gpu_milli} but num_gpu is 0")
        if num_gpu and not gpu_milli:
            raise b.error("gpu_milli", f"is 0 but num_gpu is {num_gpu}")
        phase = b.text(row, "pod_phase").capitalize()  # "running" is Running too
        created = b.time(row, "creation_time")
        scheduled = b.time(row, "scheduled_time", allow_empty=True)
        deleted = b.time(row, "deletion_time", allow_empty=True)
        if scheduled is None:
            return NEVER_STARTED
        if scheduled < created:
            raise b.error(
                "scheduled_time", f"start {shown(scheduled)} is before creation {shown(created)}"
            )
        if deleted is None:
            raise b.error("deletion_time", "value is missing for a pod that started")
        if deleted < scheduled:
            raise b.error(
                "deletion_time", f"end {shown(deleted)} is before start {shown(scheduled)}"
            )
        return b.job(
            b.ident(row, "name"),
            created,
            deleted - scheduled,
            num_gpu,
            b.cores(cpu_milli / 1000.0),
            math.ceil(mem),
            1,
            fractional=0 < gpu_milli < 1000,
            censored=phase == "Running",
        )

    b.load(parse, REQUIRED, OPTIONAL)
    return b.finish()
