"""Slurm's jobs as the controller's cycle walks them, kept up to date from what changed.

``JobListing`` gives back the same ``SlurmJob`` object for a job whose line did not
change, so a job is looked at again only when it is new or different: the sets a
cycle walks (held for CODA, mid-placement, placed and not started) and the count of
marks follow from the changed jobs alone, and a cycle's passes cost what changed
plus those (small) sets, not every job Slurm remembers.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence

from coda.slurm.client import SlurmJob

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")  # fmt: skip


def _mark_state(j: SlurmJob) -> str | None:
    """The mark state counted for a job (None: ended, or no mark of CODA's)."""
    if not j.mark or j.state in ENDED:
        return None
    return j.mark.get("state", "")


class JobIndex:
    def __init__(self) -> None:
        self.by_id: dict[int, SlurmJob] = {}
        self.held: dict[int, SlurmJob] = {}  # held for CODA to place
        self.placing: dict[int, SlurmJob] = {}  # marked ``placing``: not finished
        self.placed_pending: dict[int, SlurmJob] = {}  # placed, released, not started
        # Marked held but released by someone else (its user opting out): not CODA's.
        # Pending with a priority, or already started by Slurm (it may start at once);
        # a job Slurm itself holds again (priority 0: BadConstraints) is still held.
        self.released: dict[int, SlurmJob] = {}
        self.marks: Counter[str] = Counter()  # mark states of jobs not ended
        self.gone: list[int] = []  # ids the last update no longer saw
        # Held jobs the cycle cannot simply queue, looked at every cycle: array tasks
        # and heterogeneous jobs (passed to Slurm), jobs with a dependency.
        self.held_special: dict[int, SlurmJob] = {}
        # Array tasks by their array's id: a dependency on an array waits for them all.
        self.tasks: dict[int, dict[int, SlurmJob]] = {}
        # (submit time, id) of held jobs, stale entries dropped when they come to the top.
        self._by_submit: list[tuple[int, int]] = []

    def update(
        self,
        jobs: Sequence[SlurmJob],
        changed: Sequence[SlurmJob] | None = None,
        gone: Sequence[int] | None = None,
    ) -> list[SlurmJob]:
        """Take this read of Slurm's jobs; returns those new or changed since the last
        (``gone``: the ids of those Slurm no longer lists). ``changed`` and ``gone``
        given (``JobListing`` knows them): only those are looked at."""
        old = self.by_id
        old_get = old.get
        if changed is None or gone is None:
            new = {j.job_id: j for j in jobs}
            changed = [j for j in jobs if old_get(j.job_id) is not j]
            gone = list(old.keys() - new.keys())
        else:
            new = old
        self.gone = list(gone)
        for jid in self.gone:
            prev = old.pop(jid, None)
            if prev is not None:
                self._drop(prev)
        for j in changed:
            prev = old_get(j.job_id)
            if prev is not None:
                self._drop(prev)
            self._add(j)
            new[j.job_id] = j
        self.by_id = new
        return list(changed)

    def oldest_held_submit(self) -> int | None:
        """The earliest submit time of a held job (None: none held, or none with one)."""
        heap, held = self._by_submit, self.held
        if len(heap) > 2 * len(held) + 1024:  # mostly stale: start again
            heap[:] = [(j.submit_time, jid) for jid, j in held.items() if j.submit_time > 0]
            heapq.heapify(heap)
        while heap:
            t, jid = heap[0]
            j = held.get(jid)
            if j is not None and j.submit_time == t:
                return t
            heapq.heappop(heap)
        return None

    def _add(self, j: SlurmJob) -> None:
        jid = j.job_id
        if j.array_job_id:
            self.tasks.setdefault(j.array_job_id, {})[jid] = j
        if j.held_for_coda:
            self.held[jid] = j
            if j.submit_time > 0:
                heapq.heappush(self._by_submit, (j.submit_time, jid))
            if j.is_array_or_het or j.dependency:
                self.held_special[jid] = j
        if j.mark is not None and j.mark.get("state") == "placing":
            self.placing[jid] = j
        if j.state == "PENDING" and j.placed_by_coda and j.priority != 0:
            self.placed_pending[jid] = j
        if (
            j.mark is not None
            and j.mark.get("state") == "held"
            and j.state not in ENDED
            and (j.state != "PENDING" or j.priority != 0)
        ):
            self.released[jid] = j
        state = _mark_state(j)
        if state is not None:
            self.marks[state] += 1

    def _drop(self, j: SlurmJob) -> None:
        jid = j.job_id
        for d in (self.held, self.placing, self.placed_pending, self.released, self.held_special):
            if d.get(jid) is j:
                del d[jid]
        tasks = self.tasks.get(j.array_job_id) if j.array_job_id else None
        if tasks is not None and tasks.get(jid) is j:
            del tasks[jid]
            if not tasks:
                del self.tasks[j.array_job_id]
        state = _mark_state(j)
        if state is not None:
            self.marks[state] -= 1
            if self.marks[state] <= 0:
                del self.marks[state]
