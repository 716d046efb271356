"""The simulator's controls keep the job control's ``wants_samples`` answers (the jobs
that want samples, how many on each node) where the control declares they change only
in its own calls: the kept answers must equal a rescan, and a run must decide exactly
as one that asks the control at every change."""

from __future__ import annotations

import random

import numpy as np
import pytest
from job_tables import table

from coda.cycle import InvariantError
from coda.policy import make_policy
from coda.policy.framework import answers_on_calls
from coda.policy.state import Job
from coda.sim.engine import Simulator
from coda.workload.cluster import parse_cluster_spec
from coda.workload.perf import build_workload, load_profile_set

PROFILES = load_profile_set("coda")
CLUSTER = "3x4g32c,1x2g16c,1x0g32c"
MIX = {"VGG16": 1.0, "AlexNet": 1.0, "ResNet50": 1.0}


def _rows(seed: int, n: int = 80) -> list[tuple]:
    """DNN jobs (some spanning two nodes) and CPU jobs, arriving close together."""
    rng = random.Random(seed)
    rows, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(1 / 40.0)
        if rng.random() < 0.5:
            nodes = 2 if rng.random() < 0.2 else 1
            gpus = rng.choice((1, 2, 4)) * nodes
            rows.append((t, rng.uniform(300, 3000), gpus, rng.choice((4, 8, 12)), 0, nodes))
        else:
            rows.append((t, rng.uniform(100, 4000), 0, rng.choice((2, 4, 8, 16))))
    return rows


def _run(rows: list[tuple], kept: bool, check: bool = True) -> tuple[Simulator, dict]:
    policy = make_policy("coda")
    if not kept:
        policy.job_control.answers_on_calls = False  # asked at every change instead
    wl = build_workload(table(rows), PROFILES, 0, MIX)
    sim = Simulator(wl, parse_cluster_spec(CLUSTER), policy, check_invariants=check, noise=0.05)
    res = sim.run()
    return sim, {"summary": res.summary, **{k: v.tolist() for k, v in res.jobs.items()}}


def test_the_allocator_declares_that_its_answers_change_only_in_its_calls():
    assert answers_on_calls(make_policy("coda").job_control)
    assert not answers_on_calls(object())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_answers_equal_a_rescan_and_decide_alike(seed):
    rows = _rows(seed)
    # check_invariants compares the kept answers with a rescan at every read.
    sim, kept = _run(rows, kept=True)
    assert sim.controls.loop.heard is not None
    assert sim.policy.job_control.stats()["searches"] > 0  # jobs wanted samples
    _, asked = _run(rows, kept=False)
    for res in (kept, asked):
        res["summary"].pop("wall_seconds")
        res["summary"].pop("events_per_s")
    assert np.isnan(kept["start"]).sum() == 0  # every job ran
    assert repr(kept) == repr(asked)  # NaN too


class _Lying:
    """Wraps the allocator, claiming its answers change only in its calls, while they
    change behind its back (every job wants samples once it has run 100 s)."""

    answers_on_calls = True

    def __init__(self, inner) -> None:
        self.inner = inner
        self.now = 0.0

    def on_start(self, job: Job, now: float):
        return self.inner.on_start(job, now)

    def on_sample(self, job: Job, now: float, throughput: float):
        self.now = now
        return self.inner.on_sample(job, now, throughput)

    def on_finish(self, job: Job, now: float) -> None:
        self.inner.on_finish(job, now)

    def wants_samples(self, job: Job) -> bool:
        return self.inner.wants_samples(job) or self.now - job.start > 100.0

    def waiting_for_room(self, job: Job) -> bool:
        return self.inner.waiting_for_room(job)


def test_stale_kept_answers_are_caught_by_the_invariant_checks():
    policy = make_policy("coda")
    policy.job_control = _Lying(policy.job_control)
    wl = build_workload(table(_rows(0)), PROFILES, 0, MIX)
    sim = Simulator(wl, parse_cluster_spec(CLUSTER), policy, check_invariants=True)
    with pytest.raises(InvariantError, match="stale"):
        sim.run()
