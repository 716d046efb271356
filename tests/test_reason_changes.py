"""The queue says which jobs' reasons may have changed (``Queue.reason_changes``): a
mirror of every queued job's reason kept from it equals the reasons worked out for
every queued job, after every cycle of simulations under every policy."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda.cycle import Reason, Scheduler
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
    """Each queued job's reason, kept from the changes the queue names."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.reasons: dict[Job, Reason] = {}
        self.partial = 0  # checks that went by the changes named (not every job)

    def check(self) -> None:
        sched, queued = self.sched, self.sched.queue.bucket_of
        named = sched.reason_changes()
        if named is None:
            self.reasons = {}
            changes = list(queued)
        else:
            self.partial += 1
            changes = named.jobs
            for shown, jobs in named.groups:
                for job in jobs:  # a group's jobs all show its reason
                    assert sched.reason_of(job) == shown
                    self.reasons[job] = shown
        for job in changes:
            why = sched.reason_of(job) if job in queued else None
            if why is None:
                self.reasons.pop(job, None)
            else:
                self.reasons[job] = why
        whole = {j: r for j in queued if (r := sched.reason_of(j)) is not None}
        assert self.reasons == whole


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


def test_jobs_that_showed_their_own_reason_follow_their_bucket_again() -> None:
    """Two jobs of one bucket noted in one cycle with different reasons: the first
    shows its own until the bucket is noted again, with the same reason as before;
    it then shows the bucket's, and is named among the changes."""
    from coda.cycle import reasons as R
    from coda.cycle.clock import Clock
    from coda.cycle.queued import Queue

    clock = Clock()
    queue = Queue(make_policy("coda"), clock)
    jobs = [Job(i, f"cpu{i}", 0.0, 0, 4, 0, 1, 100.0) for i in range(3)]
    for job in jobs:
        queue.enqueue(job)
    assert queue.reason_changes() is None  # the first time: every job
    clock.cycles = 1
    queue.note(jobs[0], Reason(R.CORES, "4"))
    queue.note(jobs[1], Reason(R.RESERVATION, behind="cpu9#9"))
    assert set(queue.reason_changes() or ()) == {jobs[0], jobs[1], jobs[2]}
    assert queue.reason_of(jobs[0]) == Reason(R.CORES, "4")
    assert queue.reason_of(jobs[2]) == Reason(R.RESERVATION, behind="cpu9#9")
    clock.cycles = 2
    queue.note(jobs[2], Reason(R.RESERVATION, behind="cpu9#9"))
    assert queue.reason_of(jobs[0]) == Reason(R.RESERVATION, behind="cpu9#9")
    assert jobs[0] in (queue.reason_changes() or ())
    assert list(queue.reason_changes() or [None]) == []  # nothing since
