"""The paper's baselines (fifo, drf), DRF ordering in the cycle, CODA's sub-arrays and
the paper's allocator start point, on hand-built state."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from coda.cycle import Scheduler, Start
from coda.cycle.once import Booking, plan
from coda.policy import PolicyOptions, make_policy
from coda.policy.allocator import AllocatorConfig
from coda.policy.baselines import GpuSizeArrays
from coda.policy.fairshare import DominantShares
from coda.policy.state import Job, Node
from coda.sim.engine import Simulator
from coda.workload.cluster import parse_cluster_spec
from coda.workload.jobs import JobTable
from coda.workload.perf import build_workload, load_profile_set

PROFILES = load_profile_set("coda")


def gpu_node(idx: int = 0, gpus: int = 4, cores: int = 28) -> Node:
    return Node(idx, f"g{idx}", gpus, cores, 0, 56.0)


def job(idx: int, user: str, gpus: int = 1, cores: int = 4, submit: float = 0.0) -> Job:
    model = "Transformer" if gpus else None
    perf = PROFILES.job_perf("Transformer", gpus, 1) if gpus else None
    return Job(idx, f"j{idx}", submit, gpus, cores, 0, 1, 100.0, model=model, perf=perf, user=user)


# ---------------------------------------------------------------- the share book
def test_dominant_share_is_the_larger_of_gpu_and_core_shares() -> None:
    shares = DominantShares()
    nodes = [gpu_node(0), gpu_node(1)]  # 8 GPUs, 56 cores
    shares.observe_cluster(nodes)
    a = job(0, "a", gpus=2, cores=4)
    a.cores_pn = 4
    shares.reserve(a, [nodes[0]], 0.0)
    assert shares.share("a") == pytest.approx(2 / 8)
    c = job(1, "c", gpus=0, cores=14)
    c.cores_pn = 14
    shares.reserve(c, [nodes[1]], 0.0)
    assert shares.share("c") == pytest.approx(14 / 56)
    shares.reserve(c, [nodes[1]], 0.0)  # booked twice: charged once
    assert shares.share("c") == pytest.approx(14 / 56)
    shares.unreserve(a, 1.0)
    shares.unreserve(a, 1.0)  # released twice: nothing below zero
    assert shares.share("a") == 0.0
    assert shares.share("nobody") == 0.0


# ---------------------------------------------------------------- DRF in the cycle
def _first_two(policy_name: str) -> list[str]:
    """One 2-GPU node; user a submits three jobs, then b one: which two start."""
    policy = make_policy(policy_name)
    node = gpu_node(0, gpus=2, cores=28)
    policy.observe_cluster([node])
    sched = Scheduler(policy, [node])
    for j in (job(0, "a"), job(1, "a", submit=1), job(2, "a", submit=2), job(3, "b", submit=3)):
        sched.submit(j)
    decisions = sched.cycle(4.0, Booking(sched, 4.0))
    return [d.job.job_id for d in decisions if isinstance(d, Start)]


def test_fifo_runs_in_arrival_order_drf_lets_the_other_tenant_in() -> None:
    assert _first_two("fifo") == ["j0", "j1"]
    # Once j0 runs, a holds half the GPUs and b none: b's job goes next.
    assert _first_two("drf") == ["j0", "j3"]


def test_drf_order_follows_shares_at_each_start() -> None:
    """Two GPUs free, a already holds one: of a's and b's queued jobs, b's starts."""
    policy = make_policy("drf")
    nodes = [gpu_node(0, gpus=2, cores=28)]
    policy.observe_cluster(nodes)
    sched = Scheduler(policy, nodes)
    running = job(9, "a")
    sched.occupy(running, nodes, 4, 0.0)
    a2, b1 = job(1, "a", submit=0.0), job(2, "b", submit=5.0)
    sched.submit(a2)
    sched.submit(b1)
    starts = [d for d in sched.cycle(6.0, Booking(sched, 6.0)) if isinstance(d, Start)]
    assert [s.job.job_id for s in starts] == ["j2"]
    assert sched.reason_of(a2) is not None


