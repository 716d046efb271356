"""What the agent answers on its control socket: submit, status, cancel, logs, per peer.

The rules, all keyed by the uid the kernel reported for the connecting process:
- a submitted job runs as the submitter (uid, primary gid, the user's groups); an
  agent that is not root can run only its own user's jobs and refuses others; a user
  has at most MAX_QUEUED_PER_USER jobs waiting;
- a user cancels and reads the logs of only their own jobs (root and the agent's own
  user may do so for any);
- status lists every job, without commands and environments; one job's command,
  working directory and environment are shown to its owner only (environments hold
  tokens; commands hold paths).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from coda.runtime.cgroups import parse_cpus
from coda.runtime.control import Peer
from coda.runtime.store import (
    ACTIVE,
    MAX_JOB_ID,
    MAX_LOG_TAIL,
    JobRow,
    JobSpec,
    Owner,
    SpecError,
    Store,
    StoreError,
    read_log,
)

MAX_DECISIONS = 1000
MAX_QUEUED_PER_USER = 1000


def _is_admin(uid: int) -> bool:
    return uid == 0 or uid == os.geteuid()


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SpecError(f"{what} must be a whole number in [{lo}, {hi}]")
    return value


def visible(row: JobRow, uid: int, detail: bool = True) -> dict[str, Any]:
    """A job as ``uid`` may see it: command, working directory and environment only
    for its owner (or an admin), and only with ``detail`` (one job, not a list)."""
    d = row.as_dict()
    if not detail or not (_is_admin(uid) or row.uid == uid):
        d.update(argv=[], env={}, cwd="")
    return d


class AgentService:
    """Answers requests against the state database at ``db``. One connection, opened
    on the first request: they all come from the control socket's one thread (not the
    control loop's), and SQLite ties a connection to the thread that made it."""

    def __init__(self, db: str | os.PathLike[str]) -> None:
        self.db = Path(db)
        self._store: Store | None = None

    def __call__(self, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        op = req.get("op")
        handlers = {
            "submit": self.submit,
            "status": self.status,
            "cancel": self.cancel,
            "logs": self.logs,
        }
        if not isinstance(op, str) or op not in handlers:
            return {"ok": False, "error": f"unknown request {str(op)[:40]!r}"}
        try:
            if self._store is None:
                self._store = Store(self.db)
            return handlers[op](self._store, req, peer)
        except SpecError as e:
            return {"ok": False, "error": str(e)}
        except (StoreError, sqlite3.Error) as e:
            self.close()  # opened afresh next time (a damaged database may be mended)
            return {
                "ok": False,
                "error": str(e) if isinstance(e, StoreError) else f"{self.db}: {e}",
            }

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def submit(self, store: Store, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        if os.geteuid() != 0 and peer.uid != os.geteuid():
            raise SpecError(
                f"this agent runs as uid {os.geteuid()}, not root: it runs only its own "
                f"user's jobs, not uid {peer.uid}'s"
            )
        spec = JobSpec.from_dict(req.get("spec"))
        if not spec.cwd:
            raise SpecError("the spec needs an absolute working directory ('cwd')")
        a = store.agent_info()
        cpus = a.get("cpus")
        node_cores = len(parse_cpus(cpus)) if isinstance(cpus, str) and cpus else None
        gpus = a.get("gpus")
        # Never probe the user's working directory as root (it would be an oracle for
        # any path): the job enters it as its user when it starts.
        spec.validate(node_cores, gpus if type(gpus) is int else None, probe_cwd=False)
        if store.queued_by(peer.uid) >= MAX_QUEUED_PER_USER:
            raise SpecError(
                f"uid {peer.uid} has {MAX_QUEUED_PER_USER} jobs waiting already: "
                "wait for some to start, or cancel some"
            )
        job_id = store.submit(spec, Owner.of_user(peer.uid, peer.gid))
        return {"ok": True, "id": job_id}

    def status(self, store: Store, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        job_id = req.get("job_id")
        n = _int(req.get("decisions", 10), "decisions", 0, MAX_DECISIONS)
        if job_id is not None:
            row = store.job(_int(job_id, "job id", 0, MAX_JOB_ID))
            if row is None:
                return {"ok": False, "error": f"no job {job_id}"}
            jobs = [visible(row, peer.uid)]
        else:
            rows = store.jobs(limit=50) if req.get("all") else store.jobs(("queued", *ACTIVE))
            jobs = [visible(r, peer.uid, detail=False) for r in rows]
        return {
            "ok": True,
            "jobs": jobs,
            "decisions": store.decisions(limit=n, job_id=job_id),
            "agent": store.agent_info(),
        }

    def cancel(self, store: Store, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        ids = req.get("ids")
        if not isinstance(ids, list) or not ids or len(ids) > 10000:
            raise SpecError("cancel needs a list of job ids")
        out = []
        for raw in ids:
            j = _int(raw, "job id", 0, MAX_JOB_ID)
            row = store.job(j)
            if row is None:
                out.append({"id": j, "error": f"no job {j}"})
                continue
            if not (_is_admin(peer.uid) or row.uid == peer.uid):
                out.append({"id": j, "error": f"job {j} is not yours (uid {row.uid})"})
                continue
            row = store.request_cancel(j)
            out.append({"id": j, "state": row.state})
        return {"ok": True, "jobs": out}

    def logs(self, store: Store, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        j = _int(req.get("job_id"), "job id", 0, MAX_JOB_ID)
        stream = req.get("stream", "stdout")
        if stream not in ("stdout", "stderr"):
            raise SpecError("stream must be stdout or stderr")
        tail = _int(req.get("tail", 65536), "tail", 0, MAX_LOG_TAIL)
        row = store.job(j)
        if row is None:
            return {"ok": False, "error": f"no job {j}"}
        if not (_is_admin(peer.uid) or row.uid == peer.uid):
            return {"ok": False, "error": f"job {j} is not yours (uid {row.uid})"}
        return {"ok": True, "text": read_log(self.db.parent, j, str(stream), tail)}
