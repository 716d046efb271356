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

from coda.cycle.nodes import NodeBook
from coda.policy.state import Job, Node

# (the reservation's shadow time, its owner's rank (Scheduler._rank), its owner) on a node
Hold = tuple[float, tuple[Any, ...], Job]

_RESERVATION_CANDIDATES = 32  # nodes considered when planning a blocked job's reservation


@dataclass
class Reservation:
    job: Job
    nodes: list[Node]
    shadow: float  # when the reserved job is expected to be able to start
    versions: tuple[int, ...]
    rank: tuple[Any, ...] = ()  # its owner's rank when it last bound others (Hold)


class Reservations(NodeBook):
    reservations: dict[str, Reservation | None]
    now: float
    # The holds the last every-job round made (every_job.py).
    every_job_holds: dict[int, list[Hold]]

    def _plans_moved(self, owner: Job | None) -> None:
        """A planned job left (``owner``), or a node with plans did (None): the plans
        after it may come earlier, so its nodes (every planned node) are due a cycle."""
        for idx, held in self.every_job_holds.items():
            node = self.nodes.get(idx)
            if node is not None and (owner is None or any(h[2] is owner for h in held)):
                self.mark_dirty(node)

    def _rank(self, job: Job) -> tuple[Any, ...]:
        return job.queue_key

    def _forget_node(self, node: Node) -> None:
        if node.idx in self.every_job_holds:
            self._plans_moved(None)  # every plan after one on it may move
        for arr, resv in self.reservations.items():
            if resv is not None and node in resv.nodes:
                self.reservations[arr] = None
                for other in resv.nodes:  # jobs it kept off them may fit now
                    if other is not node:
                        self.mark_dirty(other)

    def _binding_owner(
        self, job: Job, key: tuple[Any, ...], finish_by: float, held: list[Hold]
    ) -> Job | None:
        # A job of unknown length (no estimate) never runs on reserved nodes; one that
        # ends before the reserved start may (even when that start is unknown).
        late = finish_by == math.inf
        for shadow, okey, owner in held:
            if owner is not job and okey < key and (late or finish_by > shadow):
                if self._binds(owner, job):
                    return owner
        return None

    def _binds(self, owner: Job, job: Job) -> bool:
        """Whether owner's reservation binds job. A CPU job's does not bind a DNN
        job where the policy reclaims: the DNN job would take those cores back."""
        return owner.is_dnn or not job.is_dnn or self.dnn_index is None

    def _reserve_for(
        self, arr: str, job: Job, cores_pn: int, active: dict[int, list[Hold]]
    ) -> Reservation | None:
        """Plan when and where a blocked job can start (the backfill shadow time).

        Kept across cycles while the same job is blocked and its nodes are
        unchanged. Nodes an earlier-queued head holds are left out: that head
        goes first there (once it starts, this plan is redone).
        """
        old = self.reservations[arr]
        if (
            old is not None
            and old.job is job
            and old.shadow >= self.now  # due now (a job past its limit): still the plan
            and old.versions == tuple(n.version for n in old.nodes)
        ):
            return old
        key = self._rank(job)
        policy = self.policy
        times: list[tuple[float, int, Node]] = []
        for pool in policy.pools.pools(job):
            index = self.index.get(pool)
            if index is None:
                continue
            for node in index.most_free():
                if len(times) >= _RESERVATION_CANDIDATES:
                    break
                if any(
                    okey < key and self._binds(owner, job)
                    for _, okey, owner in active.get(node.idx, ())
                ):
                    continue
                if policy.filters and not policy.allows(job, node, cores_pn):
                    continue
                t = self._available_at(node, job, cores_pn)
                if t is not None:  # inf: it fits there once empty, but when is unknown
                    times.append((t, node.idx, node))
        if len(times) < job.nodes:
            self.reservations[arr] = None
            return None
        times.sort(key=lambda x: (x[0], x[1]))
        chosen = [node for _, _, node in times[: job.nodes]]
        shadow = max(t for t, _, _ in times[: job.nodes])
        resv = Reservation(job, chosen, shadow, tuple(n.version for n in chosen))
        self.reservations[arr] = resv
        return resv

    def _available_at(self, node: Node, job: Job, cores_pn: int) -> float | None:
        """When node could host job, if its running jobs end as estimated (inf: not
        known, a running job has no estimate; None: never, the node is too small)."""
        g, c, m = node.free_gpus, node.free_cores, node.free_mem
        reclaim = job.is_dnn and self.dnn_index is not None
        if reclaim:
            c += self._reclaimable_cores(node)  # taken back when it starts
        need_g, need_m = job.gpus_pn, job.mem_pn
        if node.gpus < need_g or node.cores < cores_pn or (node.mem_mib and node.mem_mib < need_m):
            return None
        if g >= need_g and c >= cores_pn and (not node.mem_mib or m >= need_m):
            return self.now
        taken = self.policy.reclaim.reclaimable if reclaim and self.policy.reclaim else None
        end_of = self.policy.estimates.end_of
        ends = sorted((end_of(j, self.now), j.idx, j) for j in node.jobs)
        for t, _, j in ends:
            if t == math.inf:
                break
            g += j.gpus_pn
            # Cores reclaim takes back were counted as free already; a job narrowed
            # inside a fixed grant frees the whole grant.
            c += 0 if taken is not None and not j.is_dnn and taken(j) else self.grant_pn(j)
            m += j.mem_pn
            if g >= need_g and c >= cores_pn and (not node.mem_mib or m >= need_m):
                return t
        return math.inf  # some job in its way has no estimate
