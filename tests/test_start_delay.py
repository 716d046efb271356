"""The simulator's model of a real stack's timing: a start delay (a placed job holds its
GPUs and cores at once and works only that long after) and CODA's control period."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from coda.cli import main
from coda.policy import PolicyOptions, make_policy
from coda.sim.engine import Simulator
from coda.sim.run import RunConfig
from coda.workload.cluster import parse_cluster_spec
from coda.workload.perf import build_workload
from tests.test_engine import PROFILES, simulate, table


def test_a_lone_job_ends_its_delay_later_and_starts_when_placed():
    rows = [(0, 100, 2, 4), (10, 50, 0, 4)]
    _, res = simulate(rows, "1x2g16c,1x0g16c", start_delay_s=3.0)
    assert res.jobs["start"].tolist() == [0, 10]  # placed (holding its share) at once
    assert np.allclose(res.jobs["end"], [103, 63])


def test_the_delay_holds_resources_so_the_next_job_waits_for_it():
    # One GPU: the second job is placed when the first ends (its delay included),
    # then waits its own delay before it works.
    _, res = simulate([(0, 100, 1, 2), (0, 100, 1, 2)], "1x1g8c", start_delay_s=5.0)
    assert res.jobs["start"].tolist() == [0, 105]
    assert np.allclose(res.jobs["end"], [105, 210])


def test_the_delay_costs_effective_gpu_time_not_allocated():
    rows = [(0, 100, 2, 4)]
    kw = {"window": (0.0, 200.0)}
    _, a = simulate(rows, "1x2g16c", **kw)
    _, b = simulate(rows, "1x2g16c", start_delay_s=10.0, **kw)
    # GPU-seconds of work are the same; the delay only adds held, idle GPU time.
    assert a.summary["gpu_util_effective"] == pytest.approx(b.summary["gpu_util_effective"])
    assert b.summary["gpu_util_allocated"] == pytest.approx(
        a.summary["gpu_util_allocated"] * 110 / 100
    )


def test_the_allocator_does_not_measure_the_launch():
    # A job's throughput windows open when it begins to work: the seconds it waits to
    # start are not slow samples (they once made CODA's allocator settle at 1 core).
    wl = build_workload(table([(0, 4000, 1, 8)]), PROFILES, 0, {"AlexNet": 1.0})
    policy = make_policy("coda")
    control = policy.job_control
    assert control is not None
    seen: list[tuple[float, float]] = []
    real = control.on_sample

    def on_sample(job, now, rate):  # type: ignore[no-untyped-def]
        seen.append((now, rate))
        return real(job, now, rate)

    control.on_sample = on_sample  # type: ignore[method-assign]
    Simulator(wl, parse_cluster_spec("1x1g16c"), policy, noise=0.0, start_delay_s=25.0).run()
    assert seen and seen[0][0] > 25.0
    assert all(rate > 0 for _, rate in seen)


def test_a_job_stopped_while_launching_loses_nothing_and_launches_again():
    # The CPU job is placed at 0 and would work from 5; the DNN job arriving at 1
    # takes its cores back (preempts it) before it did any work. Its first launch is
    # then stale; it is placed again when the DNN job ends (56) and works from 61.
    rows = [(0, 100, 0, 8), (1, 50, 1, 8)]
    sim, res = simulate(rows, "1x1g8c", policy="coda", start_delay_s=5.0)
    assert res.jobs["preemptions"].tolist() == [1, 0]
    assert sim.lost_core_s == 0.0
    assert np.allclose(res.jobs["end"], [161, 56])
    assert not sim._launching


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, 1e9])
def test_a_bad_start_delay_is_refused(bad):
    wl = build_workload(table([(0, 10, 0, 1)]), PROFILES, 0, {"VGG16": 1.0})
    with pytest.raises(ValueError, match="start_delay_s"):
        Simulator(wl, parse_cluster_spec("1x0g8c"), make_policy("fifo"), start_delay_s=bad)
    with pytest.raises(ValueError, match="start_delay_s"):
        RunConfig(start_delay_s=bad)


@pytest.mark.parametrize("bad", [0.0, -2.0, math.nan, math.inf])
def test_a_bad_control_period_is_refused(bad):
    with pytest.raises(ValueError, match="control"):
        RunConfig(control_period_s=bad)
    with pytest.raises(ValueError, match="control period"):
        PolicyOptions(control_period_s=bad)


def test_an_unknown_reclaim_is_refused():
    with pytest.raises(ValueError, match="reclaim"):
        RunConfig(reclaim="evict")


def test_the_control_period_sets_the_eliminator_tick_and_the_sample_window():
    default = make_policy("coda")
    assert default.sample_period_s == 10.0
    assert default.node_control is not None and default.node_control.period_s == 10.0
    p = make_policy("coda", PolicyOptions(control_period_s=2.0))
    assert p.sample_period_s == 2.0
    assert p.node_control is not None and p.node_control.period_s == 2.0
    q = make_policy("coda-no-eliminator", PolicyOptions(control_period_s=2.0))
    assert q.node_control is None and q.sample_period_s == 2.0


@pytest.mark.parametrize(
    "args", [["--start-delay", "-1"], ["--start-delay", "nan"], ["--control-period", "0"]]
)
def test_the_cli_refuses_bad_timing_in_one_line(args, tmp_path):
    r = CliRunner().invoke(main, ["simulate", *args, "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    assert "--start-delay" in r.output or "--control-period" in r.output
