"""The paper's metrics (coda.sim.paper_metrics, docs/metrics.md): hand-built runs
with known answers, the fragmentation meter against a brute force, and bounds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from job_tables import table

from coda.policy import make_policy
from coda.policy.state import DNN, Job
from coda.sim.engine import Simulator
from coda.sim.paper_metrics import group_percentile, paper_metrics
from coda.sim.result import SimResult
from coda.workload.cluster import parse_cluster_spec
from coda.workload.perf import build_workload, load_profile_set

PROFILES = load_profile_set("coda")

SHARES = (
    "gpu_util_effective",
    "gpu_util_allocated",
    "gpu_active_queued",
    "dnn_queued_time_share",
    "gpu_frag_cores",
    "dnn_no_queue_share",
    "dnn_queue_over_10min_share",
    "dnn_queue_over_1h_share",
    "cpu_within_10s_share",
    "cpu_within_180s_share",
    "cpu_preempted_share",
    "cpu_shrunk_share",
    "dnn_more_cores_share",
    "dnn_fewer_cores_share",
)


def run(rows, cluster, policy="static-separate", users=None, sim_class=Simulator, **kw):
    jobs = table(rows)
    if users is not None:
        jobs.user = list(users)
    wl = build_workload(jobs, PROFILES, 0, {"VGG16": 1.0})
    sim = sim_class(wl, parse_cluster_spec(cluster), make_policy(policy), **kw)
    return sim.run()


# ------------------------------------------------------------ fragmentation
def test_gpus_idle_for_want_of_cores_are_fragmented():
    # One 4-GPU, 8-core node. A (1 GPU, 6 cores) runs 0-100; B (1 GPU, 4 cores) waits
    # for cores while 3 GPUs are free, then runs 100-200.
    res = run([(0, 100, 1, 6), (0, 100, 1, 4)], "1x4g8c", window=(0.0, 200.0), samples=5)
    assert res.jobs["start"].tolist() == [0, 100]
    # A sample shows the state after the events at its instant (t = 0, 50, ..., 200).
    assert res.timeseries["gpu_frag_cores"].tolist() == pytest.approx([0.75, 0.75, 0, 0, 0])
    s = res.summary
    assert s["gpu_frag_cores"] == pytest.approx(0.75 * 2 / 5)  # the samples' mean
    assert s["dnn_queued_time_share"] == pytest.approx(0.5)  # integrated exactly
    assert s["gpu_active_queued"] == pytest.approx(0.25)  # 1 of 4 GPUs while B waited
    assert s["gpu_util_allocated"] == pytest.approx(0.25)
    pm = paper_metrics(res)
    assert pm["gpu_frag_cores"] == s["gpu_frag_cores"] == s["paper"]["gpu_frag_cores"]
    assert pm["dnn_no_queue_share"] == pytest.approx(0.5)


def test_with_many_samples_fragmentation_nears_its_time_average():
    res = run([(0, 100, 1, 6), (0, 100, 1, 4)], "1x4g8c", window=(0.0, 200.0), samples=2001)
    # Exactly: 3 of 4 GPUs for half the window.
    assert res.summary["gpu_frag_cores"] == pytest.approx(0.375, abs=1e-3)


def test_gpus_idle_for_want_of_gpus_are_not_fragmented():
    # B needs 2 GPUs and only 1 is free: it waits for GPUs, not cores.
    res = run([(0, 100, 1, 2), (0, 100, 2, 2)], "1x2g8c", window=(0.0, 200.0))
    assert res.jobs["start"].tolist() == [0, 100]
    assert res.summary["gpu_frag_cores"] == 0.0
    assert res.summary["gpu_active_queued"] == pytest.approx(0.5)


def test_a_node_too_small_for_the_job_even_when_empty_is_not_fragmented():
    # X (4 GPUs, 8 cores) can never hold B (2 GPUs, 16 cores); B waits for Y's GPUs.
    res = run([(0, 100, 2, 20), (0, 100, 2, 16)], "1x4g8c,1x2g32c", window=(0.0, 200.0))
    assert res.jobs["start"].tolist() == [0, 100]
    assert res.summary["dnn_queued_time_share"] == pytest.approx(0.5)
    assert res.summary["gpu_frag_cores"] == 0.0


def test_cpu_jobs_cores_on_a_gpu_node_fragment_it_without_reclaim():
    # static-shared: a CPU job holds 6 of the GPU node's 8 cores from 0 to 100; the
    # DNN job (4 cores) waits from 10 while both GPUs are free.
    res = run(
        [(0, 100, 0, 6), (10, 50, 1, 4)], "1x2g8c", "static-shared", window=(0.0, 200.0),
        samples=2001,
    )  # fmt: skip
    assert res.jobs["start"].tolist() == [0, 100]
    assert res.summary["gpu_frag_cores"] == pytest.approx(2 * 90 / (2 * 200), abs=1e-3)


def _occupied_by_cpu_job(policy: str) -> Simulator:
    """A 2-GPU, 8-core node whose CPU job holds 6 cores, and a queued DNN job that
    would be granted 4 cores per node; no cycle has run."""
    wl = build_workload(table([(0, 100, 0, 6)]), PROFILES, 0, {"VGG16": 1.0})
    sim = Simulator(wl, parse_cluster_spec("1x2g8c"), make_policy(policy))
    node = sim.nodes[0]
    cpu = Job(0, "cpu", 0.0, 0, 6, 0, 1, 100.0)
    sim.sched.occupy(cpu, [node], 6, 0.0)
    dnn = Job(1, "dnn", 0.0, 1, 4, 0, 1, 100.0, model="VGG16")
    assert sim.sched.submit(dnn) is None
    want = sim.policy.core_count.cores_per_node(dnn)
    assert want > node.free_cores  # short of cores as the node stands
    return sim


def test_where_the_policy_reclaims_cpu_jobs_cores_count_as_free():
    assert _occupied_by_cpu_job("static-shared").meters.frag_gpus() == 2
    sim = _occupied_by_cpu_job("coda")
    assert sim.sched.dnn_index is not None
    assert sim.meters.frag_gpus() == 0  # it would take the CPU job's cores


def _brute_frag(sim: Simulator) -> int:
    """Every queued DNN job against every node (the definition, literally)."""
    cores_of = sim.policy.core_count.cores_per_node
    reclaim = sim.sched.dnn_index is not None
    queued = [
        j
        for buckets in sim.sched.buckets.values()
        for b in buckets.values()
        for j in b.live()
        if j.kind == DNN
    ]
    total = 0
    for node in sim.nodes:
        if node.free_gpus <= 0:
            continue
        free = node.dnn_free_cores if reclaim else node.free_cores
        if any(j.gpus_pn <= node.free_gpus and free < cores_of(j) <= node.cores for j in queued):
            total += node.free_gpus
    return total


class _Checked(Simulator):
    """Checks the shape-based meter against the brute force at every sample."""

    checked = 0

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        sample = self.meters.sample

        def checked_sample(i: int) -> None:
            sample(i)
            assert self.meters.frag_gpus() == _brute_frag(self)
            _Checked.checked += 1

        self.meters.sample = checked_sample  # type: ignore[method-assign]


_rows = st.lists(
    st.tuples(
        st.integers(0, 2000),  # submit
        st.integers(1, 3000),  # duration
        st.sampled_from([0, 0, 1, 2, 4, 8]),  # GPUs
        st.integers(1, 24),  # cores
    ),
    min_size=1,
    max_size=30,
)
_POLICIES = ("static-separate", "static-shared", "coda", "fifo", "drf")
_CLUSTER = "2x4g16c,1x8g24c,1x0g16c"


def _busy(seed: int, n: int = 60) -> list[tuple[int, int, int, int]]:
    """A seeded workload that keeps the cluster contended (about 60% of its samples
    have fragmented GPUs), which hypothesis' small examples seldom do."""
    rng = np.random.default_rng(seed)
    return [
        (
            int(rng.integers(0, 3000)),
            int(rng.integers(100, 3000)),
            int(rng.choice([0, 0, 1, 1, 2, 4, 8])),
            int(rng.integers(1, 25)),
        )
        for _ in range(n)
    ]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), policy=st.sampled_from(_POLICIES))
