"""CODA's multi-array scheduler plugins (policy/coda.py, policy/plugins/) on hand-built state.

No simulator: each test builds nodes and running jobs by hand, calls one plugin,
and (for reclaim) applies the returned actions the way a driver does, then checks
the node's books.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.policy import POLICIES, make_policy
from coda.policy.allocator import AdaptiveAllocator
from coda.policy.eliminator import ContentionEliminator
from coda.policy.framework import Action, Policy, Preempt, Reclaim, SetCores, SetQuota
from coda.policy.harm_budget import HarmBudget, HarmBudgetConfig
from coda.policy.options import PolicyOptions
from coda.policy.plugins.bus_headroom import BusHeadroom
from coda.policy.plugins.idle_gpu_reserve import IdleGpuReserve
from coda.policy.plugins.oracle_cores import OracleCores
from coda.policy.plugins.pools import ArrayPools
from coda.policy.plugins.queue_sort import PreemptedFirst
from coda.policy.plugins.reclaim import RequeueOnly, ShrinkThenPreempt
from coda.policy.plugins.returns_cheaply import ReturnsCheaply, gives_back_cheaply
from coda.policy.plugins.spread_pcie import SpreadPcieHeavy
from coda.policy.state import CPU_POOL, GPU_POOL, Job, Node
from coda.workload.perf import load_profile_set

PROFILES = load_profile_set("coda")
HEAVY = PROFILES.job_perf("ResNet50", 1, 1)  # PCIe-heavy
LIGHT = PROFILES.job_perf("Transformer", 1, 1)  # not PCIe-heavy
CODA_FAMILY = ("coda", "coda-no-slimming", "coda-no-colocation", "coda-no-eliminator", "oracle")


# ---------------------------------------------------------------- hand-built state
def gpu_node(idx: int = 0, gpus: int = 4, cores: int = 32) -> Node:
    return Node(idx, f"g{idx}", gpus, cores, 0, 100.0)


def cpu_node(idx: int = 0, cores: int = 32) -> Node:
    return Node(idx, f"c{idx}", 0, cores, 0, 100.0)


def cpu_job(idx: int, cores: int, submit: float = 0.0, nodes: int = 1) -> Job:
    return Job(idx, f"cpu{idx}", submit, 0, cores, 0, nodes, 100.0)


def dnn_job(
    idx: int, gpus: int = 1, cores: int = 8, model: str = "ResNet50", perf=None, nodes: int = 1
) -> Job:
    return Job(idx, f"dnn{idx}", 0.0, gpus, cores, 0, nodes, 100.0, model=model, perf=perf)


def run_on(job: Job, nodes: Node | list[Node], cores_pn: int, start: float = 0.0) -> Job:
    """Make ``job`` run on ``nodes`` with ``cores_pn`` cores each, as a driver would."""
    nodes = [nodes] if isinstance(nodes, Node) else nodes
    job.placement = list(nodes)
    job.cores_pn = cores_pn
    job.start = start
    for node in nodes:
        node.jobs[job] = None
        node.free_cores -= cores_pn
        node.free_gpus -= job.gpus_pn
        if not job.is_dnn:
            node.cpu_job_cores += cores_pn
        if job.perf is not None and job.perf.pcie_heavy:
            node.pcie_heavy.append(job)
    return job


def apply(actions: list[Action]) -> None:
    """Apply actions the way the driver does (never over-committing a node)."""
    for action in actions:
        job = action.job
        assert job.running, f"action on a job that is not running: {action}"
        if isinstance(action, Preempt):
            assert not job.is_dnn, "only CPU jobs are preempted"
            for node in job.placement:
                del node.jobs[job]
                node.free_cores += job.cores_pn
                node.free_gpus += job.gpus_pn
                node.cpu_job_cores -= job.cores_pn
            job.placement = []
            job.cores_pn = 0
            job.start = -1.0
            job.preemptions += 1
        elif isinstance(action, SetCores):
            new = int(action.cores_pn)
            assert new >= 1, "a running job keeps at least one core"
            delta = new - job.cores_pn
            if delta > 0 and any(n.free_cores < delta for n in job.placement):
                continue  # refused: the driver never over-commits
            for node in job.placement:
                node.free_cores -= delta
                if not job.is_dnn:
                    node.cpu_job_cores += delta
            job.cores_pn = new
        elif isinstance(action, SetQuota):
            job.quota = action.quota
        else:  # pragma: no cover
            raise TypeError(action)


def assert_books(node: Node) -> None:
    assert node.free_cores >= 0, node
    assert node.free_gpus >= 0, node
    assert sum(j.cores_pn for j in node.jobs) + node.free_cores == node.cores
    assert sum(j.gpus_pn for j in node.jobs) + node.free_gpus == node.gpus
    assert sum(j.cores_pn for j in node.jobs if not j.is_dnn) == node.cpu_job_cores
    assert node.dnn_free_cores == node.free_cores + node.cpu_job_cores


def floor_of(job: Job, min_share: float) -> int:
    """The fewest cores a shrink may leave a CPU job with."""
    return max(1, math.ceil(min_share * job.cores_pn_req))


def spare(job: Job, min_share: float) -> int:
    return max(0, job.cores_pn - floor_of(job, min_share))


def newest_first(node: Node) -> list[Job]:
    return sorted((j for j in node.jobs if not j.is_dnn), key=lambda j: (-j.start, -j.idx))


# ---------------------------------------------------------------- hypothesis state
@st.composite
def gpu_nodes_with_cpu_jobs(draw, min_share: float = 0.5):
    """A GPU node, maybe with a running DNN job, and random running CPU jobs."""
    gpus = draw(st.integers(1, 8))
    cores = draw(st.integers(2, 96))
    node = gpu_node(0, gpus, cores)
    idx = 0
    if draw(st.booleans()):
        g = draw(st.integers(1, gpus))
        c = draw(st.integers(1, cores // 2))
        run_on(dnn_job(idx, g, c, perf=HEAVY), node, c, start=draw(st.integers(0, 50)))
        idx += 1
    for _ in range(draw(st.integers(0, 10))):
        req = draw(st.integers(1, 24))
        lo = max(1, math.ceil(min_share * req))
        cur = draw(st.integers(lo, req))
        if cur > node.free_cores:
            continue
        start = float(draw(st.integers(0, 20)))  # small range: start ties happen
        run_on(cpu_job(idx, req), node, cur, start=start)
        idx += 1
    return node


@st.composite
def reclaim_cases(draw):
    min_share = draw(st.sampled_from([0.5, 0.5, 0.25, 0.75, 1.0, 0.3, 0.9]))
    node = draw(gpu_nodes_with_cpu_jobs(min_share))
    # The driver asks for cores_pn - free_cores, with cores_pn <= free + CPU-held.
    need = draw(st.integers(1, max(1, node.cpu_job_cores)))
    return min_share, node, need


# ---------------------------------------------------------------- ShrinkThenPreempt
def test_shrink_then_preempt_is_a_reclaim_plugin():
    plugin: Reclaim = ShrinkThenPreempt()  # the type checker holds it to the Protocol
    assert plugin.shrinks and ShrinkThenPreempt().min_share == 0.5


@settings(max_examples=300, deadline=None)
@given(reclaim_cases())
def test_reclaim_frees_enough_and_no_more_than_it_must(case):
    min_share, node, need = case
    if node.cpu_job_cores == 0:
        assert ShrinkThenPreempt(min_share).reclaim(dnn_job(99), node, 0, 100.0) == []
        return
    dnn = dnn_job(99, 1, need + node.free_cores)
    cpu = newest_first(node)
    dnn_running = [j for j in node.jobs if j.is_dnn]
    before = {j: j.cores_pn for j in node.jobs}
    actions = ShrinkThenPreempt(min_share).reclaim(dnn, node, need, 100.0)

    # Only the node's CPU jobs are touched, each at most once (never shrunk and preempted).
    touched = [a.job for a in actions]
    assert all(j in cpu for j in touched)
    assert len(touched) == len(set(touched))
    assert all(isinstance(a, SetCores | Preempt) for a in actions)
    preempted = [a.job for a in actions if isinstance(a, Preempt)]
    shrunk = {a.job: a.cores_pn for a in actions if isinstance(a, SetCores)}

    # Shrinks only shrink, and never below max(1, ceil(min_share x request)).
    for j, c in shrunk.items():
        assert floor_of(j, min_share) <= c < before[j]

    # It preempts only when shrinking every CPU job cannot cover the need ...
    if preempted:
        assert sum(spare(j, min_share) for j in cpu) < need
        # ... the most recently started first (a prefix of newest-first order) ...
        assert preempted == cpu[: len(preempted)]
        # ... and no more jobs than needed: without the last one, shrinking the
        # others (it included) plus what the rest of the preemptions free falls short.
        rest = preempted[:-1]
        freed_rest = sum(before[j] for j in rest)
        shrink_rest = sum(spare(j, min_share) for j in cpu if j not in rest)
        assert freed_rest + shrink_rest < need
    # Shrinks take only what the preemptions left to cover.
    freed_by_preempt = sum(before[j] for j in preempted)
    shrink_total = sum(before[j] - c for j, c in shrunk.items())
    assert shrink_total == max(0, need - freed_by_preempt)

    free_before = node.free_cores
    apply(actions)
    assert node.free_cores - free_before >= need
    assert all(j.cores_pn == before[j] and j in node.jobs for j in dnn_running)
    assert_books(node)

    # Never over-commits: the DNN job's cores now fit and the books still balance.
    assert node.free_cores >= dnn.cores_pn_req
    if node.free_gpus >= dnn.gpus_pn:
        run_on(dnn, node, dnn.cores_pn_req, start=100.0)
        assert_books(node)


@settings(max_examples=300, deadline=None)
@given(gpu_nodes_with_cpu_jobs(), st.data())
def test_dnn_job_never_waits_for_cores_cpu_jobs_hold(node, data):
    """The driver's contract: where a DNN job's GPUs are free and free + CPU-held
    cores cover its cores, reclaim makes room for it."""
    assert node.dnn_free_cores == node.free_cores + node.cpu_job_cores
    if node.free_gpus == 0:
        return
    gpus = data.draw(st.integers(1, node.free_gpus))
    cores = data.draw(st.integers(1, node.dnn_free_cores))
    job = dnn_job(99, gpus, cores)
    assert job.gpus_pn <= node.free_gpus and cores <= node.dnn_free_cores
    if node.free_cores < cores:
        apply(ShrinkThenPreempt().reclaim(job, node, cores - node.free_cores, 50.0))
    assert node.fits(job.gpus_pn, cores, job.mem_pn)
    assert_books(node)
    run_on(job, node, cores, start=50.0)
    assert_books(node)


def test_reclaim_shrinks_newest_first_when_that_suffices():
    node = gpu_node(cores=32)
    old = run_on(cpu_job(0, 8), node, 8, start=0.0)
    new = run_on(cpu_job(1, 8), node, 8, start=10.0)
    actions = ShrinkThenPreempt().reclaim(dnn_job(9), node, 6, 20.0)
    assert actions == [SetCores(new, 4), SetCores(old, 6)]


def test_reclaim_preempts_newest_then_shrinks_the_rest():
    node = gpu_node(cores=16)
    old = run_on(cpu_job(0, 8), node, 8, start=0.0)
    new = run_on(cpu_job(1, 8), node, 8, start=10.0)
    # Shrinking both frees 8 < 12: preempt the newer (8), shrink the older by 4.
    actions = ShrinkThenPreempt().reclaim(dnn_job(9), node, 12, 20.0)
    assert actions == [Preempt(new), SetCores(old, 4)]
    apply(actions)
    assert node.free_cores == 12 and new not in node.jobs
    assert_books(node)


def test_reclaim_breaks_start_ties_by_later_trace_row():
    node = gpu_node(cores=32)
    a = run_on(cpu_job(3, 4), node, 4, start=5.0)
    b = run_on(cpu_job(7, 4), node, 4, start=5.0)
    assert ShrinkThenPreempt().reclaim(dnn_job(9), node, 2, 6.0) == [SetCores(b, 2)]
    assert ShrinkThenPreempt().reclaim(dnn_job(9), node, 8, 6.0) == [Preempt(b), Preempt(a)]


def test_reclaim_leaves_dnn_jobs_and_floor_level_jobs_alone():
    node = gpu_node(gpus=4, cores=16)
    dnn = run_on(dnn_job(0, 1, 4), node, 4, start=30.0)  # newest of all
    at_floor = run_on(cpu_job(1, 8), node, 4, start=20.0)  # already at min_share
    one = run_on(cpu_job(2, 1), node, 1, start=10.0)  # a 1-core job cannot shrink
    older = run_on(cpu_job(3, 6), node, 6, start=0.0)
    assert node.free_cores == 1
    actions = ShrinkThenPreempt().reclaim(dnn_job(9), node, 3, 40.0)
    assert actions == [SetCores(older, 3)]
    # Needing more than all shrinks (3) preempts newest first, skipping the DNN job.
    actions = ShrinkThenPreempt().reclaim(dnn_job(9), node, 5, 40.0)
    assert actions == [Preempt(at_floor), SetCores(older, 5)]
    apply(actions)
    assert dnn in node.jobs and dnn.cores_pn == 4 and one.cores_pn == 1
    assert_books(node)


# ---------------------------------------------------------------- RequeueOnly
def test_requeue_only_keeps_the_new_jobs_an_older_one_covers():
    """The replay's case: 12 cores needed; newest first takes 4+2+2 and then the old
    8-core job; with it, the two 2-core jobs are not needed and keep running."""
    node = gpu_node(cores=28)
    old = run_on(cpu_job(25, 8), node, 8, start=0.0)
    run_on(cpu_job(29, 2), node, 2, start=5.0)
    run_on(cpu_job(31, 2), node, 2, start=8.0)
    new = run_on(cpu_job(33, 4), node, 4, start=9.0)
    assert RequeueOnly().reclaim(dnn_job(34), node, 12, 10.8) == [Preempt(new), Preempt(old)]
    # Needing 8, the newest three (4+2+2) suffice: the old job is not touched.
    assert [a.job.idx for a in RequeueOnly().reclaim(dnn_job(34), node, 8, 10.8)] == [33, 31, 29]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(reclaim_cases(), st.data())
def test_requeue_only_frees_enough_with_no_job_to_spare(case, data):
    _, node, need = case
    cpu = newest_first(node)
    for j in cpu:  # some jobs requeued before, some Slurm may not requeue
        j.preemptions = data.draw(st.integers(0, 2))
        j.preemptible = data.draw(st.booleans() | st.just(True))
    need = data.draw(st.integers(1, max(1, node.cpu_job_cores + 4)))  # maybe beyond reach
    # The plugin's order: jobs requeued fewer times first, then the newest.
    order = sorted(
        (j for j in cpu if j.preemptible), key=lambda j: (j.preemptions, -j.start, -j.idx)
    )
    actions = RequeueOnly().reclaim(dnn_job(99), node, need, 100.0)
    taken = [a.job for a in actions]
    assert all(isinstance(a, Preempt) for a in actions) and len(set(taken)) == len(taken)
    assert taken == [j for j in order if j in taken]  # in that order, requeueable only
    freed = sum(j.cores_pn for j in taken)
    if need <= sum(j.cores_pn for j in order):
        assert freed >= need
        # Every job taken is needed: without any one, the rest fall short.
        assert all(freed - j.cores_pn < need for j in taken)
        # The last taken is the first at which that order covers the need.
        last = order.index(taken[-1])
        assert sum(j.cores_pn for j in order[:last]) < need
    else:
        assert taken == order  # all it may take


def test_reclaim_needing_nothing_does_nothing():
    node = gpu_node()
    run_on(cpu_job(0, 8), node, 8, start=0.0)
    assert ShrinkThenPreempt().reclaim(dnn_job(9), node, 0, 1.0) == []


def test_reclaim_of_a_gang_cpu_job_frees_it_on_every_node():
    a, b = gpu_node(0, cores=8), gpu_node(1, cores=8)
    gang = run_on(cpu_job(0, 16, nodes=2), [a, b], 8, start=0.0)
    apply(ShrinkThenPreempt().reclaim(dnn_job(9), a, 3, 1.0))
    assert gang.cores_pn == 5 and a.free_cores == b.free_cores == 3
    apply(ShrinkThenPreempt().reclaim(dnn_job(9), a, 8, 1.0))
    assert not gang.running and a.free_cores == b.free_cores == 8
    for node in (a, b):
        assert_books(node)


# ---------------------------------------------------------------- BusHeadroom
def harm_with(**config: float) -> HarmBudget:
    return HarmBudget(HarmBudgetConfig(**config))


@settings(max_examples=300, deadline=None)
@given(
    bw_used=st.floats(0.0, 200.0),
    bw_gbps=st.sampled_from([0.0, 50.0, 100.0]),
    share=st.floats(0.05, 1.0),
    per_core=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    cores=st.integers(1, 40),
    cpu_cores=st.integers(0, 8),
)
def test_bus_headroom_keeps_cpu_jobs_off_busy_buses(
    bw_used, bw_gbps, share, per_core, cores, cpu_cores
):
    node = Node(0, "g0", 4, 32, 0, bw_gbps)
    node.bw_used = bw_used
    node.cpu_job_cores = cpu_cores
    f = BusHeadroom(harm_with(bus_share=share, bus_gbps_per_core=per_core))
    cap = share * bw_gbps
    draw = per_core * cores
    # A job too large for even an idle bus under the rule passes: it must not wait for ever.
    fits = bw_gbps == 0 or draw >= cap or bw_used + draw < cap
    assert f.filter(cpu_job(0, cores), node, cores) is fits
    # The core bound: no job larger than it passes.
    most = f.most_cores("cpu", node)
    assert 0 <= most <= node.cores
    if cores <= node.cores and fits:
        assert cores <= most
    # Training jobs and CPU nodes pass whatever the bus carries.
    assert f.filter(dnn_job(1, 1, cores), node, cores) is True
    assert f.most_cores("dnn", node) == node.cores
    cnode = Node(1, "c1", 0, 32, 0, bw_gbps)
    cnode.bw_used = bw_used
    assert f.filter(cpu_job(0, cores), cnode, cores) is True
    # The score: a training job prefers a calmer bus where CPU jobs run, and has no
    # preference where none do.
    want = 0.0 if cpu_cores == 0 or bw_gbps == 0 else -min(1.0, bw_used / bw_gbps)
    assert f.score(dnn_job(1, 1, 4), node, 4) == want
    assert f.score(cpu_job(0, 4), node, 4) == 0.0


@pytest.mark.parametrize("bad", [0.0, -0.1, 1000.5, math.nan, math.inf])
def test_the_bus_share_is_checked(bad):
    with pytest.raises(ValueError, match="bus_share"):
        HarmBudgetConfig(bus_share=bad)
    if bad != 0.0:
        with pytest.raises(ValueError, match="bus_gbps_per_core"):
            HarmBudgetConfig(bus_gbps_per_core=bad)


def test_a_tuned_bus_share_takes_effect():
    # 100 GB/s, 68 used: a 4-core job (4 GB/s expected) fits under 0.9, not under 0.7.
    node = Node(0, "g0", 4, 32, 0, 100.0)
    node.bw_used = 68.0
    policy = make_policy("coda", PolicyOptions(tune={"harm.bus_share": "0.9"}))
    assert policy.allows(cpu_job(0, 4), node, 4)
    assert not make_policy("coda").allows(cpu_job(0, 4), node, 4)
    heavy = make_policy("coda", PolicyOptions(tune={"harm.bus_gbps_per_core": "10"}))
    node.bw_used = 40.0
    assert make_policy("coda").allows(cpu_job(0, 4), node, 4)  # 40 + 4 < 70
    assert not heavy.allows(cpu_job(0, 4), node, 4)  # 40 + 40 >= 70
    assert heavy.allows(cpu_job(0, 8), node, 8)  # 80 alone: no bus would let it in


def test_a_training_job_goes_where_its_traffic_slows_cpu_jobs_least():
    policy = make_policy("coda")
    calm, busy, empty = (Node(i, f"g{i}", 4, 32, 0, 100.0) for i in range(3))
    calm.bw_used, calm.cpu_job_cores = 20.0, 8
    busy.bw_used, busy.cpu_job_cores = 68.0, 8
    empty.bw_used = 90.0  # no CPU job there: its bus is the training jobs' business
    assert policy.pick(dnn_job(9, 1, 4), [busy, calm], 4, 1) == [calm]
    assert policy.pick(dnn_job(9, 1, 4), [empty, busy], 4, 1) == [empty]
    assert not policy.allows(cpu_job(8, 4), busy, 4)  # 68 + 4 >= 70
    assert policy.allows(cpu_job(8, 4), calm, 4)
    assert make_policy("coda-unbounded").allows(cpu_job(8, 4), busy, 4)


# ---------------------------------------------------------------- ReturnsCheaply
@pytest.mark.parametrize(
    ("preemptible", "checkpoints", "limit", "cheap"),
    [
        (True, True, math.inf, True),
        (True, False, math.inf, False),
        (True, False, 900.0, True),
        (True, False, 901.0, False),
        (False, True, 60.0, False),
    ],
)
def test_which_cpu_jobs_give_cores_back_cheaply(preemptible, checkpoints, limit, cheap):
    job = cpu_job(0, 4)
    job.preemptible, job.checkpoints, job.time_limit = preemptible, checkpoints, limit
    assert gives_back_cheaply(job, 900.0) is cheap
    harm = harm_with(cap_s=900.0)
    # Where a CPU node can host it, a dear job goes there only; a cheap one anywhere.
    pools = ArrayPools(harm=harm)
    pools.observe_cluster([cpu_node(0, cores=8), gpu_node(1)])
    assert pools.pools(job) == ((CPU_POOL, GPU_POOL) if cheap else (CPU_POOL,))
    # Without a CPU node that can host it, it is not kept waiting for one.
    pools.observe_cluster([cpu_node(0, cores=2), gpu_node(1)])
    assert pools.pools(job) == (CPU_POOL, GPU_POOL)
    # Without a harm budget every CPU job may borrow.
    unbounded = ArrayPools()
    unbounded.observe_cluster([cpu_node(0, cores=8), gpu_node(1)])
    assert unbounded.pools(job) == (CPU_POOL, GPU_POOL)
    # On GPU nodes a dear job prefers the one with fewer idle GPUs.
    score = ReturnsCheaply(harm)
    idle, busy = gpu_node(0), gpu_node(1)
    busy.free_gpus = 0
    assert score.score(job, busy, 4) == 0.0
    assert score.score(job, idle, 4) == (0.0 if cheap else -1.0)
    assert score.score(dnn_job(2), idle, 4) == 0.0


# ---------------------------------------------------------------- IdleGpuReserve
@pytest.mark.parametrize(
    ("free_gpus", "cores_pn", "ok"),
    [(4, 20, True), (4, 21, False), (2, 20, True), (2, 24, True), (0, 24, True)],
)
def test_idle_gpu_reserve_keeps_cores_for_idle_gpus(free_gpus, cores_pn, ok):
    node = gpu_node(gpus=4, cores=32)
    node.free_cores = 28  # a CPU job holds 4
    node.free_gpus = free_gpus
    assert IdleGpuReserve().filter(cpu_job(0, cores_pn), node, cores_pn) is ok


def test_a_cpu_job_too_big_for_any_reserve_is_not_starved_by_it():
    # 4 GPUs x 2 = 8 reserved of 32: a 25-core job could never fit beside the full
    # reserve, so the reserve does not apply to it (DNN jobs reclaim its cores).
    node = gpu_node(gpus=4, cores=32)
    assert IdleGpuReserve().filter(cpu_job(0, 25), node, 25) is True
    assert IdleGpuReserve().filter(cpu_job(0, 24), node, 24) is True
    node.free_cores = 30
    assert IdleGpuReserve().filter(cpu_job(0, 24), node, 24) is False
    assert IdleGpuReserve().filter(cpu_job(0, 25), node, 25) is True


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.integers(1, 8),
    cores=st.integers(1, 128),
    busy_gpus=st.integers(0, 8),
    used=st.integers(0, 128),
    cores_pn=st.integers(1, 128),
    per_gpu=st.integers(0, 8),
)
def test_idle_gpu_reserve_property(gpus, cores, busy_gpus, used, cores_pn, per_gpu):
    node = gpu_node(gpus=gpus, cores=cores)
    node.free_gpus = max(0, gpus - busy_gpus)
    node.free_cores = max(0, cores - used)
    f = IdleGpuReserve(cores_per_idle_gpu=per_gpu)
    never_fits_beside_reserve = cores_pn > cores - gpus * per_gpu
    want = never_fits_beside_reserve or node.free_cores - cores_pn >= node.free_gpus * per_gpu
    assert f.filter(cpu_job(0, cores_pn), node, cores_pn) is want
    # DNN jobs and CPU nodes are never filtered.
    assert f.filter(dnn_job(1, 1, cores_pn), node, cores_pn) is True
    cnode = cpu_node(cores=cores)
    cnode.free_cores = node.free_cores
    assert f.filter(cpu_job(0, cores_pn), cnode, cores_pn) is True


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.integers(0, 8),
    cores=st.integers(1, 64),
    busy_gpus=st.integers(0, 8),
    used=st.integers(0, 64),
    per_gpu=st.integers(0, 8),
)
def test_idle_gpu_reserve_core_bound_is_the_largest_request_it_lets_in(
    gpus, cores, busy_gpus, used, per_gpu
):
    node = gpu_node(gpus=gpus, cores=cores) if gpus else cpu_node(cores=cores)
    node.free_gpus = max(0, gpus - busy_gpus)
    node.free_cores = max(0, cores - used)
    f = IdleGpuReserve(cores_per_idle_gpu=per_gpu)
    let_in = [c for c in range(1, node.free_cores + 1) if f.filter(cpu_job(0, c), node, c)]
    bound = f.most_cores("cpu", node)
    if gpus:
        assert bound == max(let_in) if let_in else bound < 1
    else:
        assert bound == node.cores  # no reserve on a CPU node
    assert f.most_cores("dnn", node) == node.cores  # DNN jobs are never bounded


def test_idle_gpu_reserve_in_policy_allows():
    policy = make_policy("coda")
    node = gpu_node(gpus=4, cores=32)  # reserve 4 x 2 = 8
    node.free_cores = 30
    assert policy.allows(cpu_job(0, 22), node, 22)
    assert not policy.allows(cpu_job(0, 23), node, 23)
    assert policy.allows(dnn_job(1, 1, 32), node, 32)
    assert make_policy("coda-no-colocation").filters == []


# ---------------------------------------------------------------- ArrayPools
@pytest.mark.parametrize("preemptions", [0, 1, 2, 5])
def test_array_pools_dnn_jobs_on_gpu_nodes_only(preemptions):
    job = dnn_job(0)
    job.preemptions = preemptions
    for pools in (ArrayPools(), ArrayPools(colocate=False), ArrayPools(max_preemptions=0)):
        assert pools.pools(job) == (GPU_POOL,)


@pytest.mark.parametrize(
    ("colocate", "max_preemptions", "preemptions", "want"),
    [
        (True, 2, 0, (CPU_POOL, GPU_POOL)),
        (True, 2, 1, (CPU_POOL, GPU_POOL)),
        (True, 2, 2, (CPU_POOL,)),
        (True, 2, 3, (CPU_POOL,)),
        (True, 0, 0, (CPU_POOL,)),
        (True, 5, 4, (CPU_POOL, GPU_POOL)),
        (False, 2, 0, (CPU_POOL,)),
        (False, 2, 3, (CPU_POOL,)),
    ],
)
def test_array_pools_cpu_jobs(colocate, max_preemptions, preemptions, want):
    job = cpu_job(0, 4)
    job.preemptions = preemptions
    assert ArrayPools(colocate, max_preemptions).pools(job) == want
    assert ArrayPools(colocate, max_preemptions).pools(job)[0] == CPU_POOL


@pytest.mark.parametrize("max_preemptions", [0, 1, 2, 3, 7])
def test_cpu_job_cannot_be_preempted_forever(max_preemptions):
    """Reclaim runs only on GPU nodes: a job is preempted only while GPU_POOL is
    among its pools, so it can be preempted at most max_preemptions times."""
    pools = ArrayPools(colocate=True, max_preemptions=max_preemptions)
    job = cpu_job(0, 4)
    node = gpu_node(gpus=1, cores=4)
    for _ in range(100):  # an adversary: every start on a GPU node is preempted
        if GPU_POOL not in pools.pools(job):
            break
        run_on(job, node, 4, start=1.0)
        apply(
            ShrinkThenPreempt(max_preemptions=max_preemptions).reclaim(
                dnn_job(1, 1, 4), node, 4, 2.0
            )
        )
        assert_books(node)
    assert job.preemptions == max_preemptions
    assert pools.pools(job) == (CPU_POOL,)


# ---------------------------------------------------------------- PreemptedFirst
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3)), min_size=1, max_size=30))
def test_preempted_first_then_fifo(rows):
    jobs = []
    for i, (submit, preemptions) in enumerate(rows):
        j = cpu_job(i, 2, submit=float(submit))
        j.preemptions = preemptions
        jobs.append(j)
    order = sorted(jobs, key=PreemptedFirst().key)
    flags = [j.preemptions > 0 for j in order]
    assert flags == sorted(flags, reverse=True)  # every preempted job before the rest
    for group in (True, False):
        submits = [j.submit for j in order if (j.preemptions > 0) is group]
        assert submits == sorted(submits)


def test_preempted_first_examples():
    key = PreemptedFirst().key
    early, late, requeued = cpu_job(0, 2, 0.0), cpu_job(1, 2, 5.0), cpu_job(2, 2, 9.0)
    requeued.preemptions = 1
    assert sorted([late, early, requeued], key=key) == [requeued, early, late]
    d1, d2 = dnn_job(3), dnn_job(4)
    d1.submit, d2.submit = 7.0, 3.0
    assert sorted([d1, d2], key=key) == [d2, d1]


# ---------------------------------------------------------------- SpreadPcieHeavy
def test_pcie_profiles_are_as_the_tests_assume():
    assert HEAVY.pcie_heavy and not LIGHT.pcie_heavy


def test_spread_pcie_heavy_scores_only_heavy_pairs():
    score = SpreadPcieHeavy().score
    crowded, light_only, empty = gpu_node(0), gpu_node(1), gpu_node(2)
    run_on(dnn_job(0, perf=HEAVY), crowded, 2)
    run_on(dnn_job(1, model="Transformer", perf=LIGHT), light_only, 2)
    assert crowded.pcie_heavy and not light_only.pcie_heavy
    heavy = dnn_job(5, perf=HEAVY)
    light = dnn_job(6, model="Transformer", perf=LIGHT)
    assert score(heavy, crowded, 2) < score(heavy, empty, 2) == 0.0
    assert score(heavy, light_only, 2) == 0.0
    for job in (light, dnn_job(7, perf=None), cpu_job(8, 4)):
        for node in (crowded, light_only, empty):
            assert score(job, node, 2) == 0.0


def test_policy_pick_keeps_heavy_jobs_apart():
    policy = make_policy("coda")
    crowded, empty = gpu_node(0), gpu_node(1)
    run_on(dnn_job(0, perf=HEAVY), crowded, 2)
    heavy = dnn_job(5, perf=HEAVY)
    light = dnn_job(6, model="Transformer", perf=LIGHT)
    assert policy.pick(heavy, [crowded, empty], 2, 1) == [empty]
    assert policy.pick(light, [crowded, empty], 2, 1) == [crowded]  # best-fit order kept


# ---------------------------------------------------------------- OracleCores
def test_oracle_cores_is_the_ceiling_of_c_opt():
    oc = OracleCores()
    assert oc.cores_per_node(dnn_job(0, perf=HEAVY, cores=16)) == math.ceil(HEAVY.c_opt)
    frac = dataclasses.replace(HEAVY, curve_x=(0.0, 2.5), curve_y=(0.0, 1.0), c_opt=2.5)
    assert oc.cores_per_node(dnn_job(1, perf=frac, cores=16)) == 3
    tiny = dataclasses.replace(HEAVY, curve_x=(0.0, 0.25), curve_y=(0.0, 1.0), c_opt=0.25)
    assert oc.cores_per_node(dnn_job(2, perf=tiny, cores=16)) == 1
    assert oc.cores_per_node(cpu_job(3, 6)) == 6
    assert oc.cores_per_node(dnn_job(4, perf=None, cores=12)) == 12
    assert oc.group_key(dnn_job(5, model="VGG16", cores=12)) == ("VGG16", 12)


# ---------------------------------------------------------------- factories
def test_coda_family_is_registered():
    for name in CODA_FAMILY:
        assert name in POLICIES
        policy = make_policy(name)
        assert isinstance(policy, Policy) and policy.name == name and policy.description


@pytest.mark.parametrize("name", CODA_FAMILY)
def test_common_parts(name):
    p = make_policy(name)
    assert isinstance(p.queue_sort, PreemptedFirst)
    assert isinstance(p.pools, ArrayPools)
    bounded = p.harm is not None  # the harm bound keeps CPU jobs and busy buses apart
    assert [type(s) for s, _ in p.scores] == [SpreadPcieHeavy] + [
        BusHeadroom,
        ReturnsCheaply,
    ] * bounded
    assert p.candidates_to_score == 4
    assert p.pools.pools(dnn_job(0)) == (GPU_POOL,)


def test_coda_parts():
    p = make_policy("coda")
    assert isinstance(p.core_count, AdaptiveAllocator) and p.core_count.config.search
    assert p.job_control is p.core_count
    assert isinstance(p.node_control, ContentionEliminator)
    assert p.node_control.book is p.core_count.book  # one book, shared by both loops
    assert p.sample_period_s == p.node_control.period_s
    assert isinstance(p.reclaim, ShrinkThenPreempt)
    assert [type(f) for f in p.filters] == [IdleGpuReserve, BusHeadroom]
    assert p.pools.colocate and p.pools.pools(cpu_job(0, 2)) == (CPU_POOL, GPU_POOL)
    assert not p.ideal_isolation


def test_coda_no_colocation_parts():
    p = make_policy("coda-no-colocation")
    assert p.pools.pools(cpu_job(0, 2)) == (CPU_POOL,)
    assert p.reclaim is None and p.node_control is None and p.filters == []
    assert isinstance(p.job_control, AdaptiveAllocator) and p.job_control.config.search
    assert p.sample_period_s == 10.0


def test_coda_no_eliminator_parts():
    p = make_policy("coda-no-eliminator")
    assert p.node_control is None
    assert isinstance(p.reclaim, ShrinkThenPreempt)
    assert p.pools.pools(cpu_job(0, 2)) == (CPU_POOL, GPU_POOL)
    assert isinstance(p.job_control, AdaptiveAllocator) and p.job_control.config.search


def test_no_slimming_grants_the_request_even_with_a_learned_profile():
    job = dnn_job(0, 1, 8, model="ResNet50")
    shape = ("ResNet50", 1, 1)
    slim, keep = make_policy("coda"), make_policy("coda-no-slimming")
    assert isinstance(keep.node_control, ContentionEliminator)
    for p in (slim, keep):
        for _ in range(3):
            p.core_count.learned.record(shape, 3)
        assert p.core_count.learned.confident(shape)
    assert slim.core_count.cores_per_node(job) == 3
    assert keep.core_count.cores_per_node(job) == 8
    assert keep.core_count.config.search is False


def test_oracle_parts():
    p = make_policy("oracle")
    assert p.ideal_isolation is True
    assert isinstance(p.core_count, OracleCores)
    assert p.core_count.cores_per_node(dnn_job(0, perf=HEAVY, cores=16)) == math.ceil(HEAVY.c_opt)
    four = PROFILES.job_perf("ResNet50", 4, 1)
    assert p.core_count.cores_per_node(dnn_job(1, 4, 32, perf=four)) == math.ceil(four.c_opt)
    assert isinstance(p.reclaim, ShrinkThenPreempt)
    assert p.job_control is None and p.node_control is None
    assert [type(f) for f in p.filters] == [IdleGpuReserve]


@pytest.mark.parametrize("name", CODA_FAMILY)
def test_each_call_builds_fresh_state(name):
    a, b = make_policy(name), make_policy(name)
    assert a is not b
    for part in ("queue_sort", "pools", "core_count", "reclaim", "node_control", "job_control"):
        pa, pb = getattr(a, part), getattr(b, part)
        assert pa is None or pa is not pb, part
    assert a.filters is not b.filters and a.scores is not b.scores


def test_two_coda_policies_share_no_book_or_profiles():
    a, b = make_policy("coda"), make_policy("coda")
    assert a.core_count.book is not b.core_count.book
    assert a.node_control.book is not b.node_control.book
    assert a.core_count.learned is not b.core_count.learned
    job = dnn_job(0, 1, 8, model="VGG16")
    a.core_count.learned.record(("VGG16", 1, 1), 2)
    a.core_count.book.add(job, 1.0, 50.0)
    assert a.core_count.cores_per_node(job) == 2
    assert b.core_count.cores_per_node(job) == 8
    assert b.core_count.book.samples(job) == [] and len(b.core_count.book) == 0


# ---------------------------------------------------------------- end to end (no driver)
def test_random_node_history_keeps_books_balanced():
    """Many reclaims on one node, with CPU jobs arriving between them."""
    rng = random.Random(7)
    node = gpu_node(gpus=8, cores=64)
    reclaim = ShrinkThenPreempt()
    idx = 0
    for t in range(200):
        for _ in range(rng.randint(0, 3)):
            req = rng.randint(1, 12)
            if req <= node.free_cores:
                run_on(cpu_job(idx, req), node, req, start=float(t))
                idx += 1
        dnns = [j for j in node.jobs if j.is_dnn]
        if dnns and rng.random() < 0.3:  # a DNN job ends
            done = rng.choice(dnns)
            del node.jobs[done]
            node.free_cores += done.cores_pn
            node.free_gpus += done.gpus_pn
        if node.free_gpus and node.dnn_free_cores:
            gpus = rng.randint(1, node.free_gpus)
            cores = rng.randint(1, node.dnn_free_cores)
            job = dnn_job(idx, gpus, cores)
            idx += 1
            if node.free_cores < cores:
                apply(reclaim.reclaim(job, node, cores - node.free_cores, float(t)))
            run_on(job, node, cores, start=float(t))
        assert_books(node)


def test_over_preempted_cpu_jobs_keep_gpu_nodes_when_no_cpu_node_fits_them():
    pools = ArrayPools(max_preemptions=1)
    pools.observe_cluster([gpu_node(0, cores=32), cpu_node(1, cores=16)])
    small, big = cpu_job(0, 8), cpu_job(1, 24)
    small.preemptions = big.preemptions = 1
    assert pools.pools(small) == (CPU_POOL,)
    # CPU-only would leave it nowhere to run: it keeps both pools (and reclaim
    # picks jobs preempted fewer times first).
    assert pools.pools(big) == (CPU_POOL, GPU_POOL)


def test_reclaim_spares_jobs_already_preempted():
    node = gpu_node(gpus=4, cores=32)
    old = run_on(cpu_job(0, 8), node, 8, start=0.0)
    veteran = run_on(cpu_job(1, 8), node, 8, start=5.0)  # newest, but preempted before
    veteran.preemptions = 1
    actions = ShrinkThenPreempt(min_share=1.0).reclaim(dnn_job(9), node, 8, 10.0)
    assert [type(a).__name__ for a in actions] == ["Preempt"]
    assert actions[0].job is old


def test_a_job_past_its_time_limit_does_not_make_the_cycle_spin() -> None:
    # A running job past its limit is expected to end "now": the head's reservation is
    # due now, and stays the same plan (no new one, no retries, every round).
    from coda.cycle import Scheduler
    from coda.cycle import scheduler as sched_mod
    from coda.cycle.once import Booking
    from coda.policy import PolicyOptions

    rounds = [0]
    real = sched_mod.Scheduler._round

    def counting(self, dirty, fresh):  # type: ignore[no-untyped-def]
        rounds[0] += 1
        return real(self, dirty, fresh)

    pol = make_policy("coda", PolicyOptions(estimates="time-limits", reclaim="requeue"))
    nodes = [Node(0, "n0", 1, 4, 0, 100.0)]
    pol.observe_cluster(nodes)
    s = Scheduler(pol, nodes)
    a = Job(0, "A", 0.0, 1, 2, 0, 1, 1e9, time_limit=10.0)
    s.submit(a)
    s.cycle(0.0, Booking(s, 0.0))
    b = Job(1, "B", 1.0, 1, 2, 0, 1, 5.0, time_limit=10.0)
    s.submit(b)
    sched_mod.Scheduler._round = counting  # type: ignore[method-assign]
    try:
        for now in (100.0, 101.0, 102.0):
            rounds[0] = 0
            s.cycle(now, Booking(s, now))
            assert rounds[0] <= 2, rounds[0]
    finally:
        sched_mod.Scheduler._round = real  # type: ignore[method-assign]
    assert not s.pending() and str(s.reason_of(b)).startswith("waits for GPUs")
