"""The performance model as one job applies it to itself (coda.workload.speed_model, used
by the emulated jobs) agrees with the simulator's physics on the same node: a job's
speed and bandwidth draw from its cores, its co-runners' draws and PCIe sharing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.policy.state import Job, Node
from coda.runtime.board import Use
from coda.runtime.workloads.emulated import Inputs, cpu_speed_of, dnn_speed_of
from coda.sim.gauges import Gauges
from coda.sim.kernel import EventKernel
from coda.sim.physics import SpeedModel, core_speed
from coda.workload import speed_model
from coda.workload.perf import load_profile_set

PROFILES = load_profile_set()
MODELS = list(PROFILES.models)

job_st = st.one_of(
    st.tuples(st.just("dnn"), st.sampled_from(MODELS), st.integers(1, 4), st.integers(1, 16)),
    st.tuples(st.just("cpu"), st.floats(0.0, 8.0), st.integers(1, 16), st.floats(0.05, 1.0)),
)


def _job(i: int, spec: tuple, node: Node) -> Job:
    if spec[0] == "dnn":
        _, model, gpus, cores = spec
        perf = PROFILES.job_perf(model, gpus, 1)
        job = Job(i, str(i), 0.0, gpus, cores, 0, 1, 100.0, model=model, perf=perf)
        job.cores_pn, job.quota = cores, 1.0
    else:
        _, bw_per_core, cores, quota = spec
        job = Job(i, str(i), 0.0, 0, cores, 0, 1, 100.0, bw_per_core=bw_per_core)
        job.cores_pn, job.quota = max(1, cores // 2), quota
    job.placement = [node]
    node.jobs[job] = None
    if job.perf is not None and job.perf.pcie_heavy:
        node.pcie_heavy.append(job)
    return job


@settings(max_examples=300, deadline=None)
@given(st.lists(job_st, min_size=1, max_size=6), st.floats(8.0, 200.0))
def test_a_jobs_own_view_gives_the_simulators_speed_and_draw(specs: list, node_bw: float) -> None:
    node = Node(0, "n0", 8, 64, 0, node_bw)
    jobs = [_job(i + 1, s, node) for i, s in enumerate(specs)]
    speed = SpeedModel(  # the simulator's speed model, no job launching
        EventKernel(0.0), Gauges(), ideal_isolation=False,
        pcie_pair=PROFILES.pcie_pair_slowdown, checkpoint_s=3600.0, checkpoints=False,
    )  # fmt: skip
    for j in jobs:
        j.bw_pn = speed.bw_demand(j)
        node.bw_used += j.bw_pn
    for j in jobs:
        cores, quota = float(j.cores_pn), j.quota
        others = [
            Use(o.idx, o.kind, o.bw_pn, o.pcie_heavy, o.model or "-", 1) for o in jobs if o is not j
        ]
        if j.perf is not None:
            assert j.bw_pn == speed_model.dnn_bandwidth(j.perf, cores, quota)
            mine = dnn_speed_of(j.perf, node_bw, PROFILES.pcie_pair_slowdown, j.model or "")
        else:
            assert j.bw_pn == speed_model.cpu_bandwidth(j.bw_per_core, cores, quota)
            mine = cpu_speed_of(j.cores_pn_req, j.bw_per_core, node_bw)
        theirs = core_speed(j) / speed.slowdown(j, node)
        assert mine(Inputs(cores, quota, others)) == pytest.approx(theirs, rel=1e-9, abs=1e-12)


def test_a_saturated_bus_slows_a_cpu_job_pro_rata() -> None:
    assert speed_model.cpu_speed(4.0, 1.0, 4, 30.0, 20.0) == pytest.approx(20.0 / 30.0)
    assert speed_model.cpu_speed(4.0, 0.5, 4, 10.0, 20.0) == 0.5
    assert speed_model.cpu_speed(8.0, 1.0, 4, 10.0, 20.0) == 1.0