def test_the_fragmentation_meter_matches_the_definition(seed, policy):
    run(_busy(seed), _CLUSTER, policy, sim_class=_Checked, samples=40)


def test_the_brute_force_check_sees_fragmentation():
    _Checked.checked = 0
    res = run(_busy(0), _CLUSTER, "static-shared", sim_class=_Checked, samples=40)
    assert _Checked.checked == 40
    assert (res.timeseries["gpu_frag_cores"] > 0).sum() >= 10


# ------------------------------------------------------------ queuing shares
def test_a_run_without_queuing():
    rows = [(i * 1000, 100, 1 + i % 2, 4) for i in range(6)] + [(500, 10, 0, 2)]
    res = run(rows, "2x4g16c,1x0g8c")
    pm = paper_metrics(res)
    assert pm["dnn_no_queue_share"] == 1.0
    assert pm["dnn_queue_over_10min_share"] == pm["dnn_queue_over_1h_share"] == 0.0
    assert pm["cpu_within_10s_share"] == pm["cpu_within_180s_share"] == 1.0
    assert pm["gpu_active_queued"] is None  # no DNN job ever queued
    assert pm["dnn_queued_time_share"] == 0.0
    assert pm["gpu_frag_cores"] == 0.0
    assert pm["cpu_preemptions_per_job"] == 0.0 and pm["cpu_preempted_share"] == 0.0
    assert pm["core_delta_hist"] == {0: 6}


