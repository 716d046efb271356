"""The node's persistent state: jobs, decisions and learned profiles in SQLite.

One embedded database per state directory, shared by the agent (the only writer
of job state) and the CLI (which submits, cancels and reads). WAL mode, so
readers never block the agent's control loop. Every job row is enough to
re-adopt the job after an agent crash: its supervisor's pid and start time, and
the cgroup it lives in.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
KINDS = ("dnn", "cpu")
# queued -> starting -> running -> done | failed | cancelled | lost;
# a preempted job goes back to queued
ACTIVE = ("starting", "running")
FINAL = ("done", "failed", "cancelled", "lost")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('dnn', 'cpu')),
    argv TEXT NOT NULL,
    cwd TEXT NOT NULL,
    env TEXT NOT NULL,
    cores INTEGER NOT NULL CHECK (cores >= 1),
    gpus INTEGER NOT NULL CHECK (gpus >= 0),
    model TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL DEFAULT 'queued',
    submit_t REAL NOT NULL,
    start_t REAL,
    end_t REAL,
    shim_pid INTEGER,
    shim_start INTEGER,
    cpus TEXT NOT NULL DEFAULT '',
    gpu_ids TEXT NOT NULL DEFAULT '',
    quota REAL NOT NULL DEFAULT 1.0,
    exit_code INTEGER,
    cancel INTEGER NOT NULL DEFAULT 0,
    launches INTEGER NOT NULL DEFAULT 0,
    preemptions INTEGER NOT NULL DEFAULT 0,
    throughput REAL,
    reference REAL,
    phase TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    job_id INTEGER,
    component TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""


class SpecError(ValueError):
    """A job spec that cannot run; the message says what to change."""


@dataclass
class JobSpec:
    """What a user submits. ``argv`` runs without a shell."""

    argv: list[str]
    name: str = ""
    cores: int = 1
    gpus: int = 0
    model: str = ""
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "dnn" if self.gpus > 0 else "cpu"

    def validate(self, node_cores: int | None = None, node_gpus: int | None = None) -> None:
        """Raise SpecError for anything that could not run or could escape its sandbox."""
        if not isinstance(self.argv, list) or not self.argv:
            raise SpecError("the command is empty: give the program and its arguments")
        if not all(isinstance(a, str) for a in self.argv):
            raise SpecError("every command argument must be a string")
        if any("\0" in a for a in self.argv):
            raise SpecError("command arguments must not contain NUL bytes")
        if not self.name:
            self.name = Path(self.argv[0]).name or "job"
        if not NAME_RE.match(self.name):
            raise SpecError(
                f"job name {self.name!r} is not allowed: use 1-64 letters, digits, '_', '.' "
                "or '-', starting with a letter or digit"
            )
        if not isinstance(self.cores, int) or self.cores < 1:
            raise SpecError(f"cores must be a whole number >= 1, got {self.cores!r}")
        if not isinstance(self.gpus, int) or self.gpus < 0:
            raise SpecError(f"gpus must be a whole number >= 0, got {self.gpus!r}")
        if node_cores is not None and self.cores > node_cores:
            raise SpecError(f"asks for {self.cores} cores but this node has {node_cores}")
        if node_gpus is not None and self.gpus > node_gpus:
            raise SpecError(f"asks for {self.gpus} GPUs but this node has {node_gpus}")
        if self.model and not NAME_RE.match(self.model):
            raise SpecError(f"model name {self.model!r} is not allowed (same rule as job names)")
        if not self.cwd:
            self.cwd = os.getcwd()
        if not os.path.isabs(self.cwd) or not os.path.isdir(self.cwd):
            raise SpecError(f"working directory {self.cwd!r} is not an existing absolute path")
        for k, v in self.env.items():
            if not isinstance(k, str) or not ENV_KEY_RE.match(k):
                raise SpecError(f"environment variable name {k!r} is not allowed")
            if not isinstance(v, str) or "\0" in v:
                raise SpecError(f"environment variable {k} must be a string without NUL bytes")
            if k.startswith("CODA_"):
                raise SpecError(f"environment variable {k}: CODA_* variables are set by the agent")

    @classmethod
    def from_dict(cls, d: Any) -> JobSpec:
        """A spec from a JSON object, with clear errors for unknown or mistyped keys."""
        if not isinstance(d, dict):
            raise SpecError("a job spec must be a JSON object")
        known = {"argv", "name", "cores", "gpus", "model", "cwd", "env"}
        extra = sorted(set(d) - known)
        if extra:
            raise SpecError(f"unknown key(s) in job spec: {', '.join(extra)}")
        if "argv" not in d:
            raise SpecError("job spec needs 'argv': the program and its arguments, as a list")
        env = d.get("env", {})
        if not isinstance(env, dict):
            raise SpecError("'env' must be an object of strings")
        return cls(
            argv=list(d["argv"]) if isinstance(d["argv"], list) else d["argv"],
            name=d.get("name", ""),
            cores=d.get("cores", 1),
            gpus=d.get("gpus", 0),
            model=d.get("model", ""),
            cwd=d.get("cwd", ""),
            env=dict(env),
        )


@dataclass
class JobRow:
    id: int
    name: str
    kind: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    cores: int
    gpus: int
    model: str
    state: str
    submit_t: float
    start_t: float | None
    end_t: float | None
    shim_pid: int | None
    shim_start: int | None
    cpus: str
    gpu_ids: str
    quota: float
    exit_code: int | None
    cancel: int
    launches: int
    preemptions: int
    throughput: float | None
    reference: float | None
    phase: str
    message: str

    @classmethod
    def from_sql(cls, r: sqlite3.Row) -> JobRow:
        d = dict(r)
        d["argv"] = json.loads(d["argv"])
        d["env"] = json.loads(d["env"])
        return cls(**d)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Store:
    """The SQLite database of one state directory."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.executescript(_SCHEMA)
        got = self.meta("schema")
        if got is None:
            self.set_meta("schema", str(SCHEMA_VERSION))
        elif got != str(SCHEMA_VERSION):
            raise RuntimeError(
                f"{self.path}: schema version {got}, this CODA reads {SCHEMA_VERSION}"
            )

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE: writers queue instead of failing)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # ----------------------------------------------------------------- meta
    def meta(self, key: str) -> str | None:
        r = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if r is None else r[0]

    def set_meta(self, key: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # ----------------------------------------------------------------- jobs
    def submit(self, spec: JobSpec, now: float | None = None) -> int:
        spec.validate()
        cur = self._db.execute(
            "INSERT INTO jobs (name, kind, argv, cwd, env, cores, gpus, model, submit_t) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                spec.name,
                spec.kind,
                json.dumps(spec.argv),
                spec.cwd,
                json.dumps(spec.env),
                spec.cores,
                spec.gpus,
                spec.model,
                time.time() if now is None else now,
            ),
        )
        return int(cur.lastrowid)

    def job(self, job_id: int) -> JobRow | None:
        r = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if r is None else JobRow.from_sql(r)

    def jobs(self, states: Sequence[str] | None = None, limit: int | None = None) -> list[JobRow]:
        q = "SELECT * FROM jobs"
        args: list[Any] = []
        if states:
            q += f" WHERE state IN ({','.join('?' * len(states))})"
            args += list(states)
        q += " ORDER BY id"
        if limit is not None:
            newest = q.replace(" ORDER BY id", " ORDER BY id DESC")
            q = f"SELECT * FROM ({newest} LIMIT ?) ORDER BY id"
            args.append(limit)
        return [JobRow.from_sql(r) for r in self._db.execute(q, args)]

    def update(self, job_id: int, **fields: Any) -> None:
        if not fields:
            return
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._db.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*fields.values(), job_id))

    def claim(self, job_id: int, **fields: Any) -> bool:
        """Update a job that is still queued and not cancelled; False if it is not
        (a cancel may land between the agent's read and its launch)."""
        cols = ", ".join(f"{k} = ?" for k in fields)
        cur = self._db.execute(
            f"UPDATE jobs SET {cols} WHERE id = ? AND state = 'queued' AND cancel = 0",
            (*fields.values(), job_id),
        )
        return cur.rowcount == 1

    def request_cancel(self, job_id: int) -> JobRow:
        """Mark a job for cancelling (the agent acts on it); a queued job is cancelled now."""
        with self.tx():
            row = self.job(job_id)
            if row is None:
                raise KeyError(f"no job {job_id}")
            if row.state == "queued":
                self.update(
                    job_id,
                    state="cancelled",
                    end_t=time.time(),
                    cancel=1,
                    message="cancelled before it started",
                )
            elif row.state in ACTIVE:
                self.update(job_id, cancel=1)
        return self.job(job_id)  # type: ignore[return-value]

    # ------------------------------------------------------------ decisions
    def log_decision(
        self, t: float, job_id: int | None, component: str, action: str, detail: dict[str, Any]
    ) -> None:
        self._db.execute(
            "INSERT INTO decisions (t, job_id, component, action, detail) VALUES (?, ?, ?, ?, ?)",
            (t, job_id, component, action, json.dumps(detail, default=str)),
        )

    def decisions(self, limit: int = 20, job_id: int | None = None) -> list[dict[str, Any]]:
        q = "SELECT * FROM decisions"
        args: list[Any] = []
        if job_id is not None:
            q += " WHERE job_id = ?"
            args.append(job_id)
        q += " ORDER BY id DESC LIMIT ?"
        args.append(limit)
        rows = [dict(r) for r in self._db.execute(q, args)]
        for r in rows:
            r["detail"] = json.loads(r["detail"])
        return rows[::-1]
