"""The simulator's CODA mechanisms one at a time: a gang job's samples, preemption and
checkpoints, reclaim and the reserve, retries when core counts drop, ticks, throttles
restored, a preempted job restarted; then all of them at once, where the books must
stay balanced."""

from __future__ import annotations

import math
import random

import pytest
from fakes import LOOSE_HARM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from job_tables import table

from coda.policy import make_policy
from coda.policy.framework import Preempt, SetCores, SetQuota
from coda.policy.options import PolicyOptions
from coda.policy.plugins.reclaim import ShrinkThenPreempt
from coda.policy.state import Job, Node
from coda.sim.constants import FINISH as _FINISH
from coda.sim.engine import Simulator
from coda.workload.cluster import parse_cluster_spec
from coda.workload.perf import build_workload, load_profile_set
from tests.test_engine_control import _Recorder, run, shared_with

PROFILES = load_profile_set("coda")


# ------------------------------------------------------------------ one mechanism each


class _NoSearch(_Recorder):
    """Job control that never wants samples for its own sake."""

    def wants_samples(self, job):
        return False


class _WatchMixed:
    """Node control: watches nodes with both a DNN and a CPU job; never acts."""

    period_s = 10.0

    def watching(self, node: Node) -> bool:
        return any(j.is_dnn for j in node.jobs) and any(not j.is_dnn for j in node.jobs)

    def control(self, node, now):
        return []


def test_a_gang_dnn_job_is_sampled_when_its_cpu_co_runner_is_on_its_second_node():
    policy = make_policy("static-shared")
    rec = _NoSearch()
    policy.job_control = rec
    policy.node_control = _WatchMixed()
    # DNN gang job on n0 (4 cores, tighter: first in its placement) and n1; the
    # 4-core CPU job only fits beside it on n1, which is watched from t=1 on.
    rows = [(0, 100, 2, 4, 0, 2), (1, 1000, 0, 4)]
    run(rows, "1x1g4c,1x1g8c", policy)
    # With the CPU job on n0 instead (2 cores fit there) the job gets 9 samples.
    assert len(rec.samples) > 0


def test_preemption_loses_exactly_the_work_since_the_last_checkpoint():
    # CPU job: 16 cores from 0, checkpoint every 100 s. At 10 a DNN job's reclaim
    # shrinks it to 12 cores (speed 0.75); at 50 another preempts it. Work since
    # the checkpoint at 0: 10 + 0.75 x 40 = 40 (the engine loses 0.75 x 50 = 37.5).
    rows = [(0, 1000, 0, 16), (10, 100, 1, 4), (50, 100, 1, 8)]
    _, res = run(rows, "1x2g16c", shared_with(ShrinkThenPreempt(), checkpoint_s=100.0))
    assert res.summary["preemption"]["count"] == 1
    assert res.summary["preemption"]["lost_core_s"] == pytest.approx(40 * 16)
    # Restarted at 150 (both DNN jobs gone) with all 1000 s of work left.
    assert res.jobs["end"][0] == pytest.approx(1150)


def test_a_cpu_job_admitted_by_the_reserve_after_a_dnn_start_starts_at_once():
    # The CPU node is full. On the GPU node a DNN job leaves 4 cores and one idle
    # GPU: the 3-core CPU job would eat into that GPU's 2-core reserve, so it
    # waits. At 5 a 1-core DNN job takes the last GPU: no reserve is left and the
    # CPU job fits the 3 remaining cores, but nothing retries it there.
    rows = [(0, 1000, 0, 8), (0, 200, 1, 12), (1, 100, 0, 3), (5, 300, 1, 1)]
    wl = build_workload(table(rows), PROFILES, 0, {"VGG16": 1.0})
    spec = parse_cluster_spec("1x2g16c,1x0g8c")
    # (A loose harm budget: a busy memory bus would keep the CPU job off the node.)
    policy = make_policy("coda-no-slimming", PolicyOptions(tune=LOOSE_HARM))
    res = Simulator(wl, spec, policy).run()
    assert res.jobs["start"][2] == 5
    # (with check_invariants=True the run stops: "fits at t=5.0 but was left waiting")


class _Learner(_Recorder):
    """Core count + job control like the allocator: once it has learned (at its
    first sample), DNN jobs get 2 cores instead of their request."""

    def __init__(self) -> None:
        super().__init__()
        self.learned = False
        self.generation = 0  # the CoreCount contract: bumped when answers change

    def cores_per_node(self, job: Job) -> int:
        return 2 if self.learned and job.is_dnn else job.cores_pn_req

    def group_key(self, job: Job) -> tuple:
        return (job.cores_pn_req,)

    def on_sample(self, job, now, throughput):
        if not self.learned:
            self.learned = True
            self.generation += 1
        return []


