"""CODA as plugins: the multi-array scheduler, wired to the adaptive CPU
allocator (allocator.py) and the contention eliminator (eliminator.py).

Scheduler rules (from the paper, docs/policies.md says why each is built so):
- Two arrays (queues): DNN jobs and CPU jobs (optionally the DNN array split
  into jobs of 4+ GPUs and of fewer), each with backfill, ordered by DRF between
  tenants (or FIFO, an option), arrival order inside a tenant; a CPU job
  preempted for a DNN job goes to the head of its tenant's CPU jobs.
- DNN jobs run on GPU nodes with the allocator's core count; PCIe-heavy jobs
  are kept apart where there is a choice.
- CPU jobs run on CPU nodes first, then on GPU nodes' free cores, beyond a
  reserve for each node's idle GPUs.
- A DNN job never waits for cores CPU jobs hold: those cores count as free for
  it, and are taken back when it starts (shrink first, then preempt). Only
  its start: a probe or any later growth uses free cores only.
- A CPU job preempted ``max_preemptions`` times runs on CPU nodes only, so no
  CPU job can be preempted forever.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coda.policy.allocator import AdaptiveAllocator, AllocatorConfig
from coda.policy.baselines import GpuSizeArrays, KindArrays
from coda.policy.eliminator import ContentionEliminator, EliminatorConfig
from coda.policy.fairshare import DominantShares
from coda.policy.feedback import ThroughputBook
from coda.policy.framework import (
    Action,
    Arrays,
    ClusterAware,
    CoreBound,
    Filter,
    Policy,
    Preempt,
    Reserve,
    SetCores,
)
from coda.policy.options import PolicyOptions
from coda.policy.state import CPU_POOL, DNN, GPU_POOL, Job, Node


class PreemptedFirst:
    """FIFO per array, but a CPU job that was preempted goes to the head: of its array,
    before every tenant's jobs under DRF too (the paper: an aborted CPU job "re-enters
    the head of its array")."""

    def key(self, job: Job) -> tuple[Any, ...]:
        return (self.band(job), job.submit)

    def band(self, job: Job) -> int:
        return 0 if job.preemptions else 1


@dataclass
class ArrayPools(ClusterAware):
    """DNN jobs on GPU nodes; CPU jobs on CPU nodes, then (when co-locating) on
    GPU nodes, unless they were preempted too often already and a CPU node can
    host them (the driver shows the plugin its nodes through observe_cluster)."""

    colocate: bool = True
    max_preemptions: int = 2
    # (cores, memory MiB; 0 = unconstrained) of each CPU node; None = not told.
    cpu_nodes: list[tuple[int, int]] | None = None
    generation: int = 0  # bumped when the CPU nodes change (answers may change)

    def observe_cluster(self, nodes: Sequence[Node]) -> None:
        cpu_nodes = [(n.cores, n.mem_mib) for n in nodes if n.pool == CPU_POOL]
        if cpu_nodes != self.cpu_nodes:
            self.cpu_nodes = cpu_nodes
            self.generation += 1

    def _fits_cpu_nodes(self, job: Job) -> bool:
        if self.cpu_nodes is None:
            return True
        room = sum(
            1 for c, m in self.cpu_nodes if c >= job.cores_pn_req and (m == 0 or m >= job.mem_pn)
        )
        return room >= job.nodes

    def pools(self, job: Job) -> tuple[str, ...]:
        if job.is_dnn:
            return (GPU_POOL,)
        if not self.colocate:
            return (CPU_POOL,)
        if job.preemptions >= self.max_preemptions and self._fits_cpu_nodes(job):
            return (CPU_POOL,)  # preempted enough: out of DNN jobs' way from now on
        return (CPU_POOL, GPU_POOL)


@dataclass
class IdleGpuReserve(CoreBound):
    """A CPU job may take a GPU node's cores only beyond a reserve for the
    node's idle GPUs, so a DNN job arriving there rarely has to reclaim."""

    cores_per_idle_gpu: int = 2  # the median 1-GPU optimum in CODA's table
    static = False  # depends on the node's idle GPUs and free cores
    by_shape = True  # and on the job's kind and core count only

    def filter(self, job: Job, node: Node, cores_pn: int) -> bool:
        if job.is_dnn or node.gpus == 0:
            return True
        if cores_pn > node.cores - node.gpus * self.cores_per_idle_gpu:
            # It could never fit beside a full reserve: the reserve would starve it
            # while the node's GPUs stand idle. It may go; DNN jobs reclaim later.
            return True
        return node.free_cores - cores_pn >= node.free_gpus * self.cores_per_idle_gpu

    def most_cores(self, kind: str, node: Node) -> int:
        if kind == DNN or node.gpus == 0:
            return node.cores  # no reserve for these: no bound
        free = node.free_cores
        if free > node.cores - node.gpus * self.cores_per_idle_gpu:
            return free  # a request this large may go beside no reserve (see filter)
        return free - node.free_gpus * self.cores_per_idle_gpu


