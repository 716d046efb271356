"""The one job table every trace loader produces and every consumer reads.

Columns are numpy arrays so that a million-job trace costs tens of MB, not GB.
Times are seconds; `submit` is sorted ascending once a table is finalised.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Bit flags in JobTable.flags.
FLAG_FRACTIONAL = 1  # asked for a fraction of a GPU; given one whole GPU
FLAG_CENSORED = 2  # still running when the trace ended: duration is a lower bound

# Columns a trace may leave out (None), in the order JobTable declares them.
OPTIONAL_COLUMNS = ("time_limit", "user", "model", "cpu_bw")


@dataclass
class JobTable:
    """Jobs as a trace describes them, before any performance model is applied.

    `gpus` and `cores` are totals over all nodes of a job; `nodes` is how many
    nodes the job spans (gang). `duration` is the observed runtime at the cores
    the job asked for. `mem_mib` is 0 where the trace does not say.
    """

    ids: list[str]
    submit: np.ndarray  # float64, seconds
    duration: np.ndarray  # float64, seconds, > 0
    gpus: np.ndarray  # int32, whole GPUs in total (0 = CPU job)
    cores: np.ndarray  # int32, cores in total, >= 1
    mem_mib: np.ndarray  # int64, MiB in total (0 = unknown)
    nodes: np.ndarray  # int32, >= 1
    flags: np.ndarray  # uint8, FLAG_* bits
    # float64 seconds, the time limit each job asked for (NaN = none); None: the trace
    # gives none. What Slurm's backfill plans with (RunConfig.estimates "time-limits").
    time_limit: np.ndarray | None = None
    # Who submitted each job (the tenant DRF shares between); None: the trace does not
    # say (the simulator then assigns users from a seeded stream, coda.workload.tenants).
    user: list[str] | None = None
    # The DNN model of each GPU job ("" = draw one from the mix); None: draw them all.
    model: list[str] | None = None
    # float64 GB/s per core of each CPU job (NaN = draw from the profile set's classes).
    cpu_bw: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.ids)
        for name in OPTIONAL_COLUMNS:
            col = getattr(self, name)
            if col is not None and len(col) != n:
                raise ValueError(f"JobTable column {name!r} has {len(col)} rows, ids has {n}")
        for name in ("submit", "duration", "gpus", "cores", "mem_mib", "nodes", "flags"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"JobTable column {name!r} has {len(getattr(self, name))} rows, ids has {n}"
                )

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[Any]]) -> JobTable:
        """Rows of (id, submit, duration, gpus, cores, mem_mib, nodes, flags)."""
        rows = list(rows)
        if not rows:
            return cls.empty()
        return cls.from_columns(*zip(*rows, strict=True))

    @classmethod
    def from_columns(
        cls,
        ids: Sequence[Any],
        submit: Sequence[Any] | np.ndarray,
        duration: Sequence[Any],
        gpus: Sequence[Any],
        cores: Sequence[Any],
        mem: Sequence[Any],
        nodes: Sequence[Any],
        flags: Sequence[Any],
    ) -> JobTable:
        """Columns as sequences, each turned into its column's dtype (ValueError, not a
        traceback, for a value that does not fit)."""
        try:
            return cls(
                ids=[str(i) for i in ids],
                submit=np.asarray(submit, dtype=np.float64),
                duration=np.asarray(duration, dtype=np.float64),
                gpus=np.asarray(gpus, dtype=np.int32),
                cores=np.asarray(cores, dtype=np.int32),
                mem_mib=np.asarray(mem, dtype=np.int64),
                nodes=np.asarray(nodes, dtype=np.int32),
                flags=np.asarray(flags, dtype=np.uint8),
            )
        except (OverflowError, TypeError) as e:  # e.g. an int beyond int32: not a traceback
            raise ValueError(f"job table: a value does not fit its column: {e}") from None

    @classmethod
    def empty(cls) -> JobTable:
        return cls(
            ids=[],
            submit=np.zeros(0, np.float64),
            duration=np.zeros(0, np.float64),
            gpus=np.zeros(0, np.int32),
            cores=np.zeros(0, np.int32),
            mem_mib=np.zeros(0, np.int64),
            nodes=np.zeros(0, np.int32),
            flags=np.zeros(0, np.uint8),
        )

    def take(self, index: np.ndarray) -> JobTable:
        """A new table with the rows at `index` (in that order)."""
        index = np.asarray(index)
        rows = index.tolist()
        return JobTable(
            ids=[self.ids[i] for i in rows],
            submit=self.submit[index],
            duration=self.duration[index],
            gpus=self.gpus[index],
            cores=self.cores[index],
            mem_mib=self.mem_mib[index],
            nodes=self.nodes[index],
            flags=self.flags[index],
            time_limit=None if self.time_limit is None else self.time_limit[index],
            user=None if self.user is None else [self.user[i] for i in rows],
            model=None if self.model is None else [self.model[i] for i in rows],
            cpu_bw=None if self.cpu_bw is None else self.cpu_bw[index],
        )

    def sorted_by_submit(self) -> JobTable:
        # Stable, so jobs submitted in the same second keep their trace order.
        return self.take(np.argsort(self.submit, kind="stable"))

    @property
    def is_dnn(self) -> np.ndarray:
        return self.gpus > 0


@dataclass
class TraceReport:
    """What loading did to a file: nothing is dropped without being counted here."""

    path: str
    format: str
    rows_read: int = 0
    jobs_loaded: int = 0
    skipped_bad_rows: int = 0
    bad_row_examples: list[str] = field(default_factory=list)  # first few, "file:line: ..."
    excluded: dict[str, int] = field(default_factory=dict)  # reason -> rows not turned into jobs
    adjusted: dict[str, int] = field(default_factory=dict)  # treatment -> jobs changed
    treatments: dict[str, str] = field(default_factory=dict)  # rule -> how it is handled
    time_origin: str | None = None  # raw first-arrival value; submit times count from it
    duplicate_ids: int = 0  # jobs whose id repeated an earlier one (renamed id#k)
    duplicate_id_examples: list[str] = field(default_factory=list)  # first few repeated ids

    def count(self, bucket: dict[str, int], key: str, n: int = 1) -> None:
        bucket[key] = bucket.get(key, 0) + n

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "rows_read": self.rows_read,
            "jobs_loaded": self.jobs_loaded,
            "skipped_bad_rows": self.skipped_bad_rows,
            "bad_row_examples": list(self.bad_row_examples),
            "excluded": dict(self.excluded),
            "adjusted": dict(self.adjusted),
            "treatments": dict(self.treatments),
            "time_origin": self.time_origin,
            "duplicate_ids": self.duplicate_ids,
            "duplicate_id_examples": list(self.duplicate_id_examples),
        }


@dataclass
class Trace:
    jobs: JobTable
    report: TraceReport


class TraceFormatError(ValueError):
    """A malformed trace file; names the file, line (1-based, header = 1) and column."""

    def __init__(self, path: str, line: int, column: str | None, message: str) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.message = message
        shown = path if path.isprintable() else repr(path)  # one line whatever the name
        where = f"{shown}:{line}"
        col = f" column {column!r}:" if column else ""
        super().__init__(f"{where}:{col} {message}")
