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
import pwd
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda.runtime.statedir import StateDirError, secure_file
from coda.workload.limits import MAX_NODE_CORES, MAX_NODE_GPUS, MAX_TIME_LIMIT_S

# 2: jobs.uid/gid/groups (who submitted, as the kernel said);
# 3: jobs.time_limit_s (the user's limit) and jobs.wait_reason (why a queued job waits)
SCHEMA_VERSION = 3
# Used with fullmatch: `$` alone would let a trailing newline through.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_LOG_TAIL = 1 << 20  # bytes of a job's log one request may read
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
    message TEXT NOT NULL DEFAULT '',
    uid INTEGER,
    gid INTEGER,
    groups TEXT NOT NULL DEFAULT '[]',
    time_limit_s REAL,
    wait_reason TEXT NOT NULL DEFAULT ''
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


# What one job spec may hold: enough for any real job, small enough that a hostile spec
# cannot make the agent or the database carry megabytes per job.
MAX_ARGS = 4096
MAX_ENV = 1024
MAX_SPEC_BYTES = 1 << 20  # argv, env and cwd together, UTF-8
MAX_CORES = MAX_NODE_CORES  # a job runs on this one node: the simulator's node caps
MAX_GPUS = MAX_NODE_GPUS
MAX_JOB_ID = 2**63 - 1  # SQLite's INTEGER
MAX_TIME_LIMIT = MAX_TIME_LIMIT_S
MAX_WAIT_REASON = 200  # characters of one wait reason (longer ones are cut)

# Columns added after version 1, with their definitions (ALTER TABLE on upgrade; an old
# database goes through every later version's columns).
_ADDED = {
    2: ("uid INTEGER", "gid INTEGER", "groups TEXT NOT NULL DEFAULT '[]'"),
    3: ("time_limit_s REAL", "wait_reason TEXT NOT NULL DEFAULT ''"),
}


class SpecError(ValueError):
    """A job spec that cannot run; the message says what to change."""


class StoreError(RuntimeError):
    """A state database that cannot be used (corrupt, newer, not ours); names the file."""


