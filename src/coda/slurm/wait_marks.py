"""Why each held job waits, and which of their marks say otherwise: kept from what
changed, so a cycle costs the jobs whose reason or record moved, not the queue.

The queue names the jobs whose reason may have changed (``Scheduler.reason_changes``);
the ready set names the jobs whose record changed (a mark written shows up there).
Only those are looked at again. The marks to write are taken in job-id order, a few
per cycle (each is a ``scontrol update``), from the ids whose mark is stale.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping

from coda.cycle import Reason, Scheduler
from coda.policy.state import Job
from coda.slurm.client import SlurmJob


class WaitMarks:
    def __init__(self) -> None:
        self._queued: dict[int, Reason] = {}  # each queued job's reason, as last worked out
        self._counts: Counter[str] = Counter()  # their codes
        self._extra: dict[int, Reason] = {}  # this cycle's others: dependency, never, undone
        self._held: dict[int, str | None] = {}  # held jobs' marks: the wait each gives
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
        reasons = self._queued
        if changes is None:  # every queued job's reason may have changed
            reasons.clear()
            self._counts.clear()
            ids: Iterable[int] = list(queued)
            look.update(records)
            self._held.clear()
            self._stale.clear()
            self._order = []
        else:
            ids = [job.idx for job in changes.jobs]
            for shown, jobs in changes.groups:
                self._take_group(shown, [job.idx for job in jobs if job.idx in queued])
        # Only a job whose reason did change needs its mark compared again (its record's
        # moves are in ``moved``).
        reason_of, job_of = sched.reason_of, queued.get
        for jid in ids:
            job = job_of(jid)
            why = reason_of(job) if job is not None else None
            old = reasons.get(jid)
            if old is why or old == why:
                continue
            self._take(jid, old, why)
            look.add(jid)
        self._extra = extra
        held, records_of = self._held, records.get
        for jid in look:  # their records, reasons given to others, or hands, moved
            sj = records_of(jid)
            mark = sj.mark if sj is not None else None
            if mark is not None and mark.get("state") == "held":
                held[jid] = mark.get("wait")
            else:
                held.pop(jid, None)
            why = extra.get(jid) or reasons.get(jid)
            self._mark(jid, why is not None and jid in held and held[jid] != why.token)
        for jid in handed:  # their marks are not CODA's to write
            self._mark(jid, False)
        if len(self._order) > 2 * len(self._stale) + 1024:  # mostly ids no longer stale
            self._order = sorted(self._stale)

    def _mark(self, jid: int, stale: bool) -> None:
        if stale:
            if jid not in self._stale:
                self._stale.add(jid)
                heapq.heappush(self._order, jid)
        else:
            self._stale.discard(jid)

    def _take_group(self, why: Reason, ids: list[int]) -> None:
        """Jobs that all show ``why`` now (a bucket's reason that changed): their
        reasons, counts and stale marks moved in one pass, without a look at each that
        its record would take (the marks they hold are kept in ``_held``). A group is
        thousands of jobs in tables of a hundred thousand: each job's entries are
        touched as few times as can be (a touch there costs a cache miss)."""
        reasons, counts, held, stale_ids = self._queued, self._counts, self._held, self._stale
        token = why.token
        new: list[int] = []
        moved = 0
        lost: dict[str, int] = {}  # the group's old reasons' codes: how many left each
        # The group's jobs mostly come from one old reason: compared with why once a run.
        last: Reason | None = why
        last_same = True
        for jid in ids:
            old = reasons.get(jid)
            if old is not last:
                last, last_same = old, old is not None and old == why
            if last_same:
                continue  # the same reason, or an equal one: nothing of it moves
            if old is not None:
                lost[old.code] = lost.get(old.code, 0) + 1
            reasons[jid] = why
            moved += 1
            # A job handed back or given another reason this cycle is looked at after.
            if held.get(jid, token) != token:
                if jid not in stale_ids:
                    stale_ids.add(jid)
                    new.append(jid)
            else:
                stale_ids.discard(jid)
        for code, n in lost.items():
            counts[code] -= n
        if moved:
            counts[why.code] += moved
        if len(new) > 64:
            self._order.extend(new)
            heapq.heapify(self._order)
        else:
            for jid in new:
                heapq.heappush(self._order, jid)

    def _take(self, jid: int, old: Reason | None, why: Reason | None) -> None:
        if old is not None:
            del self._queued[jid]
            self._counts[old.code] -= 1
        if why is not None:
            self._queued[jid] = why
            self._counts[why.code] += 1

    def reason(self, jid: int) -> Reason | None:
        return self._extra.get(jid) or self._queued.get(jid)

    def counts(self) -> Counter[str]:
        """Held jobs by their reason's code."""
        out = +self._counts
        for jid, why in self._extra.items():
            old = self._queued.get(jid)
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
