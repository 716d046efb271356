"""Wait marks kept from what changed (coda.slurm.wait_marks) count what a look at every
held job counts, and the marks written converge on every job's reason."""

from __future__ import annotations

import tempfile
from collections import Counter

import pytest
from bench_module import load_bench

from coda.cycle import Reason


@pytest.mark.parametrize("seed", [0, 1])
def test_the_waits_kept_by_changes_equal_every_reason(seed: int) -> None:
    bench = load_bench("bench_slurm_controller")
    with tempfile.TemporaryDirectory() as d:
        b = bench.Bench(12, 80, seed, d)  # type: ignore[attr-defined]
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
        for _ in range(12):  # 20 marks a cycle: the rest catch up
            b.cycle(0)
        b.slurm.tick(0)
        marks = {
            jid: j["admin_comment"]
            for jid, j in b.slurm.jobs.items()
            if j["job_state"] == "PENDING" and j["priority"] == 0
        }
        want = every_reason()
        assert want and all(f"wait={want[jid].token}" in marks[jid] for jid in want if jid in marks)
