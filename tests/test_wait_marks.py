"""Wait marks kept from what changed (coda.slurm.wait_marks) count what a look at every
held job counts, and the marks written converge on every job's reason."""

from __future__ import annotations

import tempfile
from collections import Counter

import pytest
from bench_module import load_bench
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.cycle import Reason
from coda.cycle.buckets import Bucket
from coda.cycle.queue import ReasonChanges
from coda.policy.state import Job
from coda.slurm.wait_marks import SharedReason, WaitMarks


@pytest.mark.parametrize(("seed", "nodes", "held"), [(0, 12, 80), (1, 12, 80), (2, 40, 1500)])
def test_the_waits_kept_by_changes_equal_every_reason(
    seed: int, nodes: int, held: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = load_bench("bench_slurm_controller")
    grouped = []  # jobs whose reasons moved with their bucket's, at once
    move = WaitMarks._move

    def counted(self: WaitMarks, shared: SharedReason, why: Reason) -> None:
        grouped.append(shared.count)
        move(self, shared, why)

    monkeypatch.setattr(WaitMarks, "_move", counted)
    with tempfile.TemporaryDirectory() as d:
        b = bench.Bench(nodes, held, seed, d)  # type: ignore[attr-defined]
        ctl = b.ctl

        def every_reason() -> dict[int, Reason]:
            out = {
                jid: why
                for jid, job in ctl.mirror.queued.items()
                if (why := ctl.sched.reason_of(job)) is not None
            }
            out.update(ctl.mirror.never)
            return out

        b.cycle(None)
        for k in (0, 3, 5, 5, 2, 8, 1, 0, 4, 0):
            b.cycle(k)
            assert ctl.stats.waits == Counter(r.code for r in every_reason().values())
        for _ in range(12 + held // 20):  # 20 marks a cycle: the rest catch up
            b.cycle(0)
        b.slurm.tick(0)
        marks = {
            jid: j["admin_comment"]
            for jid, j in b.slurm.jobs.items()
            if j["job_state"] == "PENDING" and j["priority"] == 0
        }
        want = every_reason()
        assert want and all(f"wait={want[jid].token}" in marks[jid] for jid in want if jid in marks)
    assert grouped and (held < 1000 or max(grouped) >= 50), grouped


class _Record:
    """What the marks read of a held job's record: its mark."""

    def __init__(self, mark: dict[str, str] | None) -> None:
        self.mark = mark


class _Changes:
    """A scheduler as the marks ask it: every reason first, then what moved: some
    buckets' reasons (the jobs that show them move with them) and some jobs'."""

    def __init__(self, reasons: dict[int, Reason | None], homes: dict[int, Bucket]) -> None:
        self.reasons = reasons  # each job's own reason
        self.homes = homes  # the jobs that show their bucket's, and that bucket
        self.shown: dict[Bucket, Reason] = {}
        self.next: ReasonChanges | None = None

    def reason_changes(self) -> ReasonChanges | None:
        return self.next

    def reason_of(self, job: Job) -> Reason | None:
        home = self.homes.get(job.idx)
        return self.shown[home] if home is not None else self.reasons[job.idx]

    def shown_by(self, job: Job) -> Bucket | None:
        return self.homes.get(job.idx)


# Equal reasons that are not one object (``Reasons`` starts afresh past its limit).
_POOL = (
    Reason("cores", "4"),
    Reason("cores", "4"),
    Reason("reservation", "", "a#1"),
    Reason("reservation", "", "a#2"),
    Reason("gpus", "8"),
    None,
)
_MARKS = (None, {"state": "placed"}, {"state": "held"}) + tuple(
    {"state": "held", "wait": r.token} for r in _POOL[2:] if r is not None
)


@settings(max_examples=300, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.integers(0, len(_POOL) - 1), st.integers(0, len(_MARKS) - 1),
                  st.integers(-1, 2)),  # own reason, mark, bucket shown (-1: its own)
        min_size=1,
        max_size=40,
    ),
    moves=st.lists(st.tuples(st.integers(0, 2), st.integers(0, len(_POOL) - 2)), max_size=4),
    own=st.lists(st.tuples(st.integers(0, 60), st.integers(-1, 2), st.integers(0, 5))),
    marks=st.lists(st.tuples(st.integers(0, 60), st.integers(0, len(_MARKS) - 1))),
)  # fmt: skip
def test_buckets_moved_at_once_leave_what_a_look_at_each_job_leaves(
    jobs: list[tuple[int, int, int]],
    moves: list[tuple[int, int]],
    own: list[tuple[int, int, int]],
    marks: list[tuple[int, int]],
) -> None:
    """Reasons, counts and stale marks kept from buckets moved at once (and some jobs
    that leave or join a bucket, or whose mark changed) equal a look at every job."""
    buckets = [Bucket() for _ in range(3)]
    reasons = {jid: _POOL[r] for jid, (r, _, _) in enumerate(jobs)}
    homes = {jid: buckets[b] for jid, (_, _, b) in enumerate(jobs) if b >= 0}
    queued = {jid: Job(jid, f"j{jid}", 0.0, 1, 1, 0, 1, 1.0) for jid in reasons}
    records = {jid: _Record(_MARKS[m]) for jid, (_, m, _) in enumerate(jobs)}
    sched = _Changes(reasons, homes)
    sched.shown = {b: _POOL[i] for i, b in enumerate(buckets)}  # type: ignore[misc]
    marks_kept = WaitMarks()
    marks_kept.update(sched, queued, records, (), {}, set())  # type: ignore[arg-type]
    moved: list[tuple[Bucket, Reason]] = []
    for b, why in moves:
        shown = _POOL[why]
        assert shown is not None
        sched.shown[buckets[b]] = shown
        moved.append((buckets[b], shown))
    named: list[Job] = []
    for jid, b, r in own:  # a job that leaves its bucket's reason, or joins one
        if jid in queued:
            if b < 0:
                homes.pop(jid, None)
                reasons[jid] = _POOL[r]
            else:
                homes[jid] = buckets[b]
            named.append(queued[jid])
    changed: list[int] = []
    for jid, m in marks:  # a record whose mark changed
        if jid in records:
            records[jid] = _Record(_MARKS[m])
            changed.append(jid)
    sched.next = ReasonChanges(named, moved)
    marks_kept.update(sched, queued, records, changed, {}, set())  # type: ignore[arg-type]

    now = {jid: sched.reason_of(job) for jid, job in queued.items()}
    assert Counter(r.code for r in now.values() if r is not None) == marks_kept.counts()
    for jid, r in now.items():
        assert marks_kept.reason(jid) == r
    held = {jid: rec.mark.get("wait") for jid, rec in records.items()
            if rec.mark is not None and rec.mark.get("state") == "held"}  # fmt: skip
    want = sorted(jid for jid, r in now.items() if r is not None and jid in held
                  and held[jid] != r.token)  # fmt: skip
    assert marks_kept.stale(len(now) + 1) == want
