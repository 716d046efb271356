"""What the agent answers on its control socket: submit, status, cancel, per peer.

The rules, all keyed by the uid the kernel reported for the connecting process:
- a submitted job runs as the submitter (uid, primary gid, the user's groups); an
  agent that is not root can run only its own user's jobs and refuses others;
- a user cancels only their own jobs (root and the agent's own user cancel any);
- status lists every job, but the command, working directory and environment only of
  the asker's own jobs (environments hold tokens; commands hold paths).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from coda.runtime.cgroups import parse_cpus
from coda.runtime.control import Peer
from coda.runtime.store import (
    ACTIVE,
    MAX_JOB_ID,
    JobRow,
    JobSpec,
    Owner,
    SpecError,
    Store,
    StoreError,
)

MAX_DECISIONS = 1000


def _is_admin(uid: int) -> bool:
    return uid == 0 or uid == os.geteuid()


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SpecError(f"{what} must be a whole number in [{lo}, {hi}]")
    return value


def visible(row: JobRow, uid: int) -> dict[str, Any]:
    """A job as ``uid`` may see it."""
    d = row.as_dict()
    if not (_is_admin(uid) or row.uid == uid):
        d.update(argv=[], env={}, cwd="")
    return d


class AgentService:
    """Answers requests against the state database at ``db`` (one connection per
    request: they come from the control socket's threads)."""

    def __init__(self, db: str | os.PathLike[str]) -> None:
        self.db = Path(db)

    def __call__(self, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        op = req.get("op")
        try:
            store = Store(self.db)
        except StoreError as e:
            return {"ok": False, "error": str(e)}
        try:
            if op == "submit":
                return self.submit(store, req, peer)
            if op == "status":
                return self.status(store, req, peer)
            if op == "cancel":
                return self.cancel(store, req, peer)
            return {"ok": False, "error": f"unknown request {op!r}"}
        except SpecError as e:
            return {"ok": False, "error": str(e)}
        except sqlite3.Error as e:
            return {"ok": False, "error": f"{self.db}: {e}"}
        finally:
            store.close()

    def submit(self, store: Store, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        if os.geteuid() != 0 and peer.uid != os.geteuid():
            raise SpecError(
                f"this agent runs as uid {os.geteuid()}, not root: it runs only its own "
                f"user's jobs, not uid {peer.uid}'s"
            )
        spec = JobSpec.from_dict(req.get("spec"))
        if not spec.cwd:
            raise SpecError("the spec needs an absolute working directory ('cwd')")
        node_cores = node_gpus = None
        info = store.meta("agent")
        if info:
            a = json.loads(info)
            node_cores, node_gpus = len(parse_cpus(a.get("cpus", ""))) or None, a.get("gpus")
        spec.validate(node_cores, node_gpus)
        job_id = store.submit(spec, Owner.of_user(peer.uid, peer.gid))
        return {"ok": True, "id": job_id}

    def status(self, store: Store, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        job_id = req.get("job_id")
        n = _int(req.get("decisions", 10), "decisions", 0, MAX_DECISIONS)
        if job_id is not None:
            row = store.job(_int(job_id, "job id", 0, MAX_JOB_ID))
            if row is None:
                return {"ok": False, "error": f"no job {job_id}"}
            rows = [row]
        elif req.get("all"):
            rows = store.jobs(limit=50)
        else:
            rows = store.jobs(("queued", *ACTIVE))
        return {
            "ok": True,
            "jobs": [visible(r, peer.uid) for r in rows],
            "decisions": store.decisions(limit=n, job_id=job_id),
            "agent": json.loads(store.meta("agent") or "{}"),
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
