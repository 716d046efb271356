"""One mini-trace through the three drivers: the simulator, the node agent and the
Slurm controller run the same scheduling cycle, so they make the same decisions in
the same order (starts, reclaims) when they see the same events.

The simulator goes first and its job ends are replayed into the other two at the
same (fake) times: the agent on a fake cgroup tree, its supervisors stand-in
``sleep`` processes; the controller against a fake Slurm that starts released
jobs at once and requeues held on ``scontrol requeuehold``.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import LOOSE_HARM, fake_v1_driver
from test_slurm_controller import FakeSlurm

from coda.cycle import Decision, Start, describe
from coda.policy import PolicyOptions, make_policy
from coda.runtime.agent import AgentConfig, Managed
from coda.runtime.jobrow import Owner
from coda.runtime.local_queue import local_agent
from coda.runtime.store import JobSpec, Store
from coda.sim.engine import Simulator
from coda.slurm.client import SlurmClient
from coda.slurm.controller import Controller
from coda.workload.cluster import parse_cluster_spec
from coda.workload.jobs import JobTable
from coda.workload.perf import build_workload, load_profile_set

POLICY = "coda-no-slimming"  # no core search: a start's cores are the request everywhere
# What Slurm can do, in every driver: time limits for backfill, requeue for reclaim.
# Each CPU job's harm budget as the policy keeps it (C and D, a few minutes old, may
# not be requeued), and a loose one (a day's allowance from the start: they may).
BOUNDED: dict[str, str] = {}
LOOSE = LOOSE_HARM
T0 = 1_700_000_000.0  # the Slurm and agent clocks' origin (epoch seconds)

# (name, GPUs, cores, duration s, time limit s or None, submit s) on one node with
# 2 GPUs and 3 cores; A, B and C are user 1000's, D user 1001's (OWNERS), and jobs are
# ordered by DRF between owners:
# - A starts; B (2 GPUs) waits for A's GPU and holds the reservation (A's limit: 60 min);
# - C (limit 30 min) backfills onto the free core;
# - D (no limit) would delay B for ever, but its owner holds nothing while B's holds A:
#   D comes before B, and starts on the last core (under FIFO, or with the owners
#   dropped, it would wait behind B's reservation);
# - when A ends, B needs 3 cores but C and D hold two: both are requeued, B starts;
# - when B ends, C and D run again.
TRACE = [
    ("A", 1, 2, 600.0, 3600.0, 0.0),
    ("B", 2, 3, 900.0, 3600.0, 1.0),
    ("C", 0, 1, 1200.0, 1800.0, 2.0),
    ("D", 0, 1, 300.0, None, 3.0),
]
OWNERS = {"A": 1000, "B": 1000, "C": 1000, "D": 1001}


def _table() -> JobTable:
    ids, sub, dur, g, c, lim = zip(
        *[(n, s, d, gpu, cores, lim if lim else math.nan) for n, gpu, cores, d, lim, s in TRACE],
        strict=True,
    )
    n = len(ids)
    t = JobTable.from_columns(ids, sub, dur, g, c, [0] * n, [1] * n, [0] * n)
    t.time_limit = np.asarray(lim, dtype=np.float64)
    t.user = [str(OWNERS[name]) for name in ids]
    return t


def _name(job_id: str) -> str:
    return job_id.split("#", 1)[0]


def _normal(decisions: Sequence[Decision]) -> list[tuple]:
    """Decisions without the drivers' own ids and node names."""
    out = []
    for d in decisions:
        x = describe(d)
        if x[0] == "start":
            out.append(("start", _name(x[1]), x[3]))
        else:
            out.append(("reclaim", _name(x[1]), x[3], _name(x[4])))
    return out


def _record(sched: Any, into: list[Decision]) -> None:
    real = sched.cycle

    def cycle(now: float, executor: Any) -> list[Decision]:
        got = real(now, executor)
        into.extend(got)
        # Every queued job waits once (a requeued job's old entry is dead).
        waiting = [job for job, _ in sched.waiting()]
        assert len(waiting) == len(set(waiting)), waiting
        return got

    sched.cycle = cycle


# ------------------------------------------------------------------ simulator
def run_simulator(tune: dict[str, str]) -> tuple[list[Decision], list[tuple[float, str]]]:
    profiles = load_profile_set("coda")
    wl = build_workload(_table(), profiles, 0, {"ResNet50": 1.0})
    policy = make_policy(POLICY, PolicyOptions(estimates="time-limits", reclaim="requeue",
                                               tune=tune))  # fmt: skip
    # A bus no job can fill: the agent and the controller read no bandwidth counters,
    # so to them no bus is ever busy (plugins/bus_headroom.py).
    sim = Simulator(wl, parse_cluster_spec("1x2g3c1000b"), policy, check_invariants=True)
    seen: list[Decision] = []
    _record(sim.sched, seen)
    ends: list[tuple[float, str]] = []
    real_finish = sim.executor.finish

    def finish(job: Any) -> None:
        ends.append((sim.now, job.job_id))
        real_finish(job)

    sim.executor.finish = finish
    res = sim.run()
    assert res.summary["jobs"]["finished"] == len(TRACE)
    return seen, ends


# ------------------------------------------------------------------ node agent
def fake_spawn(r: Any, m: Managed) -> subprocess.Popen[bytes]:
    """A ``sleep`` standing in for each job's supervisor."""
    (m.job_dir / "stdout").touch()
    return subprocess.Popen(["sleep", "600"], start_new_session=True)


