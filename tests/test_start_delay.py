"""The simulator's model of a real stack's timing: a start delay (a placed job holds its
GPUs and cores at once and works only that long after) and CODA's control period."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner
from job_tables import PROFILES, table

from coda.cli import main
from coda.policy import PolicyOptions, make_policy
from coda.sim.engine import Simulator
from coda.study.config import RunConfig, SimulationOptions
from coda.workload.cluster import parse_cluster_spec
from coda.workload.perf import build_workload
from tests.fakes import LOOSE_HARM


def simulate(rows, cluster: str, policy="static-separate", mix=None, seed=0, start_delay_s=0.0,
             estimates="exact", **kw):  # fmt: skip
    """tests.test_engine's simulate, with the policy built for the same start delay (CODA's
    with a loose harm budget: these tests take young CPU jobs back on purpose)."""
    wl = build_workload(table(rows), PROFILES, seed, mix or {"VGG16": 1.0})
    tune = LOOSE_HARM if policy.startswith("coda") else {}
    opts = PolicyOptions(start_delay_s=start_delay_s, estimates=estimates, tune=tune)
    sim = Simulator(wl, parse_cluster_spec(cluster), make_policy(policy, opts),
                    check_invariants=True, start_delay_s=start_delay_s, **kw)  # fmt: skip
    return sim, sim.run()


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
    # GPU-seconds of work are the same; the delay only adds held, idle GPU time, which
    # the summary books as lost to launches (not to too few cores), and the cores held
    # meanwhile are not useful.
    assert a.summary["gpu_util_effective"] == pytest.approx(b.summary["gpu_util_effective"])
    assert b.summary["gpu_util_allocated"] == pytest.approx(
        a.summary["gpu_util_allocated"] * 110 / 100
    )
    assert b.summary["gpu_lost_launch"] == pytest.approx(0.05)
    assert a.summary["gpu_lost_launch"] == 0.0
    assert b.summary["gpu_lost_cores"] == pytest.approx(0.0, abs=1e-12)
    assert b.summary["cpu_util_useful"] == pytest.approx(a.summary["cpu_util_useful"])
    total = sum(b.summary[k] for k in ("gpu_lost_cores", "gpu_lost_contention", "gpu_lost_launch"))
    assert b.summary["gpu_util_allocated"] - total == pytest.approx(b.summary["gpu_util_effective"])


def test_exact_backfill_plans_with_the_delay():
    # The 2-GPU head waits for job 0, which works from 5 to 105: its reservation is at
    # 105, not "never" while job 0 launches, so the long job may not jump it...
    _, res = simulate([(0, 100, 1, 2), (1, 100, 2, 4), (2, 1000, 1, 2)], "1x2g16c",
                      policy="fifo", start_delay_s=5.0)  # fmt: skip
    assert res.jobs["start"].tolist() == [0, 105, 210]
    # ...and a job that would fit before 105 without its own delay (20 + 84) does not
    # backfill: with it, it would end at 109.
    _, res = simulate([(0, 100, 1, 2), (1, 100, 2, 4), (20, 84, 1, 2)], "1x2g16c",
                      policy="fifo", start_delay_s=5.0)  # fmt: skip
    assert res.jobs["start"].tolist()[:2] == [0, 105]
    assert res.jobs["start"][2] >= 105


def test_a_policy_built_for_another_delay_is_refused():
    wl = build_workload(table([(0, 10, 0, 1)]), PROFILES, 0, {"VGG16": 1.0})
    with pytest.raises(ValueError, match="PolicyOptions"):
        Simulator(wl, parse_cluster_spec("1x0g8c"), make_policy("fifo"), start_delay_s=3.0)
    time_limits = make_policy("fifo", PolicyOptions(estimates="time-limits"))
    Simulator(wl, parse_cluster_spec("1x0g8c"), time_limits, start_delay_s=3.0)  # no plan to fit


def test_a_launching_job_draws_no_bandwidth():
    # The CPU job is placed at 200 and works from 300: its memory traffic, and the
    # interference episode it causes the DNN job, start then.
    rows = [(0, 1000, 1, 3), (200, 2000, 0, 16)]
    sims = [simulate(rows, "1x1g32c4b", policy="static-shared", mix={"WaveNet": 1.0},
                     start_delay_s=d) for d in (0.0, 100.0)]  # fmt: skip
    (a, ra), (b, rb) = sims
    assert [e[0] for e in a.speed.episode_log] == [200.0]
    assert [e[0] for e in b.speed.episode_log] == [300.0]
    # The DNN job (working from 100) runs as long after its launch as without a delay.
    assert rb.jobs["end"][0] == pytest.approx(ra.jobs["end"][0] + 100.0)


def test_a_stale_launch_does_not_start_a_later_stint_early():
    # Job 1 (CPU) is placed at 3 and would work from 8; the DNN job arriving at 6 takes
    # its cores back and it is placed again at 6 + 5 + 50 = 61, working from 66: the
    # launch event due at 8 is stale and must not let it work from then.
    rows = [(0, 1, 0, 8), (3, 100, 0, 8), (6, 50, 1, 8)]
    _, res = simulate(rows, "1x0g8c,1x1g8c", policy="coda", start_delay_s=5.0)
    assert res.jobs["end"].tolist() == pytest.approx([6, 111, 61])


def test_the_allocator_does_not_measure_the_launch():
    # A job's throughput windows open when it begins to work: the seconds it waits to
    # start are not slow samples (they once made CODA's allocator settle at 1 core).
    wl = build_workload(table([(0, 4000, 1, 8)]), PROFILES, 0, {"AlexNet": 1.0})
    policy = make_policy("coda", PolicyOptions(start_delay_s=25.0))
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
    assert sim.outcomes.lost_core_s == 0.0
    assert np.allclose(res.jobs["end"], [161, 56])
    assert not sim.speed.launching


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, 1e9])
def test_a_bad_start_delay_is_refused(bad):
    wl = build_workload(table([(0, 10, 0, 1)]), PROFILES, 0, {"VGG16": 1.0})
    with pytest.raises(ValueError, match="start_delay_s"):
        Simulator(wl, parse_cluster_spec("1x0g8c"), make_policy("fifo"), start_delay_s=bad)
    with pytest.raises(ValueError, match="start_delay_s"):
        PolicyOptions(start_delay_s=bad)


@pytest.mark.parametrize("bad", [0.0, -2.0, 1e-12, 0.001, math.nan, math.inf, 1e6])
def test_a_bad_control_period_is_refused(bad):
    with pytest.raises(ValueError, match="control period"):
        PolicyOptions(control_period_s=bad)


def test_an_unknown_reclaim_is_refused_and_a_simulation_takes_only_its_own():
    with pytest.raises(ValueError, match="reclaim"):
        PolicyOptions(reclaim="evict")
    with pytest.raises(ValueError, match="a simulation's reclaim must be one of shrink, requeue"):
        RunConfig(policy=PolicyOptions(reclaim="none"))


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
    "args",
    [
        ["--start-delay", "-1"],
        ["--start-delay", "nan"],
        ["--control-period", "0"],
        ["--control-period", "1e-12"],
        ["--reclaim", "evict"],
        ["--start-delay", "\u0663"],  # ARABIC-INDIC DIGIT THREE
        ["--start-delay", "1_0"],
        ["--control-period", "\uff12"],  # FULLWIDTH DIGIT TWO
        ["--cycle-period", "-1"],
        ["--cycle-period", "0.005"],  # neither off nor a period the cycle can keep
    ],  # fmt: skip
)
def test_the_cli_refuses_bad_timing_in_one_line(args, tmp_path):
    r = CliRunner().invoke(main, ["simulate", *args, "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    assert any(o in r.output for o in ("--start-delay", "--control-period", "--reclaim", "--cycle"))


@pytest.mark.parametrize(
    "args",
    [
        ["--probes", "\u0663"],
        ["--probes", "51"],
        ["--sim-seeds", "0"],
        ["--probes", "1_0"],
        ["--seed", "-1"],
    ],  # fmt: skip
)
def test_replay_refuses_bad_counts_before_it_starts_anything(args):
    r = CliRunner().invoke(main, ["replay", *args])
    assert r.exit_code == 2
    assert "Traceback" not in r.output and args[0] in r.output


@pytest.mark.parametrize("bad", [True, "5", None])
def test_a_start_delay_that_is_no_number_is_refused(bad):
    wl = build_workload(table([(0, 10, 0, 1)]), PROFILES, 0, {"VGG16": 1.0})
    with pytest.raises(ValueError, match="start_delay_s"):
        Simulator(wl, parse_cluster_spec("1x0g8c"), make_policy("fifo"), start_delay_s=bad)
    with pytest.raises(ValueError, match="start_delay_s"):
        PolicyOptions(start_delay_s=bad)


def test_a_periodic_cycle_places_jobs_only_at_its_passes():
    # Passes at whole seconds: a job arriving at 0.3 is placed at 1; the second waits
    # for the first to end (at 1 + 10) and is placed at once (11 is a pass), and the CPU
    # job arriving at 11.5 at 12. Waiting for a pass holds nothing.
    rows = [(0.3, 10, 1, 2), (0.4, 10, 1, 2), (11.5, 5, 0, 2)]
    _, res = simulate(rows, "1x1g8c,1x0g8c", cycle_period_s=1.0)
    assert res.jobs["start"].tolist() == [1.0, 11.0, 12.0]
    assert np.allclose(res.jobs["end"], [11, 21, 17])
    # With a start delay too: placed at a pass, working that much later.
    _, res = simulate(rows, "1x1g8c,1x0g8c", cycle_period_s=1.0, start_delay_s=0.5)
    assert res.jobs["start"].tolist() == [1.0, 12.0, 12.0]
    assert np.allclose(res.jobs["end"], [11.5, 22.5, 17.5])


def test_a_periodic_cycle_keeps_the_books_under_load():
    rng = np.random.default_rng(5)
    rows = [(float(t), float(d), int(g), int(c)) for t, d, g, c in zip(
        np.sort(rng.uniform(0, 400, 60)), rng.uniform(5, 120, 60), rng.integers(0, 3, 60),
        rng.integers(1, 9, 60), strict=True)]  # fmt: skip
    for policy in ("fifo", "coda"):
        _, res = simulate(rows, "2x2g16c,1x0g16c", policy=policy, cycle_period_s=1.0,
                          start_delay_s=0.7)  # fmt: skip
        started = res.jobs["start"][np.isfinite(res.jobs["start"])]
        assert len(started) == 60 and np.allclose(started, np.ceil(started - 1e-9))
        assert np.all(res.jobs["end"] >= res.jobs["start"] + 0.7 - 1e-9)


@pytest.mark.parametrize("bad", [-1.0, 0.001, math.nan, math.inf, True, "1"])
def test_a_bad_cycle_period_is_refused(bad):
    wl = build_workload(table([(0, 10, 0, 1)]), PROFILES, 0, {"VGG16": 1.0})
    with pytest.raises(ValueError, match="cycle_period_s"):
        Simulator(wl, parse_cluster_spec("1x0g8c"), make_policy("fifo"), cycle_period_s=bad)
    with pytest.raises(ValueError, match="cycle_period_s"):
        SimulationOptions(cycle_period_s=bad)
