"""The held jobs CODA places now, kept up to date from what changed each cycle.

A held job is ready unless it is an array task or a heterogeneous job (Slurm's own
scheduler runs those) or its dependency is not met. Only the jobs whose record
changed, those Slurm forgot, those with a dependency (judged again every cycle) and
those the last cycle asked to look at again can move in or out: a cycle costs what
changed, not the length of the queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from coda.slurm.client import SlurmJob
from coda.slurm.index import JobIndex


class ReadyJobs:
    def __init__(self) -> None:
        self.jobs: dict[int, SlurmJob] = {}  # ready now, by id
        self._built = False
        self._again: set[int] = set()

    def look_again(self, ids: Iterable[int]) -> None:
        """Hand these jobs to the queue again at the next update, changed or not (the
        cycle started them, but their start was not carried out)."""
        self._again.update(ids)

    def update(
        self,
        index: JobIndex,
        changed: Sequence[SlurmJob],
        gone: Sequence[int],
        verdicts: Mapping[int, bool | None],
    ) -> tuple[list[SlurmJob], list[int]]:
        """Take this cycle's read (``index`` already updated with ``changed`` and
        ``gone``; ``verdicts``: whether each held job with a dependency may run).
        Returns the jobs to queue or look at again, and the ids no longer ready."""
        held, jobs = index.held, self.jobs
        if not self._built:
            self._built = True
            self._again.clear()
            for jid in sorted(held):
                one = held[jid]
                if not one.is_array_or_het and verdicts.get(jid, True) is True:
                    jobs[jid] = one
            return list(jobs.values()), []
        again, self._again = self._again, set()
        suspects = {j.job_id for j in changed}
        suspects.update(gone, verdicts, again)
        # A ready job whose dependency went away is among the changed.
        fresh: list[SlurmJob] = []
        dropped: list[int] = []
        for jid in sorted(suspects):
            now = held.get(jid)
            if now is not None and not now.is_array_or_het and verdicts.get(jid, True) is True:
                if jobs.get(jid) is not now or jid in again:
                    jobs[jid] = now
                    fresh.append(now)
            elif jobs.pop(jid, None) is not None:
                dropped.append(jid)
        return fresh, dropped
