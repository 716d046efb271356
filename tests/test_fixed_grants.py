"""Fixed grants (Slurm's books) in the simulator, and the allocator's "request" start:
what the replay's CODA twin is told of CODA on Slurm (coda.replay.run.SIM_GRANTS,
SIM_ALLOCATOR_START)."""

from __future__ import annotations

import pytest
from job_tables import PROFILES, table

from coda.policy import PolicyOptions, make_policy
from coda.policy.allocator import AdaptiveAllocator
from coda.policy.allocator_config import AllocatorConfig
from coda.policy.core_search import free_room
from coda.policy.feedback import ThroughputHistory
from coda.policy.framework import SetCores
from coda.policy.state import Job, Node
from coda.sim.engine import Simulator
from coda.study.config import RunConfig
from coda.workload.cluster import parse_cluster_spec
from coda.workload.perf import build_workload

# A DNN job asks for every core of the node; a CPU job arrives a second later.
ROWS = [(0, 300, 4, 16), (1, 10, 0, 8)]


def simulator(grants: str, rows: list[tuple] = ROWS, reclaim: str = "requeue") -> Simulator:
    wl = build_workload(table(rows), PROFILES, 0, {"VGG16": 1.0})
    policy = make_policy("coda", PolicyOptions(reclaim=reclaim))
    return Simulator(wl, parse_cluster_spec("1x4g16c"), policy, check_invariants=True,
                     grants=grants)  # fmt: skip


def started(grants: str, cores: int) -> tuple[Simulator, Job, Node]:
    """One DNN job of ``cores`` cores started by hand on the 16-core node: the test
    drives the books, not the event loop."""
    sim = simulator(grants, rows=[(0, 300, 4, cores)])
    sim.executor.arrive(0)
    sim.sched.cycle(0.0, sim.executor)
    (job,) = [j for n in sim.nodes for j in n.jobs]
    return sim, job, job.placement[0]


def test_narrowed_cores_are_free_at_once_when_elastic_and_held_to_the_end_when_fixed() -> None:
    elastic = simulator("elastic").run().jobs
    fixed = simulator("fixed").run().jobs
    # Both narrow the DNN job the same way (the allocator settles on 3 of 16 cores) ...
    assert elastic["cores_settled"][0] == fixed["cores_settled"][0] < 16
    # ... but only elastic books give the cores it left to the CPU job before it ends.
    assert elastic["start"][1] < elastic["end"][0]
    assert fixed["start"][1] == pytest.approx(fixed["end"][0])


def test_a_fixed_grant_may_grow_back_inside_itself_never_past_it() -> None:
    sim, job, node = started("fixed", cores=8)
    assert (job.cores_pn, node.free_cores, node.spare_cores) == (8, 8, 0)
    assert sim.executor.apply(SetCores(job, 3)) is False  # narrowed: frees nothing
    assert (job.cores_pn, node.free_cores, node.spare_cores) == (3, 8, 5)
    # The allocator's room is the spare alone (the Slurm agent's count), not free cores.
    assert free_room([node]) == 5
    assert sim.sched.grant_pn(job) == 8
    assert sim.executor.apply(SetCores(job, 9)) is False and job.cores_pn == 3  # past its grant
    sim.executor.apply(SetCores(job, 6))  # back inside its grant, without touching free cores
    assert (job.cores_pn, node.free_cores, node.spare_cores) == (6, 8, 2)
    sim.executor.check_nodes([node])
    sim.executor.release(job)  # it leaves with what it was granted
    assert (job.cores_pn, node.free_cores, node.spare_cores) == (8, 16, 0)
    assert sim.gauges.cores_alloc == 0


def test_elastic_books_count_no_spare_cores() -> None:
    sim, job, node = started("elastic", cores=8)
    assert sim.executor.apply(SetCores(job, 3)) is True  # freed cores
    assert (node.free_cores, node.spare_cores) == (13, 0)
    sim.executor.apply(SetCores(job, 12))  # grows from free cores
    assert (job.cores_pn, node.free_cores, node.spare_cores) == (12, 4, 0)


