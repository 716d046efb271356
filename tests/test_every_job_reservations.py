"""Backfill that plans a start for every queued job (Slurm's sched/backfill) and the
``slurm`` policy, plain Slurm's twin in ``coda replay``: its plans, its node choice
and where they differ from the default (plans for the heads only, best fit by GPUs)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from coda.cycle import Scheduler, Start
from coda.cycle import reasons as R
from coda.cycle.once import Booking
from coda.cycle.reservations import Hold
from coda.policy import PolicyOptions, make_policy
from coda.policy.framework import Policy
from coda.policy.state import Job, Node
from coda.replay.node_choice import scenes, twin_choice
from coda.replay.plan import ClusterShape, fitting, load_table, prepare_replay
from coda.study.run import run_policy

OPTIONS = PolicyOptions(estimates="time-limits")


def _holds(sched: Scheduler) -> dict[int, list[Hold]]:
    """The plans the last every-job round made, by node."""
    return sched.reservations.every_job_holds


def _policy(reservations: str) -> Policy:
    return dataclasses.replace(make_policy("fifo", OPTIONS), reservations=reservations)


def _running(sched: Scheduler, node: Node, gpus: int, limit: float, name: str) -> Job:
    job = Job(-len(node.jobs) - 10 * node.idx - 1, name, 0.0, gpus, 1, 0, 1, 1e6,
              time_limit=limit)  # fmt: skip
    job.start = 0.0
    sched.occupy(job, [node], 1, 0.0)
    return job


def _two_nodes(reservations: str, c_limit: float) -> tuple[Scheduler, dict[str, Job], list[Job]]:
    """n0 is full until 100; n1 has 2 of 4 GPUs free until 200. A (4 GPUs, limit 1000)
    can start on n0 at 100; B (4 GPUs) on n1 at 200, its plan from then if every job is
    planned; C (2 GPUs) fits n1 now, for ``c_limit`` seconds."""
    nodes = [Node(0, "n0", 4, 28, 0, 56.0), Node(1, "n1", 4, 28, 0, 56.0)]
    sched = Scheduler(_policy(reservations), nodes)
    _running(sched, nodes[0], 4, 100.0, "R0")
    _running(sched, nodes[1], 2, 200.0, "R1")
    queued = [
        Job(0, "A", 1.0, 4, 1, 0, 1, 500.0, time_limit=1000.0),
        Job(1, "B", 2.0, 4, 1, 0, 1, 500.0, time_limit=1000.0),
        Job(2, "C", 3.0, 2, 1, 0, 1, 50.0, time_limit=c_limit),
    ]
    for j in queued:
        assert sched.submit(j) is None
    starts = [d.job for d in sched.cycle(10.0, Booking(sched, 10.0)) if isinstance(d, Start)]
    return sched, {j.job_id: j for j in queued}, starts


def test_a_plan_for_every_job_keeps_a_later_job_off_the_nodes_it_would_delay() -> None:
    # Heads only: B has no plan, so C takes n1's free GPUs for 300 s.
    _, jobs, starts = _two_nodes("heads", 300.0)
    assert starts == [jobs["C"]]
    # Every job: B is planned on n1 from 200 (n0 is A's from 100 to 1100); C would run
    # past 200 there, so it waits behind B.
    sched, jobs, starts = _two_nodes("every-job", 300.0)
    assert starts == []
    reason = sched.reason_of(jobs["C"])
    assert reason is not None and (reason.code, reason.behind) == (R.RESERVATION, "B")
    assert sched.queue.heads["all"] is jobs["A"]
    # C itself is planned on n0 once A is expected to be done (100 + its 1000 s limit).
    held = {i: [(t, o.job_id) for t, _, o in h] for i, h in _holds(sched).items()}
    assert held == {0: [(100.0, "A"), (1100.0, "C")], 1: [(200.0, "B")]}
    sched.check_no_waiting_fit()


def test_a_job_that_ends_before_every_plan_on_its_node_still_starts() -> None:
    sched, jobs, starts = _two_nodes("every-job", 150.0)  # ends at 160, before B's 200
    assert starts == [jobs["C"]]
    sched.check_no_waiting_fit()


def test_a_plan_starts_after_the_plans_before_it_on_the_same_node() -> None:
    # One node, busy until 100: A and then B are planned back to back, each for its limit.
    node = Node(0, "n0", 4, 28, 0, 56.0)
    sched = Scheduler(_policy("every-job"), [node])
    _running(sched, node, 4, 100.0, "R")
    a = Job(0, "A", 1.0, 2, 1, 0, 1, 50.0, time_limit=300.0)
    b = Job(1, "B", 2.0, 2, 1, 0, 1, 50.0, time_limit=60.0)
    for j in (a, b):
        sched.submit(j)
    assert sched.cycle(5.0, Booking(sched, 5.0)) == []
    assert [(t, o.job_id) for t, _, o in _holds(sched)[0]] == [(100.0, "A"), (400.0, "B")]


def test_a_gang_job_is_planned_when_enough_nodes_are_free_at_once() -> None:
    nodes = [Node(i, f"n{i}", 2, 8, 0, 56.0) for i in range(3)]
    sched = Scheduler(_policy("every-job"), nodes)
    for node, end in zip(nodes, (300.0, 100.0, 200.0), strict=True):
        _running(sched, node, 2, end, f"R{node.idx}")
    gang = Job(0, "G", 1.0, 4, 2, 0, 2, 50.0, time_limit=60.0)  # 2 nodes x 2 GPUs
    sched.submit(gang)
    assert sched.cycle(1.0, Booking(sched, 1.0)) == []
    assert {i: [(t, o.job_id) for t, _, o in h] for i, h in _holds(sched).items()} == {
        1: [(200.0, "G")],
        2: [(200.0, "G")],
    }


def test_a_job_of_unknown_length_is_planned_after_every_plan_and_never_backfills() -> None:
    node = Node(0, "n0", 4, 28, 0, 56.0)
    sched = Scheduler(_policy("every-job"), [node])
    _running(sched, node, 2, 100.0, "R")
    head = Job(0, "H", 1.0, 4, 1, 0, 1, 50.0, time_limit=60.0)
    endless = Job(1, "U", 2.0, 1, 1, 0, 1, 50.0)  # no limit, no default
    for j in (head, endless):
        sched.submit(j)
    assert sched.cycle(1.0, Booking(sched, 1.0)) == []
    assert [(t, o.job_id) for t, _, o in _holds(sched)[0]] == [(100.0, "H"), (160.0, "U")]
    assert math.isinf(endless.estimate)


def test_the_queue_depth_bounds_the_jobs_looked_at() -> None:
    node = Node(0, "n0", 1, 4, 0, 56.0)
    policy = dataclasses.replace(_policy("every-job"), backfill_depth=2)
    sched = Scheduler(policy, [node])
    _running(sched, node, 1, 100.0, "R")
    jobs = [Job(i, f"Q{i}", float(i), 1, 1, 0, 1, 10.0, time_limit=60.0) for i in range(4)]
    for j in jobs:
        sched.submit(j)
    sched.cycle(1.0, Booking(sched, 1.0))
    assert [o.job_id for _, _, o in _holds(sched)[0]] == ["Q0", "Q1"]
    assert [getattr(sched.reason_of(j), "code", None) for j in jobs[2:]] == [R.DEPTH] * 2


def test_slurm_policy_picks_the_node_with_the_fewest_free_cores_then_node_order() -> None:
    # What Slurm did on the test cluster (coda replay's node-choice scenes): the twin's
    # cycle answers alike; the default best fit (fewest free GPUs first) would not.
    shape = ClusterShape(4, 4, 5, 28)
    got = {s.name: twin_choice(shape, s) for s in scenes(shape)}
    assert got == {"cores-or-gpus": "n1", "tie-on-cores": "n1", "first-or-fewest": "n2"}
    # fifo's best fit takes the fewest free GPUs first, then the fewest free cores.
    best_fit = {"cores-or-gpus": "n2", "tie-on-cores": "n2", "first-or-fewest": "n2"}
    fifo = make_policy("fifo", OPTIONS)
    for scene in scenes(shape):
        nodes = [Node(i, f"n{i + 1}", 5, 28, 0, 0.0) for i in range(4)]
        sched = Scheduler(fifo, nodes)
        for k, f in enumerate(scene.fillers):
            filler = Job(-1 - k, f"f{k}", 0.0, f.gpus, f.cores, 0, 1, 1.0)
            sched.occupy(filler, [nodes[f.node]], f.cores, 0.0)
        probe = Job(0, "p", 0.0, scene.gpus, scene.cores, 0, 1, 1.0)
        sched.submit(probe)
        (start,) = sched.cycle(0.0, Booking(sched))
        assert isinstance(start, Start) and start.nodes[0].name == best_fit[scene.name]


def test_no_scene_where_the_shape_cannot_tell_the_rules_apart() -> None:
    assert scenes(ClusterShape(2, 1, 5, 28)) == []  # one GPU node
    assert scenes(ClusterShape(2, 2, 1, 28)) == []  # one GPU per node
    assert scenes(ClusterShape(2, 2, 5, 3)) == []  # too few cores to halve


def test_reservations_must_be_known() -> None:
    with pytest.raises(ValueError, match="reservations must be one of heads, every-job"):
        dataclasses.replace(make_policy("fifo"), reservations="all")
    assert make_policy("slurm").reserves_every_job
    # Without estimates there is nothing to plan with: strict FIFO, as with heads.
    assert not make_policy("slurm", PolicyOptions(estimates="none")).reserves_every_job


@pytest.mark.parametrize("seed", [0, 1])
def test_slurm_twin_runs_a_generated_workload_with_every_invariant_checked(
    seed: int, tmp_path: Path
) -> None:
    shape = ClusterShape(4, 4, 5, 28)
    table, _ = fitting(load_table(None, None, seed, 120), shape)
    prepared = prepare_replay(table, shape, tmp_path, seed, load=0.8)
    res = run_policy(prepared, "slurm", check_invariants=True)
    assert res.summary["policy"] == "slurm" and np.isfinite(res.jobs["end"]).sum() > 100


def test_fewest_cores_order_walks_core_levels_then_node_order_across_gpu_levels() -> None:
    from coda.cycle.index import PoolIndex

    index = PoolIndex(4)
    nodes = []
    for idx, (g, c) in enumerate([(4, 10), (1, 10), (2, 3), (0, 2), (3, 10), (2, 28)]):
        n = Node(idx, f"n{idx}", 4, 28, 0, 0.0)
        n.free_gpus, n.free_cores = g, c
        index.add(n)
        nodes.append(n)
    assert [n.idx for n in index.fewest_cores(1, 1)] == [2, 0, 1, 4, 5]
    assert [n.idx for n in index.fewest_cores(2, 4)] == [0, 4, 5]
    assert [n.idx for n in index.best_fit(2, 4)] == [5, 4, 0]  # fewest free GPUs first
    assert list(index.fewest_cores(4, 11)) == []
    nodes[0].free_cores = 1  # moved below the job's need
    index.update(nodes[0])
    assert [n.idx for n in index.fewest_cores(2, 4)] == [4, 5]


def test_jobs_past_the_depth_are_looked_at_once_those_before_them_start() -> None:
    node = Node(0, "n0", 4, 28, 0, 56.0)
    policy = dataclasses.replace(_policy("every-job"), backfill_depth=2)
    sched = Scheduler(policy, [node])
    jobs = [Job(i, f"Q{i}", float(i), 1, 1, 0, 1, 10.0, time_limit=60.0) for i in range(4)]
    for j in jobs:
        sched.submit(j)
    starts = [d.job for d in sched.cycle(5.0, Booking(sched, 5.0)) if isinstance(d, Start)]
    assert starts == jobs and not sched.pending()


def test_a_planned_job_leaving_makes_a_cycle_due() -> None:
    sched, jobs, starts = _two_nodes("every-job", 300.0)
    assert starts == [] and not sched.pending()
    sched.withdraw(jobs["B"])  # C waited behind B's plan on n1
    assert sched.pending()
    starts = [d.job for d in sched.cycle(11.0, Booking(sched, 11.0)) if isinstance(d, Start)]
    assert starts == [jobs["C"]]
    sched.check_no_waiting_fit()


def test_a_cpu_job_goes_to_the_node_with_the_fewest_free_cores_whatever_its_pool() -> None:
    # Slurm knows no pools: with a GPU node busier than the CPU node, a CPU job goes to
    # the GPU node (fifo sends it to CPU nodes first).
    for name, want in (("slurm", "g"), ("fifo", "c")):
        g, c = Node(0, "g", 4, 28, 0, 56.0), Node(1, "c", 0, 28, 0, 56.0)
        sched = Scheduler(make_policy(name, OPTIONS), [g, c])
        sched.occupy(Job(-1, "busy", 0.0, 1, 20, 0, 1, 1e6, time_limit=1e6), [g], 20, 0.0)
        probe = Job(0, "p", 0.0, 0, 4, 0, 1, 10.0, time_limit=60.0)
        sched.submit(probe)
        (start,) = sched.cycle(0.0, Booking(sched))
        assert isinstance(start, Start) and start.nodes[0].name == want, name


def test_slurm_batch_ends_follow_its_will_run_windows() -> None:
    from coda.cycle.every_job import batch_ends

    # The first batch runs to one 30 s window past the barrier above the first end
    # (150 + 30); then the window doubles until the next end is inside it (60, then 120).
    assert batch_ends([100.0, 110.0, 125.0, 140.0, 200.0, 300.0]) == [140.0, 200.0, 300.0]
    assert batch_ends([138.0, 139.0, 152.0, 158.0, 234.0]) == [158.0, 234.0]
    assert batch_ends([]) == []
    assert batch_ends([5.0]) == [5.0]


def _slurm_scene(plan_times: str) -> tuple[Scheduler, list[str]]:
    """The full replay's plain run at +82.8 s, on one node (5 GPUs, 28 cores): running
    jobs hold 15 cores and 4 GPUs and end, by their limits, at 138, 139, 152, 158 and
    234. P (1 GPU, 18 cores) fits once the first two are gone; Q (8 cores, 60 s) fits
    now and would run to 142.8."""
    policy = dataclasses.replace(make_policy("slurm", OPTIONS), plan_times=plan_times)
    node = Node(0, "n4", 5, 28, 0, 56.0)
    sched = Scheduler(policy, [node])
    for k, (gpus, cores, end) in enumerate([(0, 4, 138.0), (0, 1, 139.0), (2, 4, 152.0),
                                            (2, 2, 158.0), (0, 4, 234.0)]):  # fmt: skip
        job = Job(-k - 1, f"R{k}", 0.0, gpus, cores, 0, 1, 1e6, time_limit=end)
        job.start = 0.0
        sched.occupy(job, [node], cores, 0.0)
    for j in (Job(0, "P", 80.0, 1, 18, 0, 1, 60.0, time_limit=60.0),
              Job(1, "Q", 81.0, 0, 8, 0, 1, 30.0, time_limit=60.0)):  # fmt: skip
        assert sched.submit(j) is None
    decisions = sched.cycle(82.8, Booking(sched, 82.8))
    return sched, [d.job.job_id for d in decisions if isinstance(d, Start)]


def test_slurm_plans_a_job_where_its_will_run_test_does_so_short_jobs_pass_first() -> None:
    # Exact: P is planned at 139, and Q (to 142.8) would delay it: Q waits.
    sched, started = _slurm_scene("exact")
    assert started == []
    assert [(t, o.job_id) for t, _, o in _holds(sched)[0]][0] == (139.0, "P")
    # Slurm's windows: P's plan begins at its batch's last end, 158, so Q starts now
    # (seen on the test cluster with scontrol setdebugflags +Backfill).
    sched, started = _slurm_scene("slurm-windows")
    assert started == ["Q"]
    assert [(t, o.job_id) for t, _, o in _holds(sched)[0]] == [(158.0, "P")]
    sched.check_no_waiting_fit()


def test_slurm_windows_need_every_job_plans() -> None:
    with pytest.raises(ValueError, match="every-job"):
        dataclasses.replace(make_policy("fifo", OPTIONS), plan_times="slurm-windows")
    with pytest.raises(ValueError, match="plan_times must be one of"):
        dataclasses.replace(make_policy("slurm", OPTIONS), plan_times="soon")
    assert make_policy("slurm", OPTIONS).plan_times == "slurm-windows"
