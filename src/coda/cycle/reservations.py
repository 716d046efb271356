"""Backfill reservations: when and where a blocked head can start, and whom
that binds (Slurm's sched/backfill, simplified).

The head of each array that does not fit now is planned onto the nodes where it
could start earliest, from the policy's runtime estimates of the jobs running
there (its shadow time). A later-queued job may use those nodes only if it ends
before the shadow; a job of unknown length never may.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from coda.cycle.clock import Clock
from coda.cycle.nodes import NodeBook
from coda.cycle.tenants import rank
from coda.policy.framework import Policy
from coda.policy.state import Job, Node

# (the reservation's shadow time, its owner's rank (``tenants.rank``), its owner) on a node
Hold = tuple[float, tuple[Any, ...], Job]

_RESERVATION_CANDIDATES = 32  # nodes considered when planning a blocked job's reservation


@dataclass
class Reservation:
    job: Job
    nodes: list[Node]
    shadow: float  # when the reserved job is expected to be able to start
    versions: tuple[int, ...]
    rank: tuple[Any, ...] = ()  # its owner's rank when it last bound others (Hold)


class Reservations:
    """Each array's blocked head's reservation, and the plans the every-job round made
    (``every_job.py``): which nodes they hold from when, and whom that binds."""

    def __init__(self, policy: Policy, book: NodeBook, clock: Clock) -> None:
        self.policy = policy
        self.book = book
        self.clock = clock
        self.by_array: dict[str, Reservation | None] = dict.fromkeys(policy.arrays.names)
        # The holds the last every-job round made (every_job.py).
        self.every_job_holds: dict[int, list[Hold]] = {}

    def plans_moved(self, owner: Job | None) -> None:
        """A planned job left (``owner``), or a node with plans did (None): the plans
        after it may come earlier, so its nodes (every planned node) are due a cycle."""
        book = self.book
        for idx, held in self.every_job_holds.items():
            node = book.nodes.get(idx)
            if node is not None and (owner is None or any(h[2] is owner for h in held)):
                book.mark_dirty(node)

    def forget_node(self, node: Node) -> None:
        """A node left: the plans and reservations on it go."""
        if node.idx in self.every_job_holds:
            self.plans_moved(None)  # every plan after one on it may move
        for arr, resv in self.by_array.items():
            if resv is not None and node in resv.nodes:
                self.by_array[arr] = None
                for other in resv.nodes:  # jobs it kept off them may fit now
                    if other is not node:
                        self.book.mark_dirty(other)

    def release(self, arr: str, job: Job) -> None:
        """The job started or left: if it held ``arr``'s reservation, that is spent, and
        jobs it kept off those nodes may fit there now."""
        resv = self.by_array[arr]
        if resv is not None and resv.job is job:
            self.by_array[arr] = None
            for node in resv.nodes:
                self.book.mark_dirty(node)

    def job_left(self, job: Job) -> None:
        """A queued job left the queue (withdrawn): its plans and reservation go."""
        if self.policy.reserves_every_job:
            self.plans_moved(job)
        for arr in self.by_array:
            self.release(arr, job)

    def binding_owner(
        self, job: Job, key: tuple[Any, ...], finish_by: float, held: list[Hold]
    ) -> Job | None:
        """The earlier-ranked owner of a hold on a node whose plan job would delay
        there (None: job may use the node)."""
        # A job of unknown length (no estimate) never runs on reserved nodes; one that
        # ends before the reserved start may (even when that start is unknown).
        late = finish_by == math.inf
        for shadow, okey, owner in held:
            if owner is not job and okey < key and (late or finish_by > shadow):
                if self.binds(owner, job):
                    return owner
        return None

    def binds(self, owner: Job, job: Job) -> bool:
        """Whether owner's reservation binds job. A CPU job's does not bind a DNN
        job where the policy reclaims: the DNN job would take those cores back."""
        return owner.is_dnn or not job.is_dnn or self.book.dnn_index is None

    def hold(self, arr: str, job: Job, active: dict[int, list[Hold]], cores_pn: int) -> None:
        """Give a blocked head its reservation and make it bind later-queued jobs."""
        old = self.by_array[arr]
        resv = self._reserve_for(arr, job, cores_pn, active)
        moved = old is not None and old is not resv
        if moved and resv is not None and old is not None and resv.job is old.job:
            # The same job on the same nodes, from no later: nothing kept off them may
            # fit now. (A new head was itself kept off them, by its predecessor's hold.)
            moved = resv.nodes != old.nodes or resv.shadow > old.shadow
        if moved and old is not None:
            for node in old.nodes:
                self.book.mark_dirty(node)  # jobs kept off these nodes may fit now
        if resv is not None:
            resv.rank = rank(self.policy, job)
            for node in resv.nodes:
                active.setdefault(node.idx, []).append((resv.shadow, resv.rank, job))

    def _reserve_for(
        self, arr: str, job: Job, cores_pn: int, active: dict[int, list[Hold]]
    ) -> Reservation | None:
        """Plan when and where a blocked job can start (the backfill shadow time).

        Kept across cycles while the same job is blocked and its nodes are
        unchanged. Nodes an earlier-queued head holds are left out: that head
        goes first there (once it starts, this plan is redone).
        """
        old = self.by_array[arr]
        if (
            old is not None
            and old.job is job
            and old.shadow >= self.clock.now  # due now (a job past its limit): still the plan
            and old.versions == tuple(n.version for n in old.nodes)
        ):
            return old
        key = rank(self.policy, job)
        policy = self.policy
        times: list[tuple[float, int, Node]] = []
        for pool in policy.pools.pools(job):
            index = self.book.index.get(pool)
            if index is None:
                continue
            for node in index.most_free():
                if len(times) >= _RESERVATION_CANDIDATES:
                    break
                if any(
                    okey < key and self.binds(owner, job)
                    for _, okey, owner in active.get(node.idx, ())
                ):
                    continue
                if policy.filters and not policy.allows(job, node, cores_pn):
                    continue
                t = self.available_at(node, job, cores_pn)
                if t is not None:  # inf: it fits there once empty, but when is unknown
                    times.append((t, node.idx, node))
        if len(times) < job.nodes:
            self.by_array[arr] = None
            return None
        times.sort(key=lambda x: (x[0], x[1]))
        chosen = [node for _, _, node in times[: job.nodes]]
        shadow = max(t for t, _, _ in times[: job.nodes])
        resv = Reservation(job, chosen, shadow, tuple(n.version for n in chosen))
        self.by_array[arr] = resv
        return resv

    def available_at(self, node: Node, job: Job, cores_pn: int) -> float | None:
        """When node could host job, if its running jobs end as estimated (inf: not
        known, a running job has no estimate; None: never, the node is too small)."""
        g, c, m = node.free_gpus, node.free_cores, node.free_mem
        now = self.clock.now
        reclaim = job.is_dnn and self.book.dnn_index is not None
        if reclaim:
            c += self.book.reclaimable_cores(node)  # taken back when it starts
        need_g, need_m = job.gpus_pn, job.mem_pn
        if node.gpus < need_g or node.cores < cores_pn or (node.mem_mib and node.mem_mib < need_m):
            return None
        if g >= need_g and c >= cores_pn and (not node.mem_mib or m >= need_m):
            return now
        taken = self.policy.reclaim.takeable if reclaim and self.policy.reclaim else None
        end_of = self.policy.estimates.end_of
        ends = sorted((end_of(j, now), j.idx, j) for j in node.jobs)
        for t, _, j in ends:
            if t == math.inf:
                break
            g += j.gpus_pn
            # Cores reclaim takes back were counted as free already; a job narrowed
            # inside a fixed grant frees the whole grant.
            c += self.book.grant_pn(j) - (taken(j) if taken is not None and not j.is_dnn else 0)
            m += j.mem_pn
            if g >= need_g and c >= cores_pn and (not node.mem_mib or m >= need_m):
                return t
        return math.inf  # some job in its way has no estimate