def test_a_queued_job_is_retried_when_its_core_count_drops():
    policy = make_policy("static-separate")
    learner = _Learner()
    policy.core_count = learner
    policy.job_control = learner
    policy.sample_period_s = 10.0
    # D2 waits for cores (2 free, wants 6). At 10 the first sample teaches the
    # plugin 2 cores: D2 fits beside D1 now, but waits until D1 ends at 100.
    _, res = run([(0, 100, 1, 6), (1, 100, 1, 6)], "1x2g8c", policy)
    assert learner.learned
    assert res.jobs["start"][1] == 10


class _PreemptOnTick:
    """Node control that watches n0 while it has a CPU job and preempts it there."""

    period_s = 10.0

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def watching(self, node: Node) -> bool:
        return node.name == "n00000" and any(not j.is_dnn for j in node.jobs)

    def control(self, node, now):
        self.calls.append((node.name, now))
        return [Preempt(j) for j in node.jobs if not j.is_dnn]


class _SampleWhenAlone(_Recorder):
    """Job control that samples n1's DNN job while no CPU job shares its nodes."""

    def wants_samples(self, job):
        return job.placement[0].name == "n00001" and not any(
            not j.is_dnn for n in job.placement for j in n.jobs
        )


def test_ticks_never_run_twice_at_one_instant():
    policy = make_policy("static-shared")
    control = _PreemptOnTick()
    policy.node_control = control
    policy.job_control = _SampleWhenAlone()
    policy.sample_period_s = 10.0
    # A gang CPU job spans n0 and n1 beside a DNN job on each. Each tick on n0
    # preempts it: n0 stops being watched (none left), n1 starts (its DNN job is
    # alone). The CPU job restarts at once, so this repeats every tick.
    rows = [(0, 100, 1, 2), (0, 100, 1, 2), (1, 1000, 0, 12, 0, 2)]
    run(rows, "2x1g8c", policy, horizon=60)
    assert len(control.calls) == len(set(control.calls))


# ------------------------------- throttles restored, preemptions restarted, and all of them at once


class _ThrottleMixedRestoreAlone:
    """Eliminator-like: watches mixed nodes and nodes with a throttled CPU job;
    throttles CPU jobs next to a DNN job, restores them once it is gone."""

    period_s = 10.0

    def __init__(self) -> None:
        self.actions: list[tuple[float, str, float]] = []

    def watching(self, node: Node) -> bool:
        cpu = [j for j in node.jobs if not j.is_dnn]
        return bool(cpu) and (any(j.is_dnn for j in node.jobs) or any(j.quota < 1.0 for j in cpu))

    def control(self, node, now):
        dnn = any(j.is_dnn for j in node.jobs)
        q = 0.5 if dnn else 1.0
        acts = [SetQuota(j, q) for j in node.jobs if not j.is_dnn and j.quota != q]
        self.actions.extend((now, a.job.job_id, a.quota) for a in acts)
        return acts


def test_a_throttled_cpu_job_is_restored_after_its_dnn_neighbour_leaves():
    policy = make_policy("static-shared")
    control = _ThrottleMixedRestoreAlone()
    policy.node_control = control
    rows = [(0, 100, 1, 2), (5, 1000, 0, 4)]
    _, res = run(rows, "1x1g8c", policy)
    # Throttled at the first tick (15); the DNN job leaves at 100; the node stays
    # watched (a throttled CPU job) and the tick at 105 restores it.
    assert control.actions == [(15.0, "j1", 0.5), (105.0, "j1", 1.0)]
    # 10 s at full speed, 90 s at half, then full: 1000 - 10 - 45 left at 105.
    assert res.jobs["end"][1] == pytest.approx(105 + 945)


def test_a_preempted_and_restarted_job_finishes_once_at_the_right_time():
    # Stale finish events of the first run are retired by the version bump: the
    # job ends once, at restart + the work left after the checkpoint.
    rows = [(0, 100, 0, 8), (45, 10, 1, 4), (70, 10, 1, 4)]
    sim, res = run(rows, "1x1g8c", shared_with(ShrinkThenPreempt(min_share=1.0), 20.0))
    assert res.summary["preemption"]["count"] == 2
    # 45: loses 5 s (checkpoint at 40), restarts at 55 with 60 left (its first
    # finish event, 100, is stale); 70: loses the 15 s since its restart (no
    # checkpoint yet), restarts at 80 with 60 left: ends at 140.
    assert res.jobs["end"][0] == pytest.approx(140)
    assert res.summary["cpu_queue_delay_s"]["mean"] == pytest.approx(10 + 10)
    assert res.summary["max_work_error"] < 1e-9
    assert not [e for e in sim.kernel.events_ahead() if e[2] == _FINISH and e[3].running]


