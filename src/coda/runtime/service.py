"""What the agent answers on its control socket: submit, status, cancel, logs, per peer.

The rules, all keyed by the uid the kernel reported for the connecting process:
- a submitted job runs as the submitter (uid, primary gid, the user's groups); an
  agent that is not root can run only its own user's jobs and refuses others; a user
  has at most MAX_QUEUED_PER_USER jobs waiting, one spec holds at most
  ``limits.spec_bytes`` and a user's queued and running specs ``limits.user_bytes``;
- one user's requests take at most ``limits.user_share`` of this thread's time (over
  it they are answered "busy" at once), so one user's loop cannot starve another's;
- a user cancels and reads the logs of only their own jobs (root and the agent's own
  user may do so for any);
- status lists jobs (at most ``limits.status_rows``, and how many more), without
  commands and environments; one job's command,
  working directory and environment are shown to its owner only (environments hold
  tokens; commands hold paths).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coda.runtime.cgroups import parse_cpus
from coda.runtime.control import Peer
from coda.runtime.jobrow import LIVE
from coda.runtime.limits import BURST_S, Limits, TimeBudget, check_spec_bytes
from coda.runtime.store import (
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
MAX_CANCEL_IDS = MAX_QUEUED_PER_USER  # ids in one cancel request (a user's whole queue)


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

    def __init__(
        self,
        db: str | os.PathLike[str],
        limits: Limits | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.db = Path(db)
        self.clock = clock  # what requests' time is measured by
        self.limits = limits or Limits()
        self.budget = TimeBudget(self.limits.user_share)
        self._store: Store | None = None
        # The clock's time by which the request being served must stop: its user's
        # budget, charged as it is spent, so that one long request cannot hold the
        # socket from everyone else (infinite for root and the agent's user).
        self._until = float("inf")

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
        metered = not _is_admin(peer.uid)
        wait = self.budget.wait_s(peer.uid) if metered else 0.0
        if wait > 0:
            return {
                "ok": False,
                "busy": True,
                "error": f"busy: uid {peer.uid}'s requests took their share of the agent's "
                f"time; try again in {wait:.1f} s",
            }
        t0 = self.clock()
        self._until = t0 + self.budget.left_s(peer.uid) if metered else float("inf")
        try:
            return self._serve(handlers[op], req, peer)
        finally:
            if metered:
                self.budget.charge(peer.uid, self.clock() - t0)

    def _serve(self, handler: Any, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        try:
            if self._store is None:
                self._store = Store(self.db)
            return handler(self._store, req, peer)  # type: ignore[no-any-return]
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
        size = check_spec_bytes(spec, self.limits.spec_bytes)
        with store.tx():  # the caps and the insert at once
            queued, held = store.usage(peer.uid)
            if queued >= MAX_QUEUED_PER_USER:
                raise SpecError(
                    f"uid {peer.uid} has {MAX_QUEUED_PER_USER} jobs waiting already: "
                    "wait for some to start, or cancel some"
                )
            if held + size > self.limits.user_bytes:
                raise SpecError(
                    f"uid {peer.uid}'s queued and running jobs hold {held} bytes of specs; "
                    f"this one ({size}) would pass the {self.limits.user_bytes} a user may "
                    "hold: wait for some to end, or cancel some"
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
            more = 0
        else:
            cap = _int(
                req.get("limit", self.limits.status_rows), "limit", 1, self.limits.status_rows
            )
            if req.get("all"):
                rows, more = store.job_list(None, min(cap, 50), newest=True)
            else:
                rows, more = store.job_list(LIVE, cap)
            jobs = [visible(r, peer.uid, detail=False) for r in rows]
        return {
            "ok": True,
            "jobs": jobs,
            "more": more,
            "decisions": store.decisions(limit=n, job_id=job_id),
            "agent": store.agent_info(),
        }

    def cancel(self, store: Store, req: dict[str, Any], peer: Peer) -> dict[str, Any]:
        ids = req.get("ids")
        if not isinstance(ids, list) or not ids or len(ids) > MAX_CANCEL_IDS:
            raise SpecError(f"cancel needs a list of 1 to {MAX_CANCEL_IDS} job ids")
        once = list(dict.fromkeys(_int(raw, "job id", 0, MAX_JOB_ID) for raw in ids))
        out: list[dict[str, Any]] = []
        for i, j in enumerate(once):
            if i and self.clock() >= self._until:
                wait = BURST_S / max(self.limits.user_share, 1e-3)  # a full budget again
                out.extend(
                    {"id": k, "error": f"job {k} not cancelled: uid {peer.uid}'s share of "
                     f"the agent's time is spent; ask again in {wait:.0f} s", "busy": True}
                    for k in once[i:]
                )  # fmt: skip
                break
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
