"""Wait marks kept from what changed (coda.slurm.wait_marks) count what a look at every
held job counts, and the marks written converge on every job's reason."""

from __future__ import annotations

import tempfile
from collections import Counter

import pytest
from bench_module import load_bench

from coda.cycle import Reason
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
