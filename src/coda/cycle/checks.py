"""Invariant checks of the cycle (tests and ``--check-invariants`` runs only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coda.cycle import reasons as R
from coda.cycle.invariant import InvariantError
from coda.cycle.reasons import Reason
from coda.cycle.reservations import Hold

if TYPE_CHECKING:
    from coda.cycle.scheduler import Scheduler

    # ------------------------------------------------------------ checks


def check_no_waiting_fit(self: Scheduler) -> None:
    """After a cycle no queued job may fit anywhere, unless a reservation of
    an earlier-queued job forbids it (or, without backfill, it is not first)."""
    active: dict[int, list[Hold]] = {}
    every_job = self.policy.reserves_every_job
    if every_job:
        for idx, held in self.every_job_holds.items():
            active[idx] = [h for h in held if self.is_queued(h[2])]
    for resv in self.reservations.values():
        if resv is not None and resv.job.start < 0:
            for node in resv.nodes:
                active.setdefault(node.idx, []).append((resv.shadow, resv.rank, resv.job))
    for arr in self.policy.arrays.names:
        waiting = sorted(
            (j for b in self.buckets[arr].values() for j in b.live()),
            key=self._rank,
        )
        if not self.policy.backfill:
            first = self._earliest(arr)
            waiting = [first] if first is not None else []
        for job in waiting:
            if every_job and isinstance(job.wait, Reason) and job.wait.code == R.DEPTH:
                continue  # past the depth: not looked at, as in Slurm's pass
            cores_pn = self.cores(job)
            job.estimate = self.policy.estimates.runtime(job, cores_pn)
            wait, cycle = job.wait, job.wait_cycle
            if self._find_nodes(job, cores_pn, active, None) is not None:
                raise InvariantError(f"{job} fits at t={self.now} but was left waiting")
            job.wait, job.wait_cycle = wait, cycle