def test_drf_reservation_binds_an_earlier_arrival_of_a_heavier_tenant() -> None:
    """The DRF head (b: no share) waits for a whole node; a's job that arrived earlier
    but ranks after it must not take the cores the head is promised."""
    policy = make_policy("drf")
    node = gpu_node(0, gpus=2, cores=28)
    policy.observe_cluster([node])
    sched = Scheduler(policy, [node])
    hog = job(9, "a", gpus=1, cores=20)
    sched.occupy(hog, [node], 20, 0.0)
    hog.speed, hog.remaining, hog.last_update = 1.0, 100.0, 0.0  # ends at t = 100
    head = job(1, "b", gpus=1, cores=20, submit=5.0)  # fits once hog ends
    late = job(2, "a", gpus=1, cores=8, submit=1.0)  # fits now, but would outlast hog
    late.work = 10_000.0
    late.remaining = 10_000.0
    sched.submit(late)
    sched.submit(head)
    starts = [d for d in sched.cycle(6.0, Booking(sched, 6.0)) if isinstance(d, Start)]
    assert starts == []
    assert sched.reason_of(late).code == "reservation"
    # Under FIFO the earlier arrival is the head: it starts on the free cores.
    policy = make_policy("fifo")
    node = gpu_node(0, gpus=2, cores=28)
    policy.observe_cluster([node])
    sched = Scheduler(policy, [node])
    sched.occupy(hog, [node], 20, 0.0)
    late.start, late.queue_key = -1.0, ()
    sched.submit(late)
    sched.submit(head)
    starts = [d for d in sched.cycle(6.0, Booking(sched, 6.0)) if isinstance(d, Start)]
    assert [s.job.job_id for s in starts] == ["j2"]


@pytest.mark.parametrize("estimates", ["none", "exact", "time-limits"])
def test_a_start_in_one_array_brings_another_tenant_to_the_dnn_front(estimates: str) -> None:
    """The DNN array's first job (a's) cannot start and is settled as its head; then a's
    CPU job starts and a's share grows, so b's DNN job comes first. It fits: it starts
    in the same cycle, not at whatever event comes next (none may come)."""
    policy = make_policy("coda", PolicyOptions(estimates=estimates))
    g1, c1 = Node(0, "g1", 2, 8, 0, 0.0), Node(1, "c1", 0, 8, 0, 0.0)
    policy.observe_cluster([g1, c1])
    sched = Scheduler(policy, [g1, c1])
    other = Job(0, "other", 0.0, 1, 2, 0, 1, 100.0, user="c", time_limit=1000)
    sched.submit(other)
    sched.cycle(0.0, Booking(sched))  # c holds one of the two GPUs
    a_dnn = Job(1, "a_dnn", 1.0, 2, 2, 0, 1, 100.0, user="a", time_limit=1000)  # both GPUs
    b_dnn = Job(2, "b_dnn", 2.0, 1, 2, 0, 1, 100.0, user="b", time_limit=1000)
    a_cpu = Job(3, "a_cpu", 3.0, 0, 2, 0, 1, 100.0, user="a", time_limit=1000)
    for j in (a_dnn, b_dnn, a_cpu):
        sched.submit(j)
    starts = [d.job.job_id for d in sched.cycle(5.0, Booking(sched)) if isinstance(d, Start)]
    assert starts == ["a_cpu", "b_dnn"]
    assert b_dnn.start == 5.0 and sched.reason_of(b_dnn) is None
    sched.check_no_waiting_fit()


def test_a_new_head_is_retried_on_the_nodes_its_predecessor_held() -> None:
    """b's head holds the GPU node for when the hog ends; a's job, behind it while a's
    CPU job ran, would outlast that. Once a's CPU job ends a's job comes first: the
    head's hold no longer binds it, and it starts on the held node (which it reserves
    from now, the same node as before: that must still count as a change)."""
    policy = make_policy("drf")
    g0, c1 = gpu_node(0, gpus=4, cores=28), Node(1, "c1", 0, 8, 0, 0.0)
    policy.observe_cluster([g0, c1])
    sched = Scheduler(policy, [g0, c1])
    hog = job(9, "z", gpus=2, cores=4)
    sched.occupy(hog, [g0], 4, 0.0)
    hog.speed, hog.remaining, hog.last_update = 1.0, 100.0, 0.0  # ends at t = 100
    a_cpu = job(8, "a", gpus=0, cores=8)
    sched.occupy(a_cpu, [c1], 8, 0.0)
    a_cpu.speed, a_cpu.remaining, a_cpu.last_update = 1.0, 10.0, 0.0
    a_dnn = job(1, "a", gpus=2, cores=4, submit=1.0)  # fits now, but would outlast hog
    a_dnn.work = a_dnn.remaining = 10_000.0
    b_head = job(2, "b", gpus=3, cores=4, submit=5.0)  # fits once hog ends
    sched.submit(a_dnn)
    sched.submit(b_head)
    assert [d for d in sched.cycle(6.0, Booking(sched, 6.0)) if isinstance(d, Start)] == []
    assert sched.reason_of(a_dnn).code == "reservation"
    sched.vacate(a_cpu, 10.0)  # a's share is back to none; only c1 gained room
    starts = [d for d in sched.cycle(10.0, Booking(sched, 10.0)) if isinstance(d, Start)]
    assert [s.job.job_id for s in starts] == ["j1"]
    sched.check_no_waiting_fit()


