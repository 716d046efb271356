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
from coda.cycle.queued import ReasonChanges
from coda.policy.state import Job
from coda.slurm.wait_marks import WaitMarks


@pytest.mark.parametrize(("seed", "nodes", "held"), [(0, 12, 80), (1, 12, 80), (2, 40, 1500)])
def test_the_waits_kept_by_changes_equal_every_reason(
    seed: int, nodes: int, held: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = load_bench("bench_slurm_controller")
    grouped = []  # jobs whose reasons moved with their bucket's, as one group
    take_group = WaitMarks._take_group

    def counted(self: WaitMarks, why: Reason, ids: list[int]) -> None:
        grouped.append(len(ids))
        take_group(self, why, ids)

    monkeypatch.setattr(WaitMarks, "_take_group", counted)
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
    """A scheduler as the marks ask it: every reason first, then one bucket's group."""

    def __init__(self, reasons: dict[int, Reason | None]) -> None:
        self.reasons = reasons
        self.next: ReasonChanges | None = None

    def reason_changes(self) -> ReasonChanges | None:
        return self.next

    def reason_of(self, job: Job) -> Reason | None:
        return self.reasons[job.idx]


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
        st.tuples(st.integers(0, len(_POOL) - 1), st.integers(0, len(_MARKS) - 1)),
        min_size=1,
        max_size=40,
    ),
    group=st.lists(st.integers(0, 60), max_size=40),
    why=st.integers(0, len(_POOL) - 2),
)
def test_a_group_moved_at_once_leaves_what_a_look_at_each_job_leaves(
    jobs: list[tuple[int, int]], group: list[int], why: int
) -> None:
    reasons = {jid: _POOL[r] for jid, (r, _) in enumerate(jobs)}
    queued = {jid: Job(jid, f"j{jid}", 0.0, 1, 1, 0, 1, 1.0) for jid in reasons}
    records = {jid: _Record(_MARKS[m]) for jid, (_, m) in enumerate(jobs)}
    sched = _Changes(reasons)
    marks = WaitMarks()
    marks.update(sched, queued, records, (), {}, set())  # type: ignore[arg-type]
    shown = _POOL[why]
    assert shown is not None
    members = [queued[jid] for jid in dict.fromkeys(group) if jid in queued]
    sched.next = ReasonChanges([], [(shown, members)])
    for job in members:
        if reasons[job.idx] != shown:
            reasons[job.idx] = shown
    marks.update(sched, queued, records, (), {}, set())  # type: ignore[arg-type]

    assert Counter(r.code for r in reasons.values() if r is not None) == marks.counts()
    for jid, r in reasons.items():
        assert marks.reason(jid) == r
    held = {jid: rec.mark.get("wait") for jid, rec in records.items()
            if rec.mark is not None and rec.mark.get("state") == "held"}  # fmt: skip
    want = sorted(jid for jid, r in reasons.items() if r is not None and jid in held
                  and held[jid] != r.token)  # fmt: skip
    assert marks.stale(len(reasons) + 1) == want
