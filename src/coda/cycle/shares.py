"""What a booking moves besides the nodes: the reserve plugins' books and, where the
policy shares fairly, the queue's order and whom the heads' reservations bind.

A reservation binds the jobs ranked after its holder (by tenant's share, then queue
key). A start or an end moves its tenant's share, so a job a reservation kept off its
nodes may rank before the holder now: the reservation's array is then owed a retry of
those nodes (``unbound``, ``rebind``).
"""

from __future__ import annotations

from collections.abc import Sequence

from coda.cycle.queue import Queue
from coda.cycle.reservations import Reservations
from coda.policy.framework import Policy
from coda.policy.state import Job, Node


class Shares:
    def __init__(self, policy: Policy, queue: Queue, reservations: Reservations) -> None:
        self.policy = policy
        self.queue = queue
        self.reservations = reservations
        self.unbound: set[str] = set()  # arrays whose reservation shares moved past
        self.moved = False  # a booking moved a share since the round began

    def charge(self, job: Job, nodes: Sequence[Node], now: float) -> None:
        """Count a running job in the reserve plugins' books (fair-share usage): every
        booking does; a driver that mirrors nodes itself (Slurm) calls it for each job
        it finds running. Charging a job twice counts it once."""
        before = self._share_before(job)
        for r in self.policy.reserve:
            r.reserve(job, nodes, now)
        self.booked(job)
        if before is not None:
            self._share_moved(job, before)

    def discharge(self, job: Job, now: float) -> None:
        """A job stopped (its counterpart, ``charge``); a job not charged is let be."""
        before = self._share_before(job)
        for r in self.policy.reserve:
            r.unreserve(job, now)
        self.booked(job)
        if before is not None:
            self._share_moved(job, before)

    def booked(self, job: Job) -> None:
        """A job took or gave back resources, or left the queue: its tenant's share (or
        first job) moved."""
        fair = self.policy.fair_share
        if fair is not None:
            self.queue.touch(fair.tenant(job))
            self.moved = True

    def _share_before(self, job: Job) -> float | None:
        """Under fair share, the job's tenant's share before a booking moves it, where a
        move matters (``_share_moved`` is then told); None where it cannot."""
        fair = self.policy.fair_share
        if fair is None:
            return None
        for arr, resv in self.reservations.by_array.items():
            if resv is not None and arr not in self.unbound:
                return fair.share(fair.tenant(job))
        return None  # no reservation a move could unbind

    def _share_moved(self, job: Job, before: float) -> None:
        """The job's tenant's share was ``before`` until now. A job a reservation kept
        off its nodes may rank before its holder now if its tenant's share fell past
        the holder's, or the holder's own tenant took more: its array is owed a retry
        of those nodes (``rebind``). Other moves only bind more jobs."""
        fair = self.policy.fair_share
        assert fair is not None  # called under fair share only
        tenant = fair.tenant(job)
        after = fair.share(tenant)
        for arr, resv in self.reservations.by_array.items():
            if resv is None or arr in self.unbound:
                continue
            if fair.tenant(resv.job) == tenant:
                if after > before:
                    self.unbound.add(arr)
            elif after < before and after <= resv.rank[1] <= before:  # (band, share, key)
                self.unbound.add(arr)

    def rebind(self) -> None:
        """The nodes of the reservations shares moved past are retried, as if they had
        gained room: a job those reservations kept off them may start there now."""
        for arr in self.unbound:
            resv = self.reservations.by_array.get(arr)
            if resv is not None:
                for node in resv.nodes:
                    self.reservations.book.mark_dirty(node)
        self.unbound.clear()