def _mixed_trace(seed: int, n: int = 300) -> JobTable:
    """Half DNN jobs (1-8 GPUs), half CPU jobs, over 3,000 s; some time limits."""
    rng = random.Random(seed)
    submit = sorted(rng.uniform(0, 3000) for _ in range(n))
    rows = []
    for i in range(n):
        if rng.random() < 0.5:
            gpus, cores = rng.choice([1, 2, 4, 8]), rng.choice([2, 4, 8, 16])
        else:
            gpus, cores = 0, rng.choice([1, 2, 4, 8, 16])
        duration = rng.uniform(50, 2000)
        limit = rng.choice([math.nan, rng.uniform(100, 4000)])
        rows.append((f"j{i}", submit[i], duration, gpus, cores, limit))
    ids, sub, dur, g, c, lim = zip(*rows, strict=True)
    table = JobTable.from_columns(ids, sub, dur, g, c, [0] * n, [1] * n, [0] * n)
    table.time_limit = np.asarray(lim)
    return table


# Seeds a search over seeds found: each can leave a job that fits waiting after a cycle,
# as shares move under DRF.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "estimates", "seed"),
    [
        ("coda", "none", 0),  # a start in one array brought another tenant to its front
        ("coda", "none", 4),
        ("drf", "exact", 2),  # a new head on its predecessor's reserved node
        ("coda", "exact", 9),  # a tenant's share fell past another array's holder
        ("coda", "time-limits", 12),
        ("coda", "time-limits", 28),
    ],
)
def test_no_job_that_fits_waits_as_shares_move(policy: str, estimates: str, seed: int) -> None:
    workload = build_workload(_mixed_trace(seed), PROFILES, seed)
    options = PolicyOptions(estimates=estimates, default_time_limit_s=3600)
    sim = Simulator(
        workload,
        parse_cluster_spec("4x8g32c,2x0g32c"),
        make_policy(policy, options),
        check_invariants=True,  # after every cycle: no queued job fits where it may go
        seed=seed,
    )
    result = sim.run()
    assert result.summary["jobs"]["finished"] == 300


# ---------------------------------------------------------------- policies
def test_fifo_and_drf_share_servers_and_grant_requests() -> None:
    for name in ("fifo", "drf"):
        policy = make_policy(name)
        assert policy.arrays.names == ("all",)
        assert policy.reclaim is None
        n = gpu_node(0)
        c = job(0, "u", gpus=0, cores=6)
        d = job(1, "u", gpus=1, cores=9)
        starts = plan(policy, [n], [c, d])
        assert {s.job.job_id: s.cores_pn for s in starts} == {"j0": 6, "j1": 9}


def test_coda_orders_by_drf_unless_asked_for_fifo() -> None:
    assert make_policy("coda").fair_share is not None
    assert make_policy("coda", PolicyOptions(order="fifo")).fair_share is None
    with pytest.raises(ValueError, match="queue order"):
        PolicyOptions(order="lifo")


def test_gpu_subarrays_split_the_dnn_array() -> None:
    policy = make_policy("coda", PolicyOptions(gpu_subarrays=True))
    assert isinstance(policy.arrays, GpuSizeArrays)
    assert policy.arrays.array_of(job(0, "u", gpus=4)) == "dnn-big"
    assert policy.arrays.array_of(job(1, "u", gpus=2)) == "dnn"
    assert policy.arrays.array_of(job(2, "u", gpus=0)) == "cpu"


def test_small_jobs_pass_a_big_one_in_their_own_subarray() -> None:
    """Without estimates (strict FIFO per array) a waiting 4-GPU job blocks every DNN
    job behind it; with sub-arrays, 1-GPU jobs have a head of their own."""
    node = gpu_node(0, gpus=4, cores=28)

    def starts(sub: bool) -> list[str]:
        policy = make_policy("coda", PolicyOptions(estimates="none", gpu_subarrays=sub))
        n = gpu_node(0, gpus=4, cores=28)
        policy.observe_cluster([n])
        sched = Scheduler(policy, [n])
        sched.occupy(job(9, "x", gpus=1), [n], 4, 0.0)
        big, small = job(1, "u", gpus=4, submit=1.0), job(2, "v", gpus=1, submit=2.0)
        sched.submit(big)
        sched.submit(small)
        return [d.job.job_id for d in sched.cycle(3.0, Booking(sched, 3.0)) if isinstance(d, Start)]

    assert node.gpus == 4
    assert starts(False) == []
    assert starts(True) == ["j2"]