def test_dnn_queuing_shares_on_one_gpu():
    # FIFO on one GPU, 4000 s each: the jobs wait 0, 4000 and 7990 s.
    rows = [(0, 4000, 1, 2), (0, 4000, 1, 2), (10, 4000, 1, 2)]
    res = run(rows, "1x1g8c")
    assert res.jobs["queued_s"].tolist() == [0, 4000, 7990]
    pm = paper_metrics(res)
    assert pm["dnn_no_queue_share"] == pytest.approx(1 / 3)
    assert pm["dnn_queue_over_10min_share"] == pytest.approx(2 / 3)
    assert pm["dnn_queue_over_1h_share"] == pytest.approx(2 / 3)
    assert pm["dnn_jct_mean_s"] == pytest.approx((4000 + 8000 + 11990) / 3)
    assert pm["cpu_jobs"] == 0 and pm["cpu_jct_mean_s"] is None
    assert pm["cpu_within_10s_share"] is None and pm["cpu_preemptions_per_job"] is None


def test_queuing_past_ten_thousand_seconds_and_the_series_figures():
    # FIFO on one GPU, 6000 s each: the third job waits 11,990 s, past Figure 11's
    # 10^4 s. VGG16 on one GPU asking 2 cores is fed: busy 93.4% while it runs.
    rows = [(0, 6000, 1, 2), (0, 6000, 1, 2), (10, 6000, 1, 2)]
    res = run(rows, "1x1g8c", samples=181)
    pm = paper_metrics(res)
    assert pm["dnn_within_1e4s_share"] == pytest.approx(2 / 3)
    assert pm["cpu_within_1e4s_share"] is None  # no CPU job
    busy = PROFILES.job_perf("VGG16", 1, 1).busy(1.0)
    # The GPU is held all along (Figure 10's time average of busy, unweighted).
    assert pm["gpu_util_busy_time_avg"] == pytest.approx(busy)
    assert pm["gpu_active_over_90_time_share"] == pytest.approx(1.0)
    # The samples cover the window (0 ... 10 s): two jobs queue while the first runs.
    assert pm["dnn_queued_jobs_mean"] == pytest.approx(float(np.mean(res.timeseries["dnn_queued"])))
    assert pm["queued_jobs_mean"] == pm["dnn_queued_jobs_mean"]
    assert pm["gpu_util_busy_queued"] == pytest.approx(busy)