class SpreadPcieHeavy:
    """Score: keep two PCIe-heavy training jobs off one node where possible
    (two of them lose 5-25% each; other pairs are unaffected)."""

    def score(self, job: Job, node: Node, cores_pn: int) -> float:
        if not job.pcie_heavy:
            return 0.0
        return -1.0 if node.pcie_heavy else 0.0


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
        newest_first = [j for j in _victims(node) if self.reclaimable(j)]

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
        for j in _victims(node):
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


def _victims(node: Node) -> list[Job]:
    """The CPU jobs on a node that may be taken back, in the order to take them: jobs
    preempted fewer times first, then the most recently started (least work lost)."""
    return sorted(
        (j for j in node.jobs if not j.is_dnn and j.preemptible),
        key=lambda j: (j.preemptions, -j.start, -j.idx),
    )


class OracleCores:
    """Upper bound: every job's true optimum, known in advance (reads the
    performance model, which no real policy can)."""

    generation = 0  # the model's optima never change

    def cores_per_node(self, job: Job) -> int:
        if job.perf is not None:
            return max(1, math.ceil(job.perf.c_opt))
        return job.cores_pn_req

    def group_key(self, job: Job) -> tuple[Any, ...]:
        return (job.model, job.cores_pn_req)


def _ordering(options: PolicyOptions) -> tuple[Arrays, DominantShares | None, list[Reserve]]:
    """The arrays and the tenants' order the options ask for."""
    arrays: Arrays = GpuSizeArrays() if options.gpu_subarrays else KindArrays()
    if options.order == "fifo":
        return arrays, None, []
    shares = DominantShares()
    return arrays, shares, [shares]


def _coda(
    name: str,
    *,
    slimming: bool = True,
    colocation: bool = True,
    eliminator: bool = True,
    description: str,
    options: PolicyOptions,
) -> Policy:
    book = ThroughputBook()
    # 16/8 windows: the allocator's tests show >= 98% exact answers at 5% sample noise.
    allocator = AdaptiveAllocator(
        book,
        AllocatorConfig(
            search=slimming,
            max_windows=16,
            peak_windows=8,
            start=options.allocator_start,
            categories=dict(options.categories),
            settle_windows=options.settle_windows,
        ),
    )
    period = options.control_period_s
    elim_config = EliminatorConfig() if period is None else EliminatorConfig(period_s=period)
    control = ContentionEliminator(book, elim_config) if eliminator and colocation else None
    filters: list[Filter] = [IdleGpuReserve()] if colocation else []
    arrays, shares, reserve = _ordering(options)
    return Policy(
        name=name,
        arrays=arrays,
        fair_share=shares,
        reserve=reserve,
        estimates=options.runtime_estimate(),
        queue_sort=PreemptedFirst(),
        pools=ArrayPools(colocate=colocation),
        core_count=allocator,  # without slimming it grants the request
        filters=filters + list(options.filters),
        scores=[(SpreadPcieHeavy(), 1.0)],
        candidates_to_score=4,
        node_control=control,
        job_control=allocator,
        sample_period_s=(
            control.period_s if control is not None else 10.0 if period is None else period
        ),
        reclaim=options.reclaimer() if colocation else None,
        description=description,
    )


def coda(options: PolicyOptions) -> Policy:
    return _coda(
        "coda",
        options=options,
        description="CODA: slimmed cores (online search), CPU jobs on freed cores, "
        "contention eliminator, DNN jobs reclaim CPU-held cores",
    )


def coda_no_slimming(options: PolicyOptions) -> Policy:
    return _coda(
        "coda-no-slimming",
        options=options,
        slimming=False,
        description="CODA without the allocator's search: DNN jobs keep the cores they asked for",
    )


def coda_no_colocation(options: PolicyOptions) -> Policy:
    return _coda(
        "coda-no-colocation",
        options=options,
        colocation=False,
        description="CODA without co-location: CPU jobs stay on CPU nodes",
    )


def coda_no_eliminator(options: PolicyOptions) -> Policy:
    return _coda(
        "coda-no-eliminator",
        options=options,
        eliminator=False,
        description="CODA without the contention eliminator: co-located CPU jobs never throttled",
    )


def oracle(options: PolicyOptions) -> Policy:
    arrays, shares, reserve = _ordering(options)
    return Policy(
        name="oracle",
        arrays=arrays,
        fair_share=shares,
        reserve=reserve,
        estimates=options.runtime_estimate(),
        queue_sort=PreemptedFirst(),
        pools=ArrayPools(colocate=True),
        core_count=OracleCores(),
        filters=[IdleGpuReserve(), *options.filters],
        scores=[(SpreadPcieHeavy(), 1.0)],
        candidates_to_score=4,
        reclaim=options.reclaimer(),
        ideal_isolation=True,
        description="upper bound: every job's optimal cores known, no search, no interference",
    )
