"""Slurm's jobs as the controller's cycle walks them, kept up to date from what changed.

``JobListing`` gives back the same ``SlurmJob`` object for a job whose line did not
change, so a job is looked at again only when it is new or different: the sets a
cycle walks (held for CODA, mid-placement, placed and not started) and the count of
marks follow from the changed jobs alone, and a cycle's passes cost what changed
plus those (small) sets, not every job Slurm remembers.
"""

from __future__ import annotations

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

    def _add(self, j: SlurmJob) -> None:
        jid = j.job_id
        if j.held_for_coda:
            self.held[jid] = j
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
        for d in (self.held, self.placing, self.placed_pending, self.released):
            if d.get(jid) is j:
                del d[jid]
        state = _mark_state(j)
        if state is not None:
            self.marks[state] -= 1
            if self.marks[state] <= 0:
                del self.marks[state]
