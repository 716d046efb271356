"""Backfill passes over attempts that would fail (cycle/backfill.py): a bucket refused
alike waits until a node changes, a job needing no less than a failed one of its bucket
is not tried. These tests check that nothing passed over would have started, against a
scheduler that tries every job, and the cases a review found."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import pytest
from test_speed_equivalence import _outcome

import coda.sim.engine as engine
from coda.cycle.backfill import Backfill
from coda.cycle.decisions import Start
from coda.cycle.once import Booking
from coda.cycle.scheduler import Scheduler
from coda.cycle.search import NodeSearch
from coda.policy import PolicyOptions, make_policy
from coda.policy.framework import Policy
from coda.policy.state import Job, Node
from coda.sim.engine import Simulator
from coda.workload.cluster import parse_cluster_spec
from coda.workload.jobs import JobTable
from coda.workload.perf import build_workload, load_profile_set

PROFILES = load_profile_set("coda")


class SearchesEveryNode(NodeSearch):
    """A search whose every failure counts as the job's own."""

    def find(self, *args: Any, **kw: Any) -> list[Node] | None:
        nodes = super().find(*args, **kw)
        self.alike, self.failed_with = False, None
        return nodes


class TriesEveryJob(Scheduler):
    """The same cycle with nothing passed over: every failure counts as the job's own."""

    def __init__(self, policy: Policy, nodes: Iterable[Node] = ()) -> None:
        super().__init__(policy, nodes)
        search = SearchesEveryNode(
            policy, self.book, self.reservations, self.queue, self.reasons, self.clock
        )
        self.search = self.starter.search = self.backfill.search = search


def _workload(seed: int, memory: bool) -> Any:
    rnd = random.Random(seed)
    rows = []
    for i in range(rnd.randint(30, 70)):
        gpus = rnd.choice([0, 0, 0, 1, 2, 4])
        submit, duration = rnd.randint(0, 400), rnd.randint(20, 400)
        cores = rnd.choice([1, 1, 2, 4]) * gpus if gpus else rnd.randint(1, 16)
        mem = rnd.choice([0, 1024, 8192, 30000, 60000]) if memory else 0
        nodes = rnd.choice([1, 1, 1, 2]) if memory and gpus in (0, 2, 4) else 1
        rows.append((f"j{i}", float(submit), float(duration), gpus, cores, mem, nodes, 0))
    table = JobTable.from_rows(rows).sorted_by_submit()
    return build_workload(table, PROFILES, 0, {"AlexNet": 1.0, "ResNet50": 1.0})


def _starts(wl: Any, cluster: str, policy: str, opts: PolicyOptions, cls: type) -> dict:
    saved = engine.Scheduler
    engine.Scheduler = cls  # type: ignore[misc]
    try:
        out = _outcome(Simulator(wl, parse_cluster_spec(cluster), make_policy(policy, opts)).run())
    finally:
        engine.Scheduler = saved  # type: ignore[misc]
    return {k: out[k] for k in ("start", "end", "cores_granted", "preemptions", "shrinks")}


