"""Backfill passes over attempts that would fail (cycle/backfill.py): a bucket refused
alike waits until a node changes, a job needing no less than a failed one of its bucket
is not tried. These tests check that nothing passed over would have started, against a
scheduler that tries every job, and the edge cases of each rule."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import pytest
from test_speed_equivalence import _outcome

import coda.sim.engine as engine
from coda.cycle import reasons as R
from coda.cycle.backfill import Backfill
from coda.cycle.decisions import Start
from coda.cycle.once import Booking
from coda.cycle.reasons import Reason
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


@pytest.mark.slow
def test_nothing_passed_over_would_have_started(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small queues: the backfill depth never binds, so not counting the jobs passed over
    # cannot change a start either. Memory, gang jobs, both reclaims and both estimates.
    skipped = {"stopped": 0, "dominated": 0}
    dominated, go_on = Backfill._dominated, Backfill._go_on

    def counted_dominated(self: Backfill, *args: Any) -> bool:
        hit = dominated(self, *args)
        skipped["dominated"] += hit
        return hit

    def counted_go_on(self: Backfill, stopped: Any, *args: Any) -> None:
        skipped["stopped"] += len(stopped)
        go_on(self, stopped, *args)

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


@pytest.mark.slow
def test_a_job_searched_in_full_is_not_searched_in_full_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # After core counts or pools change, each queued job owes one full search. One that
    # failed it by what is its own (a reservation, its memory) is retried only where room
    # appears, as any old job is; the reference searches it in full at every cycle until
    # its bucket fails alike. Same starts; fewer full searches.
    from coda.cycle.buckets import Bucket
    from coda.cycle.starts import Starter

    full_searches = {"now": 0, "reference": 0}
    attempt = Starter.attempt
    counting = ["now"]

    def counted(self: Starter, job: Job, full: bool, *args: Any, **kw: Any) -> bool:
        full_searches[counting[0]] += full
        return attempt(self, job, full, *args, **kw)

    monkeypatch.setattr(Starter, "attempt", counted)
    searched_through = Bucket.searched_through
    for seed in range(16):
        memory = seed % 2 == 1
        policy = ("coda", "coda-no-slimming")[seed % 2]
        cluster = ("2x5g28c64m,1x0g16c32m", "3x4g16c96m")[seed % 2] if memory else (
            ("2x5g28c", "3x4g16c")[seed % 2])  # fmt: skip
        opts = PolicyOptions(estimates="time-limits", default_time_limit_s=300.0)
        wl = _workload(seed, memory)
        counting[0] = "now"
        monkeypatch.setattr(Bucket, "searched_through", searched_through)
        now = _starts(wl, cluster, policy, opts, Scheduler)
        counting[0] = "reference"
        monkeypatch.setattr(Bucket, "searched_through", lambda self, job: None)
        reference = _starts(wl, cluster, policy, opts, Scheduler)
        assert now == reference, (seed, policy, cluster)
    assert full_searches["now"] < full_searches["reference"], full_searches


def test_a_bucket_keeps_where_its_full_searches_reached() -> None:
    from coda.cycle.buckets import Bucket

    jobs = [Job(i, f"j{i}", float(i), 0, 1, 0, 1, 10.0) for i in range(4)]
    bucket = Bucket()
    for i, job in enumerate(jobs):
        job.queue_key = (float(i), i, i)
        bucket.add(job.queue_key, job)
    assert not bucket.owes_full(jobs[0])
    bucket.owe_full_search()
    assert all(bucket.owes_full(j) for j in jobs)
    bucket.searched_through(jobs[2])  # out of queue order: records nothing
    assert bucket.owes_full(jobs[0]) and bucket.owes_full(jobs[2])
    bucket.searched_through(jobs[0])
    assert not bucket.owes_full(jobs[0]) and bucket.owes_full(jobs[1])
    jobs[1].start = 5.0  # started: passed over
    bucket.searched_through(jobs[2])
    assert not bucket.owes_full(jobs[2]) and bucket.owes_full(jobs[3])
    assert bucket.unsearched() == (jobs[3].queue_key, 3)
    bucket.searched_through(jobs[3])  # the last: the bucket owes nothing more
    assert not bucket.full and bucket.unsearched() is None
    bucket.owe_full_search()  # core counts changed again: every queued job owes one
    assert bucket.owes_full(jobs[0]) and bucket.unsearched() == (jobs[0].queue_key, 0)


def test_jobs_the_depth_left_owe_a_full_search_and_no_node_stays_dirty() -> None:
    # Depth 1: behind the head, one job is looked at per cycle. The ones the sweep did not
    # get to owe a full search; the node that gained room is not carried as dirty (a
    # set that only grew while the depth cut every sweep), and a cycle stays due until
    # the owed searches are done, one job per cycle, with nothing else changing.
    policy = make_policy("static-shared", PolicyOptions(estimates="time-limits"))
    policy.backfill_depth = 1
    n0, n1 = Node(0, "n0", 4, 28, 0, 100.0), Node(1, "n1", 4, 28, 0, 100.0)
    policy.observe_cluster([n0, n1])
    sched = Scheduler(policy, [n0, n1])
    running = [Job(100 + i, f"R{i}", 0.0, 4, 4, 0, 1, 1e6, time_limit=1e6) for i in range(2)]
    for job, node in zip(running, (n0, n1), strict=True):
        sched.occupy(job, [node], 4, 0.0)
        job.start = 0.0
    head = Job(0, "H", 1.0, 8, 8, 0, 2, 50.0, time_limit=60.0)  # both nodes: it waits
    queued = [head] + [
        Job(i, f"Q{i}", 1.0 + i, 1, 1, 0, 1, 50.0, time_limit=60.0) for i in range(1, 5)
    ]
    for job in queued:
        assert sched.submit(job) is None
    assert sched.cycle(1.0, Booking(sched, 1.0)) == []
    assert not sched.pending()
    sched.vacate(running[1], 2.0)  # n1: 4 GPUs free
    starts = []
    for t in (2.0, 3.0, 4.0):
        got = [d.job.job_id for d in sched.cycle(t, Booking(sched, t)) if isinstance(d, Start)]
        starts.append(got)
        assert not sched.book.dirty, t
        assert sched.pending() == (t < 4.0), t
    # A round per cycle, and a second at 2.0 (the head's reservation moved, its nodes
    # look again): one job behind the waiting head per round, the rest owed a search.
    assert starts == [["Q1", "Q2"], ["Q3"], ["Q4"]]
    assert [sched.reason_of(j) for j in queued[1:]] == [None] * 4


def test_a_job_the_depth_passes_over_keeps_its_reason_or_shows_the_depth() -> None:
    # As Slurm's backfill: a job the depth leaves unexamined keeps what its last
    # examination said; one never examined (it shows "new") shows the depth.
    policy = make_policy("static-shared", PolicyOptions(estimates="time-limits"))
    n0 = Node(0, "n0", 4, 28, 0, 100.0)
    policy.observe_cluster([n0])
    sched = Scheduler(policy, [n0])
    seen, unseen = (Job(i, f"J{i}", float(i), 1, 1, 0, 1, 50.0, time_limit=60.0) for i in (1, 2))
    for job in (seen, unseen):
        sched.queue.enqueue(job)
    sched.queue.note_job(seen, Reason(R.GPUS, "1"))
    assert sched.reason_of(unseen) == Reason(R.NEW)
    for job in (seen, unseen):
        sched.backfill._put_off(job)
    assert sched.reason_of(seen) == Reason(R.GPUS, "1")
    assert sched.reason_of(unseen) == Reason(R.DEPTH)
