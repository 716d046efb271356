"""What co-location costs each CPU job: execution against its runtime alone and
against the same job under a baseline, time throttled and shrunk, work lost to
preemption (coda.sim.cpu_harm, the executor's spells)."""

from __future__ import annotations

import numpy as np
import pytest

from coda.policy.state import Job
from coda.sim.cpu_harm import cpu_harm, cpu_stretch
from coda.sim.outcomes import JobOutcomes
from coda.sim.result import SimResult
from tests.test_engine_control import _PreemptAll, _ShrinkOnly, run, shared_with


def result(ids, is_dnn, start, end, alone, **columns) -> SimResult:
    jobs = {
        "job_id": np.asarray(ids, dtype=object),
        "is_dnn": np.asarray(is_dnn, dtype=bool),
        "start": np.asarray(start, dtype=np.float64),
        "end": np.asarray(end, dtype=np.float64),
        "alone_s": np.asarray(alone, dtype=np.float64),
    }
    jobs.update({k: np.asarray(v, dtype=np.float64) for k, v in columns.items()})
    return SimResult(summary={}, jobs=jobs)


def test_slowdown_counts_finished_cpu_jobs_against_their_runtime_alone():
    res = result(
        ["a", "b", "c", "d", "e"],
        [False, False, False, True, False],
        [0, 10, 0, 0, 5],
        [100, 260, np.nan, 900, 125],  # c never finished; d is a DNN job
        [100, 100, 50, np.nan, 80],
        throttled_s=[0, 40, 7, 0, 0],
        shrunk_s=[0, 0, 3, 0, 90],
        lost_core_s=[0, 16, 0, 0, 0],
    )
    h = cpu_harm(res)
    # a: 1.0x, b: 250/100 = 2.5x, e: 120/80 = 1.5x (not over 1.5x: strictly over)
    assert h["cpu_slowdown_max"] == pytest.approx(2.5)
    assert h["cpu_slowdown_mean"] == pytest.approx((1.0 + 2.5 + 1.5) / 3)
    assert h["cpu_slowed_over_2x_share"] == pytest.approx(1 / 3)
    assert h["cpu_slowed_over_1_5x_share"] == pytest.approx(1 / 3)
    # Spells over every CPU job that started (c too, unfinished).
    assert h["cpu_harm_jobs"] == 4
    assert h["cpu_throttled_s_mean"] == pytest.approx(47 / 4)
    assert h["cpu_throttled_s_max"] == pytest.approx(40)
    assert h["cpu_shrunk_s_max"] == pytest.approx(90)
    assert h["cpu_lost_core_s_mean"] == pytest.approx(4)


def test_a_result_without_the_columns_says_none_not_zero():
    res = SimResult(
        summary={},
        jobs={
            "job_id": np.asarray(["a"], dtype=object),
            "is_dnn": np.asarray([False]),
            "start": np.asarray([0.0]),
            "end": np.asarray([10.0]),
        },
    )
    h = cpu_harm(res)
    assert h["cpu_slowdown_p99"] is None and h["cpu_slowed_over_2x_share"] is None
    assert h["cpu_throttled_s_mean"] is None and h["cpu_lost_core_s_mean"] is None


def test_the_stretch_matches_jobs_by_id_whatever_their_order():
    base = result(["x", "y", "z", "g"], [False, False, False, True],
                  [0, 0, 0, 0], [100, 50, np.nan, 10], [100, 50, 10, np.nan])  # fmt: skip
    ours = result(["y", "x", "z", "g"], [False, False, False, True],
                  [5, 0, 0, 0], [205, 150, 40, 30], [50, 100, 10, np.nan])  # fmt: skip
    s = cpu_stretch(ours, base, "fifo")
    # y: 200/50 = 4x, x: 150/100 = 1.5x; z unfinished under the baseline, g a DNN job.
    assert s["baseline"] == "fifo" and s["jobs"] == 2
    assert s["stretch_max"] == pytest.approx(4.0)
    assert s["stretch_over_2x_share"] == pytest.approx(0.5)
    assert s["stretch_over_1_5x_share"] == pytest.approx(0.5)
    assert cpu_stretch(base, base, "fifo")["stretch_max"] == pytest.approx(1.0)


def test_spells_open_and_close_with_the_jobs_state():
    out = JobOutcomes(2, ["u", "u"])
    job = Job(0, "c", 0.0, 0, 8, 0, 1, 100.0)
    job.placement = [object()]  # type: ignore[list-item]  # running
    job.cores_pn = 8
    out.note_cpu_spells(job, 0.0)
    job.quota = 0.5
    out.note_cpu_spells(job, 10.0)
    job.cores_pn = 4
    out.note_cpu_spells(job, 15.0)
    job.quota = 1.0
    out.note_cpu_spells(job, 40.0)
    job.placement = []
    out.note_cpu_spells(job, 50.0)  # off its nodes: neither
    out.close_spells(60.0)
    assert out.throttled_s[0] == pytest.approx(30.0)
    assert out.shrunk_s[0] == pytest.approx(35.0)
    dnn = Job(1, "d", 0.0, 1, 4, 0, 1, 100.0)
    dnn.placement = [object()]  # type: ignore[list-item]
    dnn.quota = 0.1
    out.note_cpu_spells(dnn, 0.0)
    out.close_spells(99.0)
    assert out.throttled_s[1] == 0.0  # DNN jobs are not what this measures


def test_a_shrunk_cpu_job_in_the_simulator():
    rows = [(0, 100, 0, 8), (50, 10, 1, 4)]
    _, res = run(rows, "1x1g8c", shared_with(_ShrinkOnly()))
    # 50 s at full speed, then half its cores for the 100 s it needs: ends at 150.
    assert res.jobs["shrunk_s"][0] == pytest.approx(100)
    assert res.jobs["alone_s"][0] == pytest.approx(100)
    assert np.isnan(res.jobs["alone_s"][1])
    paper = res.summary["paper"]
    assert paper["cpu_slowdown_max"] == pytest.approx(1.5)
    assert paper["cpu_shrunk_s_max"] == pytest.approx(100)
    assert paper["cpu_lost_core_s_max"] == 0


def test_work_lost_to_a_preemption_is_the_jobs_own():
    rows = [(0, 100, 0, 8), (45, 10, 1, 4)]
    _, res = run(rows, "1x1g8c", shared_with(_PreemptAll(), checkpoint_s=20.0))
    # Checkpoints at 20 and 40; preempted at 45: 5 s x 8 cores; restarts at 55, ends 115.
    assert res.jobs["lost_core_s"][0] == pytest.approx(40)
    assert res.jobs["lost_core_s"].sum() == pytest.approx(res.summary["preemption"]["lost_core_s"])
    assert res.summary["paper"]["cpu_slowdown_max"] == pytest.approx(115 / 100)