class _RandomControl:
    """Node control doing random quota cuts, shrinks and preemptions."""

    period_s = 7.0

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def watching(self, node: Node) -> bool:
        return any(not j.is_dnn for j in node.jobs)

    def at_rest(self, node: Node) -> bool:
        return False

    def forget_job(self, job: Job) -> None:
        pass

    def control(self, node, now):
        acts = []
        for j in list(node.jobs):
            r = self.rng.random()
            if j.is_dnn:
                if r < 0.2:
                    acts.append(SetCores(j, max(1, j.cores_pn + self.rng.choice([-1, 1]))))
            elif r < 0.3:
                acts.append(SetQuota(j, self.rng.choice([0.1, 0.5, 1.0])))
            elif r < 0.4:
                acts.append(SetCores(j, max(1, j.cores_pn - 1)))
            elif r < 0.45:
                acts.append(Preempt(j))
        return acts


def _check_books(sim: Simulator, jobs: list[Job]) -> None:
    running = [j for j in jobs if j.running]
    for kind in ("dnn", "cpu"):
        assert sim.gauges.count[f"{kind}_running"] == sum(j.kind == kind for j in running)
        queued = [j for j in jobs if j.kind == kind and not j.running and j.end < 0]
        assert sim.sched.queued[kind] == len(queued)
    assert sim.gauges.gpu_alloc == sum(j.gpus for j in running)
    assert sim.gauges.cores_alloc == sum(j.cores_pn * j.nodes for j in running)
    assert sim.gauges.cores_useful == pytest.approx(
        sum(sim.speed.useful_cores(j) for j in running), abs=1e-6
    )
    dnn = [j for j in running if j.is_dnn]
    assert sim.gauges.gpu_base == pytest.approx(
        sum(j.gpus * j.core_speed_now for j in dnn), abs=1e-6
    )
    assert sim.gauges.gpu_eff == pytest.approx(sum(j.gpus * j.speed for j in dnn), abs=1e-6)
    for n in sim.nodes:
        assert n.cpu_job_cores == sum(j.cores_pn for j in n.jobs if not j.is_dnn)
        assert sim.sched.index[n.pool].key[n.idx] == (n.free_gpus, n.free_cores)
        if sim.sched.dnn_index is not None and n.pool == "gpu":
            assert sim.sched.dnn_index.key[n.idx] == (n.free_gpus, n.free_cores + n.cpu_job_cores)
    for j in running:
        assert j.start >= 0 and j.remaining > -1e-6 * max(1.0, j.work)
        if j.speed > 0:
            ahead = sim.kernel.events_ahead()
            live = [e for e in ahead if e[2] == _FINISH and e[3] is j and e[4] == j.version]
            assert len(live) == 1
            assert live[0][0] == pytest.approx(j.last_update + j.remaining / j.speed)
    for j in sim.speed.episodes:
        assert j.running and j.is_dnn


rows_st = st.lists(
    st.tuples(
        st.integers(0, 300),
        st.integers(1, 600),
        st.sampled_from([0, 0, 0, 1, 1, 2]),
        st.integers(1, 16),
        st.sampled_from([0, 0, 1000]),
        st.sampled_from([1, 1, 2]),
    ),
    min_size=1,
    max_size=30,
)


@pytest.mark.slow
@settings(
    max_examples=20, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(rows=rows_st, seed=st.integers(0, 1000), ckpt=st.sampled_from([5.0, 60.0, 600.0]))
def test_books_stay_balanced_under_preemption_shrinks_and_throttles(rows, seed, ckpt):
    rows = [r if r[2] % r[5] == 0 else (*r[:5], 1) for r in rows]
    policy = make_policy("coda")  # reclaim on start and on growth, learning allocator
    policy.node_control = _RandomControl(random.Random(seed))
    policy.checkpoint_s = ckpt
    mix = {"AlexNet": 1.0, "WaveNet": 1.0, "ResNet50": 1.0}
    wl = build_workload(table(rows), PROFILES, seed % 4, mix)
    seen: dict[int, Job] = {}

    class Checked(Simulator):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            arrive = self.executor.arrive

            def arrive_seen(i):
                job = arrive(i)
                if job is not None:
                    seen[i] = job
                return job

            self.executor.arrive = arrive_seen

        instants = 0

        def _advance(self, t):
            if t > self.kernel.now:
                # Every instant at first, then every 50th: heavy throttling makes
                # runs of many thousand idle ticks, each as costly to check.
                self.instants += 1
                if self.instants <= 2000 or self.instants % 50 == 0:
                    _check_books(self, list(seen.values()))
            super()._advance(t)

    # The bugs above are fixed, so the driver's own checks run too.
    sim = Checked(
        wl,
        parse_cluster_spec("2x2g8c4b,1x0g8c"),
        policy,
        noise=0.05,
        seed=seed,
        check_invariants=True,
    )
    res = sim.run()
    _check_books(sim, list(seen.values()))
    jobs = res.summary["jobs"]
    assert jobs["unfinished"] == jobs["unschedulable"]  # nobody lost or stuck
    assert res.summary["max_work_error"] < 1e-6
    assert all(math.isclose(n.free_cores, n.cores) for n in sim.nodes)
