"""Alibaba PAI 2020 (cluster-trace-gpu-v2020) pai_task_table, with or without a header.

A task is a group of `inst_num` identical instances. A GPU task is one gang job over
`inst_num` nodes; a CPU-only task's instances are independent, so each becomes its
own single-node job.
"""

from __future__ import annotations

import math
from pathlib import Path

from coda.workload.jobs import Trace, TraceFormatError
from coda.workload.traces._common import (
    EXTRA_JOBS,
    NEVER_STARTED,
    ZERO_DURATION,
    Outcome,
    Time,
    TraceBuilder,
    TraceRow,
    shown,
)

FORMAT = "pai"
# Column order of the original, header-less file.
COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
REQUIRED = COLUMNS[:9]
OPTIONAL = ("gpu_type",)
SIGNATURE = ("job_name", "task_name", "inst_num")
NO_END_TIME = "no_end_time"
# Where each job total comes from, for the message when one is above its cap.
SOURCES = {
    "gpus": "inst_num, plan_gpu",
    "cores": "inst_num, plan_cpu",
    "mem_mib": "inst_num, plan_mem",
    "nodes": "inst_num",
    "duration": "end_time",
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
        submit_column="start_time",
    )
    b.treat(
        "times",
        "the task table has no submit time: submit = start_time (queueing in the original "
        "cluster is unknown), duration = end_time - start_time; submit counts from the first "
        "kept task's start_time",
    )
    b.treat(
        NEVER_STARTED,
        "a task with status Waiting or no start_time never ran; it is left out "
        f"(excluded[{NEVER_STARTED!r}])",
    )
    b.treat(
        NO_END_TIME,
        "a task that is not Running but has no end_time has no known runtime; it is left "
        f"out (excluded[{NO_END_TIME!r}]). A Running task with no end_time runs to the "
        "last time stamp in the file and is censored",
    )
    b.treat(
        "end_before_start",
        "a Failed (or other non-Terminated) task with end_time before start_time is left "
        f"out as excluded[{ZERO_DURATION!r}]; a Terminated one is a bad row",
    )
    b.treat(
        "resources",
        "plan_cpu and plan_gpu are percent of one core / GPU per instance, plan_mem is GB "
        "per instance. A task with plan_gpu > 0 is one gang job: nodes = inst_num, "
        "gpus = inst_num * ceil(plan_gpu / 100) (flagged FRACTIONAL if plan_gpu is not a "
        "multiple of 100), cores = inst_num * ceil(plan_cpu / 100), mem = inst_num * "
        "plan_mem. A task with empty or 0 plan_gpu is CPU-only: each instance is its own "
        "one-node job with id job_name/task_name#k; inst_num is at most 10000",
    )
    b.treat(
        "row_identity",
        "rows_read == jobs_loaded - adjusted['" + EXTRA_JOBS + "'] + sum(excluded) + "
        "skipped_bad_rows, since a CPU-only row with inst_num = n makes n jobs",
    )
    b.treat(
        "missing_requests",
        "an empty plan_cpu gives 1 core per instance (counted as cores_raised_to_1); an "
        "empty plan_mem gives mem_mib = 0 (unknown)",
    )
    trace_end: Time | None = None
    # (line, (name, inst, start, plan_cpu, mem, plan_gpu)) of tasks still running at the end
    deferred: list[tuple[int, tuple[str, int, Time, float | None, int, float | None]]] = []

    def make(
        name: str,
        inst: int,
        start: Time,
        duration: Time,
        plan_cpu: float | None,
        mem: int,
        plan_gpu: float | None,
        running: bool,
    ) -> Outcome:
        cores = b.cores(plan_cpu / 100.0) if plan_cpu is not None else 0
        if plan_gpu:
            per = math.ceil(plan_gpu / 100.0 - 1e-9)
            return b.job(
                name,
                start,
                duration,
                inst * per,
                inst * cores,
                inst * mem,
                inst,
                fractional=plan_gpu % 100 != 0,
                censored=running,
            )
        jobs: list[TraceRow] = []
        for k in range(inst):
            r = b.job(f"{name}#{k}", start, duration, 0, cores, mem, 1, censored=running)
            if isinstance(r, str):
                return r  # same inputs for every instance: the first decides for all
            jobs.append(r)
        return jobs

    def parse(row: dict[str, str]) -> Outcome | None:
        nonlocal trace_end
        name = f"{b.ident(row, 'job_name')}/{b.ident(row, 'task_name')}"
        inst = b.integer(row, "inst_num")  # capped: a CPU task makes inst_num jobs
        status = b.text(row, "status").capitalize()  # "waiting" is Waiting too
        start = b.time(row, "start_time", allow_empty=True)
        end = b.time(row, "end_time", allow_empty=True)
        plan_cpu = b.num(row, "plan_cpu", allow_empty=True)
        plan_mem = b.num(row, "plan_mem", allow_empty=True)
        plan_gpu = b.num(row, "plan_gpu", allow_empty=True)
        mem = round(plan_mem * 1024) if plan_mem is not None else 0
        running = status == "Running"
        backwards = start is not None and end is not None and end < start
        if backwards and status == "Terminated":
            raise b.error("end_time", f"end {shown(end)} is before start {shown(start)}")
        for t in (start, end):
            if t is not None and (trace_end is None or t > trace_end):
                trace_end = t
        if status == "Waiting" or start is None:
            return NEVER_STARTED
        if end is None:
            if running:
                # Runs to the end of the trace, which is known only after the last row.
                deferred.append((b.line, (name, inst, start, plan_cpu, mem, plan_gpu)))
                return None
            return NO_END_TIME
        if backwards:
            return ZERO_DURATION
        return make(name, inst, start, end - start, plan_cpu, mem, plan_gpu, running)

    b.load(parse, REQUIRED, OPTIONAL, headerless=COLUMNS)
    for line, (name, inst, start, plan_cpu, mem, plan_gpu) in deferred:
        assert trace_end is not None  # this row's start time set it
        b.line = line
        try:
            outcome = make(name, inst, start, trace_end - start, plan_cpu, mem, plan_gpu, True)
        except TraceFormatError as e:  # e.g. it runs past the duration cap
            b.bad_row(e)
            continue
        b.settle(outcome)
    return b.finish()
