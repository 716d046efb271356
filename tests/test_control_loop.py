"""The control loop every body runs (coda.control.ControlLoop): samples and ticks in,
actions out to the body's sink with the component that decided and why."""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

from coda.control import ALLOCATOR, ELIMINATOR, ControlLoop
from coda.policy import make_policy
from coda.policy.framework import Action, Policy, SetCores, SetQuota
from coda.policy.state import CPU, DNN, Job, Node


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[list[Action], float, str, dict[str, Any] | None]] = []

    def carry_out(
        self, actions: list[Action], now: float, component: str, reason: dict[str, Any] | None
    ) -> None:
        self.calls.append((actions, now, component, reason))


class StepControl:
    """A job control that grows a job by one core per sample while it searches."""

    def __init__(self) -> None:
        self.searching: set[Job] = set()
        self.finished: list[Job] = []

    def on_start(self, job: Job, now: float) -> list[Action]:
        self.searching.add(job)
        return [SetCores(job, job.cores_pn + 1)]

    def on_sample(self, job: Job, now: float, throughput: float) -> list[Action]:
        if throughput >= 100.0:
            self.searching.discard(job)
            return []
        return [SetCores(job, job.cores_pn + 1)]

    def on_finish(self, job: Job, now: float) -> None:
        self.searching.discard(job)
        self.finished.append(job)

    def wants_samples(self, job: Job) -> bool:
        return job in self.searching

    def waiting_for_room(self, job: Job) -> bool:
        return False


class Throttler:
    """A node control that throttles a node's CPU jobs, recording each decision as
    the contention eliminator does (``decisions``, newest last); ``explain`` off:
    it keeps no record (a control without the capability)."""

    def __init__(self, watched: set[Node], explain: bool = True) -> None:
        self.watched = watched
        self.throttle = True
        if explain:
            self.decisions: deque[dict[str, Any]] = deque(maxlen=10)
        self.explain = explain

    def control(self, node: Node, now: float) -> list[Action]:
        if not self.throttle:
            return []
        cpu = [j for j in node.jobs if j.kind == CPU]
        if self.explain:
            self.decisions.append({"action": "throttle", "reason": {"dnn_drop": 0.2}})
        return [SetQuota(j, 0.5) for j in cpu]

    def watching(self, node: Node) -> bool:
        return node in self.watched

    def at_rest(self, node: Node) -> bool:
        return False

    def forget_job(self, job: Job) -> None:
        pass


def _policy(jc: Any = None, nc: Any = None) -> Policy:
    return dataclasses.replace(make_policy("coda"), job_control=jc, node_control=nc)


def _job(idx: int, gpus: int, node: Node) -> Job:
    job = Job(idx, f"j{idx}", 0.0, gpus=gpus, cores=4, mem_mib=0, nodes=1, work=100.0)
    job.cores_pn = 4
    job.placement = [node]
    node.jobs[job] = None
    return job


def _node() -> Node:
    return Node(0, "n0", gpus=4, cores=32, mem_mib=0, bw_gbps=100.0)


def test_job_control_steps_go_to_the_sink_as_the_allocators() -> None:
    node = _node()
    dnn = _job(0, 1, node)
    assert dnn.kind == DNN
    jc, sink = StepControl(), Sink()
    loop = ControlLoop(_policy(jc=jc), sink)
    loop.start(dnn, 1.0)
    loop.sample(dnn, 11.0, 50.0)
    loop.sample(dnn, 21.0, 120.0)  # converged: no action, nothing handed on
    assert [(c[1], c[2], c[3]) for c in sink.calls] == [
        (1.0, ALLOCATOR, None),
        (11.0, ALLOCATOR, None),
    ]
    assert all(isinstance(c[0][0], SetCores) for c in sink.calls)
    loop.finish(dnn, 30.0)
    assert jc.finished == [dnn]


def test_heard_follows_each_job_control_call_before_its_actions() -> None:
    node = _node()
    dnn = _job(0, 1, node)
    jc, sink = StepControl(), Sink()
    seen: list[tuple[bool, int]] = []  # (its answer then, actions carried out before)
    loop = ControlLoop(
        _policy(jc=jc), sink, heard=lambda j: seen.append((jc.wants_samples(j), len(sink.calls)))
    )
    loop.start(dnn, 1.0)
    loop.sample(dnn, 11.0, 120.0)  # converged
    loop.finish(dnn, 20.0)
    assert seen == [(True, 0), (False, 1), (False, 1)]


def test_without_controls_nothing_happens() -> None:
    node = _node()
    dnn = _job(0, 1, node)
    sink = Sink()
    loop = ControlLoop(_policy(), sink)
    loop.start(dnn, 0.0)
    loop.sample(dnn, 10.0, 1.0)
    loop.finish(dnn, 20.0)
    loop.tick(node, 20.0)
    assert sink.calls == []
    assert not loop.needs_sample(dnn)
    assert not loop.watches(node)


def test_a_tick_carries_the_eliminators_recorded_reason() -> None:
    node = _node()
    _job(0, 1, node)
    cpu = _job(1, 0, node)
    nc, sink = Throttler({node}), Sink()
    loop = ControlLoop(_policy(nc=nc), sink)
    loop.tick(node, 5.0)
    assert len(sink.calls) == 1
    actions, now, component, reason = sink.calls[0]
    assert actions == [SetQuota(cpu, 0.5)]
    assert (now, component) == (5.0, ELIMINATOR)
    assert reason == {"decision": "throttle", "dnn_drop": 0.2}
    nc.throttle = False
    loop.tick(node, 6.0)  # no action: nothing handed on
    assert len(sink.calls) == 1


def test_a_control_that_keeps_no_record_gives_an_empty_reason() -> None:
    node = _node()
    _job(1, 0, node)
    sink = Sink()
    ControlLoop(_policy(nc=Throttler({node}, explain=False)), sink).tick(node, 1.0)
    assert [c[3] for c in sink.calls] == [{}]


def test_which_jobs_need_samples_and_which_nodes_are_watched() -> None:
    node, other = _node(), Node(1, "n1", gpus=4, cores=32, mem_mib=0, bw_gbps=100.0)
    dnn = _job(0, 1, node)
    jc = StepControl()
    nc = Throttler(set())
    loop = ControlLoop(_policy(jc=jc, nc=nc), Sink())
    assert not loop.needs_sample(dnn) and not loop.watches(node)
    jc.searching.add(dnn)  # its own control searches: wanted
    assert loop.needs_sample(dnn) and loop.watches(node)
    jc.searching.clear()
    nc.watched.add(node)  # watched, but no CPU job shares its node: not wanted
    assert not loop.needs_sample(dnn) and loop.watches(node)
    cpu = Job(1, "j1", 0.0, gpus=0, cores=4, mem_mib=0, nodes=1, work=1.0)
    node.jobs[cpu] = None
    node.cpu_job_cores = 4  # a CPU job on a watched node: the eliminator needs it
    assert loop.needs_sample(dnn)
    nc.watched = {other}  # the CPU job's node is no longer watched
    assert not loop.needs_sample(dnn) and not loop.watches(node)