def test_nothing_passed_over_would_have_started(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small queues: the backfill depth never binds, so not counting the jobs passed over
    # cannot change a start either. Memory, gang jobs, both reclaims and both estimates.
    skipped = {"stopped": 0, "dominated": 0}
    dominated, go_on = Backfill._dominated, Backfill._go_on

    def counted_dominated(self: Backfill, *args: Any) -> bool:
        hit = dominated(self, *args)
        skipped["dominated"] += hit
        return hit

    def counted_go_on(self: Backfill, stopped: Any, heap: Any, after: Any) -> None:
        skipped["stopped"] += len(stopped)
        go_on(self, stopped, heap, after)

    monkeypatch.setattr(Backfill, "_dominated", counted_dominated)
    monkeypatch.setattr(Backfill, "_go_on", counted_go_on)
    for seed in range(24):
        memory = seed % 2 == 1
        policy = ("coda", "coda-no-slimming", "drf", "static-shared")[seed % 4]
        clusters = ("2x5g28c64m,1x0g16c32m", "1x5g28c64m", "3x4g16c96m") if memory else (
            "2x5g28c", "1x5g28c", "3x4g16c")  # fmt: skip
        opts = PolicyOptions(
            estimates=("time-limits", "exact")[seed % 2 if seed % 3 else 0],
            default_time_limit_s=300.0,
            reclaim=("shrink", "requeue")[(seed // 2) % 2],
        )
        wl = _workload(seed, memory)
        cluster = clusters[seed % 3]
        fast = _starts(wl, cluster, policy, opts, Scheduler)
        every = _starts(wl, cluster, policy, opts, TriesEveryJob)
        assert fast == every, (seed, policy, cluster)
    assert skipped["stopped"] > 0 and skipped["dominated"] > 0, skipped


def test_jobs_are_filed_again_when_their_pools_change() -> None:
    # CODA sends a CPU job preempted twice to CPU nodes while one can host it. A and B
    # shared a bucket; the big CPU node leaves, so B may now use the GPU node: A failing
    # (no CPU node has room) must not hold B back from the GPU node that gained room.
    policy = make_policy("coda", PolicyOptions(estimates="time-limits"))
    cpu1, cpu2 = Node(0, "cpu1", 0, 8, 65536, 100.0), Node(1, "cpu2", 0, 8, 8192, 100.0)
    gpu1 = Node(2, "gpu1", 4, 32, 65536, 100.0)
    policy.observe_cluster([cpu1, cpu2, gpu1])
    sched = Scheduler(policy, [cpu1, cpu2, gpu1])
    running = [
        (Job(100, "Y", 0, 0, 8, 0, 1, 1e6, time_limit=1e6), cpu1, 8),
        (Job(101, "X", 0, 0, 8, 0, 1, 1e6, time_limit=1e6), cpu2, 8),
        (Job(102, "D1", 0, 2, 20, 0, 1, 1e6, time_limit=1e6), gpu1, 20),
        (Job(103, "D2", 0, 2, 12, 0, 1, 1e6, time_limit=1e6), gpu1, 12),
    ]
    for job, node, cores in running:
        sched.occupy(job, [node], cores, 0.0)
        job.start = 0.0
    head = Job(1, "H", 1.0, 0, 10, 0, 1, 50.0, time_limit=50.0)
    a = Job(2, "A", 2.0, 0, 4, 4096, 1, 50.0, time_limit=50.0)
    b = Job(3, "B", 3.0, 0, 4, 32768, 1, 50.0, time_limit=50.0)
    a.preemptions = b.preemptions = 2
    head.preemptions = 1  # preempted first: it stays the head
    for job in (head, a, b):
        assert sched.submit(job) is None
    assert sched.cycle(1.0, Booking(sched, 1.0)) == []
    sched.remove_node(cpu1)
    policy.observe_cluster([cpu2, gpu1])
    assert policy.pools.pools(a) != policy.pools.pools(b)
    sched.vacate(running[3][0], 2.0)  # gpu1: 2 GPUs and 12 cores free
    started = [d.job.job_id for d in sched.cycle(2.0, Booking(sched, 2.0)) if isinstance(d, Start)]
    assert started == ["B"]


def test_a_filter_must_declare_what_backfill_relies_on() -> None:
    class OnlyEven:  # written before filters declared ``by_shape``
        static = False

        def filter(self, job: Job, node: Node, cores_pn: int) -> bool:
            return node.idx % 2 == 0

    with pytest.raises(TypeError, match="OnlyEven does not declare by_shape"):
        make_policy("static-shared", PolicyOptions(filters=(OnlyEven(),)))  # type: ignore[arg-type]


def test_new_jobs_dominated_by_a_failed_one_are_not_searched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A restart queues every held job at once. A CPU job kept off the only node with room
    # by the head's reservation (it would end after the head could start) stands for the
    # new jobs of its bucket behind it that need no less memory and time: they get its
    # reason without a search, as a search would have given it.
    counts = {"searched": 0, "dominated": 0}
    find, dominated = NodeSearch.find, Backfill._dominated

    def counted_find(self: NodeSearch, *args: Any, **kw: Any) -> list[Node] | None:
        counts["searched"] += 1
        return find(self, *args, **kw)

    def counted_dominated(self: Backfill, *args: Any) -> bool:
        hit = dominated(self, *args)
        counts["dominated"] += hit
        return hit

    def run(cls: type[Scheduler]) -> tuple[list[str], list[str]]:
        policy = make_policy("static-shared", PolicyOptions(estimates="time-limits"))
        node = Node(0, "n0", 0, 16, 65536, 100.0)
        policy.observe_cluster([node])
        sched = cls(policy, [node])
        busy = Job(100, "busy", 0.0, 0, 12, 0, 1, 100.0, time_limit=100.0)
        sched.occupy(busy, [node], 12, 0.0)
        busy.start = 0.0
        head = Job(1, "head", 1.0, 0, 16, 0, 1, 50.0, time_limit=50.0)
        waiting = [
            Job(2 + i, f"w{i}", 2.0, 0, 2, 1024 * (1 + i % 3), 1, 10.0, time_limit=200.0 + i)
            for i in range(30)
        ]
        short = Job(40, "short", 3.0, 0, 2, 0, 1, 10.0, time_limit=20.0)  # fits before it
        for job in (head, *waiting, short):
            assert sched.submit(job) is None
        started = [d.job.job_id for d in sched.cycle(1.0, Booking(sched, 1.0))
                   if isinstance(d, Start)]  # fmt: skip
        reasons = [str(sched.queue.reason_of(j)) for j in waiting]
        return started, reasons

    monkeypatch.setattr(NodeSearch, "find", counted_find)
    monkeypatch.setattr(Backfill, "_dominated", counted_dominated)
    fast = run(Scheduler)
    searched, skipped = counts["searched"], counts["dominated"]
    every = run(TriesEveryJob)
    assert fast == every
    assert fast[0] == ["short"] and all("reservation" in r for r in fast[1]), fast
    assert skipped > 20 and searched < counts["searched"] - searched, counts
