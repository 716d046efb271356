"""The simulator core: scheduling, backfill, contention, extension points, invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from job_tables import PROFILES, table

from coda.policy import POLICIES, PolicyOptions, make_policy
from coda.policy.framework import SetQuota
from coda.policy.state import Job, Node
from coda.sim.engine import Simulator
from coda.workload.cluster import parse_cluster_spec
from coda.workload.jobs import JobTable
from coda.workload.perf import build_workload


def simulate(rows, cluster: str, policy="static-separate", mix=None, seed=0, **kw):
    wl = build_workload(table(rows), PROFILES, seed, mix or {"VGG16": 1.0})
    sim = Simulator(
        wl, parse_cluster_spec(cluster), make_policy(policy), check_invariants=True, **kw
    )
    return sim, sim.run()


def test_lone_jobs_run_for_their_trace_duration():
    # Each job alone on its node at the cores it asked for: JCT == trace duration,
    # whatever its model's optimum (work = duration x speed(requested)).
    rows = [(0, 100, 2, 1), (0, 50, 2, 12), (0, 70, 0, 4), (1000, 30, 1, 1)]
    _, res = simulate(rows, "2x2g16c,1x0g16c", mix={"AlexNet": 1.0})
    jct = res.jobs["end"] - res.jobs["submit"]
    assert np.allclose(jct, [100, 50, 70, 30])
    assert res.summary["jobs"]["finished"] == 4


def test_fifo_queueing_on_one_gpu():
    _, res = simulate([(0, 100, 1, 2), (0, 100, 1, 2), (10, 100, 1, 2)], "1x1g8c")
    assert res.jobs["start"].tolist() == [0, 100, 200]
    assert res.summary["dnn_queue_delay_s"]["mean"] == pytest.approx((0 + 100 + 190) / 3)


def test_backfill_uses_idle_gpus_without_delaying_the_blocked_head():
    rows = [
        (0, 100, 1, 2),  # A: holds one of the two GPUs until t=100
        (1, 50, 2, 2),  # B: needs both GPUs: blocked, gets a reservation at t=100
        (2, 90, 1, 2),  # C: ends at 92 < 100: may backfill
        (3, 200, 1, 2),  # D: would end at 203 and delay B: must wait
    ]
    _, res = simulate(rows, "1x2g8c")
    start = res.jobs["start"].tolist()
    assert start[0] == 0 and start[2] == 2  # C backfilled at once
    assert start[1] == 100  # B not delayed
    assert start[3] == 150  # D after B


def test_without_backfill_the_head_blocks_everyone():
    rows = [(0, 100, 1, 2), (1, 50, 2, 2), (2, 90, 1, 2)]
    wl = build_workload(table(rows), PROFILES, 0, {"VGG16": 1.0})
    policy = make_policy("static-separate", PolicyOptions(estimates="none"))
    res = Simulator(wl, parse_cluster_spec("1x2g8c"), policy, check_invariants=True).run()
    # Strict FIFO (Slurm's sched/builtin): the short job may not pass the blocked
    # 2-GPU job although a GPU is idle.
    assert res.jobs["start"].tolist() == [0, 100, 150]


def test_separate_keeps_cpu_jobs_off_gpu_nodes_and_shared_does_not():
    rows = [(0, 100, 0, 16), (0, 100, 0, 16)]  # two CPU jobs, one 16-core CPU node
    _, sep = simulate(rows, "1x8g96c,1x0g16c", policy="static-separate")
    assert sep.jobs["start"].tolist() == [0, 100]
    _, shared = simulate(rows, "1x8g96c,1x0g16c", policy="static-shared")
    assert shared.jobs["start"].tolist() == [0, 0]  # second one on the GPU node's cores


def test_shared_cpu_jobs_can_delay_dnn_jobs():
    # static-shared has no protection: a CPU job holding the GPU node's cores
    # makes a later DNN job wait although its GPU is free.
    rows = [(0, 100, 0, 16), (0, 100, 0, 8), (1, 10, 1, 4)]
    _, res = simulate(rows, "1x1g8c,1x0g16c", policy="static-shared")
    assert res.jobs["start"][2] == 100


def test_unschedulable_jobs_are_counted_not_lost():
    rows = [(0, 10, 8, 8), (0, 10, 1, 4), (0, 10, 0, 64)]
    _, res = simulate(rows, "2x4g32c,1x0g32c")
    jobs = res.summary["jobs"]
    assert jobs["unschedulable"] == 2 and jobs["finished"] == 1 and jobs["unfinished"] == 2


def test_gang_job_takes_several_nodes_and_waits_for_all():
    rows = [(0, 100, 1, 2), (1, 10, 4, 8, 0, 2)]  # 2 nodes x 2 GPUs
    sim, res = simulate(rows, "2x2g8c")
    assert res.jobs["start"].tolist() == [0, 100]
    assert res.jobs["end"][1] == pytest.approx(110)


def test_memory_bandwidth_contention_slows_sensitive_jobs_and_conserves_work():
    # Two WaveNet jobs alone: 1 GPU each, c_opt 3, 6 GB/s each. On a node with
    # 8 GB/s, each sees the other's 6 GB/s = 75% pressure -> 1.33x slower.
    rows = [(0, 100, 1, 3), (0, 100, 1, 3)]
    sim, res = simulate(rows, "1x2g8c8b", mix={"WaveNet": 1.0})
    perf = PROFILES.job_perf("WaveNet", 1, 1)
    expected = 100 * perf.slowdown(perf.bw_gbps / 8.0)
    assert expected > 100
    assert np.allclose(res.jobs["end"], expected)
    assert res.summary["max_work_error"] < 1e-9


def test_speed_recomputed_when_a_co_runner_leaves():
    rows = [(0, 100, 1, 3), (0, 20, 1, 3)]
    _, res = simulate(rows, "1x2g8c8b", mix={"WaveNet": 1.0})
    perf = PROFILES.job_perf("WaveNet", 1, 1)
    slow = perf.slowdown(perf.bw_gbps / 8.0)
    t_short = 20 * slow
    # The long job ran at 1/slow until t_short, then at full speed.
    assert res.jobs["end"][1] == pytest.approx(t_short)
    assert res.jobs["end"][0] == pytest.approx(t_short + (100 - t_short / slow))


class _HalfQuotaForCpuJobs:
    """A node-control plugin: throttles every CPU job to half its cores."""

    period_s = 10.0

    def control(self, node: Node, now: float):
        return [SetQuota(j, 0.5) for j in node.jobs if not j.is_dnn and j.quota != 0.5]

    def watching(self, node: Node) -> bool:
        return bool(node.jobs)

    def at_rest(self, node: Node) -> bool:
        return False

    def forget_job(self, job: Job) -> None:
        pass


def test_node_control_plugin_throttles_without_touching_the_core():
    rows = [(0, 100, 0, 4)]
    wl = build_workload(table(rows), PROFILES, 0)
    policy = make_policy("static-shared")
    policy.node_control = _HalfQuotaForCpuJobs()
    res = Simulator(wl, parse_cluster_spec("1x0g8c"), policy, check_invariants=True).run()
    # Full speed for the first 10 s, then half: 10 + 2 x 90.
    assert res.jobs["end"][0] == pytest.approx(190)


class _PreferLastNode:
    def score(self, job: Job, node: Node, cores_pn: int) -> float:
        return node.idx


def test_score_plugin_chooses_among_feasible_nodes():
    wl = build_workload(table([(0, 10, 1, 2)]), PROFILES, 0, {"VGG16": 1.0})
    policy = make_policy("static-separate")
    policy.scores = [(_PreferLastNode(), 1.0)]
    policy.candidates_to_score = 10
    placed = []

    class Spy:
        def reserve(self, job, nodes, now):
            placed.extend(n.idx for n in nodes)

        def unreserve(self, job, now):
            pass

    policy.reserve = [Spy()]
    Simulator(wl, parse_cluster_spec("4x1g8c"), policy).run()
    assert placed == [3]


def test_horizon_reports_running_and_queued_jobs_as_unfinished():
    rows = [(0, 100, 1, 2), (0, 100, 1, 2), (5, 1, 0, 1)]
    _, res = simulate(rows, "1x1g8c,1x0g4c", horizon=50)
    assert res.summary["jobs"]["finished"] == 1
    assert res.summary["jobs"]["unfinished"] == 2
    assert math.isnan(res.jobs["start"][1])


def test_utilisation_is_a_time_average_over_the_arrival_window():
    # One 1-GPU job busy for the whole window [0, 100] on a 2-GPU cluster.
    rows = [(0, 100, 1, 2), (100, 10, 0, 1)]
    _, res = simulate(rows, "1x2g8c,1x0g4c")
    assert res.summary["gpu_util_allocated"] == pytest.approx(0.5)
    assert res.summary["gpu_util_effective"] == pytest.approx(0.5)
    ts = res.timeseries
    assert ts["gpu_util_allocated"][len(ts["t"]) // 2] == pytest.approx(0.5)


# ---------------------------------------------------------------- properties

job_rows = st.lists(
    st.tuples(
        st.integers(0, 500),  # submit
        st.integers(1, 300),  # duration
        st.sampled_from([0, 0, 1, 1, 2, 4]),  # gpus
        st.integers(1, 24),  # cores
        st.sampled_from([0, 1000, 64000]),  # mem MiB
        st.sampled_from([1, 1, 1, 2]),  # nodes
    ),
    min_size=1,
    max_size=40,
)
clusters = st.sampled_from(["2x4g16c8b,1x0g16c", "3x2g8c64m,2x0g8c", "1x4g24c,1x0g4c", "4x1g4c"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=job_rows, cluster=clusters, policy=st.sampled_from(sorted(POLICIES)))
def test_invariants_hold_on_random_workloads(rows, cluster, policy):
    rows = [r if r[2] % r[5] == 0 else (*r[:5], 1) for r in rows]
    mix = {"AlexNet": 1.0, "WaveNet": 1.0, "ResNet50": 1.0}
    # check_invariants: no node over-committed, books balance, work conserved, and
    # after every cycle no queued job fits anywhere (for CODA's DNN jobs: counting
    # the cores CPU jobs hold as free, i.e. no DNN job waits on CPU-job cores).
    sim, res = simulate(rows, cluster, policy=policy, mix=mix, noise=0.05)
    jobs = res.summary["jobs"]
    # Every arriving job finishes or is reported (unschedulable).
    assert jobs["finished"] + jobs["unfinished"] == len(rows)
    assert jobs["unfinished"] == jobs["unschedulable"]
    started = ~np.isnan(res.jobs["start"])
    assert (res.jobs["start"][started] >= res.jobs["submit"][started]).all()
    assert res.summary["max_work_error"] < 1e-6
    assert all(n.free_gpus == n.gpus and n.free_cores == n.cores for n in sim.nodes)
    assert 0.0 <= res.summary["gpu_util_effective"] <= res.summary["gpu_util_allocated"] + 1e-9
    assert res.summary["gpu_util_allocated"] <= 1.0 + 1e-9 and res.summary["cpu_util"] <= 1.0 + 1e-9


@settings(max_examples=15, deadline=None)
@given(rows=job_rows, seed=st.integers(0, 3))
def test_same_seed_same_result(rows, seed):
    rows = [r if r[2] % r[5] == 0 else (*r[:5], 1) for r in rows]
    mix = {"AlexNet": 1.0, "WaveNet": 1.0, "Bi-att-flow": 1.0}
    _, a = simulate(rows, "2x4g16c8b,1x0g16c", mix=mix, seed=seed)
    _, b = simulate(rows, "2x4g16c8b,1x0g16c", mix=mix, seed=seed)
    for key in ("start", "end"):
        assert np.array_equal(a.jobs[key], b.jobs[key], equal_nan=True)
    for key in ("gpu_util_effective", "cpu_util", "dnn_jct_s"):
        assert a.summary[key] == b.summary[key]


# ------------------------------------------------- scheduling regressions
# Found by comparing against a brute-force scheduler that retries every queued
# job on every node at every event. B: memory bandwidth high enough that there
# is no contention, so runtime estimates are exact.
B = "1000000000b"


def starts(rows, cluster, policy="static-separate", **policy_knobs):
    wl = build_workload(table(rows), PROFILES, 0, {"VGG16": 1.0})
    pol = make_policy(policy)
    for k, v in policy_knobs.items():
        setattr(pol, k, v)
    sim = Simulator(wl, parse_cluster_spec(cluster), pol, check_invariants=True)
    return sim.run().jobs["start"].tolist()


def test_a_dnn_heads_reservation_binds_cpu_jobs_on_gpu_nodes():
    # H (row 3, 2 GPUs) is reserved on the GPU node from t=100; the 200 s CPU
    # job C (row 5) must not take that node's cores at t=10 and delay H.
    rows = [(0, 100, 1, 2), (0, 1000, 0, 4), (0, 10, 0, 6), (1, 50, 2, 6), (2, 100, 0, 4, 2000),
            (3, 200, 0, 4)]  # fmt: skip
    assert starts(rows, f"1x2g8c1m{B},1x0g4c64m{B}", "static-shared") == [0, 0, 0, 100, 1000, 150]


def test_a_head_refused_by_another_reservation_does_not_claim_the_node_now():
    # The CPU head (row 2) cannot use the GPU node the DNN head holds; it must
    # not reserve it at "now" and so keep the short DNN job (row 3) off it.
    rows = [(0, 300, 0, 16, 0, 2), (1, 100, 1, 14), (2, 400, 0, 6), (3, 50, 1, 2)]
    assert starts(rows, f"1x4g16c{B},1x0g8c{B}", "static-shared") == [0, 300, 300, 3]


def test_nodes_freed_by_a_spent_reservation_are_retried_in_the_same_cycle():
    # At t=309 the gang head (row 1) starts; the nodes its reservation held must
    # be open to row 3 at once, else row 3 becomes a false head and a long job
    # backfills in front of the next gang head (row 4).
    rows = [(143, 166, 0, 14), (149, 1, 0, 6, 0, 2), (150, 279, 0, 4), (247, 100, 0, 12),
            (257, 1, 0, 14, 0, 2), (279, 281, 0, 6)]  # fmt: skip
    assert starts(rows, f"2x0g16c{B}") == [143, 309, 309, 309, 409, 409]


def test_jobs_that_only_fail_on_memory_do_not_use_up_the_backfill_depth():
    # 20 queued jobs fit only the big-memory node (busy until 1000); the last
    # job fits the small node once it frees at 100, whatever the depth.
    rows = [(0, 1000, 0, 8, 2000), (0, 100, 0, 8)] + [(1, 10, 0, 1, 2000)] * 20 + [(2, 10, 0, 1)]
    assert starts(rows, f"1x0g8c64m{B},1x0g8c1m{B}", backfill_depth=5)[-1] == 100


def test_a_job_that_fits_only_the_last_of_many_nodes_is_found():
    rows = [(0, 10, 0, 1, 2000)]
    assert starts(rows, "300x0g8c1m,1x0g8c64m") == [0]


def test_control_ticks_stop_when_no_job_is_left():
    wl = build_workload(table([(0, 100, 0, 4)]), PROFILES, 0)
    policy = make_policy("static-separate")
    policy.node_control = _HalfQuotaForCpuJobs()
    res = Simulator(wl, parse_cluster_spec("1x0g8c"), policy).run()
    assert res.summary["events"] < 30  # 1 arrival, 1 finish, ~19 ticks; not endless


def test_time_series_before_the_first_arrival_shows_an_empty_cluster():
    wl = build_workload(table([(100, 50, 1, 2), (200, 10, 0, 1)]), PROFILES, 0, {"VGG16": 1.0})
    sim = Simulator(
        wl, parse_cluster_spec("1x1g8c,1x0g4c"), make_policy("static-separate"),
        window=(0.0, 200.0), samples=5,
    )  # fmt: skip
    res = sim.run()
    assert res.timeseries["gpu_util_allocated"].tolist() == [0, 0, 1, 0, 0]
    assert res.summary["gpu_util_allocated"] == pytest.approx(0.25)


def test_time_series_stops_at_the_horizon():
    wl = build_workload(table([(0, 500, 1, 2), (1000, 10, 0, 1)]), PROFILES, 0, {"VGG16": 1.0})
    sim = Simulator(wl, parse_cluster_spec("1x1g8c,1x0g4c"), make_policy("static-separate"),
                    horizon=100.0, samples=11)  # fmt: skip
    res = sim.run()
    assert res.timeseries["t"][-1] == pytest.approx(100.0)
    assert res.summary["window"]["end"] == 100.0
    assert res.summary["gpu_util_allocated"] == pytest.approx(1.0)


def test_without_backfill_a_new_head_is_searched_everywhere():
    # J2 sat behind the blocked head H (8 GPUs) and was never tried; when A ends at 100,
    # H starts on A's node and J2 must be searched for on X's node too, where its GPUs
    # were free all along (not only on the nodes that just gained room).
    rows = [("A", 0.0, 100.0, 8, 8), ("X", 0.5, 1000.0, 4, 4), ("H", 2.0, 100.0, 8, 8),
            ("J2", 3.0, 100.0, 2, 2)]  # fmt: skip
    ids, sub, dur, g, c = zip(*rows, strict=True)
    n = len(ids)
    t = JobTable.from_columns(ids, sub, dur, g, c, [0] * n, [1] * n, [0] * n)
    wl = build_workload(t, PROFILES, 0, {"ResNet50": 1.0})
    policy = make_policy("static-separate", PolicyOptions(estimates="none"))
    sim = Simulator(wl, parse_cluster_spec("2x8g32c"), policy, check_invariants=True)
    res = sim.run()
    assert res.jobs["start"].tolist() == [0.0, 0.5, 100.0, 100.0]


def test_a_fifo_wait_is_recorded_as_the_jobs_wait_reason():
    # 4 GPUs: A takes 3, B (2) waits for GPUs, C (1) would fit but waits behind B (no
    # backfill); both start when A ends.
    rows = [("A", 0.0, 600.0, 3, 3), ("B", 1.0, 600.0, 2, 2), ("C", 2.0, 100.0, 1, 1)]
    ids, sub, dur, g, c = zip(*rows, strict=True)
    t = JobTable.from_columns(ids, sub, dur, g, c, [0] * 3, [1] * 3, [0] * 3)
    wl = build_workload(t, PROFILES, 0, {"ResNet50": 1.0})
    policy = make_policy("static-separate", PolicyOptions(estimates="none"))
    res = Simulator(wl, parse_cluster_spec("1x4g8c"), policy, check_invariants=True).run()
    assert res.jobs["wait_reason"].tolist() == ["", "gpus", "fifo:B"]
    assert res.summary["waits_by_reason"] == {"fifo": 1, "gpus": 1}
