"""How `coda submit/run/status/cancel` reach a node's jobs: the agent's socket, or the
database itself for its owner when no agent runs.

While an agent runs, every command goes through its control socket, so the agent
learns who is asking from the kernel (see control.py). With no agent, the owner of
a state directory may still queue, list and cancel jobs in its database directly;
anyone else gets one line saying no agent answers.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Protocol

from coda.runtime.control import SOCKET_NAME, ControlError, answers, request
from coda.runtime.statedir import owned_by_me, secure_dir
from coda.runtime.store import ACTIVE, JobRow, JobSpec, Store


class ClientError(RuntimeError):
    """The node's jobs cannot be reached or the request was refused; one line."""


class AgentClient(Protocol):
    where: str  # what is being talked to, for messages
    via_agent: bool  # True: through a running agent's socket

    def submit(self, spec: JobSpec) -> int: ...
    def status(self, job_id: int | None, show_all: bool, decisions: int) -> dict[str, Any]: ...
    def cancel(self, ids: list[int]) -> list[dict[str, Any]]: ...
    def close(self) -> None: ...


def socket_path(state_dir: str | os.PathLike[str]) -> Path:
    sd = Path(state_dir)
    return sd.with_name(sd.name + ".run") / SOCKET_NAME


def _row(d: dict[str, Any]) -> JobRow:
    names = {f.name for f in fields(JobRow)}
    return JobRow(**{k: v for k, v in d.items() if k in names})


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

    def submit(self, spec: JobSpec) -> int:
        return int(self._ask({"op": "submit", "spec": spec.as_dict()})["id"])

    def status(self, job_id: int | None, show_all: bool, decisions: int) -> dict[str, Any]:
        a = self._ask({"op": "status", "job_id": job_id, "all": show_all, "decisions": decisions})
        return {
            "jobs": [_row(d) for d in a["jobs"]],
            "decisions": a["decisions"],
            "agent": a["agent"],
        }

    def cancel(self, ids: list[int]) -> list[dict[str, Any]]:
        return list(self._ask({"op": "cancel", "ids": ids})["jobs"])

    def close(self) -> None:
        pass


class LocalClient:
    """The owner's direct access to the database (no agent running)."""

    via_agent = False

    def __init__(self, store: Store) -> None:
        self.store = store
        self.where = str(store.path)

    def submit(self, spec: JobSpec) -> int:
        return self.store.submit(spec)

    def status(self, job_id: int | None, show_all: bool, decisions: int) -> dict[str, Any]:
        import json

        if job_id is not None:
            row = self.store.job(job_id)
            if row is None:
                raise ClientError(f"no job {job_id}")
            rows = [row]
        elif show_all:
            rows = self.store.jobs(limit=50)
        else:
            rows = self.store.jobs(("queued", *ACTIVE))
        return {
            "jobs": rows,
            "decisions": self.store.decisions(limit=decisions, job_id=job_id),
            "agent": json.loads(self.store.meta("agent") or "{}"),
        }

    def cancel(self, ids: list[int]) -> list[dict[str, Any]]:
        out = []
        for j in ids:
            try:
                out.append({"id": j, "state": self.store.request_cancel(j).state})
            except KeyError:
                out.append({"id": j, "error": f"no job {j}"})
        return out

    def close(self) -> None:
        self.store.close()


def connect(state_dir: str | os.PathLike[str], create: bool = False) -> AgentClient:
    """The running agent's socket if it answers; else the database, for its owner
    (``create``: make an empty state directory and database if there is none)."""
    sock = socket_path(state_dir)
    if sock.exists() and answers(sock):
        return SocketClient(sock)
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
