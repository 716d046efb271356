"""Each CPU job's harm budget (coda.policy.harm_budget): a token bucket that fills at
``share`` per second of the job's life and drains by what throttles, shrinks and
requeues take from it; the reclaim plugins and the eliminator ask it first."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.policy.harm_budget import HarmBudget, HarmBudgetConfig
from coda.policy.plugins.reclaim import RequeueOnly, ShrinkThenPreempt
from coda.policy.state import Job, Node


def cpu_job(idx: int = 0, cores: int = 8) -> Job:
    return Job(idx, f"c{idx}", 0.0, 0, cores, 0, 1, 1e6)


def place(job: Job, node: Node, now: float, budget: HarmBudget) -> None:
    job.placement = [node]
    job.cores_pn = job.cores_pn_req
    job.start = now
    node.jobs[job] = None
    budget.started(job, now)


def test_a_fresh_job_may_not_be_slowed_and_earns_share_per_second() -> None:
    b = HarmBudget(HarmBudgetConfig(share=0.25, cap_s=900.0))
    node = Node(0, "n", 1, 8, 0, 0.0)
    job = cpu_job()
    place(job, node, 100.0, b)
    assert b.left(job) == 0.0 and not b.may_slow(job)
    b.advance(140.0)
    assert b.left(job) == pytest.approx(10.0) and b.may_slow(job)
    b.advance(100.0 + 10_000.0)
    assert b.left(job) == pytest.approx(900.0)  # capped


def test_throttling_drains_the_bucket_and_a_shrink_to_one_minus_share_never_does() -> None:
    b = HarmBudget(HarmBudgetConfig(share=0.25))
    node = Node(0, "n", 1, 8, 0, 0.0)
    job = cpu_job()
    place(job, node, 0.0, b)
    b.advance(400.0)  # 100 s saved
    job.quota = 0.1
    b.changed(job)
    b.advance(400.0 + 100.0 / 0.65)  # drains at 0.9 - 0.25 per second
    assert b.left(job) == pytest.approx(0.0, abs=1e-6)
    assert b.dry(job)
    job.quota = 1.0
    job.cores_pn = 6  # 75% of its cores: harm 0.25 per second, the fill rate
    b.changed(job)
    assert job in b.shrunk
    left = b.left(job)
    b.advance(b.now + 5000.0)
    assert b.left(job) == pytest.approx(left)


def test_a_requeue_charges_the_lost_work_and_the_wait() -> None:
    b = HarmBudget(HarmBudgetConfig(share=0.25, cap_s=900.0, restart_s=120.0), checkpoint_s=600)
    node = Node(0, "n", 1, 8, 0, 0.0)
    job = cpu_job()
    place(job, node, 0.0, b)
    b.advance(2000.0)
    assert not b.may_preempt(job)  # 500 s saved < 600 s lost + 120 s restart
    b.advance(2880.0)
    assert b.may_preempt(job)  # 720 = 600 + 120
    job.placement = []
    node.jobs.clear()
    b.stopped(job, 2880.0)
    b.requeued(job)
    assert b.left(job) == pytest.approx(120.0)
    b.advance(2980.0)  # 100 s requeued: each costs (1 - share) net
    assert b.left(job) == pytest.approx(120.0 - 75.0)


def test_a_finished_job_is_forgotten_and_a_requeued_one_kept() -> None:
    b = HarmBudget()
    node = Node(0, "n", 1, 16, 0, 0.0)
    done, again = cpu_job(0), cpu_job(1)
    for j in (done, again):
        place(j, node, 0.0, b)
    for j in (done, again):
        j.placement = []
        b.stopped(j, 10.0)
    b.requeued(again)
    b.advance(11.0)
    assert b.stats()["tracked"] == 1


@settings(max_examples=200, deadline=None)
@given(
    share=st.floats(0.05, 0.9),
    steps=st.lists(
        st.tuples(
            st.floats(0.1, 500.0), st.sampled_from([1.0, 0.75, 0.5, 0.1]), st.integers(1, 8)
        ),  # fmt: skip
        min_size=1,
        max_size=40,
    ),
)
def test_a_driver_that_slows_only_what_the_bucket_allows_stays_within_the_bound(
    share: float, steps: list[tuple[float, float, int]]
) -> None:
    """Whatever a taker asks, honouring may_slow (and giving the quota back when dry,
    as the eliminator does at its next tick) keeps the job's harm within share x its
    life, overdrawn by at most what one step took."""
    b = HarmBudget(HarmBudgetConfig(share=share, cap_s=1e9))
    node = Node(0, "n", 1, 8, 0, 0.0)
    job = cpu_job()
    place(job, node, 0.0, b)
    harm = now = worst_step = 0.0
    for dt, quota, cores in steps:
        if b.dry(job) or not b.may_slow(job):
            quota, cores = 1.0, 8  # given back / not taken
        job.quota, job.cores_pn = quota, cores
        b.changed(job)
        step = (1.0 - min(1.0, cores * quota / 8)) * dt
        harm += step
        worst_step = max(worst_step, step)
        now += dt
        b.advance(now)
        # The bucket is the account: what the life earned minus what was taken.
        assert b.left(job) == pytest.approx(share * now - harm, abs=1e-6)
        assert harm <= share * now + worst_step + 1e-6


def test_reclaim_takes_only_what_the_bucket_allows() -> None:
    b = HarmBudget(HarmBudgetConfig(share=0.25, restart_s=120.0), checkpoint_s=600.0)
    node = Node(0, "n", 1, 16, 0, 0.0)
    young, old = cpu_job(0, 8), cpu_job(1, 8)
    place(old, node, 0.0, b)
    b.advance(3000.0)
    place(young, node, 3000.0, b)
    shrink = ShrinkThenPreempt(harm=b)
    requeue = RequeueOnly(harm=b)
    # The young job has nothing saved: nothing; the old one covers a requeue: all.
    assert shrink.takeable(young) == 0 and requeue.takeable(young) == 0
    assert shrink.takeable(old) == 8 and requeue.takeable(old) == 8
    b.advance(3040.0)  # the young one saved 10 s: a shrink to 75% (6 of 8 cores)
    assert shrink.takeable(young) == 2 and requeue.takeable(young) == 0
    acts = shrink.reclaim(cpu_job(9), node, 4, 3040.0)
    kinds = sorted((type(a).__name__, a.job.job_id) for a in acts)
    assert kinds == [("SetCores", "c0"), ("SetCores", "c1")]  # two shrinks cover 4
    acts = shrink.reclaim(cpu_job(9), node, 5, 3040.0)
    kinds = sorted((type(a).__name__, a.job.job_id) for a in acts)
    assert kinds == [("Preempt", "c1")]  # shrinks cover 4 of 5: the old one goes
    acts = shrink.reclaim(cpu_job(9), node, 2, 3040.0)
    assert [(type(a).__name__, a.job.job_id, getattr(a, "cores_pn", None)) for a in acts] == [
        ("SetCores", "c0", 6)
    ]


def test_the_next_time_a_bucket_allows_more_is_scheduled() -> None:
    b = HarmBudget(HarmBudgetConfig(share=0.25, cap_s=900.0, restart_s=120.0), checkpoint_s=600)
    node = Node(0, "n", 1, 8, 0, 0.0)
    job = cpu_job()
    place(job, node, 0.0, b)
    assert not b.due()
    b.advance(1.0)
    assert b.due() and b.take_flipped() == [job]  # a shrink (tokens > 0)
    b.advance(2879.0)
    assert not b.due()
    b.advance(2880.0)
    assert b.due() and b.take_flipped() == [job]  # a requeue: 600 lost + 120
    assert not b.due()
    assert math.isclose(b.left(job), 720.0)


@pytest.mark.parametrize("field", ["share", "cap_s", "restart_s", "initial_s"])
def test_bad_configs_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        HarmBudgetConfig(**{field: -1.0})
    with pytest.raises(ValueError, match=field):
        HarmBudgetConfig(**{field: math.inf if field != "share" else 1.0})


def test_in_the_simulator_a_start_takes_only_what_the_bucket_allows() -> None:
    from job_tables import table

    from coda.policy import make_policy
    from coda.sim.engine import Simulator
    from coda.workload.cluster import parse_cluster_spec
    from coda.workload.perf import build_workload, load_profile_set

    def run(dnn_at: float):
        rows = [(0, 20000, 0, 6), (dnn_at, 3000, 1, 4)]
        wl = build_workload(table(rows), load_profile_set("coda"), 0, {"AlexNet": 1.0})
        sim = Simulator(wl, parse_cluster_spec("1x1g8c"), make_policy("coda"),
                        check_invariants=True)  # fmt: skip
        return sim.run()

    # 10 s old, the CPU job has earned nothing: the DNN job waits until its bucket
    # covers a requeue (0.1 x 7,200 s = 600 s lost + 120 s), then takes its cores.
    young = run(10.0)
    assert young.jobs["start"][1] == pytest.approx(7200, abs=1.0)
    assert young.summary["preemption"]["count"] == 1
    # 7,300 s old, its bucket (0.1 x 7,300 s, at most 900) covers a requeue losing one
    # checkpoint interval (600 s) plus 120 s: the DNN job starts on arrival.
    old = run(7300.0)
    assert old.jobs["start"][1] == pytest.approx(7300)
    assert old.summary["preemption"]["count"] == 1
    # A shrink to 90% of 6 cores keeps all 6: never a shrink.
    assert old.jobs["shrinks"][0] == 0


@pytest.mark.parametrize("dnn_at", [10.0, 7300.0])
def test_in_the_simulator_a_job_that_does_not_checkpoint_keeps_its_cores(dnn_at) -> None:
    from job_tables import table

    from coda.policy import make_policy
    from coda.sim.engine import Simulator
    from coda.workload.cluster import parse_cluster_spec
    from coda.workload.perf import build_workload, load_profile_set

    rows = [(0, 20000, 0, 6), (dnn_at, 3000, 1, 4)]
    wl = build_workload(table(rows), load_profile_set("coda"), 0, {"AlexNet": 1.0},
                        checkpoint_share=0.0)  # fmt: skip
    assert not wl.checkpoints[0] and wl.checkpoints[1]
    res = Simulator(wl, parse_cluster_spec("1x1g8c"), make_policy("coda"),
                    check_invariants=True).run()  # fmt: skip
    # A requeue would throw its whole run away, more than its bucket ever holds: the
    # training job, with no other node to go to, waits for it to end.
    assert res.summary["preemption"]["count"] == 0
    assert res.jobs["lost_core_s"][0] == 0
    assert res.jobs["end"][0] == pytest.approx(20000)
    assert res.jobs["start"][1] == pytest.approx(20000)
    # Unbounded, CODA takes the cores back (a shrink covers it) at the arrival.
    res = Simulator(wl, parse_cluster_spec("1x1g8c"), make_policy("coda-unbounded"),
                    check_invariants=True).run()  # fmt: skip
    assert res.jobs["shrinks"][0] == 1
    assert res.jobs["start"][1] == pytest.approx(dnn_at)


def test_the_checkpoint_share_draws_after_everything_else() -> None:
    from job_tables import table

    from coda.workload.perf import build_workload, load_profile_set

    rows = [(i, 100, i % 2, 4) for i in range(400)]
    profiles = load_profile_set("coda")
    every = build_workload(table(rows), profiles, 3)
    half = build_workload(table(rows), profiles, 3, checkpoint_share=0.5)
    assert every.checkpoints.all()
    cpu = every.model < 0
    assert (half.model == every.model).all()
    assert (half.cpu_bw_per_core == every.cpu_bw_per_core).all()
    assert half.checkpoints[~cpu].all()
    assert 0.35 < half.checkpoints[cpu].mean() < 0.65
    with pytest.raises(ValueError, match="checkpoint"):
        build_workload(table(rows), profiles, 3, checkpoint_share=1.5)


def test_each_job_has_one_live_flip_however_often_it_changes() -> None:
    b = HarmBudget(HarmBudgetConfig(share=0.25))
    node = Node(0, "n", 1, 8, 0, 0.0)
    job = cpu_job()
    place(job, node, 0.0, b)
    for k in range(50):
        job.quota = 0.5 if k % 2 else 1.0
        b.changed(job)
    b.advance(1e6)
    assert b.take_flipped() in ([job], [])  # never the same job twice
    assert b.take_flipped() == []


def test_a_preemption_allowed_again_later_is_scheduled() -> None:
    # 300 s at the start allow a requeue at once; the work it would lose grows faster
    # than the bucket, so it is refused for a while, then allowed again once the lost
    # work stops growing at one checkpoint interval.
    cfg = HarmBudgetConfig(share=0.25, cap_s=900.0, restart_s=120.0, initial_s=300.0)
    b = HarmBudget(cfg, checkpoint_s=600.0)
    node = Node(0, "n", 1, 8, 0, 0.0)
    job = cpu_job()
    place(job, node, 0.0, b)
    assert b.may_preempt(job)
    b.advance(300.0)
    assert not b.may_preempt(job)
    t = b.next_due()
    assert 300.0 < t < math.inf
    b.advance(t)
    assert b.may_preempt(job)


def test_a_job_found_running_has_earned_from_its_start() -> None:
    b = HarmBudget(HarmBudgetConfig(share=0.1, cap_s=900.0))
    node = Node(0, "n", 1, 8, 0, 0.0)
    job = cpu_job()
    job.placement, job.cores_pn, job.start = [node], 8, 1000.0
    b.started(job, 6000.0)  # a restarted body adopts it 5,000 s into its run
    assert b.left(job) == pytest.approx(500.0)


def test_a_periodic_scheduler_waits_for_its_pass_not_forever() -> None:
    from job_tables import table

    from coda.policy import make_policy
    from coda.sim.engine import Simulator
    from coda.workload.cluster import parse_cluster_spec
    from coda.workload.perf import build_workload, load_profile_set

    rows = [(0.3, 20000, 0, 8), (10, 3000, 1, 4)]
    wl = build_workload(table(rows), load_profile_set("coda"), 0, {"AlexNet": 1.0})
    sim = Simulator(wl, parse_cluster_spec("1x1g8c"), make_policy("coda"),
                    check_invariants=True, cycle_period_s=7.0)  # fmt: skip
    res = sim.run()
    assert res.summary["jobs"]["finished"] == 2
    # The CPU job starts at the first pass (7 s); its bucket covers a requeue 7,200 s
    # later, at 7,207 s; the next pass is at 7,210 s.
    assert res.jobs["start"][0] == pytest.approx(7.0)
    assert res.jobs["start"][1] == pytest.approx(7210.0)


def test_a_job_that_does_not_checkpoint_is_requeued_only_while_young() -> None:
    # It would lose its whole run: 300 s at the start cover a requeue for 180 s of
    # run (300 + 0.25 t >= t + 120), never again, and no flip is scheduled for it.
    cfg = HarmBudgetConfig(share=0.25, cap_s=900.0, restart_s=120.0, initial_s=300.0)
    b = HarmBudget(cfg, checkpoint_s=600.0)
    node = Node(0, "n", 1, 8, 0, 0.0)
    job = cpu_job()
    job.checkpoints = False
    place(job, node, 0.0, b)
    b.advance(200.0)
    assert b.lost(job) == pytest.approx(200.0)
    assert b.may_preempt(job) == (300.0 + 0.25 * 200.0 >= 200.0 + 120.0)
    b.advance(240.0)
    assert b.may_preempt(job)
    b.advance(241.0)
    assert not b.may_preempt(job)
    assert b.next_due() == math.inf
    b.advance(1e6)
    assert not b.may_preempt(job) and b.lost(job) == pytest.approx(1e6)
    assert b.may_slow(job)  # a shrink or throttle still may: it loses no work