# ---------------------------------------------------------------- start point
def _paper_allocator() -> tuple[object, PolicyOptions]:
    opts = PolicyOptions(allocator_start="paper", categories=PROFILES.domains)
    return make_policy("coda", opts), opts


def test_paper_start_point_by_category_then_owner_history() -> None:
    policy, _ = _paper_allocator()
    alloc = policy.core_count  # type: ignore[attr-defined]
    nlp = job(0, "a", gpus=1, cores=2)  # Transformer: nlp
    assert alloc.cores_per_node(nlp) == 5  # the paper's first NLP start, above the request
    cv = Job(1, "cv", 0.0, 1, 8, 0, 1, 100.0, model="ResNet50", user="a")
    assert alloc.cores_per_node(cv) == 3
    other = Job(2, "o", 0.0, 1, 7, 0, 1, 100.0, model="Unknown", user="a")
    assert alloc.cores_per_node(other) == 7  # no category: the request
    # An owner's settled count becomes the start of their later jobs of the category.
    alloc._owner_max[("a", "nlp")] = 9
    assert alloc.cores_per_node(job(3, "a", gpus=1, cores=2)) == 9
    assert alloc.cores_per_node(job(4, "b", gpus=1, cores=2)) == 5


def test_paper_start_point_is_checked() -> None:
    with pytest.raises(ValueError, match="allocator start"):
        PolicyOptions(allocator_start="middle")
    with pytest.raises(ValueError, match="paper_start"):
        AllocatorConfig(paper_start={"cv": 0})


# ---------------------------------------------------------------- bounded preemption
def test_a_cpu_job_preempted_twice_keeps_its_cores() -> None:
    """On a cluster without CPU nodes a CPU job taken back max_preemptions times is no
    longer reclaimable: a DNN job waits for cores instead of taking its cores again."""
    from coda.policy.plugins.reclaim import ShrinkThenPreempt

    reclaim = ShrinkThenPreempt()
    node = gpu_node(0, gpus=1, cores=8)
    tired = job(1, "u", gpus=0, cores=8)
    tired.preemptions = reclaim.max_preemptions
    fresh = job(2, "u", gpus=0, cores=8)
    tired.cores_pn = fresh.cores_pn = 8
    assert reclaim.takeable(tired) == 0
    assert reclaim.takeable(fresh) == 8
    policy = make_policy("coda")
    policy.observe_cluster([node])
    sched = Scheduler(policy, [node])
    sched.occupy(tired, [node], 8, 0.0)
    dnn = job(3, "v", gpus=1, cores=4)
    sched.submit(dnn)
    starts = [d for d in sched.cycle(1.0, Booking(sched, 1.0)) if isinstance(d, Start)]
    assert starts == []
    assert tired.running and tired.cores_pn == 8
    assert reclaim.reclaim(dnn, node, 4, 1.0) == []


class _Shares:
    """A stand-in FairShare: fixed shares by tenant."""

    def __init__(self, shares: dict[str, float]) -> None:
        self.shares = shares

    def tenant(self, job: Job) -> str:
        return job.user

    def share(self, tenant: str) -> float:
        return self.shares[tenant]


def test_a_preempted_job_heads_its_array_whatever_its_tenants_share() -> None:
    # The paper: a CPU job aborted for a DNN job re-enters the head of its array. Under
    # DRF that is before every tenant's jobs, not only before its own tenant's.
    from coda.cycle.tenants import TenantQueues
    from coda.policy.plugins.queue_sort import PreemptedFirst

    sort = PreemptedFirst()
    heavy, light = job(1, "heavy", gpus=0, submit=5.0), job(2, "light", gpus=0, submit=9.0)
    queues = TenantQueues(
        ["cpu"], _Shares({"heavy": 0.9, "light": 0.1}), lambda k, j: True, sort.band
    )

    def file(j: Job, stamp: int) -> None:
        j.queue_key = (sort.key(j), j.idx, stamp)
        queues.push("cpu", j)

    file(heavy, 1)
    file(light, 2)
    assert queues.first("cpu") is light  # by share
    heavy.preemptions = 1  # aborted for a DNN job and queued again
    file(heavy, 3)
    assert queues.first("cpu") is heavy
    # With the baselines' sort (one band), shares alone decide.
    from coda.policy.baselines import FifoOrder

    fifo = FifoOrder()
    plain = TenantQueues(
        ["cpu"], _Shares({"heavy": 0.9, "light": 0.1}), lambda k, j: True, fifo.band
    )
    for stamp, j in enumerate((heavy, light)):
        j.queue_key = (fifo.key(j), j.idx, stamp)
        plain.push("cpu", j)
    assert plain.first("cpu") is light
