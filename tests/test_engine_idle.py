"""Idle spans cost nothing (issue 11, item 2): the work of a run does not grow with
empty time, nor with long stretches in which nothing on a node changes. Counted in
events and ticks, never timed."""

from __future__ import annotations

import pytest
from job_tables import table

from coda.policy import PolicyOptions, make_policy
from coda.sim.engine import Simulator
from coda.workload.cluster import parse_cluster_spec
from coda.workload.perf import build_workload, load_profile_set

PROFILES = load_profile_set("coda")
YEAR = 365 * 86400


def run(rows, policy="coda", cluster="1x8g96c", mix=None, samples=1000, tune=None):
    wl = build_workload(table(rows), PROFILES, 0, mix or {"VGG16": 1.0})
    pol = make_policy(policy, PolicyOptions(tune=tune or {}))
    sim = Simulator(wl, parse_cluster_spec(cluster), pol, samples=samples, noise=0.05)
    return sim, sim.run()


@pytest.mark.parametrize("policy", ["coda", "coda-no-eliminator", "static-shared", "oracle"])
def test_two_jobs_31_years_apart_cost_what_two_jobs_1000_s_apart_cost(policy):
    near, res_near = run([(0, 100, 1, 4), (1000, 100, 1, 4)], policy)
    far, res_far = run([(0, 100, 1, 4), (31 * YEAR, 100, 1, 4)], policy)
    assert res_far.summary["jobs"]["finished"] == 2
    assert res_far.summary["events"] == res_near.summary["events"]
    assert len(res_far.timeseries["t"]) == len(res_near.timeseries["t"]) == 1000


@pytest.mark.parametrize("policy", ["coda", "coda-no-slimming", "coda-no-eliminator"])
def test_co_located_jobs_running_for_years_cost_a_bounded_number_of_ticks(policy):
    # A DNN job beside a CPU job for a year, then for nine years: the eliminator
    # and the allocator settle, then the node rests until something on it changes.
    def events(span: int) -> int:
        rows = [(0, span, 0, 4), (0, span, 1, 4), (span, 100, 1, 4)]
        sim, res = run(rows, policy, mix={"AlexNet": 1.0})
        assert res.summary["jobs"]["finished"] == 3
        return res.summary["events"]

    short, long = events(YEAR), events(9 * YEAR)
    assert short < 5000  # a tick every 10 s for a year would be 3 million
    assert long == short


def test_a_resting_node_wakes_when_a_job_arrives():
    # After the node rests, a second CPU job arrives beside the DNN job: ticks
    # resume (the eliminator sees it), and the arrival is not missed.
    # The bandwidth gate lowered so that the eliminator watches this (lightly used) node.
    rows = [(0, 10 * YEAR, 1, 4), (0, 10 * YEAR, 0, 4), (YEAR, 1000, 0, 40)]
    sim, res = run(rows, "coda", mix={"AlexNet": 1.0}, tune={"eliminator.bw_gate": "0.01"})
    assert sim.controls.rests >= 2  # rested before the arrival and again after it
    assert res.summary["jobs"]["finished"] == 3
    ticks = res.summary["policy_stats"]["eliminator"]["ticks"]
    assert 0 < ticks < 10000