def run_agent(
    tmp_path: Path, ends: list[tuple[float, str]], tune: dict[str, str]
) -> list[Decision]:
    drv = fake_v1_driver(tmp_path)
    store = Store(tmp_path / "state" / "coda.db")
    now = [T0]
    cfg = AgentConfig(
        policy=POLICY,
        reclaim="requeue",
        gpus=2,
        cpus=[0, 1, 2],
        period_s=1.0,
        window_s=2.0,
        tune=tune,
    )
    agent = local_agent(store, drv, tmp_path / "state", cfg, clock=lambda: now[0],
                        wall=lambda: now[0])  # fmt: skip
    agent.source.supervisor._spawn = fake_spawn  # type: ignore[method-assign]
    agent.start()
    seen: list[Decision] = []
    assert agent.source.sched is not None
    _record(agent.source.sched, seen)
    ids: dict[str, int] = {}
    try:
        for t in sorted({s for *_, s in TRACE} | {e for e, _ in ends}):
            now[0] = T0 + t
            for name, g, c, _, lim, s in TRACE:
                if s == t:
                    spec = JobSpec(argv=["true"], name=name, gpus=g, cores=c, time_limit_s=lim)
                    uid = OWNERS[name]
                    ids[name] = store.submit(spec, Owner(uid, uid))
            for e, name in ends:
                if e == t:
                    m = agent.jobs.running[ids[name]]
                    (m.job_dir / "exit").write_text("0")
                    assert m.popen is not None
                    os.killpg(m.popen.pid, signal.SIGKILL)
                    m.popen.wait()
            agent.tick()
        assert {store.job(i).state for i in ids.values()} == {"done"}
    finally:
        for m in list(agent.jobs.running.values()):
            if m.popen is not None and m.popen.poll() is None:
                os.killpg(m.popen.pid, signal.SIGKILL)
                m.popen.wait()
        store.close()
    return seen


# ------------------------------------------------------------------ Slurm controller
class StartingSlurm(FakeSlurm):
    """Starts a released job at once on its required nodes; requeues held."""

    now = T0

    def run(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        if argv[:2] == ["scontrol", "requeuehold"]:
            self.calls.append(argv)
            job = self.jobs[int(argv[2])]
            job.update(job_state="PENDING", priority=0, nodes="",
                       state_reason="job_requeued_in_held_state",
                       restart_cnt=job["restart_cnt"] + 1, start_time=0)  # fmt: skip
            return ""
        if argv[:2] == ["scontrol", "update"] and any(a == "StartTime=now" for a in argv):
            self.calls.append(argv)
            return ""
        out = super().run(argv)
        if argv[:2] == ["scontrol", "release"]:
            job = self.jobs[int(argv[2])]
            job.update(job_state="RUNNING", nodes=job["required_nodes"], start_time=int(self.now))
        return out


def run_controller(
    tmp_path: Path, ends: list[tuple[float, str]], tune: dict[str, str]
) -> list[Decision]:
    tmp_path.mkdir(mode=0o700)
    fake = StartingSlurm()
    fake.node("g1", 3, gpus=2)
    ctl = Controller(
        SlurmClient(fake.run), tmp_path, policy=POLICY, wall=lambda: fake.now, tune=tune
    )
    seen: list[Decision] = []
    _record(ctl.sched, seen)
    ids: dict[str, int] = {}
    for t in sorted({s for *_, s in TRACE} | {e for e, _ in ends}):
        fake.now = T0 + t
        for name, g, c, _, lim, s in TRACE:
            if s == t:
                jid = 100 + len(ids)
                ids[name] = jid
                d = fake.job(jid, name, c, gpus_pn=g)
                d.update(
                    submit_time=int(T0 + s),
                    user_id=OWNERS[name],
                    requeue=True,
                    time_limit=int(lim // 60) if lim else None,
                )
        for e, name in ends:  # fmt: skip
            if e == t:
                fake.jobs[ids[name]]["job_state"] = "COMPLETED"
        for _ in range(2):  # a requeued job is CODA's again at the next cycle
            ctl.cycle()
    assert {d["job_state"] for d in fake.jobs.values()} == {"COMPLETED"}
    if tune == LOOSE:
        # D was placed and taken back in one cycle, before it was written to Slurm: only
        # C, which ran, is requeued.
        assert fake.ids("requeuehold") == [ids["C"]]
    else:
        assert fake.ids("requeuehold") == []

    return seen


EXPECTED = {
    "loose": [
        ("start", "A", 2),
        ("start", "C", 1),
        ("start", "D", 1),
        ("reclaim", "B", "Preempt", "D"),
        ("reclaim", "B", "Preempt", "C"),
        ("start", "B", 3),
        ("start", "C", 1),
        ("start", "D", 1),
    ],
    # Neither CPU job's bucket covers a requeue: B waits for their cores.
    "bounded": [
        ("start", "A", 2),
        ("start", "C", 1),
        ("start", "D", 1),
        ("start", "B", 3),
    ],
}


@pytest.mark.parametrize("budget", ["loose", "bounded"])
def test_three_drivers_make_the_same_decisions_in_the_same_order(
    tmp_path: Path, budget: str
) -> None:
    tune = LOOSE if budget == "loose" else BOUNDED
    sim, ends = run_simulator(tune)
    expected = EXPECTED[budget]
    assert _normal(sim) == expected
    assert _normal(run_agent(tmp_path / "agent", ends, tune)) == expected
    assert _normal(run_controller(tmp_path / "slurm", ends, tune)) == expected


def test_a_start_is_the_same_object_shape_everywhere() -> None:
    # The decisions the drivers compare are plain values (describe) of one dataclass.
    sim, _ = run_simulator(LOOSE)
    assert all(isinstance(d, Start) or d.action is not None for d in sim)
    assert json.dumps([describe(d) for d in sim])
    assert re.fullmatch(r"[A-D]", sim[0].job.job_id)


pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")
