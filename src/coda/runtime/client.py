"""How `coda submit/run/status/cancel/logs` reach a node's jobs: the agent's socket, or
the database itself for its owner when no agent runs.

While an agent runs, every command goes through its control socket, so the agent
learns who is asking from the kernel (see control.py). With no agent, the owner of
a state directory may still queue, list and cancel jobs in its database directly;
anyone else gets one line saying no agent answers. An answer from the socket is
checked for shape before anything is shown: a malformed one is an error, not a crash.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, Protocol, TypeVar

from coda.runtime.control import (
    SOCKET_NAME,
    ControlError,
    Unreachable,
    answers,
    check_socket,
    request,
)
from coda.runtime.jobrow import LIVE
from coda.runtime.limits import Limits
from coda.runtime.statedir import owned_by_me, run_dir_of, secure_dir
from coda.runtime.store import JobRow, JobSpec, Store, StoreError, read_log

T = TypeVar("T")


class ClientError(RuntimeError):
    """The node's jobs cannot be reached or the request was refused; one line."""


class AgentClient(Protocol):
    where: str  # what is being talked to, for messages
    via_agent: bool  # True: through a running agent's socket

    def submit(self, spec: JobSpec) -> int: ...
    def status(self, job_id: int | None, show_all: bool, decisions: int) -> dict[str, Any]: ...
    def cancel(self, ids: list[int]) -> list[dict[str, Any]]: ...
    def logs(self, job_id: int, stream: str, tail: int) -> str: ...
    def close(self) -> None: ...


def socket_path(state_dir: str | os.PathLike[str]) -> Path:
    return run_dir_of(state_dir) / SOCKET_NAME


_ROW_FIELDS = {f.name for f in fields(JobRow)}
# Fields an agent from before schema version 3 (5: checkpoints) does not send (it still
# runs after an upgrade until restarted): their defaults, not a malformed answer.
_LATER_FIELDS = {"time_limit_s": None, "wait_reason": "", "checkpoints": 0}
_DECISION_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": int,
    "t": (int, float),
    "component": str,
    "action": str,
    "detail": dict,
}


def _row(d: Any) -> JobRow:
    if not isinstance(d, dict) or not _ROW_FIELDS - set(_LATER_FIELDS) <= set(d):
        raise ClientError("the agent's answer is malformed (a job without its fields)")
    row = JobRow(**{**_LATER_FIELDS, **{k: d[k] for k in _ROW_FIELDS if k in d}})
    try:
        row.check()
    except ValueError as e:
        raise ClientError(f"the agent's answer is malformed ({e})") from None
    return row


def _decision(d: Any) -> dict[str, Any]:
    if (
        not isinstance(d, dict)
        or not all(isinstance(d.get(k), t) for k, t in _DECISION_TYPES.items())
        or (d.get("job_id") is not None and not isinstance(d["job_id"], int))
    ):
        raise ClientError("the agent's answer is malformed (a decision without its fields)")
    return d


class SocketClient:
    via_agent = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def _ask(self, req: dict[str, Any]) -> dict[str, Any]:
        try:
            return request(self.path, req)
        except ControlError as e:
            raise ClientError(str(e)) from None

    def _field(self, answer: dict[str, Any], key: str, kind: type[T]) -> T:
        got = answer.get(key)
        if not isinstance(got, kind) or isinstance(got, bool):
            raise ClientError(f"the agent's answer is malformed (no {key})")
        return got

    def submit(self, spec: JobSpec) -> int:
        return int(self._field(self._ask({"op": "submit", "spec": spec.as_dict()}), "id", int))

    def status(self, job_id: int | None, show_all: bool, decisions: int) -> dict[str, Any]:
        a = self._ask({"op": "status", "job_id": job_id, "all": show_all, "decisions": decisions})
        jobs = self._field(a, "jobs", list)
        decs = self._field(a, "decisions", list)
        more = a.get("more", 0)  # agents before the status cap do not say
        return {
            "more": more if type(more) is int and more >= 0 else 0,
            "jobs": [_row(d) for d in jobs],
            "decisions": [_decision(d) for d in decs],
            "agent": self._field(a, "agent", dict),
        }

    def cancel(self, ids: list[int]) -> list[dict[str, Any]]:
        got = self._field(self._ask({"op": "cancel", "ids": ids}), "jobs", list)
        if not all(isinstance(r, dict) and ("state" in r or "error" in r) for r in got):
            raise ClientError("the agent's answer is malformed (cancel)")
        return got

    def logs(self, job_id: int, stream: str, tail: int) -> str:
        req = {"op": "logs", "job_id": job_id, "stream": stream, "tail": tail}
        return str(self._field(self._ask(req), "text", str))

    def close(self) -> None:
        pass


def _store_errors(method: Callable[..., T]) -> Callable[..., T]:
    """A damaged database found half-way through a command: one line, like at open."""

    @functools.wraps(method)
    def wrapped(*args: Any, **kw: Any) -> T:
        try:
            return method(*args, **kw)
        except (StoreError, sqlite3.Error) as e:
            raise ClientError(str(e)) from None

    return wrapped


class LocalClient:
    """The owner's direct access to the database (no agent running)."""

    via_agent = False

    def __init__(self, store: Store) -> None:
        self.store = store
        self.where = str(store.path)

    @_store_errors
    def submit(self, spec: JobSpec) -> int:
        return self.store.submit(spec)

    @_store_errors
    def status(self, job_id: int | None, show_all: bool, decisions: int) -> dict[str, Any]:
        if job_id is not None:
            row = self.store.job(job_id)
            if row is None:
                raise ClientError(f"no job {job_id}")
            rows, more = [row], 0
        elif show_all:
            rows, more = self.store.job_list(None, 50, newest=True)
        else:
            rows, more = self.store.job_list(LIVE, Limits().status_rows)
        return {
            "more": more,
            "jobs": rows,
            "decisions": self.store.decisions(limit=decisions, job_id=job_id),
            "agent": self.store.agent_info(),
        }

    @_store_errors
    def cancel(self, ids: list[int]) -> list[dict[str, Any]]:
        out = []
        for j in ids:
            try:
                out.append({"id": j, "state": self.store.request_cancel(j).state})
            except KeyError:
                out.append({"id": j, "error": f"no job {j}"})
        return out

    @_store_errors
    def logs(self, job_id: int, stream: str, tail: int) -> str:
        if self.store.job(job_id) is None:
            raise ClientError(f"no job {job_id}")
        return read_log(self.store.path.parent, job_id, stream, tail)

    def close(self) -> None:
        self.store.close()


def connect(state_dir: str | os.PathLike[str], create: bool = False) -> AgentClient:
    """The running agent's socket if it answers; else the database, for its owner
    (``create``: make an empty state directory and database if there is none)."""
    sock = socket_path(state_dir)
    if os.path.lexists(sock):
        try:
            check_socket(sock)
            if answers(sock):
                return SocketClient(sock)
        except Unreachable:
            pass  # a dead agent's socket: the database, for its owner
        except ControlError as e:
            raise ClientError(str(e)) from None
    sd = Path(state_dir)
    db = sd / "coda.db"
    if sd.exists() and not owned_by_me(sd):
        raise ClientError(
            f"no agent answers at {sock}, and {sd} belongs to another user: "
            "start its agent, or use your own --state-dir"
        )
    if not db.exists() and not create:
        raise ClientError(
            f"no CODA state in {sd} (start an agent there first: coda agent --state-dir {sd})"
        )
    secure_dir(sd)
    return LocalClient(Store(db))
