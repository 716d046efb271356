"""The held jobs to place and the index's held sets, kept from what changed, equal what
a read of every job gives (coda.slurm.ready, coda.slurm.index)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.slurm.client import SlurmJob
from coda.slurm.controller import Dependencies
from coda.slurm.index import JobIndex
from coda.slurm.ready import ReadyJobs

IDS = st.integers(1, 30)
DEPENDENCIES = ["", "", "afterok:3", "after:7?afterany:9", "afterok:9", "x"]
STATES = st.sampled_from(["PENDING", "RUNNING", "COMPLETED"])


@st.composite
def records(draw: st.DrawFn, jid: int) -> SlurmJob:
    held = draw(st.booleans())
    state = "PENDING" if held else draw(STATES)
    return SlurmJob(
        job_id=jid, name="j", user_id=1, state=state, reason="None", cpus=1, node_count=1,
        gpus_per_node=0, nodes=[], required_nodes=[],
        dependency=draw(st.sampled_from(DEPENDENCIES)),
        priority=0 if held else draw(st.integers(0, 1)),
        mark={"state": "held"} if held else draw(st.sampled_from([None, {"state": "placed"}])),
        submit_time=draw(st.integers(0, 50)),
        array_job_id=draw(st.sampled_from([0, 0, 0, 9])),
        het_job_id=draw(st.sampled_from([0, 0, 0, 4])),
    )  # fmt: skip


@st.composite
def reads(draw: st.DrawFn) -> list[dict[int, SlurmJob]]:
    """Slurm's jobs at successive reads: each read changes, adds or forgets some."""
    out: list[dict[int, SlurmJob]] = []
    now: dict[int, SlurmJob] = {}
    for _ in range(draw(st.integers(1, 8))):
        now = dict(now)
        for jid in draw(st.lists(IDS, max_size=6)):
            if jid in now and draw(st.booleans()):
                del now[jid]
            else:
                now[jid] = draw(records(jid))
        out.append(dict(sorted(now.items())))
    return out


def _verdicts(index: JobIndex) -> dict[int, bool | None]:
    deps = Dependencies(index=index)
    return {jid: deps.met(j.dependency) for jid, j in index.held_special.items() if j.dependency}


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(reads(), st.lists(IDS, max_size=4))
def test_kept_by_changes_equals_built_from_every_job(
    history: list[dict[int, SlurmJob]], again: list[int]
) -> None:
    index, ready = JobIndex(), ReadyJobs()
    for read in history:
        jobs = list(read.values())
        changed = index.update(jobs)
        verdicts = _verdicts(index)
        ready.look_again(again)
        before = dict(ready.jobs)
        fresh, dropped = ready.update(index, changed, index.gone, verdicts)
        held = {j.job_id: j for j in jobs if j.held_for_coda}
        assert index.held == held
        assert index.held_special == {
            jid: j for jid, j in held.items() if j.is_array_or_het or j.dependency
        }
        tasks: dict[int, dict[int, SlurmJob]] = {}
        for j in jobs:
            if j.array_job_id:
                tasks.setdefault(j.array_job_id, {})[j.job_id] = j
        assert index.tasks == tasks
        # The same verdicts as over a list of every job.
        whole = Dependencies(jobs)
        assert verdicts == {jid: whole.met(j.dependency) for jid, j in held.items() if j.dependency}
        submits = [j.submit_time for j in held.values() if j.submit_time > 0]
        assert index.oldest_held_submit() == (min(submits) if submits else None)
        want = {
            jid: j for jid, j in held.items()
            if not j.is_array_or_het and verdicts.get(jid, True) is True
        }  # fmt: skip
        assert ready.jobs == want
        # What moved: every job new to the set or changed, and every id that left.
        assert {j.job_id for j in fresh} >= {
            jid for jid, j in want.items() if before.get(jid) is not j
        }
        assert set(dropped) == before.keys() - want.keys()
        assert {j.job_id for j in fresh} >= set(again) & want.keys() or not before
