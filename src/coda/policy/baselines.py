"""The baselines CODA is measured against: Slurm-like static allocation.

static-separate: DNN jobs get the cores they asked for on GPU nodes only; CPU
jobs run on CPU nodes only; FIFO per array with backfill.
static-shared: the same, but CPU jobs may also take free cores on GPU nodes
(CPU nodes first), with no protection for the training jobs there.
fifo: the paper's first baseline, Slurm with FIFO: one queue of CPU and DNN jobs
in arrival order (with Slurm's backfill where there are estimates), requested
cores, servers shared.
drf: the paper's second: the same queue ordered by dominant resource fairness
between tenants (GPUs dominant for DNN jobs), requested cores, servers shared.
slurm: plain Slurm as deploy/slurm-test-cluster runs it (``coda replay``'s baseline):
fifo, with every queued job holding a plan (sched/backfill) that begins where Slurm's
will-run test puts it, and Slurm's node choice.
"""

from __future__ import annotations

from typing import Any

from coda.policy.fairshare import DominantShares
from coda.policy.framework import Arrays, Policy, PoolSelect
from coda.policy.options import PolicyOptions
from coda.policy.state import CPU, CPU_POOL, DNN, GPU_POOL, Job


class KindArrays:
    """Two arrays, DNN jobs and CPU jobs (CODA's, and a GPU and a CPU partition)."""

    names: tuple[str, ...] = (DNN, CPU)

    def array_of(self, job: Job) -> str:
        return job.kind


class GpuSizeArrays:
    """CODA's GPU array split in two sub-arrays, jobs of ``big`` GPUs or more and jobs
    of fewer (the paper's option: small jobs do not queue behind a big one's wait
    for a whole server), plus the CPU array."""

    names: tuple[str, ...] = ("dnn-big", DNN, CPU)
    big: int = 4

    def array_of(self, job: Job) -> str:
        if not job.is_dnn:
            return CPU
        return "dnn-big" if job.gpus >= self.big else DNN


class SingleQueue:
    """One FIFO queue for every job (a plain cluster scheduler)."""

    names: tuple[str, ...] = ("all",)

    def array_of(self, job: Job) -> str:
        return "all"


class FifoOrder:
    """First come, first served; trace order breaks ties."""

    def key(self, job: Job) -> tuple[Any, ...]:
        return (job.submit, job.idx)

    def band(self, job: Job) -> int:
        return 0  # one band: fair share (where the policy has it) orders every job


class SeparatePools:
    """DNN jobs on GPU nodes, CPU jobs on CPU nodes."""

    generation = 0  # never changes its answers

    def pools(self, job: Job) -> tuple[str, ...]:
        return (GPU_POOL,) if job.is_dnn else (CPU_POOL,)


class SharedPools:
    """DNN jobs on GPU nodes; CPU jobs on CPU nodes first, then on GPU nodes."""

    generation = 0  # never changes its answers

    def pools(self, job: Job) -> tuple[str, ...]:
        return (GPU_POOL,) if job.is_dnn else (CPU_POOL, GPU_POOL)


class RequestedCores:
    """Grant exactly what the job asked for (static allocation)."""

    generation = 0  # never changes its answers

    def cores_per_node(self, job: Job) -> int:
        return job.cores_pn_req

    def group_key(self, job: Job) -> tuple[Any, ...]:
        return (job.cores_pn_req,)


def _requested(
    name: str,
    options: PolicyOptions,
    arrays: Arrays,
    pools: PoolSelect,
    description: str,
    fair: DominantShares | None = None,
) -> Policy:
    """A baseline: requested cores, arrival order (between tenants by DRF with fair)."""
    return Policy(
        name=name,
        arrays=arrays,
        estimates=options.runtime_estimate(),
        queue_sort=FifoOrder(),
        pools=pools,
        core_count=RequestedCores(),
        filters=list(options.filters),
        reserve=[fair] if fair is not None else [],
        fair_share=fair,
        description=description,
    )


def static_separate(options: PolicyOptions) -> Policy:
    return _requested(
        "static-separate",
        options,
        KindArrays(),
        SeparatePools(),
        "Slurm-like: requested cores, GPU and CPU nodes kept apart, FIFO + backfill",
    )


def static_shared(options: PolicyOptions) -> Policy:
    return _requested(
        "static-shared",
        options,
        KindArrays(),
        SharedPools(),
        "as static-separate, but CPU jobs may use free cores on GPU nodes, unprotected",
    )


def fifo(options: PolicyOptions) -> Policy:
    return _requested(
        "fifo",
        options,
        SingleQueue(),
        SharedPools(),
        "the paper's FIFO: one queue in arrival order, requested cores, shared servers",
    )


def drf(options: PolicyOptions) -> Policy:
    return _requested(
        "drf",
        options,
        SingleQueue(),
        SharedPools(),
        "the paper's DRF: one queue, tenants by dominant share (GPUs for DNN jobs), "
        "requested cores, shared servers",
        fair=DominantShares(),
    )


def slurm(options: PolicyOptions) -> Policy:
    return Policy(
        name="slurm",
        arrays=SingleQueue(),
        estimates=options.runtime_estimate(),
        queue_sort=FifoOrder(),
        pools=SharedPools(),
        core_count=RequestedCores(),
        filters=list(options.filters),
        node_order="fewest-cores",
        reservations="every-job",
        plan_times="slurm-windows",
        description="plain Slurm (coda replay's baseline): fifo, every queued job holding "
        "a plan as sched/backfill does (begun where its will-run test puts it), the node "
        "with the fewest free cores",
    )