def test_series_figures_read_the_time_series():
    r = _hand_result(submit=[0.0])
    r.timeseries.update(
        gpu_util_allocated=np.array([0.95, 0.8, 0.91, 0.5]),
        gpu_util_busy=np.array([0.6, np.nan, 0.4, 0.2]),
        dnn_queued=np.array([2.0, 0.0, 1.0, 0.0]),
        cpu_queued=np.array([1.0, 1.0, 0.0, 0.0]),
        cpu_util=np.array([0.1, 1.0, 0.2, 0.3]),
    )
    pm = paper_metrics(r)
    assert pm["gpu_active_over_90_time_share"] == pytest.approx(0.5)
    assert pm["gpu_util_busy_time_avg"] == pytest.approx(0.4)  # NaN: no GPU held
    assert pm["gpu_util_busy_queued"] == pytest.approx(0.5)
    assert pm["queued_jobs_mean"] == pytest.approx(5 / 4)
    assert pm["dnn_queued_jobs_mean"] == pytest.approx(3 / 4)
    assert pm["cpu_active_peak"] == 1.0


def test_cpu_placement_shares():
    # Four 4-core CPU jobs on one 4-core node, 5 s each: placed after 0, 5, 10, 15 s.
    res = run([(0, 5, 0, 4)] * 4, "1x0g4c")
    pm = paper_metrics(res)
    assert pm["cpu_within_10s_share"] == pytest.approx(3 / 4)
    assert pm["cpu_within_180s_share"] == 1.0
    assert pm["cpu_jct_mean_s"] == pytest.approx((5 + 10 + 15 + 20) / 4)
    assert pm["cpu_jct_p95_s"] == pytest.approx(np.percentile([5, 10, 15, 20], 95))
    assert pm["dnn_no_queue_share"] is None


def test_per_user_p99_and_its_spread():
    rows = [(0, 100, 1, 2)] * 4 + [(0, 50, 0, 8)]
    res = run(rows, "1x1g8c,1x0g8c", users=["a", "b", "a", "b", "c"])
    queued = res.jobs["queued_s"]
    assert queued.tolist() == [0, 100, 200, 300, 0]
    pm = paper_metrics(res)
    expect = {
        "a": np.percentile([0, 200], 99),
        "b": np.percentile([100, 300], 99),
        "c": 0.0,
    }
    assert pm["user_queue_p99_s"] == pytest.approx(expect)
    assert pm["users"] == 3
    assert pm["user_queue_p99_max_s"] == pytest.approx(max(expect.values()))
    assert pm["user_queue_p99_median_s"] == pytest.approx(np.median(list(expect.values())))
    assert "user_queue_p99_s" not in res.summary["paper"]  # kept out of summary.json


def _hand_result(**cols) -> SimResult:
    n = len(cols["submit"])
    jobs = {
        "is_dnn": np.ones(n, dtype=bool),
        "start": np.asarray(cols["submit"], dtype=float),
        "end": np.asarray(cols["submit"], dtype=float) + 10,
        "cores_requested": np.full(n, 4),
        "cores_granted": np.full(n, 4),
        "user": np.asarray(["u"] * n, dtype=object),
        "preemptions": np.zeros(n, dtype=np.int32),
        "shrinks": np.zeros(n, dtype=np.int32),
    }
    jobs.update({k: np.asarray(v) for k, v in cols.items()})
    return SimResult(summary={"window": {"start": 100.0, "end": 200.0}}, jobs=jobs)


def test_window_unschedulable_and_still_queued_jobs():
    nan = math.nan
    r = _hand_result(
        submit=[50.0, 100.0, 150.0, 160.0, 190.0, 300.0],
        start=[50.0, 100.0, nan, 170.0, nan, nan],
        end=[60.0, 110.0, nan, 180.0, nan, nan],
        # Still queued when the run stopped at 1000 (850 s so far); the last one
        # arrived after the window.
        queued_s=[0.0, 0.0, 850.0, 10.0, nan, 0.0],
        unschedulable=[False, False, False, False, True, False],
    )
    pm = paper_metrics(r)
    # Counted: the jobs at 100, 150 and 160 (50 is before the window, 190 can never
    # run, 300 is after it).
    assert pm["dnn_jobs"] == 3
    assert pm["dnn_no_queue_share"] == pytest.approx(1 / 3)  # only 100 started at once
    assert pm["dnn_queue_over_10min_share"] == pytest.approx(1 / 3)  # 150: 850 s so far
    assert pm["dnn_queue_over_1h_share"] == 0.0
    assert pm["dnn_jct_n"] == 2 and pm["dnn_jct_mean_s"] == pytest.approx((10 + 20) / 2)
    assert pm["core_delta_hist"] == {0: 2}  # the two that started