def test_fixed_grants_refuse_a_reclaim_that_shrinks_and_unknown_books() -> None:
    with pytest.raises(ValueError, match="requeues"):
        simulator("fixed", reclaim="shrink")
    with pytest.raises(ValueError, match="grants must be one of"):
        simulator("loose")
    base = RunConfig(trace="t.csv", policy=PolicyOptions(reclaim="requeue"))
    assert base.varied(simulation={"grants": "fixed"}).simulation.grants == "fixed"
    with pytest.raises(ValueError, match="fixed grants need reclaim 'requeue'"):
        base.varied(policy={"reclaim": "shrink"}, simulation={"grants": "fixed"})
    with pytest.raises(ValueError, match="grants must be one of"):
        base.varied(simulation={"grants": "Fixed"})


def _dnn(idx: int) -> tuple[Job, Node]:
    node = Node(0, "n1", 4, 16, 0, 0.0)
    job = Job(idx, f"j{idx}", 0.0, 1, 8, 0, 1, 100.0, model="VGG16")
    return job, node


def test_the_request_start_places_every_job_with_its_request_and_learns_nothing() -> None:
    learned = AdaptiveAllocator(ThroughputHistory(), AllocatorConfig(start="learned"))
    request = AdaptiveAllocator(ThroughputHistory(), AllocatorConfig(start="request"))
    key = ("VGG16", 1, 1)
    for _ in range(3):
        learned.learned.record(key, 2)
        request.learned.record(key, 2)  # even with a value at hand, it is not used
    job, _ = _dnn(0)
    assert learned.cores_per_node(job) == 2
    assert request.cores_per_node(job) == 8
    assert request.on_start(job, 0.0) == []  # a full search from what it holds
    assert request.explain(job)["search"] == "full"


def test_the_replay_twins_are_told_slurms_books() -> None:
    from coda.replay import run as R

    assert R.SIM_GRANTS == {"plain": "fixed", "coda": "fixed"}
    assert R.SIM_ALLOCATOR_START == {"plain": "request", "coda": "request"}
    assert all(R.SIM_RECLAIM[m] == "requeue" for m in R.SIM_GRANTS)


@pytest.mark.parametrize("start", ["learned", "request"])
def test_a_later_job_of_a_shape_starts_from_what_the_first_settled_on_unless_request(
    start: str,
) -> None:
    rows = [(0, 300, 4, 16), (2000, 300, 4, 16)]  # the second arrives after the first ends
    wl = build_workload(table(rows), PROFILES, 0, {"VGG16": 1.0})
    policy = make_policy("coda", PolicyOptions(reclaim="requeue", allocator_start=start))
    res = Simulator(wl, parse_cluster_spec("1x4g16c"), policy, check_invariants=True).run()
    first = int(res.jobs["cores_settled"][0])
    assert first < 16
    granted = int(res.jobs["cores_granted"][1])
    assert granted == (first if start == "learned" else 16)


def test_settle_windows_reach_the_allocator_and_are_checked() -> None:
    policy = make_policy("coda", PolicyOptions(settle_windows=1))
    assert isinstance(policy.core_count, AdaptiveAllocator)
    assert policy.core_count.config.settle_windows == 1
    assert make_policy("coda", PolicyOptions()).core_count.config.settle_windows == 0  # type: ignore[attr-defined]
    for bad in (-1, 11, 1.5, True):
        with pytest.raises(ValueError, match="settle windows"):
            PolicyOptions(settle_windows=bad)  # type: ignore[arg-type]
    from coda.replay import run as R

    assert R.SIM_SETTLE_WINDOWS == {"plain": 0, "coda": 1}


def test_a_plan_counts_the_whole_grant_a_narrowed_job_frees_when_it_ends() -> None:
    # A DNN job granted all 16 cores, narrowed to 3, ends (by its estimate) at 300: a
    # queued 8-core CPU job can start there then. Counting only the 3 cores it works on,
    # the node would never have room (an unknown start: no protection from backfill).
    sim, job, node = started("fixed", cores=16)
    sim.executor.apply(SetCores(job, 3))
    cpu = Job(99, "cpu", 1.0, 0, 8, 0, 1, 10.0)
    end = sim.policy.estimates.end_of(job, 1.0)
    assert 0.0 < end < float("inf")
    sim.sched.clock.now = 1.0
    assert sim.sched.reservations.available_at(node, cpu, 8) == end
    sim.executor.check_nodes([node])