@dataclass(frozen=True)
class Owner:
    """Who a job runs as: the submitter as the kernel vouched for it (peer credentials,
    or the user of the process that opened the database), never what a spec says."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    @classmethod
    def me(cls) -> Owner:
        return cls(os.geteuid(), os.getegid(), tuple(os.getgroups()))

    @classmethod
    def of_user(cls, uid: int, gid: int) -> Owner:
        """``uid``/``gid`` with the supplementary groups the user database gives uid
        (only the primary group if uid has no entry)."""
        try:
            name = pwd.getpwuid(uid).pw_name
            groups = tuple(sorted(set(os.getgrouplist(name, gid))))
        except (KeyError, OSError):
            groups = (gid,)
        return cls(uid, gid, groups)


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates: the database, the shim's
    exec and every terminal need real text)."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _whole(value: Any, what: str, lo: int, hi: int) -> int:
    # bool is an int to Python but never a core count to a user.
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SpecError(f"{what} must be a whole number in [{lo}, {hi}], got {value!r}")
    return value


def _time_limit(value: Any, what: str) -> float | None:
    """A time limit in seconds, or None for none."""
    if value is None:
        return None
    # Range first: it is False for nan and needs no float() of a huge int.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 < value <= MAX_TIME_LIMIT)
    ):
        raise SpecError(
            f"{what} must be seconds in (0, {MAX_TIME_LIMIT}] (366 days), or null for no "
            f"limit, got {value!r}"
        )
    return float(value)


def clean_reason(text: str) -> str:
    """A wait reason as the database keeps it: one line of printable text (anything else
    becomes '?'), at most MAX_WAIT_REASON characters."""
    if not isinstance(text, str):
        raise TypeError(f"a wait reason is text, not {type(text).__name__}")
    return "".join(c if c.isprintable() else "?" for c in text[:MAX_WAIT_REASON])


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
    time_limit_s: float | None = None  # None: no limit

    @property
    def kind(self) -> str:
        return "dnn" if self.gpus > 0 else "cpu"

    def validate(self, node_cores: int | None = None, node_gpus: int | None = None) -> None:
        """Raise SpecError for anything that could not run or could escape its sandbox."""
        if not isinstance(self.argv, list) or not self.argv:
            raise SpecError("the command is empty: give the program and its arguments")
        if not all(isinstance(a, str) for a in self.argv):
            raise SpecError("every command argument must be a string")
        if len(self.argv) > MAX_ARGS:
            raise SpecError(f"the command has {len(self.argv)} arguments; at most {MAX_ARGS}")
        if any("\0" in a for a in self.argv):
            raise SpecError("command arguments must not contain NUL bytes")
        if not self.argv[0]:
            raise SpecError("the program name is empty")
        for what, v in (("name", self.name), ("model", self.model), ("cwd", self.cwd)):
            if not isinstance(v, str):
                raise SpecError(f"{what} must be a string, got {type(v).__name__}")
        if not isinstance(self.env, dict):
            raise SpecError("env must be an object of strings")
        if len(self.env) > MAX_ENV:
            raise SpecError(f"env has {len(self.env)} variables; at most {MAX_ENV}")
        if not self.name:
            self.name = Path(self.argv[0]).name or "job"
        if not NAME_RE.fullmatch(self.name):
            raise SpecError(
                f"job name {self.name!r} is not allowed: use 1-64 letters, digits, '_', '.' "
                "or '-', starting with a letter or digit"
            )
        _whole(self.cores, "cores", 1, MAX_CORES)
        _whole(self.gpus, "gpus", 0, MAX_GPUS)
        self.time_limit_s = _time_limit(self.time_limit_s, "the time limit")
        if node_cores is not None and self.cores > node_cores:
            raise SpecError(f"asks for {self.cores} cores but this node has {node_cores}")
        if node_gpus is not None and self.gpus > node_gpus:
            raise SpecError(f"asks for {self.gpus} GPUs but this node has {node_gpus}")
        if self.model and not NAME_RE.fullmatch(self.model):
            raise SpecError(f"model name {self.model!r} is not allowed (same rule as job names)")
        if not self.cwd:
            self.cwd = os.getcwd()
        if "\0" in self.cwd or not os.path.isabs(self.cwd) or not os.path.isdir(self.cwd):
            raise SpecError(f"working directory {self.cwd!r} is not an existing absolute path")
        for k, v in self.env.items():
            if not isinstance(k, str) or not ENV_KEY_RE.fullmatch(k):
                raise SpecError(f"environment variable name {k!r} is not allowed")
            if not isinstance(v, str) or "\0" in v:
                raise SpecError(f"environment variable {k} must be a string without NUL bytes")
            if k.startswith("CODA_"):
                raise SpecError(f"environment variable {k}: CODA_* variables are set by the agent")
        for what, texts in (
            ("command", self.argv),
            ("working directory", [self.cwd]),
            ("environment", [*self.env, *self.env.values()]),
        ):
            if not all(_utf8(t) for t in texts):
                raise SpecError(f"the {what} is not valid UTF-8 text")
        size = sum(len(a.encode("utf-8", "surrogatepass")) for a in self.argv) + len(
            self.cwd.encode("utf-8", "surrogatepass")
        )
        size += sum(len(k) + len(v.encode("utf-8", "surrogatepass")) for k, v in self.env.items())
        if size > MAX_SPEC_BYTES:
            raise SpecError(
                f"the spec holds {size} bytes of command and environment; at most {MAX_SPEC_BYTES}"
            )

    @classmethod
    def from_dict(cls, d: Any) -> JobSpec:
        """A spec from a JSON object, with clear errors for unknown or mistyped keys."""
        if not isinstance(d, dict):
            raise SpecError("a job spec must be a JSON object")
        known = {"argv", "name", "cores", "gpus", "model", "cwd", "env", "time_limit_s"}
        extra = sorted(repr(k) for k in set(d) - known)
        if extra:
            raise SpecError(f"unknown key(s) in job spec: {', '.join(extra)}")
        if "argv" not in d:
            raise SpecError("job spec needs 'argv': the program and its arguments, as a list")
        env = d.get("env", {})
        if not isinstance(env, dict):
            raise SpecError("'env' must be an object of strings")
        argv = d["argv"]
        if not isinstance(argv, list):
            raise SpecError("'argv' must be a list of strings")
        spec = cls(
            argv=list(argv),
            name=d.get("name", ""),
            cores=d.get("cores", 1),
            gpus=d.get("gpus", 0),
            model=d.get("model", ""),
            cwd=d.get("cwd", ""),
            env=dict(env),
            time_limit_s=_time_limit(d.get("time_limit_s"), "'time_limit_s'"),
        )
        # Types now, so that a wrong one is this error and never a crash further on.
        for what in ("name", "model", "cwd"):
            if not isinstance(getattr(spec, what), str):
                raise SpecError(
                    f"'{what}' must be a string, got {type(getattr(spec, what)).__name__}"
                )
        _whole(spec.cores, "'cores'", 1, MAX_CORES)
        _whole(spec.gpus, "'gpus'", 0, MAX_GPUS)
        if not all(isinstance(a, str) for a in spec.argv):
            raise SpecError("'argv' must be a list of strings")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in spec.env.items()):
            raise SpecError("'env' must be an object of strings")
        return spec

    def as_dict(self) -> dict[str, Any]:
        return {
            "argv": list(self.argv),
            "name": self.name,
            "cores": self.cores,
            "gpus": self.gpus,
            "model": self.model,
            "cwd": self.cwd,
            "env": dict(self.env),
            "time_limit_s": self.time_limit_s,
        }


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
    uid: int | None = None  # None: the agent's own user (databases from before version 2)
    gid: int | None = None
    groups: list[int] = field(default_factory=list)
    time_limit_s: float | None = None  # None: no limit (and databases before version 3)
    wait_reason: str = ""  # why a queued job waits, as the last cycle said; '' otherwise

    @classmethod
    def from_sql(cls, r: sqlite3.Row) -> JobRow:
        """A row as the agent wrote it; ValueError naming the field if it is not (a
        damaged or hand-edited database must not crash the agent or the CLI)."""
        d = dict(r)
        try:
            d["argv"] = json.loads(d["argv"])
            d["env"] = json.loads(d["env"])
            d["groups"] = json.loads(d.get("groups") or "[]")
            row = cls(**d)
        except (ValueError, TypeError, RecursionError) as e:
            raise ValueError(
                f"job {d.get('id')}: unreadable command or environment ({e})"
            ) from None
        row.check()
        return row

    def check(self) -> None:
        def bad(what: str) -> ValueError:
            return ValueError(f"job {self.id}: {what} is not what the agent writes")

        for name, kind in (("id", int), ("cores", int), ("gpus", int), ("launches", int),
                           ("preemptions", int), ("cancel", int)):  # fmt: skip
            v = getattr(self, name)
            if not isinstance(v, kind) or isinstance(v, bool):
                raise bad(name)
        for name in ("name", "kind", "cwd", "model", "state", "cpus", "gpu_ids", "phase",
                     "message", "wait_reason"):  # fmt: skip
            if not isinstance(getattr(self, name), str):
                raise bad(name)
        if not (isinstance(self.argv, list) and all(isinstance(a, str) for a in self.argv)):
            raise bad("argv")
        if not (
            isinstance(self.env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items())
        ):
            raise bad("env")
        if not (isinstance(self.groups, list) and all(type(g) is int for g in self.groups)):
            raise bad("groups")
        for name in ("uid", "gid", "shim_pid", "shim_start", "exit_code"):
            v = getattr(self, name)
            if v is not None and type(v) is not int:
                raise bad(name)
        for name in ("submit_t", "start_t", "end_t", "throughput", "reference", "quota"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise bad(name)
        if self.uid is not None and not 0 <= self.uid < 2**32:
            raise bad("uid")
        try:
            _time_limit(self.time_limit_s, "time_limit_s")
        except SpecError:
            raise bad("time_limit_s") from None
        if clean_reason(self.wait_reason) != self.wait_reason:  # too long, or not one line
            raise bad("wait_reason")

    @property
    def owner(self) -> Owner | None:
        if self.uid is None or self.gid is None:
            return None
        return Owner(self.uid, self.gid, tuple(self.groups))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


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
        self._db.executescript(_SCHEMA)
        got = self.meta("schema")
        if got is None:
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
            self.set_meta("schema", str(SCHEMA_VERSION))

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
    def submit(self, spec: JobSpec, owner: Owner | None = None, now: float | None = None) -> int:
        """Queue ``spec`` to run as ``owner`` (default: this process's user)."""
        spec.validate()
        owner = owner or Owner.me()
        cur = self._db.execute(
            "INSERT INTO jobs (name, kind, argv, cwd, env, cores, gpus, model, submit_t, "
            "uid, gid, groups, time_limit_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                owner.uid,
                owner.gid,
                json.dumps(list(owner.groups)),
                spec.time_limit_s,
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
            "WHERE id = ? AND state = 'queued' AND wait_reason IS NOT ?"
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
            elif row.state in ACTIVE:
                self.update(job_id, cancel=1)
        row = self.job(job_id)
        assert row is not None  # it was there in the transaction above; rows are never deleted
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
        r = self._db.execute(
            "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND uid IS ?", (uid,)
        ).fetchone()
        return int(r[0])


def read_log(state_dir: str | os.PathLike[str], job_id: int, stream: str, tail: int) -> str:
    """The last ``tail`` bytes (at most MAX_LOG_TAIL) of a job's stdout or stderr."""
    if stream not in ("stdout", "stderr"):
        raise ValueError(f"no log {stream!r}: stdout or stderr")
    tail = max(0, min(int(tail), MAX_LOG_TAIL))
    path = Path(state_dir) / "jobs" / str(int(job_id)) / stream
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return ""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - tail), os.SEEK_SET)
        return os.read(fd, tail).decode("utf-8", "replace")
    finally:
        os.close(fd)
