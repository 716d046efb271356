"""Probes use free cores only (issue 11, item 8; docs/policies.md): cores CPU jobs
hold are reclaimed for a DNN job's start (its request or learned count), never for
an allocator probe or any later growth. Checked with the real CODA policy."""

from __future__ import annotations

import pytest
from job_tables import table

from coda.policy import make_policy
from coda.policy.framework import SetCores
from coda.sim.engine import Simulator
from coda.workload.cluster import parse_cluster_spec
from coda.workload.perf import build_workload, load_profile_set

PROFILES = load_profile_set("coda")
# AlexNet on one GPU peaks at 6 cores: a job that asked for 2 wants to probe up.
MIX = {"AlexNet": 1.0}


def run_coda(rows: list[tuple], cluster: str = "1x1g8c", name: str = "coda"):
    wl = build_workload(table(rows), PROFILES, 0, MIX)
    policy = make_policy(name)
    sim = Simulator(wl, parse_cluster_spec(cluster), policy, check_invariants=True, noise=0.02)
    asked: list[tuple[str, int, int]] = []  # (job, cores it held, cores asked)
    apply = sim.executor.apply

    def spy(action):
        if isinstance(action, SetCores):
            asked.append((action.job.job_id, action.job.cores_pn, int(action.cores_pn)))
        return apply(action)

    sim.executor.apply = spy  # type: ignore[method-assign]
    return sim, sim.run(), asked, policy


def test_a_probe_beside_cpu_jobs_on_a_full_node_preempts_nothing():
    # A CPU job takes the 6 cores the idle-GPU reserve leaves it; a DNN job asking
    # for 2 arrives and starts on the 2 free cores. Its allocator would probe 3+,
    # but the node has no free core: the probe is capped, the CPU job untouched.
    rows = [(0, 20000, 0, 6), (10, 3000, 1, 2)]
    _, res, asked, policy = run_coda(rows)
    assert res.summary["preemption"] == {"count": 0, "jobs": 0, "lost_core_s": 0.0}
    assert res.jobs["end"][0] == pytest.approx(20000)  # the CPU job ran at full cores
    assert not [a for a in asked if a[0] == "j0"]  # never shrunk
    assert all(new <= 2 for job, _, new in asked if job == "j1")  # never grew
    stats = policy.job_control.stats()
    assert stats["refused"] == 0  # it did not ask for what it could not get
    assert stats["learned"] == {}  # capped by the node: not the shape's answer


def test_the_same_probe_grows_once_cores_are_free():
    # Without the CPU job the same DNN job probes up into free cores and settles
    # near AlexNet's optimum: the cap above comes from the rule, not the search.
    _, res, asked, _ = run_coda([(10, 3000, 1, 2)])
    assert max(new for _, _, new in asked) > 2
    assert res.summary["preemption"]["count"] == 0


def test_a_start_may_still_reclaim_cpu_held_cores():
    # A DNN job whose request exceeds the free cores starts at once: the CPU job's
    # cores are reclaimed for its start (shrink first), as before (without the harm
    # budget: a CPU job 10 s old has earned no harm yet, tests/test_harm_budget.py).
    rows = [(0, 20000, 0, 6), (10, 3000, 1, 4)]
    _, res, asked, _ = run_coda(rows, name="coda-unbounded")
    assert res.jobs["start"][1] == pytest.approx(10)
    shrinks = [a for a in asked if a[0] == "j0"]
    assert shrinks[0][1:] == (6, 4)  # 2 cores taken back from the CPU job at the start
