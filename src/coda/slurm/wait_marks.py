"""Why each held job waits, and which of their marks say otherwise: kept from what
changed, so a cycle costs the jobs whose reason or record moved, not the queue.

The queue names the jobs whose reason may have changed and the buckets whose reason
changed (``Scheduler.reason_changes``); the ready set names the jobs whose record
changed (a mark written shows up there). A job that shows its bucket's reason holds
the bucket's ``SharedReason``, one object for all of them: a bucket's new reason moves
its thousands of jobs at once, and only those whose mark names the old or the new
reason are looked at (marks are indexed by the wait they give). The marks to write
are taken in job-id order, a few per cycle (each is a ``scontrol update``), from the
ids whose mark is stale.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping

from coda.cycle import Reason, Scheduler
from coda.cycle.buckets import Bucket
from coda.policy.state import Job
from coda.slurm.client import SlurmJob


class SharedReason:
    """A bucket's reason as the jobs that show it hold it, and how many do."""

    __slots__ = ("bucket", "why", "count")

    def __init__(self, bucket: Bucket, why: Reason) -> None:
        self.bucket = bucket
        self.why = why
        self.count = 0


class WaitMarks:
    def __init__(self) -> None:
        # Each queued job's reason, as last worked out: its own, or its bucket's.
        self._queued: dict[int, Reason | SharedReason] = {}
        self._shared: dict[Bucket, SharedReason] = {}  # those held by some job
        self._counts: Counter[str] = Counter()  # their codes
        self._extra: dict[int, Reason] = {}  # this cycle's others: dependency, never, undone
        self._held: dict[int, str | None] = {}  # held jobs' marks: the wait each gives
        self._holders: dict[str, set[int]] = {}  # the held jobs whose mark gives each wait
        self._stale: set[int] = set()  # ids whose mark's wait is not their reason's token
        self._order: list[int] = []  # those ids (and ids no longer stale), a heap

    def update(
        self,
        sched: Scheduler,
        queued: Mapping[int, Job],
        records: Mapping[int, SlurmJob],
        moved: Iterable[int],
        extra: dict[int, Reason],
        handed: set[int],
    ) -> None:
        """Bring the reasons up to date. ``queued``: the jobs in the scheduler's queue;
        ``records``: every held job's record that may be marked; ``moved``: ids whose
        record or place changed since the last update; ``extra``: reasons of held jobs
        the queue does not hold (they win over a queued one's); ``handed``: ids given
        back to Slurm this cycle (their marks are not CODA's to write)."""
        changes = sched.reason_changes()
        look = set(moved)
        look.update(self._extra, extra, handed)
        entries = self._queued
        if changes is None:  # every queued job's reason may have changed
            entries.clear()
            self._shared.clear()
            self._counts.clear()
            ids: Iterable[int] = list(queued)
            look.update(records)
            self._held.clear()
            self._holders.clear()
            self._stale.clear()
            self._order = []
        else:
            for home, shown in changes.moved:
                shared = self._shared.get(home)
                if shared is not None:
                    self._move(shared, shown)
            ids = [job.idx for job in changes.jobs]
        # Only a job whose reason did change needs its mark compared again (its record's
        # moves are in ``moved``).
        reason_of, shown_by, job_of = sched.reason_of, sched.shown_by, queued.get
        for jid in ids:
            job = job_of(jid)
            why = reason_of(job) if job is not None else None
            entry = entries.get(jid)
            old: Reason | None = entry.why if isinstance(entry, SharedReason) else entry
            bucket = None
            if why is not None and job is not None:
                bucket = shown_by(job)
            now: Reason | SharedReason | None = why
            if bucket is not None and why is not None:
                now = self._shared_of(bucket, why)
            if now is not entry:
                self._take(jid, entry, now)
            if old is not why and old != why:
                look.add(jid)
        self._extra = extra
        held, records_of = self._held, records.get
        for jid in look:  # their records, reasons given to others, or hands, moved
            sj = records_of(jid)
            mark = sj.mark if sj is not None else None
            if mark is not None and mark.get("state") == "held":
                self._hold(jid, mark.get("wait"))
            elif jid in held:
                self._let_go(jid)
            wait = extra.get(jid) or self.reason_of_queued(jid)
            self._mark(jid, wait is not None and jid in held and held[jid] != wait.token)
        for jid in handed:  # their marks are not CODA's to write
            self._mark(jid, False)
        if len(self._order) > 2 * len(self._stale) + 1024:  # mostly ids no longer stale
            self._order = sorted(self._stale)

    def _shared_of(self, bucket: Bucket, why: Reason) -> SharedReason:
        shared = self._shared.get(bucket)
        if shared is None:
            shared = self._shared[bucket] = SharedReason(bucket, why)
        elif shared.why is not why and shared.why != why:
            self._move(shared, why)  # never expected: the queue names every move
        return shared

    def _move(self, shared: SharedReason, why: Reason) -> None:
        """A bucket's reason changed: its jobs' counts move at once, and only those
        whose mark gives the old wait or the new one change staleness."""
        old, shared.why = shared.why, why
        if old is why or old == why:
            return
        self._counts[old.code] -= shared.count
        self._counts[why.code] += shared.count
        if old.token == why.token:
            return
        entries = self._queued
        for jid in self._holders.get(old.token, ()):
            if entries.get(jid) is shared:
                self._mark(jid, True)
        for jid in self._holders.get(why.token, ()):
            if entries.get(jid) is shared:
                self._mark(jid, False)

    def _take(
        self, jid: int, entry: Reason | SharedReason | None, now: Reason | SharedReason | None
    ) -> None:
        counts = self._counts
        if isinstance(entry, SharedReason):
            counts[entry.why.code] -= 1
            entry.count -= 1
            if not entry.count:
                del self._shared[entry.bucket]
        elif entry is not None:
            counts[entry.code] -= 1
        if now is None:
            self._queued.pop(jid, None)
            return
        self._queued[jid] = now
        if isinstance(now, SharedReason):
            now.count += 1
            counts[now.why.code] += 1
        else:
            counts[now.code] += 1

    def _hold(self, jid: int, wait: str | None) -> None:
        held = self._held
        if jid in held:
            if held[jid] == wait:
                return
            self._let_go(jid)
        held[jid] = wait
        if wait is not None:
            self._holders.setdefault(wait, set()).add(jid)

    def _let_go(self, jid: int) -> None:
        wait = self._held.pop(jid)
        if wait is not None:
            holders = self._holders[wait]
            holders.discard(jid)
            if not holders:
                del self._holders[wait]

    def _mark(self, jid: int, stale: bool) -> None:
        if stale:
            if jid not in self._stale:
                self._stale.add(jid)
                heapq.heappush(self._order, jid)
        else:
            self._stale.discard(jid)

    def reason_of_queued(self, jid: int) -> Reason | None:
        """A queued job's reason as last worked out (None: not queued)."""
        entry = self._queued.get(jid)
        return entry.why if isinstance(entry, SharedReason) else entry

    def reason(self, jid: int) -> Reason | None:
        return self._extra.get(jid) or self.reason_of_queued(jid)

    def counts(self) -> Counter[str]:
        """Held jobs by their reason's code."""
        out = +self._counts
        for jid, why in self._extra.items():
            old = self.reason_of_queued(jid)
            if old is not None:
                out[old.code] -= 1
            out[why.code] += 1
        return +out

    def stale(self, n: int) -> list[int]:
        """The ``n`` lowest ids whose mark is stale (they stay stale until their record
        says otherwise: a mark written shows in the next read)."""
        out: list[int] = []
        order = self._order
        while order and len(out) < n:
            jid = heapq.heappop(order)
            if jid in self._stale and (not out or out[-1] != jid):
                out.append(jid)
        for jid in out:
            heapq.heappush(order, jid)
        return out
