"""Reclaim: taking cores back from CPU jobs for a DNN job (shrink then preempt, or
requeue only, for a cluster manager that cannot shrink a running job)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from coda.policy.framework import Action, Preempt, SetCores
from coda.policy.state import Job, Node


@dataclass
class ShrinkThenPreempt:
    """Take cores back from a node's CPU jobs: shrink each down to
    ``min_share`` of its request first (no work lost, it runs slower), then
    preempt the most recently started (least work since a checkpoint is lost),
    jobs preempted fewer times first (so no job bears every preemption)."""

    min_share: float = 0.5
    # A CPU job taken back this often keeps its cores from then on (on a cluster with
    # CPU nodes ArrayPools sends it there; without them this bounds what it bears).
    max_preemptions: int = 2
    shrinks = True

    def reclaimable(self, job: Job) -> bool:
        return job.preemptible and job.preemptions < self.max_preemptions

    def reclaim(self, job: Job, node: Node, cores_needed: int, now: float) -> list[Action]:
        newest_first = [j for j in reclaim_order(node) if self.reclaimable(j)]

        def spare(j: Job) -> int:  # cores a shrink can take from j
            return max(0, j.cores_pn - max(1, math.ceil(self.min_share * j.cores_pn_req)))

        # Preempt (newest first) only as many jobs as shrinking the rest cannot cover.
        preempt: list[Job] = []
        freed = 0
        shrinkable = sum(spare(j) for j in newest_first)
        for j in newest_first:
            if freed + shrinkable >= cores_needed:
                break
            preempt.append(j)
            freed += j.cores_pn
            shrinkable -= spare(j)
        actions: list[Action] = [Preempt(j) for j in preempt]
        left = cores_needed - freed
        for j in newest_first:
            if left <= 0:
                break
            if j in preempt:
                continue
            give = min(left, spare(j))
            if give > 0:
                actions.append(SetCores(j, j.cores_pn - give))
                left -= give
        return actions


@dataclass
class RequeueOnly:
    """Take cores back only by requeueing whole CPU jobs (a cluster manager that
    cannot shrink a running job, as Slurm cannot), and only jobs that may be
    requeued: newest first (least work lost), jobs requeued fewer times first; then
    none that the others already cover."""

    shrinks = False

    def reclaimable(self, job: Job) -> bool:
        return job.preemptible

    def reclaim(self, job: Job, node: Node, cores_needed: int, now: float) -> list[Action]:
        chosen: list[Job] = []
        freed = 0
        for j in reclaim_order(node):
            if freed >= cores_needed:
                break
            chosen.append(j)
            freed += j.cores_pn
        # Newest first can overshoot: the last (oldest) job taken may free what the small
        # new ones before it did. Walking back from it, a job whose cores are not needed
        # keeps running (seen on a real replay: four CPU jobs, 16 cores, requeued for
        # 12 where two covered them); the first job walked is always needed.
        for j in reversed(chosen[:-1]):
            if freed - j.cores_pn >= cores_needed:
                chosen.remove(j)
                freed -= j.cores_pn
        return [Preempt(j) for j in chosen]


def reclaim_order(node: Node) -> list[Job]:
    """The CPU jobs on a node that may be taken back, in the order to take them: jobs
    preempted fewer times first, then the most recently started (least work lost)."""
    return sorted(
        (j for j in node.jobs if not j.is_dnn and j.preemptible),
        key=lambda j: (j.preemptions, -j.start, -j.idx),
    )