def test_preemptions_shrinks_and_core_deltas():
    r = _hand_result(
        submit=[100.0, 110.0, 120.0, 130.0, 140.0],
        is_dnn=[False, False, False, True, True],
        preemptions=[0, 3, 1, 0, 0],
        shrinks=[2, 0, 0, 0, 0],
        cores_requested=[4, 4, 4, 8, 30],
        cores_granted=[4, 4, 4, 11, 6],
    )
    pm = paper_metrics(r)
    assert pm["cpu_preemptions_per_job"] == pytest.approx(4 / 3)
    assert pm["cpu_preemptions_max"] == 3
    assert pm["cpu_preempted_share"] == pytest.approx(2 / 3)
    assert pm["cpu_shrinks_per_job"] == pytest.approx(2 / 3)
    assert pm["cpu_shrinks_max"] == 2
    assert pm["cpu_shrunk_share"] == pytest.approx(1 / 3)
    assert pm["core_delta_basis"] == "at start"
    assert pm["core_delta_hist"] == {-24: 1, 3: 1}
    assert pm["dnn_more_cores_share"] == 0.5
    assert pm["dnn_fewer_cores_share"] == 0.0  # 24 fewer is outside the paper's 1-20


def test_a_settled_grant_is_preferred_when_the_engine_records_one():
    r = _hand_result(submit=[100.0, 110.0], cores_settled=[6, 2])
    pm = paper_metrics(r)
    assert pm["core_delta_basis"] == "settled"
    assert pm["core_delta_hist"] == {-2: 1, 2: 1}


def test_a_result_without_the_needed_columns_is_refused_in_one_line():
    r = _hand_result(submit=[100.0])
    del r.jobs["user"]
    with pytest.raises(ValueError, match="lacks column.*user"):
        paper_metrics(r)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abcde"), st.floats(0, 1e6, allow_nan=False)),
        min_size=1,
        max_size=60,
    )
)
def test_group_percentile_is_numpys_per_group(pairs):
    keys = np.asarray([k for k, _ in pairs], dtype=object)
    values = np.asarray([v for _, v in pairs])
    got = group_percentile(keys, values, 99.0)
    for k in set(keys.tolist()):
        assert got[k] == pytest.approx(np.percentile(values[keys == k], 99.0), rel=1e-9, abs=1e-6)
    assert set(got) == set(keys.tolist())


# ------------------------------------------------------------ bounds
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows, policy=st.sampled_from(_POLICIES), horizon=st.sampled_from([None, 2500.0]))
def test_every_share_is_a_fraction_and_never_nan(rows, policy, horizon):
    res = run(rows, _CLUSTER, policy, horizon=horizon)
    pm = paper_metrics(res)
    for key in SHARES:
        v = pm[key]
        assert v is None or 0.0 <= v <= 1.0 + 1e-12, (key, v)
    for key, v in pm.items():
        assert not (isinstance(v, float) and math.isnan(v)), key
    # Fragmented GPUs are free GPUs, and they exist only while a DNN job queues.
    ts = res.timeseries
    assert (ts["gpu_frag_cores"] <= 1.0 - ts["gpu_util_allocated"] + 1e-9).all()
    assert (ts["dnn_queued"][ts["gpu_frag_cores"] > 0] > 0).all()
    assert sum(pm["core_delta_hist"].values()) <= pm["dnn_jobs"]
    assert all(p >= 0 for p in pm["user_queue_p99_s"].values())
