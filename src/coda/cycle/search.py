"""The node search of one attempt: feasible nodes in best-fit order (or Slurm's fewest
free cores first), then the policy's scores pick among them.

A node is feasible when it has the job's room (for a DNN job where the policy reclaims,
counting the cores CPU jobs hold there as free), its memory, no reservation of an
earlier-ranked job it would delay, and every filter's consent. A search that finds too
few notes why on the job, and what refused it (``alike``, ``failed_with``), which
backfill's merge reads to pass over the attempts that would fail the same way.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from typing import Any

from coda.cycle import reasons as R
from coda.cycle.clock import Clock
from coda.cycle.nodes import NodeBook
from coda.cycle.queue import Queue
from coda.cycle.reasons import Reason, Reasons
from coda.cycle.reservations import Hold, Reservations
from coda.cycle.tenants import rank
from coda.policy.framework import Policy
from coda.policy.state import DNN, GPU_POOL, Job, Node

SORT_DIRTY_UP_TO = 64  # more dirty nodes than this: search the index instead
# What a failed search was refused by besides what its bucket's jobs share: (finish by,
# memory, rank) it failed with (a lower bound where that did not matter).
FailedWith = tuple[float, int, tuple[Any, ...] | None]


class NodeSearch:
    def __init__(
        self,
        policy: Policy,
        book: NodeBook,
        reservations: Reservations,
        queue: Queue,
        reasons: Reasons,
        clock: Clock,
    ) -> None:
        self.policy = policy
        self.book = book
        self.reservations = reservations
        self.queue = queue
        self.reasons = reasons
        self.clock = clock
        self.fewest_cores = policy.node_order == "fewest-cores"  # Slurm's node order
        # The last failed search was refused by what its bucket's jobs share (GPUs,
        # cores, filters declaring ``by_shape``), not by its memory or a reservation.
        self.alike = False
        # Or by its memory, length or rank too (``FailedWith``), None if not even so.
        self.failed_with: FailedWith | None = None

    def find(
        self,
        job: Job,
        cores_pn: int,
        active: dict[int, list[Hold]],
        only: list[Node] | None,
    ) -> list[Node] | None:
        """Feasible nodes in best-fit order, then the policy's scores pick among them.

        ``only``: search just these nodes (a single-node job retried after a
        departure); a gang job always searches the index, since the nodes it
        needs beside a freed one may have been free all along. On failure the
        job's reason is noted.
        """
        self.alike = False
        self.failed_with = None
        policy = self.policy
        book = self.book
        need = job.nodes
        want = max(need, policy.candidates_to_score)
        pools = policy.pools.pools(job)
        reclaim = job.kind == DNN and book.dnn_index is not None
        if only is not None and need == 1 and len(only) <= SORT_DIRTY_UP_TO:
            gpus_pn = job.gpus_pn
            cands = [
                n
                for n in only
                if n.pool in pools
                and n.free_gpus >= gpus_pn
                and (n.free_cores >= cores_pn or reclaim and book.dnn_fits(n, cores_pn))
            ]
            if not cands:  # nothing on them has the room
                self.queue.note(job, self.short_of(job, cores_pn, pools))
                self.alike = True
                return None
            if len(cands) > 1 and self.fewest_cores:
                # Pools in no order (Slurm's), nodes that need reclaiming last.
                cands.sort(key=lambda n: (n.free_cores < cores_pn, n.free_cores, n.idx))
            elif len(cands) > 1:
                cands.sort(
                    # Nodes where it would have to reclaim CPU jobs' cores come last.
                    key=lambda n: (
                        pools.index(n.pool),
                        n.free_cores < cores_pn,
                        n.free_gpus,
                        n.free_cores,
                        n.idx,
                    ),
                )
            streams: list[Iterable[Node]] = [cands]
        else:
            # Many dirty nodes: the index finds the same feasible set (no node that
            # stayed clean can fit a job that failed before) without sorting them.
            streams = []
            fewest = self.fewest_cores
            if fewest and len(pools) > 1:
                # Slurm's order knows no pools: one order over the pools' nodes.
                streams.append(
                    heapq.merge(
                        *(book.index[p].fewest_cores(job.gpus_pn, cores_pn)
                          for p in pools if p in book.index),
                        key=_fewest_cores_key,
                    )
                )  # fmt: skip
            for p in pools:
                if p in book.index:
                    index = book.index[p]
                    if fewest:
                        if len(pools) == 1:
                            streams.append(index.fewest_cores(job.gpus_pn, cores_pn))
                    else:
                        streams.append(index.best_fit(job.gpus_pn, cores_pn))
                    if reclaim and p == GPU_POOL:
                        # Then the nodes that fit only once CPU jobs give cores back.
                        streams.append(book.needs_reclaim(job.gpus_pn, cores_pn))
        mem = job.mem_pn
        finish_by = self.clock.now + job.estimate
        plans = self.reservations
        key: tuple[Any, ...] | None = None  # its rank, worked out where a reservation asks
        filters = policy.filters
        found: list[Node] = []
        seen = 0
        by_mem = 0
        by_resv: Job | None = None
        by_filter: str | None = None
        by_job = False  # refused by something its bucket's jobs need not share
        for stream in streams:
            for node in stream:
                seen += 1
                if mem and node.mem_mib and node.free_mem < mem:
                    by_mem += 1
                    continue
                held = active.get(node.idx)
                if held is not None:
                    if key is None:
                        key = rank(policy, job)
                    owner = plans.binding_owner(job, key, finish_by, held)
                    if owner is not None:
                        by_resv = by_resv or owner
                        continue  # would delay an earlier job's reservation
                if filters:
                    refused = None
                    for f in filters:  # Policy.refusing_filter, without the call
                        if not f.filter(job, node, cores_pn):
                            refused = f
                            break
                    if refused is not None:
                        by_filter = by_filter or type(refused).__name__
                        by_job = by_job or not refused.by_shape
                        continue
                found.append(node)
                if len(found) >= want:
                    break
            if len(found) >= want:
                break
        if len(found) < need:
            if by_resv is not None:
                reason = self.reasons.why(R.RESERVATION, behind=by_resv.job_id)
            elif by_filter is not None:
                reason = self.reasons.why(R.FILTER, by_filter)
            elif by_mem:
                reason = self.reasons.why(R.MEMORY, str(mem))
            elif seen == 0 or only is not None:
                reason = self.short_of(job, cores_pn, pools)
            else:
                reason = self.reasons.why(R.CORES, str(cores_pn))  # a gang short of nodes
            self.queue.note(job, reason)
            self.alike = not (by_job or by_mem or by_resv is not None)
            if not by_job:
                self.failed_with = (
                    finish_by if by_resv is not None else -math.inf,
                    mem if by_mem else 0,
                    key if by_resv is not None else None,
                )
            return None
        return policy.pick(job, found, cores_pn, need)

    def short_of(self, job: Job, cores_pn: int, pools: tuple[str, ...]) -> Reason:
        """Nothing fitted: whether GPUs or cores are what no node has free."""
        book = self.book
        reclaim = job.kind == DNN and book.dnn_index is not None
        for p in pools:
            index = book.dnn_index if reclaim and p == GPU_POOL else book.index.get(p)
            if index is not None:
                masks = index.masks
                for g in range(job.gpus_pn, len(masks)):
                    if masks[g]:  # some node has its GPUs free
                        return self.reasons.why(R.CORES, str(cores_pn))
        if job.gpus_pn:
            return self.reasons.why(R.GPUS, str(job.gpus_pn))
        return self.reasons.why(R.CORES, str(cores_pn))


def _fewest_cores_key(n: Node) -> tuple[int, int]:
    return n.free_cores, n.idx
