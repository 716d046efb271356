"""The node's persistent state: jobs, decisions and learned profiles in SQLite.

One embedded database per state directory, shared by the agent (the only writer
of job state) and the CLI (which submits, cancels and reads). WAL mode, so
readers never block the agent's control loop. Every job row is enough to
re-adopt the job after an agent crash: its supervisor's pid and start time, and
the cgroup it lives in.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from coda.runtime.joblogs import MAX_LOG_TAIL, read_log
from coda.runtime.jobrow import (
    ACTIVE,
    FINAL,
    KINDS,
    MAX_WAIT_REASON,
    JobRow,
    Owner,
    clean_reason,
)
from coda.runtime.jobspec import (
    ENV_KEY_RE,
    MAX_ARGS,
    MAX_CORES,
    MAX_ENV,
    MAX_GPUS,
    MAX_SPEC_BYTES,
    MAX_TIME_LIMIT,
    NAME_RE,
    JobSpec,
    SpecError,
)
from coda.runtime.statedir import StateDirError, secure_file

# The job record, its spec and its logs have modules of their own; their names are
# importable from here too, so a caller of the store needs one import.
__all__ = [
    "ACTIVE",
    "ENV_KEY_RE",
    "FINAL",
    "KINDS",
    "MAX_ARGS",
    "MAX_CORES",
    "MAX_ENV",
    "MAX_GPUS",
    "MAX_JOB_ID",
    "MAX_LOG_TAIL",
    "MAX_SPEC_BYTES",
    "MAX_TIME_LIMIT",
    "MAX_WAIT_REASON",
    "NAME_RE",
    "SCHEMA_VERSION",
    "JobRow",
    "JobSpec",
    "Owner",
    "SpecError",
    "Store",
    "StoreError",
    "clean_reason",
    "read_log",
]

# 2: jobs.uid/gid/groups (who submitted, as the kernel said);
# 3: jobs.time_limit_s (the user's limit) and jobs.wait_reason (why a queued job waits);
# 4: jobs.spec_bytes (what the row's spec holds, for the per-user cap) and the indexes
#    that let the agent and status read the queue without its specs;
# 5: jobs.checkpoints (the job says a requeue loses only its work since a checkpoint)
SCHEMA_VERSION = 5
MAX_JOB_ID = 2**63 - 1  # SQLite's INTEGER

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
    message TEXT NOT NULL DEFAULT '',
    uid INTEGER,
    gid INTEGER,
    groups TEXT NOT NULL DEFAULT '[]',
    time_limit_s REAL,
    wait_reason TEXT NOT NULL DEFAULT '',
    spec_bytes INTEGER NOT NULL DEFAULT 0,
    checkpoints INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    job_id INTEGER,
    component TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""

# Columns added after version 1, with their definitions (ALTER TABLE on upgrade; an old
# database goes through every later version's columns).
_ADDED = {
    2: ("uid INTEGER", "gid INTEGER", "groups TEXT NOT NULL DEFAULT '[]'"),
    3: ("time_limit_s REAL", "wait_reason TEXT NOT NULL DEFAULT ''"),
    4: ("spec_bytes INTEGER NOT NULL DEFAULT 0",),
    5: ("checkpoints INTEGER NOT NULL DEFAULT 0",),
}

# Made once every column is there. Covering indexes: the queue, a user's usage and the
# purge read them without touching a row (a row's spec may be tens of KiB).
_INDEXES = """
DROP INDEX IF EXISTS jobs_state;
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (state, cancel);
CREATE INDEX IF NOT EXISTS jobs_user ON jobs (uid, state, spec_bytes);
CREATE INDEX IF NOT EXISTS jobs_ended ON jobs (state, end_t);
CREATE INDEX IF NOT EXISTS decisions_job ON decisions (job_id);
"""

# The columns of a row listed without its spec (status lists, the agent's queue).
_SPEC_COLS = ("argv", "env", "cwd")
_LIST_COLS = ", ".join(
    [f.name for f in dataclasses.fields(JobRow) if f.name not in _SPEC_COLS]
    + ["'[]' AS argv", "'{}' AS env", "'' AS cwd"]
)


class StoreError(RuntimeError):
    """A state database that cannot be used (corrupt, newer, not ours); names the file."""


class Store:
    """The SQLite database of one state directory.

    Opened only by its owner: the file (and its WAL and shared-memory files) must
    belong to this process's user and be writable by no one else; it is kept 0600.
    A file that is not a database, is damaged or was written by a newer CODA raises
    StoreError naming it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            for suffix in ("", "-wal", "-shm"):
                secure_file(f"{self.path}{suffix}", "state database")
            self._db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        except StateDirError as e:
            raise StoreError(str(e)) from None
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"{self.path}: {e}") from None
        try:
            self._open()
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise StoreError(f"{self.path}: not a usable CODA database ({e})") from None
        except StoreError:
            self._db.close()
            raise
        for suffix in ("", "-wal", "-shm"):  # made just now under the caller's umask
            if os.path.exists(f"{self.path}{suffix}"):
                os.chmod(f"{self.path}{suffix}", 0o600)

    def _open(self) -> None:
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")}
        if tables and not {"meta", "jobs", "decisions"} <= tables:
            raise StoreError(
                f"{self.path}: an SQLite database, but not CODA's "
                f"(tables: {', '.join(sorted(tables))})"
            )
        # Pages freed by purges go back to the file system a few at a time (compact()):
        # set before the first table; an older database is rewritten once to take it.
        if self._db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("VACUUM")
        self._db.executescript(_SCHEMA)
        got = self.meta("schema")
        if got is None:
            self._db.executescript(_INDEXES)
            self.set_meta("schema", str(SCHEMA_VERSION))
            return
        try:
            version = int(got)
        except ValueError:
            raise StoreError(f"{self.path}: schema version {got!r} is not a number") from None
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this CODA reads "
                f"({SCHEMA_VERSION}); use the CODA that wrote it"
            )
        if version < 1:
            raise StoreError(f"{self.path}: schema version {version} is not one CODA wrote")
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}
        with self.tx():
            for v in range(version + 1, SCHEMA_VERSION + 1):
                for col in _ADDED.get(v, ()):
                    if col.split()[0] not in cols:
                        self._db.execute(f"ALTER TABLE jobs ADD COLUMN {col}")
            if version < 4:  # rows of older versions: their specs' size as stored
                self._db.execute(
                    "UPDATE jobs SET spec_bytes = length(CAST(argv AS BLOB)) "
                    "+ length(CAST(env AS BLOB)) + length(CAST(cwd AS BLOB))"
                )
            for stmt in filter(None, (x.strip() for x in _INDEXES.split(";"))):
                self._db.execute(stmt)
            self.set_meta("schema", str(SCHEMA_VERSION))

    def close(self) -> None:
        self._db.close()

    def compact(self, pages: int) -> int:
        """Give at most ``pages`` free pages back to the file system (the file shrinks
        after purges, a bounded step at a time); how many were free before."""
        free = int(self._db.execute("PRAGMA freelist_count").fetchone()[0])
        if free:
            self._db.execute(f"PRAGMA incremental_vacuum({int(pages)})").fetchall()
        return free

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
    def submit(self, spec: JobSpec, owner: Owner | None = None, now: float | None = None) -> int:
        """Queue ``spec`` to run as ``owner`` (default: this process's user). Its
        working directory is not probed here (the agent may be root): see
        ``JobSpec.validate``."""
        spec.validate(probe_cwd=False)
        owner = owner or Owner.me()
        argv, env = spec.stored_argv, spec.stored_env
        cur = self._db.execute(
            "INSERT INTO jobs (name, kind, argv, cwd, env, cores, gpus, model, submit_t, "
            "uid, gid, groups, time_limit_s, spec_bytes, checkpoints) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                spec.name,
                spec.kind,
                argv,
                spec.cwd,
                env,
                spec.cores,
                spec.gpus,
                spec.model,
                time.time() if now is None else now,
                owner.uid,
                owner.gid,
                json.dumps(list(owner.groups)),
                spec.time_limit_s,
                sum(spec.stored_sizes().values()),
                int(spec.checkpoints),
            ),
        )
        assert cur.lastrowid is not None  # set by every successful INSERT
        return cur.lastrowid

    def _row(self, r: sqlite3.Row) -> JobRow:
        try:
            return JobRow.from_sql(r)
        except ValueError as e:
            raise StoreError(f"{self.path}: {e}") from None

    def job(self, job_id: int) -> JobRow | None:
        if not 0 <= job_id <= MAX_JOB_ID:  # SQLite cannot even bind it: no such job
            return None
        r = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if r is None else self._row(r)

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
        return [self._row(r) for r in self._db.execute(q, args)]

    def job_list(
        self, states: Sequence[str] | None, limit: int, newest: bool = False
    ) -> tuple[list[JobRow], int]:
        """At most ``limit`` rows in ``states`` (None: any), oldest first (``newest``:
        the newest ``limit`` of them), without their specs (argv, env and cwd empty), and
        how many more there are: one status answer costs the same however big the specs
        or the queue."""
        where, args = "", list(states or ())
        if states:
            where = f" WHERE state IN ({','.join('?' * len(states))})"
        total = int(self._db.execute(f"SELECT COUNT(*) FROM jobs{where}", args).fetchone()[0])
        order = "DESC" if newest else "ASC"
        q = f"SELECT {_LIST_COLS} FROM jobs{where} ORDER BY id {order} LIMIT ?"
        rows = [self._row(r) for r in self._db.execute(q, [*args, limit])]
        rows.sort(key=lambda r: r.id)
        return rows, max(0, total - len(rows))

    def queue_index(self) -> list[tuple[int, int]]:
        """(id, cancel) of every job waiting to start (queued, or suspended to be
        resumed), from an index alone (no row is read)."""
        q = "SELECT id, cancel FROM jobs WHERE state IN ('queued', 'suspended') ORDER BY id"
        return [(int(r[0]), int(r[1])) for r in self._db.execute(q)]

    def queue_entry(self, job_id: int) -> JobRow | None:
        """A queued job's row without its spec (argv, env and cwd empty): what the
        scheduler needs to queue it; the spec is read when it starts."""
        r = self._db.execute(f"SELECT {_LIST_COLS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if r is None else self._row(r)

    def cancelled_ids(self, states: Sequence[str]) -> list[int]:
        """Ids of jobs in ``states`` marked for cancelling (from an index alone)."""
        q = f"SELECT id FROM jobs WHERE state IN ({','.join('?' * len(states))}) AND cancel != 0"
        return [int(r[0]) for r in self._db.execute(q, list(states))]

    def usage(self, uid: int) -> tuple[int, int]:
        """(jobs queued, bytes of specs queued or running) of ``uid`` (from an index)."""
        r = self._db.execute(
            "SELECT COALESCE(SUM(state = 'queued'), 0), COALESCE(SUM(spec_bytes), 0) FROM jobs "
            "WHERE uid IS ? AND state IN ('queued', 'starting', 'running', 'suspended')",
            (uid,),
        ).fetchone()
        return int(r[0]), int(r[1])

    def purge(self, before: float, per_user: int, batch: int) -> list[int]:
        """Delete at most ``batch`` finished jobs: those that ended before ``before``
        (wall time), then each user's oldest beyond their newest ``per_user``; and their
        decisions. Returns the ids deleted (their job directories are the caller's)."""
        final = f"state IN ({','.join('?' * len(FINAL))})"
        ids = [
            int(r[0])
            for r in self._db.execute(
                f"SELECT id FROM jobs WHERE {final} AND end_t < ? ORDER BY id LIMIT ?",
                (*FINAL, before, batch),
            )
        ]
        if len(ids) < batch:
            over = self._db.execute(
                f"SELECT uid, COUNT(*) FROM jobs INDEXED BY jobs_user WHERE {final} "
                "GROUP BY uid HAVING COUNT(*) > ?",
                (*FINAL, per_user),
            ).fetchall()
            taken = set(ids)
            for uid, n in over:
                room = batch - len(ids)
                if room <= 0:
                    break
                for r in self._db.execute(
                    f"SELECT id FROM jobs INDEXED BY jobs_user WHERE uid IS ? AND {final} "
                    "ORDER BY id LIMIT ?",
                    (uid, *FINAL, min(room, int(n) - per_user)),
                ):
                    if int(r[0]) not in taken:
                        ids.append(int(r[0]))
        self.delete_finished(ids)
        return ids

    def delete_finished(self, ids: Sequence[int]) -> None:
        """Delete these jobs' rows and decisions: only rows still finished, never one a
        concurrent change made active."""
        if not ids:
            return
        final = f"state IN ({','.join('?' * len(FINAL))})"
        with self.tx():
            for i in range(0, len(ids), 500):
                part = list(ids[i : i + 500])
                marks = ",".join("?" * len(part))
                self._db.execute(
                    f"DELETE FROM jobs WHERE id IN ({marks}) AND {final}", (*part, *FINAL)
                )
                self._db.execute(f"DELETE FROM decisions WHERE job_id IN ({marks})", part)

    def log_owners(self, limit: int) -> list[tuple[int, int | None, bool]]:
        """(id, uid, finished) of the jobs whose logs the agent holds (started ones),
        the running first, then the finished newest first; at most ``limit``."""
        final = f"state IN ({','.join('?' * len(FINAL))})"
        rows = self._db.execute(
            f"SELECT id, uid, {final} AS done FROM jobs WHERE state != 'queued' "
            "ORDER BY done, id DESC LIMIT ?",
            (*FINAL, limit),
        )
        return [(int(r[0]), r[1], bool(r[2])) for r in rows]

    def purge_decisions(self, before: float, batch: int) -> int:
        """Delete at most ``batch`` of the oldest decisions made before ``before``."""
        rows = self._db.execute(
            "SELECT id, t FROM decisions ORDER BY id LIMIT ?", (batch,)
        ).fetchall()
        old = [int(r[0]) for r in rows if isinstance(r[1], int | float) and r[1] < before]
        if old:
            self._db.execute(f"DELETE FROM decisions WHERE id IN ({','.join('?' * len(old))})", old)
        return len(old)

    def job_ids(self, states: Sequence[str]) -> list[int]:
        """Ids of the jobs in ``states`` (no rows parsed)."""
        q = f"SELECT id FROM jobs WHERE state IN ({','.join('?' * len(states))}) ORDER BY id"
        return [int(r[0]) for r in self._db.execute(q, list(states))]

    @staticmethod
    def _with_reason(fields: dict[str, Any]) -> dict[str, Any]:
        """A job that leaves the queue waits for nothing: the update that changes its
        state clears its wait reason; a reason given is cleaned."""
        if "state" in fields and fields["state"] != "queued":
            return {**fields, "wait_reason": ""}
        if "wait_reason" in fields:
            return {**fields, "wait_reason": clean_reason(fields["wait_reason"])}
        return fields

    def update(self, job_id: int, **fields: Any) -> None:
        if not fields:
            return
        fields = self._with_reason(fields)
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._db.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*fields.values(), job_id))

    def claim(self, job_id: int, **fields: Any) -> bool:
        """Update a job that is still queued and not cancelled; False if it is not
        (a cancel may land between the agent's read and its launch)."""
        fields = self._with_reason(fields)
        cols = ", ".join(f"{k} = ?" for k in fields)
        cur = self._db.execute(
            f"UPDATE jobs SET {cols} WHERE id = ? AND state = 'queued' AND cancel = 0",
            (*fields.values(), job_id),
        )
        return cur.rowcount == 1

    def set_wait_reasons(self, reasons: Mapping[int, str]) -> None:
        """Record why each job waits (job id -> reason, as the last cycle said), in one
        transaction. Only rows still queued are touched, and only where the reason
        changed (an unchanged queue writes nothing); a reason is kept as one line of
        printable text of at most MAX_WAIT_REASON characters."""
        rows = []
        for job_id, reason in reasons.items():
            if type(job_id) is not int or not 0 <= job_id <= MAX_JOB_ID:
                raise ValueError(f"not a job id: {job_id!r}")
            text = clean_reason(reason)
            rows.append((text, job_id, text))
        if not rows:
            return
        q = (
            "UPDATE jobs SET wait_reason = ? "
            "WHERE id = ? AND state IN ('queued', 'suspended') AND wait_reason IS NOT ?"
        )
        if self._db.in_transaction:  # the caller's transaction: one with the rest of it
            self._db.executemany(q, rows)
            return
        with self.tx():
            self._db.executemany(q, rows)

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
            elif row.state in ACTIVE or row.state == "suspended":
                self.update(job_id, cancel=1)
            row = self.job(job_id)  # in the transaction: a purge cannot take it between
        assert row is not None
        return row

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
            try:
                r["detail"] = json.loads(r["detail"])
            except (ValueError, TypeError, RecursionError):
                r["detail"] = None
            ok = (
                isinstance(r["detail"], dict)
                and isinstance(r["t"], int | float)
                and isinstance(r["component"], str)
                and isinstance(r["action"], str)
                and (r["job_id"] is None or type(r["job_id"]) is int)
            )
            if not ok:
                raise StoreError(f"{self.path}: decision {r['id']} is not what the agent writes")
        return rows[::-1]

    def agent_info(self) -> dict[str, Any]:
        """What the running (or last) agent said about itself; {} if nothing."""
        raw = self.meta("agent")
        try:
            info = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):
            info = None
        if not isinstance(info, dict):
            raise StoreError(f"{self.path}: the agent's record (meta 'agent') is damaged")
        return info

    def queued_by(self, uid: int) -> int:
        """Jobs of ``uid`` waiting."""
        r = self._db.execute(
            "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND uid IS ?", (uid,)
        ).fetchone()
        return int(r[0])
