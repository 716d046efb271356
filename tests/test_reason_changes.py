"""The queue says which jobs' reasons may have changed (``Queue.reason_changes``): a
mirror of every queued job's reason kept from it equals the reasons worked out for
every queued job, after every cycle of simulations under every policy."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda.cycle import Reason, Scheduler
from coda.cycle.buckets import Bucket
from coda.policy import POLICIES, make_policy
from coda.policy.state import Job
from coda.sim.engine import Simulator
from coda.workload.cluster import parse_cluster_spec
from coda.workload.jobs import JobTable
from coda.workload.perf import build_workload, load_profile_set

PROFILES = load_profile_set("coda")
ROWS = st.lists(
    st.tuples(
        st.integers(0, 300),  # submit
        st.integers(1, 300),  # duration
        st.sampled_from([0, 0, 1, 1, 2, 4]),  # gpus
        st.integers(1, 24),  # cores
        st.sampled_from([1, 1, 1, 2]),  # nodes
    ),
    min_size=1,
    max_size=40,
)
CLUSTERS = st.sampled_from(["2x4g16c,1x0g16c", "3x2g8c,2x0g8c", "1x4g24c,1x0g4c", "4x1g4c"])


class Mirror:
    """Each queued job's reason, kept from the changes the queue names: a job that
    shows its bucket's reason holds the bucket's, which a move changes for all."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.own: dict[Job, Reason] = {}  # jobs that show a reason of their own
        self.member: dict[Job, Bucket] = {}  # jobs that show their bucket's
        self.shown: dict[Bucket, Reason] = {}  # each such bucket's reason
        self.partial = 0  # checks that went by the changes named (not every job)
        self.moved = 0  # buckets moved with their jobs, unnamed

    def reasons(self) -> dict[Job, Reason]:
        out = dict(self.own)
        out.update({job: self.shown[bucket] for job, bucket in self.member.items()})
        return out

    def check(self) -> None:
        sched, queued = self.sched, self.sched.queue.bucket_of
        named = sched.reason_changes()
        if named is None:
            self.own, self.member, self.shown = {}, {}, {}
            changes = list(queued)
        else:
            self.partial += 1
            changes = named.jobs
            for bucket, why in named.moved:
                if bucket in self.shown:
                    self.shown[bucket] = why
                    self.moved += 1
        for job in changes:
            self.own.pop(job, None)
            self.member.pop(job, None)
            why = sched.reason_of(job) if job in queued else None
            bucket = sched.shown_by(job) if why is not None else None
            if bucket is not None:
                assert why is not None and why == bucket.wait
                self.member[job] = bucket
                self.shown.setdefault(bucket, why)
                assert self.shown[bucket] == why
            elif why is not None:
                self.own[job] = why
        whole = {j: r for j in queued if (r := sched.reason_of(j)) is not None}
        assert self.reasons() == whole


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ROWS, cluster=CLUSTERS, policy=st.sampled_from(sorted(POLICIES)))
def test_reasons_kept_from_the_changes_named_equal_every_reason(
    rows: list[tuple[int, int, int, int, int]], cluster: str, policy: str
) -> None:
    rows = [r if r[2] % r[4] == 0 else (*r[:4], 1) for r in rows]
    table = JobTable.from_rows(
        [(f"j{i}", s, d, g, c, 0, n, 0) for i, (s, d, g, c, n) in enumerate(rows)]
    ).sorted_by_submit()
    wl = build_workload(table, PROFILES, 0, {"AlexNet": 1.0, "ResNet50": 1.0})
    sim = Simulator(wl, parse_cluster_spec(cluster), make_policy(policy))
    mirror = Mirror(sim.sched)
    cycle = sim.sched.cycle

    def checked(*a: Any, **k: Any) -> Any:
        mirror.check()  # what moved between cycles
        out = cycle(*a, **k)
        mirror.check()
        return out

    sim.sched.cycle = checked  # type: ignore[method-assign]
    sim.run()
    if make_policy(policy).backfill:
        assert mirror.partial > 0 or len(rows) < 2


def test_a_buckets_jobs_move_with_it_unnamed() -> None:
    """Over simulations of 40 jobs, some bucket's reason changes with its jobs behind
    it: they move with it, not named one by one."""
    moved = 0
    for seed in range(6):
        rows = [(i * 3, 50 + (i * 37 + seed) % 200, [0, 1, 2][i % 3], 4, 1) for i in range(40)]
        table = JobTable.from_rows(
            [(f"j{i}", s, d, g, c, 0, n, 0) for i, (s, d, g, c, n) in enumerate(rows)]
        ).sorted_by_submit()
        wl = build_workload(table, PROFILES, seed, {"AlexNet": 1.0, "ResNet50": 1.0})
        sim = Simulator(wl, parse_cluster_spec("1x2g8c,1x0g8c"), make_policy("coda"))
        mirror = Mirror(sim.sched)
        cycle = sim.sched.cycle

        def checked(*a: Any, _cycle: Any = cycle, _mirror: Mirror = mirror, **k: Any) -> Any:
            out = _cycle(*a, **k)
            _mirror.check()
            return out

        sim.sched.cycle = checked  # type: ignore[method-assign]
        sim.run()
        moved += mirror.moved
    assert moved > 0


def test_jobs_that_showed_their_own_reason_follow_their_bucket_again() -> None:
    """Two jobs of one bucket noted in one cycle with different reasons: the first
    shows its own until the bucket is noted again, with the same reason as before;
    it then shows the bucket's, and is named among the changes."""
    from coda.cycle import reasons as R
    from coda.cycle.clock import Clock
    from coda.cycle.queue import Queue

    clock = Clock()
    queue = Queue(make_policy("coda"), clock)
    jobs = [Job(i, f"cpu{i}", 0.0, 0, 4, 0, 1, 100.0) for i in range(3)]
    for job in jobs:
        queue.enqueue(job)
    assert queue.reason_changes() is None  # the first time: every job
    clock.cycles = 1
    queue.note(jobs[0], Reason(R.CORES, "4"))
    queue.note(jobs[1], Reason(R.RESERVATION, behind="cpu9#9"))
    named = queue.reason_changes()
    assert named is not None and {jobs[0], jobs[1]} <= set(named.jobs)
    bucket = queue.bucket_of[jobs[2]]
    assert named.moved == [(bucket, Reason(R.RESERVATION, behind="cpu9#9"))]
    assert queue.shown_by(jobs[2]) is bucket and queue.shown_by(jobs[0]) is None
    assert queue.reason_of(jobs[0]) == Reason(R.CORES, "4")
    assert queue.reason_of(jobs[2]) == Reason(R.RESERVATION, behind="cpu9#9")
    clock.cycles = 2
    queue.note(jobs[2], Reason(R.RESERVATION, behind="cpu9#9"))
    assert queue.reason_of(jobs[0]) == Reason(R.RESERVATION, behind="cpu9#9")
    named = queue.reason_changes()
    assert named is not None and jobs[0] in named.jobs and named.moved == []
    named = queue.reason_changes()
    assert named is not None and named.jobs == [] and named.moved == []  # nothing since
