"""A job as the state database holds it: its row, its states, its owner, its wait reason.

``JobRow.check`` refuses a row the agent would not have written, so a damaged or
hand-edited database cannot crash the agent or the CLI.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from coda.runtime.jobspec import SpecError, checked_time_limit

KINDS = ("dnn", "cpu")
# queued -> starting -> running -> done | failed | cancelled | lost;
# a preempted job goes back to queued, or (the agent's take_back "suspend") is frozen
# as suspended and goes back to running when the cycle starts it again
ACTIVE = ("starting", "running")
FINAL = ("done", "failed", "cancelled", "lost", "timeout")
LIVE = ("queued", "suspended", *ACTIVE)  # not ended: what `coda status` lists
MAX_WAIT_REASON = 200  # characters of one wait reason (longer ones are cut)


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


def clean_reason(text: str) -> str:
    """A wait reason as the database keeps it: one line of printable text (anything else
    becomes '?'), at most MAX_WAIT_REASON characters."""
    if not isinstance(text, str):
        raise TypeError(f"a wait reason is text, not {type(text).__name__}")
    return "".join(c if c.isprintable() else "?" for c in text[:MAX_WAIT_REASON])


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
    checkpoints: int = 0  # 1: its spec says it checkpoints (databases before version 5: 0)

    @classmethod
    def from_sql(cls, r: sqlite3.Row) -> JobRow:
        """A row as the agent wrote it; ValueError naming the field if it is not (a
        damaged or hand-edited database must not crash the agent or the CLI)."""
        d = dict(r)
        d.pop("spec_bytes", None)  # the database's own bookkeeping (the per-user cap)
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
            if not isinstance(v, kind) or isinstance(v, bool) or v < 0:
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
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < math.inf
            ):  # times, rates and shares the agent writes are finite and never negative
                raise bad(name)
        if self.uid is not None and not 0 <= self.uid < 2**32:
            raise bad("uid")
        try:
            checked_time_limit(self.time_limit_s, "time_limit_s")
        except SpecError:
            raise bad("time_limit_s") from None
        if clean_reason(self.wait_reason) != self.wait_reason:  # too long, or not one line
            raise bad("wait_reason")
        if type(self.checkpoints) is not int or self.checkpoints not in (0, 1):
            raise bad("checkpoints")

    @property
    def owner(self) -> Owner | None:
        if self.uid is None or self.gid is None:
            return None
        return Owner(self.uid, self.gid, tuple(self.groups))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
