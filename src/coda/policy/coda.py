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

from coda.policy.allocator import AdaptiveAllocator, AllocatorConfig
from coda.policy.baselines import GpuSizeArrays, KindArrays
from coda.policy.eliminator import ContentionEliminator, EliminatorConfig
from coda.policy.fairshare import DominantShares
from coda.policy.feedback import ThroughputHistory
from coda.policy.framework import (
    CHECKPOINT_S,
    Arrays,
    Filter,
    Policy,
    Reserve,
    Score,
)
from coda.policy.harm_budget import HarmBudget
from coda.policy.options import PolicyOptions
from coda.policy.plugins.bus_headroom import BusHeadroom
from coda.policy.plugins.idle_gpu_reserve import IdleGpuReserve
from coda.policy.plugins.oracle_cores import OracleCores
from coda.policy.plugins.pools import ArrayPools
from coda.policy.plugins.queue_sort import PreemptedFirst
from coda.policy.plugins.returns_cheaply import ReturnsCheaply
from coda.policy.plugins.spread_pcie import SpreadPcieHeavy


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
    harm_bound: bool = True,
    description: str,
    options: PolicyOptions,
) -> Policy:
    book = ThroughputHistory()
    # The policy's checkpoint interval: what a requeue is assumed to lose at most.
    harm = HarmBudget(checkpoint_s=CHECKPOINT_S) if harm_bound and colocation else None
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
    control = ContentionEliminator(book, elim_config, harm) if eliminator and colocation else None
    filters: list[Filter] = [IdleGpuReserve()] if colocation else []
    # The harm bound keeps CPU jobs off busy memory buses and away from the cores
    # training jobs will want back unless they give them back cheaply.
    scores: list[tuple[Score, float]] = [(SpreadPcieHeavy(), 1.0)]
    if harm is not None:
        bus = BusHeadroom(harm)
        filters.append(bus)
        scores += [(bus, 1.0), (ReturnsCheaply(harm), 1.0)]
    arrays, shares, reserve = _ordering(options)
    return Policy(
        name=name,
        arrays=arrays,
        fair_share=shares,
        reserve=reserve,
        estimates=options.runtime_estimate(),
        queue_sort=PreemptedFirst(),
        pools=ArrayPools(colocate=colocation, harm=harm),
        core_count=allocator,  # without slimming it grants the request
        filters=filters + list(options.filters),
        scores=scores,
        candidates_to_score=4,
        node_control=control,
        job_control=allocator,
        sample_period_s=(
            control.period_s if control is not None else 10.0 if period is None else period
        ),
        reclaim=options.reclaimer(harm) if colocation else None,
        harm=harm,
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


def coda_unbounded(options: PolicyOptions) -> Policy:
    return _coda(
        "coda-unbounded",
        options=options,
        harm_bound=False,
        description="CODA without the bound on CPU jobs' harm: any CPU job may be throttled, "
        "shrunk and preempted however long",
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
