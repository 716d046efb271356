"""Reclaim: taking cores back from CPU jobs for a DNN job (shrink then preempt, or
requeue only, for a cluster manager that cannot shrink a running job), within each
CPU job's harm budget where the policy keeps one (coda.policy.harm_budget)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from coda.policy.framework import Action, Preempt, SetCores
from coda.policy.harm_budget import HarmBudget
from coda.policy.state import Job, Node


@dataclass
class ShrinkThenPreempt:
    """Take cores back from a node's CPU jobs: shrink each down to ``min_share`` of
    its request first (no work lost, it runs slower), then preempt the most recently
    started (least work since a checkpoint is lost), jobs preempted fewer times first
    (so no job bears every preemption).

    With a harm budget a shrink goes no lower than ``1 − share`` of the request (a
    job shrunk so never drains its bucket, however long the DNN job holds the cores)
    and a preemption needs the job's bucket to cover the work it loses and its
    restart: a CPU job whose bucket is dry gives nothing."""

    min_share: float = 0.5
    # A CPU job taken back this often keeps its cores from then on (on a cluster with
    # CPU nodes ArrayPools sends it there; without them this bounds what it bears).
    max_preemptions: int = 2
    harm: HarmBudget | None = None
    shrinks = True

    def _floor(self, job: Job) -> int:
        share = self.min_share
        if self.harm is not None:
            share = max(share, 1.0 - self.harm.config.share)
        return max(1, math.ceil(share * job.cores_pn_req))

    def _spare(self, job: Job) -> int:  # cores a shrink may take from job
        if self.harm is not None and not self.harm.may_slow(job):
            return 0  # its bucket is dry (a requeue's wait overdrew it)
        return max(0, job.cores_pn - self._floor(job))

    def _preemptable(self, job: Job) -> bool:
        if not job.preemptible or job.preemptions >= self.max_preemptions:
            return False
        return self.harm is None or self.harm.may_preempt(job)

    def takeable(self, job: Job) -> int:
        if not job.preemptible or job.preemptions >= self.max_preemptions:
            return 0
        return job.cores_pn if self._preemptable(job) else self._spare(job)

    def reclaim(self, job: Job, node: Node, cores_needed: int, now: float) -> list[Action]:
        newest_first = [j for j in reclaim_order(node) if self.takeable(j) > 0]
        # Preempt (newest first) only as many jobs as shrinking the rest cannot cover.
        preempt: list[Job] = []
        freed = 0
        shrinkable = sum(self._spare(j) for j in newest_first)
        for j in newest_first:
            if freed + shrinkable >= cores_needed:
                break
            if not self._preemptable(j):
                continue
            preempt.append(j)
            freed += j.cores_pn
            shrinkable -= self._spare(j)
        actions: list[Action] = [Preempt(j) for j in preempt]
        left = cores_needed - freed
        for j in newest_first:
            if left <= 0:
                break
            if j in preempt:
                continue
            give = min(left, self._spare(j))
            if give > 0:
                actions.append(SetCores(j, j.cores_pn - give))
                left -= give
        return actions


@dataclass
class RequeueOnly:
    """Take cores back only by requeueing whole CPU jobs (a cluster manager that
    cannot shrink a running job, as Slurm cannot), and only jobs that may be
    requeued (and, with a harm budget, whose bucket covers it): newest first (least
    work lost), jobs requeued fewer times first; then none that the others already
    cover."""

    harm: HarmBudget | None = None
    shrinks = False

    def takeable(self, job: Job) -> int:
        if not job.preemptible:
            return 0
        if self.harm is not None and not self.harm.may_preempt(job):
            return 0
        return job.cores_pn

    def reclaim(self, job: Job, node: Node, cores_needed: int, now: float) -> list[Action]:
        chosen: list[Job] = []
        freed = 0
        for j in reclaim_order(node):
            if freed >= cores_needed:
                break
            if self.takeable(j) <= 0:
                continue
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
