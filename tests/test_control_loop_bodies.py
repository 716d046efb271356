"""The control half across the three bodies: the simulator, the node agent and the
Slurm node agent each build their control loop (``coda.control.ControlLoop``) over
their own policy; one scripted series of samples and ticks, on the same job and node
state, must give the same actions, from the same components, in the same order.

What this covers: each body's wiring of the one runner and of its policy (the same
options give the same allocator and eliminator). What it does not: how each body
measures (virtual speeds, progress records) and carries actions out (books, cgroups),
which their own tests cover (test_engine*.py, test_runtime_agent.py, test_slurm_agent.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fakes import fake_v1_driver
from job_tables import table

from coda.control import ALLOCATOR, ELIMINATOR, ControlLoop
from coda.policy import PolicyOptions, make_policy
from coda.policy.framework import Action, Preempt, SetCores, SetQuota
from coda.policy.state import Job, Node
from coda.runtime.agent import AgentConfig
from coda.runtime.local_queue import local_agent
from coda.runtime.store import Store
from coda.sim.engine import Simulator
from coda.slurm.agent import slurm_node_agent
from coda.slurm.cgroups import SlurmJobCgroups
from coda.slurm.client import SlurmClient
from coda.workload.cluster import parse_cluster_spec
from coda.workload.perf import build_workload, load_profile_set

PROFILES = load_profile_set("coda")
PERIOD = 2.0


class Recorder:
    """A sink that books the actions on the scripted state and records them."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def carry_out(
        self, actions: list[Action], now: float, component: str, reason: dict[str, Any] | None
    ) -> None:
        for a in actions:
            job = a.job
            if isinstance(a, SetCores):
                node = job.placement[0]
                give = min(a.cores_pn - job.cores_pn, node.free_cores)
                node.free_cores -= give
                job.cores_pn += give
                self.seen.append((now, component, "cores", job.job_id, a.cores_pn, job.cores_pn))
            elif isinstance(a, SetQuota):
                job.quota = a.quota
                why = (reason or {}).get("decision")
                self.seen.append((now, component, "quota", job.job_id, a.quota, why))
            elif isinstance(a, Preempt):
                self.seen.append((now, component, "preempt", job.job_id))


def _script(loop: ControlLoop) -> list[tuple[Any, ...]]:
    """A DNN job asking 8 cores beside a memory-hungry CPU job on one node: the
    allocator searches its cores; the CPU job slows it down half the time."""
    sink = Recorder()
    loop.sink = sink
    node = Node(0, "n0", 4, 16, 0, 40.0)
    dnn = Job(1, "dnn", 0.0, 1, 8, 0, 1, 1e9, model="ResNet50",
              perf=PROFILES.job_perf("ResNet50", 1, 1), user="u")  # fmt: skip
    cpu = Job(2, "cpu", 0.0, 0, 4, 0, 1, 1e9, bw_per_core=8.0, user="v")
    for job, cores in ((dnn, 8), (cpu, 4)):
        job.cores_pn = cores
        job.placement = [node]
        job.start = 0.0
        node.jobs[job] = None
        node.free_cores -= cores
        job.bw_pn = job.bw_per_core * cores if not job.is_dnn else 10.0
        node.bw_used += job.bw_pn
    node.free_gpus -= 1
    node.cpu_job_cores = 4
    harm = loop.policy.harm
    if harm is not None:  # placed by hand: the budget is told as a booking would
        harm.started(cpu, 0.0)
    loop.start(dnn, 0.0)
    assert dnn.perf is not None
    for k in range(1, 120):
        now = k * PERIOD
        hog = 0.6 if (k // 20) % 2 and cpu.quota > 0.5 else 1.0  # the CPU job's bursts
        speed = dnn.perf.core_speed(dnn.cores_pn * dnn.quota) * hog
        if loop.needs_sample(dnn):
            loop.sample(dnn, now, 100.0 * speed)
        if loop.watches(node):
            loop.tick(node, now)
    return sink.seen


def _options() -> PolicyOptions:
    # What a node agent builds its policy with (coda.runtime.agent): the same here.
    return PolicyOptions(estimates="time-limits", reclaim="shrink")


def test_the_three_bodies_run_one_control_loop_alike(tmp_path: Path) -> None:
    wl = build_workload(table([(0, 100, 1, 4)]), PROFILES, 0, {"ResNet50": 1.0})
    sim = Simulator(wl, parse_cluster_spec("1x4g16c"), make_policy("coda", _options()))
    store = Store(tmp_path / "state" / "coda.db")
    config = AgentConfig(policy="coda", reclaim="shrink")
    agent = local_agent(store, fake_v1_driver(tmp_path / "v1"), tmp_path / "state", config)
    slurm_agent = slurm_node_agent(
        "n1", SlurmClient(lambda argv: ""), SlurmJobCgroups("n1", tmp_path / "sl", version=1),
        store, tmp_path / "slurm-state", tmp_path / "progress", config,
    )  # fmt: skip
    runs = {
        "simulator": _script(sim.executor.loop),
        "node agent": _script(agent.loop),
        "slurm agent": _script(slurm_agent.loop),
    }
    first = runs["simulator"]
    kinds = {(c, k) for _, c, k, *_ in first}
    assert (ALLOCATOR, "cores") in kinds, first  # the allocator searched
    assert (ELIMINATOR, "quota") in kinds, first  # and the eliminator throttled
    for body, seen in runs.items():
        assert seen == first, body
