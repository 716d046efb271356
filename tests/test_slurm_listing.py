"""The controller's narrow squeue listing (coda.slurm.listing) and the index of what
changed (coda.slurm.index): parsed from output recorded on Slurm 22.05.8, hostile
names, and the cycle's mirror kept by changes alone equal to one rebuilt from
every job. The same reader against real Slurm: tests/test_slurm_e2e.py."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.cycle import Scheduler
from coda.slurm.client import SlurmError, SlurmJob, SlurmNode
from coda.slurm.index import JobIndex
from coda.slurm.listing import (
    LISTING,
    MAX_ALONE,
    NAMES_REFRESH_S,
    JobListing,
    names_argv,
    parse_line,
    parse_names,
    time_limit_s,
)
from coda.slurm.listing_diff import Spliced, line_starts, splice
from coda.slurm.view import SlurmView
from tests.bench_module import load_bench

# Recorded from Slurm 22.05.8 (deploy/slurm-test-cluster, TZ=UTC): the listing, then the
# names query for some of its jobs. Job 9's name forges a line of job 2:
# ``sbatch -J $'x\n2||fake'``; job 10's is ``a|b`` with ``--exclude=n3``; job 1's is
# ``evil\nname|x``; 3, 6, 7 are an array's tasks, 8 a pending array. The listing asks for
# BatchFlag (after Requeue) since this was recorded: every job here is sbatch's, so its
# column reads 1, inserted by hand.
LISTED = (
    "1|1|N/A|N/A|0|PENDING|JobHeldUser|1|1|1|N/A|N/A|N/A|||(null)|0|2026-12-02T06:54:55|N/A|N/A|0|0|5:00|1|1|main|(null)\n"
    "2|2|N/A|N/A|0|PENDING|JobHeldUser|1|1|1|N/A|N/A|N/A|||(null)|0|2026-12-02T06:54:55|N/A|N/A|0|0|5:00|1|1|main|coda:held\n"
    "6|3|1|N/A|0|CANCELLED|None|1|1|1|N/A|N/A|N/A|n1||(null)|4294901759|2026-12-02T06:56:34|2026-12-02T06:56:47|2026-12-02T06:58:02|15|0|5:00|1|1|main|(null)\n"
    "7|3|2|N/A|0|CANCELLED|None|1|1|1|N/A|N/A|N/A|n1||(null)|4294901759|2026-12-02T06:56:34|2026-12-02T06:56:47|2026-12-02T06:58:02|15|0|5:00|1|1|main|(null)\n"
    "3|3|3|N/A|0|CANCELLED|None|1|1|1|N/A|N/A|N/A|n2||(null)|4294901759|2026-12-02T06:56:34|2026-12-02T06:56:47|2026-12-02T06:58:02|15|0|5:00|1|1|main|(null)\n"
    "4|4|N/A|N/A|0|PENDING|BadConstraints|2|1|1|gres:gpu:2|N/A|N/A|||(null)|0|2026-12-02T06:56:34|N/A|N/A|0|0|2:00|1|1|main|coda:held\n"
    "5|5|N/A|N/A|0|PENDING|JobHeldUser|1|1|1|N/A|N/A|N/A|||afterok:2(unfulfilled)|0|2026-12-02T06:56:34|N/A|N/A|0|0|UNLIMITED|1|1|main|coda:held\n"
    "8|8|1-2|N/A|0|PENDING|JobHeldUser|1|1|1|N/A|N/A|N/A|||(null)|0|2026-12-02T06:58:50|N/A|N/A|0|0|5:00|1|1|main|coda:held\n"
    "9|9|N/A|N/A|0|PENDING|JobHeldUser|1|1|1|N/A|N/A|N/A|||(null)|0|2026-12-02T07:02:50|N/A|N/A|0|0|1:30:00|1|1|main|coda:held\n"
    "10|10|N/A|N/A|0|PENDING|JobHeldUser|2|1|1|N/A|N/A|N/A|||(null)|0|2026-12-02T07:02:50|N/A|N/A|0|0|1-02:00:00|1|1|main|coda:held\n"
    "12|12|N/A|N/A|65534|CANCELLED|None|2|1|1|N/A|N/A|N/A|n1||(null)|4294901758|2026-12-02T07:03:15|2026-12-02T07:03:16|2026-12-02T07:03:16|15|0|1:30:00|1|1|main|coda:held\n"
    "13|13|N/A|N/A|65534|CANCELLED|JobHeldUser|1|1|4294967294|gres:gpu:1|N/A|N/A|||(null)|0|2026-12-02T07:03:15|2026-12-02T07:03:16|2026-12-02T07:03:16|0|0|1-02:00:00|1|1|main|coda:held\n"
)  # fmt: skip
# Each job's part of the names query's answer (squeue prints the asked ones, in this order).
NAMES_OF = {10: "10|n3|a|b", 9: "9||x\n2||fake", 5: "5||j.sh", 4: "4||j.sh", 2: "2||aaaa",
            1: "1||evil\nname|x", 12: "12||p", 13: "13||q"}  # fmt: skip
NAMES = "".join(v + "\n" for v in NAMES_OF.values())


class Recorded:
    """A runner answering the listing and names queries from recorded text."""

    def __init__(self, listed: str = LISTED, names: str | dict[int, str] = NAMES) -> None:
        self.listed, self.names = listed, names
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.calls.append(argv)
        if argv == list(LISTING):
            return self.listed
        if argv[-1] == "--format=%A|%x|%j":
            if isinstance(self.names, str):
                return self.names
            asked = {int(x) for x in argv[4].removeprefix("--jobs=").split(",")}
            return "".join(v + "\n" for k, v in self.names.items() if k in asked)
        if argv[-1] == "--format=%x|%j":  # one job alone
            alone = {"--jobs=2": "|aaaa\n", "--jobs=4": "|j.sh\n", "--jobs=9": "|x\n2||fake\n"}
            return alone.get(argv[4], "")
        raise AssertionError(argv)


def test_recorded_listing_reads_every_field() -> None:
    runner = Recorded()
    jobs = {j.job_id: j for j in JobListing(runner).jobs()}
    assert sorted(jobs) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13]
    held = jobs[4]
    assert (held.state, held.reason, held.cpus, held.gpus_per_node, held.priority) == (
        "PENDING", "BadConstraints", 2, 1 * 2, 0)  # fmt: skip
    assert held.held_for_coda and held.mark == {"state": "held"}
    assert held.time_limit_s == 120.0 and held.requeueable and held.partitions == ["main"]
    assert held.submit_time == 1796194594 and held.start_time is None
    assert jobs[5].dependency == "afterok:2(unfulfilled)" and jobs[5].time_limit_s is None
    assert jobs[9].time_limit_s == 5400.0 and jobs[10].time_limit_s == 26 * 3600.0
    task = jobs[6]
    assert (task.array_job_id, task.array_task_id, task.is_array_or_het) == (3, 1, True)
    assert task.nodes == ["n1"] and task.start_time == 1796194607.0 and task.exit_code == 15
    assert jobs[8].array_job_id == 8 and jobs[8].array_task_id is None
    assert jobs[1].mark is None and jobs[1].admin_comment == ""
    assert jobs[12].user_id == 65534 and jobs[12].end_time == 1796194996
    # Names: asked for once, for the jobs that are not an array's.
    names = [c for c in runner.calls if c[-1] == "--format=%A|%x|%j"]
    assert len(names) == 1 and names[0][4] == "--jobs=1,2,4,5,9,10,12,13"
    assert jobs[10].name == "a|b" and jobs[10].excluded_nodes == ["n3"]
    assert jobs[1].name == "evil\nname|x" and jobs[4].name == "j.sh"
    # Job 9's name forged a line of job 2: job 2 is asked for alone and keeps its
    # name, and so is job 4, whose record ran into job 2's second line; job 9's own
    # name is cut short at the forgery.
    assert jobs[2].name == "aaaa" and jobs[9].name == "x"
    alone = [c[4] for c in runner.calls if c[-1] == "--format=%x|%j"]
    assert alone == ["--jobs=2", "--jobs=4"]
    assert jobs[6].name == "" and jobs[8].name == ""


def test_an_unchanged_line_gives_back_the_same_job_and_asks_nothing_more() -> None:
    runner = Recorded()
    listing = JobListing(runner)
    first = listing.jobs()
    n = len(runner.calls)
    second = listing.jobs()
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert len(runner.calls) == n + 1  # the listing only: no names query
    runner.listed = LISTED.replace(
        "|2:00|1|1|main|coda:held\n", "|2:00|1|1|main|coda:held,wait=cores\n"
    )
    third = listing.jobs()
    assert [j.job_id for a, j in zip(first, third, strict=True) if a is not j] == [4]
    assert runner.calls[-1][4] == "--jobs=4" and third[5].mark == {"state": "held", "wait": "cores"}


def test_an_admin_comment_with_a_newline_or_a_pipe_stays_in_its_job() -> None:
    line = LISTED.splitlines()[1].replace("|coda:held", "|note: a|b\nsecond line")
    runner = Recorded(listed=line + "\n", names="2||n\n")
    [job] = JobListing(runner).jobs()
    assert job.admin_comment == "note: a|b\nsecond line" and job.mark is None


@pytest.mark.parametrize(
    "bad",
    [
        "x|2|N/A",  # not a job id
        LISTED.splitlines()[1].replace("|1|1|main|", "|yes|1|main|"),  # Requeue
        LISTED.splitlines()[1].replace("|1|1|main|", "|1|yes|main|"),  # BatchFlag
        LISTED.splitlines()[1].replace("|5:00|", "|5 min|"),  # TimeLimit
        LISTED.splitlines()[1].replace("2026-12-02T06:54:55", "yesterday"),  # SubmitTime
        LISTED.splitlines()[1].replace("|JobHeldUser|1|", "|JobHeldUser|٣|"),  # NumCPUs
        "2|2|N/A",  # too few fields
    ],
)
def test_a_line_it_cannot_read_is_left_out_and_said_and_read_again(bad: str) -> None:
    """One job's unreadable line must not stop the reading of everyone's jobs."""
    good = LISTED.splitlines()[5]  # job 4
    runner = Recorded(listed=bad + "\n" + good + "\n", names="4||j.sh\n")
    listing = JobListing(runner)
    assert [j.job_id for j in listing.jobs()] == [4]
    assert len(listing.unreadable) == 1 and listing.unreadable[0].startswith("job ")
    n = len(runner.calls)
    assert [j.job_id for j in listing.jobs()] == [4]  # read again, not taken as unchanged
    assert len(listing.unreadable) == 1 and len(runner.calls) > n


def test_time_limits() -> None:
    assert time_limit_s("5:00") == 300.0 and time_limit_s("1:30:00") == 5400.0
    assert time_limit_s("2-00:00:00") == 172800.0 and time_limit_s("UNLIMITED") is None
    assert time_limit_s("INVALID") is None  # squeue's word for a limit over a year
    assert time_limit_s("0:00") is None
    for bad in ("5", "1:2:3:4", "a-1:00", "-1:00:00", "1:xx"):
        with pytest.raises(ValueError):
            time_limit_s(bad)


@settings(max_examples=200, deadline=None)
@given(names=st.lists(st.text(st.sampled_from("ab|\n12x"), max_size=12), min_size=1, max_size=6))
def test_names_never_read_one_job_as_another(names: list[str]) -> None:
    """Whatever the names (pipes, newlines, forged lines), a job's name as read is its
    own name or a prefix of it, except where an id shows up twice (asked for again)."""
    ids = list(range(1, len(names) + 1))
    text = "".join(f"{i}||{n}\n" for i, n in zip(ids, names, strict=True))
    got, twice = parse_names(text, ids)
    for i, n in zip(ids, names, strict=True):
        if i in got and i not in twice:
            assert n.startswith(got[i][1]) or got[i][1] == n, (i, n, got[i])


def test_names_are_asked_for_in_batches() -> None:
    assert names_argv([1, 2, 3])[4] == "--jobs=1,2,3"
    many = "".join(
        LISTED.splitlines()[1].replace("2|2|", f"{i}|{i}|", 1) + "\n" for i in range(1, 4502)
    )
    runner = Recorded(listed=many, names={i: f"{i}||n{i}" for i in range(1, 4502)})
    jobs = JobListing(runner).jobs()
    assert len(jobs) == 4501
    assert len([c for c in runner.calls if c[-1] == "--format=%A|%x|%j"]) == 3


def test_the_index_follows_what_changed() -> None:
    listing = JobListing(Recorded())
    index = JobIndex()
    jobs = listing.jobs()
    changed = index.update(jobs)
    assert changed == jobs and index.gone == []
    assert sorted(index.held) == [2, 4, 5, 8, 9, 10]
    assert index.marks == {"held": 6}
    assert index.update(listing.jobs()) == [] and index.gone == []
    runner = Recorded(listed="".join(x + "\n" for x in LISTED.splitlines()[1:]))
    index2 = JobIndex()
    index2.update(JobListing(Recorded()).jobs())
    index2.update(JobListing(runner).jobs())
    assert index2.gone == [1] and 1 not in index2.by_id


# ---------------------------------------------------------------- the mirror, by changes
def _state(view: SlurmView) -> list[tuple[object, ...]]:
    return [
        (n.name, n.free_gpus, n.free_cores, n.cpu_job_cores, sorted(j.idx for j in n.jobs))
        for n in sorted(view.nodes.values(), key=lambda n: n.name)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_mirror_kept_by_changes_equals_one_built_from_every_job(seed: int) -> None:
    """Each cycle's mirror, brought up to date from the jobs that changed, holds what a
    mirror built afresh from every job would (free GPUs and cores, jobs per node), over
    cycles where jobs end, arrive, start and are requeued."""
    bench = load_bench("bench_slurm_controller")
    checked: list[int] = []
    with tempfile.TemporaryDirectory() as d:
        b = bench.Bench(12, 60, seed, d)  # type: ignore[attr-defined]
        ctl = b.ctl
        sync = ctl.mirror.sync

        def checking(
            snodes: Sequence[SlurmNode], jobs: Sequence[SlurmJob], queued: Sequence[SlurmJob],
            now: float, delta: object = None, ready_delta: object = None,
        ) -> bool:  # fmt: skip
            out = sync(snodes, jobs, queued, now, delta, ready_delta)  # type: ignore[arg-type]
            fresh = SlurmView(Scheduler(ctl.policy))
            fresh.sync(snodes, jobs, queued, now)
            assert _state(ctl.mirror) == _state(fresh)
            assert sorted(ctl.mirror.queued) == sorted(fresh.queued)
            checked.append(delta is not None and ready_delta is not None)
            return out

        ctl.mirror.sync = checking  # type: ignore[method-assign]
        b.cycle(None)
        for k in (0, 3, 5, 5, 2, 8, 1, 0):
            b.cycle(k)
        assert ctl.stats.placed > 0
    assert checked[0] is False and sum(checked) >= 6  # the first full, then by changes


def test_only_a_batch_job_with_requeue_may_be_requeued() -> None:
    # Slurm refuses to requeue a job srun or salloc made, though it shows Requeue=1 too.
    line = LISTED.splitlines()[1]
    assert parse_line(line).requeueable
    assert not parse_line(line.replace("|1|1|main|", "|1|0|main|")).requeueable
    assert not parse_line(line.replace("|1|1|main|", "|0|1|main|")).requeueable


def test_a_running_job_without_a_time_limit_has_no_end_time() -> None:
    # Recorded (22.05.8; BatchFlag inserted): `sbatch -t 0`, running; squeue -O prints its
    # EndTime as NONE.
    line = ("18|18|N/A|N/A|65534|RUNNING|None|2|1|1|gres:gpu:1|N/A|N/A|n1|n1|(null)|"
            "4294901755|2026-12-02T07:13:20|2026-12-02T07:13:21|NONE|0|0|UNLIMITED|1|1|main|"
            "coda:placed,req=2,grant=2,nodes=n1")  # fmt: skip
    job = parse_line(line, "tiny")
    assert (job.state, job.end_time, job.time_limit_s, job.nodes) == ("RUNNING", 0, None, ["n1"])
    assert job.start_time == 1796195601.0 and job.gpus_per_node == 1


@settings(max_examples=150, deadline=None)
@given(
    reads=st.lists(
        st.dictionaries(
            st.integers(1, 12), st.sampled_from(["held", "placed", "held,wait=x"]), max_size=12
        ),
        min_size=1,
        max_size=6,
    ),
    forgets=st.lists(st.sets(st.integers(1, 12), max_size=3), min_size=6, max_size=6),
)
def test_what_a_listing_remembers_never_changes_what_it_reads(
    reads: list[dict[int, str]], forgets: list[set[int]]
) -> None:
    """Over any sequence of reads (jobs coming, changing, going, in any order; some
    forgotten between reads), a listing that remembers the last read returns the jobs
    a fresh one reads, and its ``changed`` and ``gone`` say exactly what differs from
    the read before. (Every line here reads; with lines that do not, see
    test_unreadable_lines_and_ids_listed_twice_keep_changed_and_gone_exact.)"""
    template = LISTED.splitlines()[1]  # job 2, held
    listing = JobListing(Recorded())
    before: dict[int, SlurmJob] = {}
    for read in reads:
        text = "".join(
            template.replace("2|2|", f"{jid}|{jid}|", 1).replace("coda:held", f"coda:{mark}") + "\n"
            for jid, mark in read.items()
        )

        def slurm(argv: Sequence[str], text: str = text) -> str:
            if list(argv) == list(LISTING):
                return text
            asked = argv[4].removeprefix("--jobs=").split(",")  # like squeue: those only
            return "".join(f"{jid}||n{jid}\n" for jid in asked)

        listing.run = slurm
        got = listing.jobs()
        fresh = JobListing(slurm).jobs()
        assert got == fresh
        now = {j.job_id: j for j in got}
        assert {j.job_id for j in listing.changed} == {
            jid for jid, j in now.items() if before.get(jid) is not j
        }
        assert sorted(listing.gone) == sorted(before.keys() - now.keys())
        before = now
        for jid in forgets[len(before) % 6]:
            listing.forget(jid)  # read afresh: a new object, "changed" if listed, else gone


def test_what_squeue_prints_unlike_json_reads_as_json_would() -> None:
    """Slurm's no-value numbers are absent; a reason's description reads as its code;
    an end time that is not a time is none (nothing decides by it)."""
    line = LISTED.splitlines()[-1]  # job 13: NumTasks 4294967294 (no value)
    job = parse_line(line.replace("|0|2026-12-02T07:03:15|", "|4294967295|2026-12-02T07:03:15|"))
    assert job.priority == 0 and job.gpus_per_node == 1  # not 4294967294 GPUs
    why = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority"
    placed = LISTED.splitlines()[1].replace("|JobHeldUser|", f"|{why} partitions|")
    placed = placed.replace("|N/A|N/A|0|0|5:00|", "|N/A|soon|0|0|5:00|")
    job = parse_line(placed)
    assert job.reason == "Resources" and job.end_time == 0


def test_an_unasked_line_in_the_names_is_never_part_of_another_name() -> None:
    # squeue lists an array's task under its array's id (a cancelled array, here 121,
    # reads as a plain job): the task's line (122, not asked for) follows job 123's.
    got, suspect = parse_names("123||rootvictim\n122||x\nEVIL\n121||atk\n", [121, 123])
    assert got[123] == ("", "rootvictim") and 123 in suspect
    assert got[121] == ("", "atk")


def test_a_flood_of_forged_lines_costs_a_bounded_number_of_queries() -> None:
    ids = list(range(1, 201))
    forged = "".join(f"\n{i}||fake" for i in ids)
    names = "".join(f"{i}||n{i}\n" for i in ids[1:]) + f"1||evil{forged}\n"
    line = LISTED.splitlines()[1]
    listed = "".join(line.replace("2|2|", f"{i}|{i}|", 1) + "\n" for i in ids)
    alone: list[str] = []

    def slurm(argv: Sequence[str]) -> str:
        if list(argv) == list(LISTING):
            return listed
        if argv[-1] == "--format=%x|%j":
            alone.append(argv[4])
            return "|" + argv[4].removeprefix("--jobs=") + "\n"
        return names

    listing = JobListing(slurm)
    listing.jobs()
    assert len(alone) == MAX_ALONE  # the rest wait for the next read
    listing.jobs()
    assert len(alone) == 2 * MAX_ALONE


def test_names_and_exclusions_are_asked_again_every_so_often() -> None:
    """A user may rename a pending job or change what it excludes: its line does not
    change, so the listing asks every pending job's name again each NAMES_REFRESH_S."""
    now = [0.0]
    runner = Recorded()
    listing = JobListing(runner, clock=lambda: now[0])
    first = {j.job_id: j for j in listing.jobs()}
    runner.names = {**NAMES_OF, 10: "10|n1|c"}
    assert {j.job_id: j for j in listing.jobs()}[10] is first[10]
    now[0] = NAMES_REFRESH_S
    again = {j.job_id: j for j in listing.jobs()}
    assert again[10].name == "c" and again[10].excluded_nodes == ["n1"]
    assert again[5] is first[5]  # unchanged ones stay the same objects
    assert 10 in {j.job_id for j in listing.changed}


def test_forget_reads_a_job_afresh() -> None:
    runner = Recorded()
    listing = JobListing(runner)
    first = {j.job_id: j for j in listing.jobs()}
    runner.names = {**NAMES_OF, 10: "10||renamed"}
    listing.forget(10)
    again = {j.job_id: j for j in listing.jobs()}
    assert again[10].name == "renamed" and again[4] is first[4]


def test_a_job_read_afresh_that_slurm_then_drops_is_reported_gone() -> None:
    """A job whose line is to be read afresh (CODA's write to it failed) and that
    Slurm then no longer lists is gone, like any other: else the controller's view
    kept it queued and placed it again every cycle."""
    runner = Recorded()
    listing = JobListing(runner)
    assert 10 in {j.job_id for j in listing.jobs()}
    listing.forget(10)
    runner.listed = "".join(x + "\n" for x in LISTED.splitlines() if not x.startswith("10|"))
    assert 10 not in {j.job_id for j in listing.jobs()}
    assert listing.gone == [10]


def test_a_job_left_unsettled_that_slurm_then_drops_is_reported_gone() -> None:
    """The same for a job read before whose name a flood of forged lines left unsettled
    (it keeps the name and exclusions it had)."""
    ids = list(range(1, 201))
    forged = "".join(f"\n{i}||fake" for i in ids)
    names = ["".join(f"{i}|n9|n{i}\n" for i in ids)]
    line = LISTED.splitlines()[1]
    listed = ["".join(line.replace("2|2|", f"{i}|{i}|", 1) + "\n" for i in ids)]

    def slurm(argv: Sequence[str]) -> str:
        if list(argv) == list(LISTING):
            return listed[0]
        if argv[-1] == "--format=%x|%j":
            return "|" + argv[4].removeprefix("--jobs=") + "\n"
        return names[0]

    listing = JobListing(slurm)
    listing.jobs()
    names[0] = "".join(f"{i}||n{i}\n" for i in ids[1:]) + f"1||evil{forged}\n"
    marked = line.replace("coda:held", "coda:held,wait=x")
    listed[0] = "".join(marked.replace("2|2|", f"{i}|{i}|", 1) + "\n" for i in ids)
    jobs = {j.job_id: j for j in listing.jobs()}
    assert listing._last_text is None  # some left unsettled: the last ones asked about
    assert jobs[200].excluded_nodes == ["n9"]  # what it had, not nothing
    listed[0] = "".join(marked.replace("2|2|", f"{i}|{i}|", 1) + "\n" for i in ids[:-1])
    listing.jobs()
    assert listing.gone == [200]


def test_a_known_job_whose_line_turns_unreadable_keeps_its_last_state() -> None:
    """Slurm still lists the job: taking it for gone would free what it holds (the
    controller's view dropped it, and its cores looked free), so it keeps its last
    state, said in ``unreadable``, until its line reads again."""
    runner = Recorded()
    listing = JobListing(runner)
    first = {j.job_id: j for j in listing.jobs()}
    good = LISTED.splitlines()[5]  # job 4
    runner.listed = LISTED.replace(good, good.replace("|2:00|", "|2 min|"))
    second = {j.job_id: j for j in listing.jobs()}
    assert second.keys() == first.keys() and second[4] is first[4]
    assert listing.gone == [] and 4 not in {j.job_id for j in listing.changed}
    assert len(listing.unreadable) == 1 and listing.unreadable[0].startswith("job 4:")
    assert {j.job_id: j for j in listing.jobs()}[4] is first[4] and listing.gone == []
    runner.listed = LISTED.replace(good, good.replace("|2:00|", "|3:00|"))
    third = {j.job_id: j for j in listing.jobs()}
    assert third[4].time_limit_s == 180.0 and [j.job_id for j in listing.changed] == [4]
    assert listing.unreadable == []
    runner.listed = LISTED.replace(good + "\n", "")
    assert 4 not in {j.job_id for j in listing.jobs()} and listing.gone == [4]


def test_a_job_never_read_whose_line_is_unreadable_is_left_out() -> None:
    good = LISTED.splitlines()[5]  # job 4
    runner = Recorded(listed=LISTED.replace(good, good.replace("|2:00|", "|2 min|")))
    listing = JobListing(runner)
    assert 4 not in {j.job_id for j in listing.jobs()} and len(listing.unreadable) == 1


def test_an_id_listed_twice_never_hides_another_gone() -> None:
    """Counting lines, one extra line of a job made up for a job gone: that job was
    never reported gone, for as long as the other stayed listed twice."""
    lines = LISTED.splitlines()
    two, four = lines[1], lines[5]
    runner = Recorded()
    listing = JobListing(runner)
    listing.jobs()
    twice = two.replace("coda:held", "coda:held,wait=x")
    runner.listed = "".join(x + "\n" for x in lines if x != four) + twice + "\n"
    listing.jobs()
    assert listing.gone == [4]
    runner.listed = LISTED + twice + "\n"  # job 4 back, job 2 still listed twice
    listing.jobs()
    assert listing.gone == []
    runner.listed = "".join(x + "\n" for x in lines if x != four) + twice + "\n"
    listing.jobs()
    assert listing.gone == [4]


def _line(jid: int, mark: str) -> str:
    """Job ``jid``'s line (job 2's, held, as recorded), with ``mark`` as CODA's mark;
    ``bad``/``bad2``: a time limit it cannot read."""
    line = LISTED.splitlines()[1].replace("2|2|", f"{jid}|{jid}|", 1)
    if mark.startswith("bad"):
        return line.replace("|5:00|", "|5 min|" if mark == "bad" else "|6 min|")
    return line.replace("coda:held", f"coda:{mark}")


def _answering(text: str) -> Callable[[Sequence[str]], str]:
    def slurm(argv: Sequence[str]) -> str:
        if list(argv) == list(LISTING):
            return text
        asked = argv[4].removeprefix("--jobs=").split(",")
        return "".join(f"{jid}||n{jid}\n" for jid in asked)

    return slurm


def test_a_line_kept_at_its_last_state_and_an_id_listed_twice_never_hide_a_job_gone() -> None:
    """A kept line is in none of the counts the update by changes relies on: with an id
    listed twice they could balance, and job 5, gone, must still be reported gone."""
    listing = JobListing(_answering(""))
    for text, gone in [
        ([_line(4, "held"), _line(4, "placed"), _line(5, "held")], []),
        ([_line(4, "held"), _line(4, "placed"), _line(5, "bad")], []),
        ([_line(5, "bad")], [4]),
        ([_line(4, "held")], [5]),
    ]:
        listing.run = _answering("".join(x + "\n" for x in text))
        listing.jobs()
        assert sorted(listing.gone) == gone
    assert [j.job_id for j in listing.changed] == [4]


@settings(max_examples=300, deadline=None)
@given(
    reads=st.lists(
        st.lists(
            st.tuples(st.integers(1, 5), st.sampled_from(["held", "placed", "bad", "bad2"])),
            max_size=6,
        ),
        min_size=1,
        max_size=7,
    ),
    forgets=st.lists(st.sets(st.integers(1, 5), max_size=2), min_size=7, max_size=7),
    twice=st.booleans(),
)
def test_unreadable_lines_and_ids_listed_twice_keep_changed_and_gone_exact(
    reads: list[list[tuple[int, str]]], forgets: list[set[int]], twice: bool
) -> None:
    """Over any reads with unreadable lines (and, with ``twice``, ids listed twice): a
    job is listed if a line of it reads, or if it was listed before and its line does
    not read (as it was: the same object); ``gone`` is exactly the ids no longer
    listed; without ids listed twice, the jobs whose lines read are those a fresh
    listing reads and ``changed`` is exactly the new objects."""
    listing = JobListing(_answering(""))
    before: dict[int, SlurmJob] = {}
    for k, read in enumerate(reads):
        if not twice:
            read = list(dict(read).items())
        text = "".join(_line(j, m) + "\n" for j, m in read)
        listing.run = _answering(text)
        got = listing.jobs()
        now: dict[int, SlurmJob] = {}
        for j in got:
            now.setdefault(j.job_id, j)
        good = {j for j, m in read if not m.startswith("bad")}
        unreadable = {j for j, m in read if m.startswith("bad")} - good
        assert set(now) == good | (unreadable & before.keys())
        assert sorted(listing.gone) == sorted(before.keys() - now.keys())
        if not twice:
            assert [j for j in got if j.job_id in good] == JobListing(_answering(text)).jobs()
            assert all(now[j] is before[j] for j in unreadable & before.keys())
            assert {j.job_id for j in listing.changed} == {
                jid for jid, j in now.items() if before.get(jid) is not j
            }
        before = now
        for jid in forgets[k]:
            listing.forget(jid)


def test_a_new_job_whose_exclusions_are_unknown_is_not_listed_until_they_are() -> None:
    """Read as excluding nothing, it was placed on a node it excludes (the attack
    helper's flood: job 33, past the single queries' budget, got no name and no
    exclusions and was placed and released on the node it excluded)."""
    ids = list(range(1, 34))
    forged = "".join(f"\n{i}||f" for i in ids)
    line = LISTED.splitlines()[1]
    listed = "".join(line.replace("2|2|", f"{i}|{i}|", 1) + "\n" for i in [*ids, 100])
    flood = [f"100||x{forged}\n" + "".join(f"{i}|n1|victim{i}\n" for i in ids)]

    def slurm(argv: Sequence[str]) -> str:
        if list(argv) == list(LISTING):
            return listed
        if argv[-1] == "--format=%x|%j":
            return "n1|victim" + argv[4].removeprefix("--jobs=") + "\n"
        return flood[0]

    listing = JobListing(slurm)
    jobs = {j.job_id: j for j in listing.jobs()}
    assert all(j.excluded_nodes == ["n1"] for jid, j in jobs.items() if jid != 100)
    assert 33 not in jobs and any("job 33: its name" in x for x in listing.unreadable)
    assert listing._last_text is None  # asked again next read
    flood[0] = "".join(f"{i}|n1|victim{i}\n" for i in [*ids, 100])
    jobs = {j.job_id: j for j in listing.jobs()}
    assert jobs[33].excluded_nodes == ["n1"] and listing.unreadable == []


def test_a_job_the_names_query_does_not_answer_for_is_not_listed() -> None:
    """squeue failing the names query ('Invalid job id specified' for one of them)
    read as no name and no exclusions for every job asked about."""
    from coda.slurm.client import SlurmError

    def slurm(argv: Sequence[str]) -> str:
        if list(argv) == list(LISTING):
            return LISTED.splitlines()[5] + "\n"  # job 4
        raise SlurmError("squeue: error: Invalid job id specified")

    listing = JobListing(slurm)
    assert listing.jobs() == [] and "job 4: its name" in listing.unreadable[0]


def test_a_time_limit_too_long_for_a_number_is_an_unreadable_line() -> None:
    """400 nines of days overflowed float() and killed the controller."""
    line = LISTED.splitlines()[1].replace("|5:00|", "|" + "9" * 400 + "-00:00:00|")
    with pytest.raises(ValueError, match="too long"):
        parse_line(line)


def test_a_flood_renewed_every_read_never_keeps_another_users_job_out() -> None:
    """Forty pending jobs of one user whose names forge lines of jobs 100 and 200, their
    lines changed every read (the review's case): the single queries went to the
    lowest ids first, every read, so 100 and 200 were never settled and never listed.
    A running job is listed at once (nothing places it; its cores count), and a new
    pending one as soon as its single query comes round."""
    attackers = list(range(1, 41))
    base = LISTED.splitlines()[1]
    running = LISTED.splitlines()[1].replace("|PENDING|JobHeldUser|", "|RUNNING|None|")
    tick = [0]

    def slurm(argv: Sequence[str]) -> str:
        if list(argv) == list(LISTING):
            lines = [
                base.replace("2|2|", f"{i}|{i}|", 1).replace("|5:00|", f"|{5 + tick[0]}:00|")
                for i in attackers
            ]
            lines += [running.replace("2|2|", "100|100|", 1), base.replace("2|2|", "200|200|", 1)]
            return "".join(x + "\n" for x in lines)
        ids = [int(x) for x in argv[4].removeprefix("--jobs=").split(",")]
        if argv[-1] == "--format=%x|%j":  # one job alone
            return "|x\n100||f\n200||f\n" if ids[0] in attackers else f"n1|job{ids[0]}\n"
        return "".join(
            f"{i}||x\n100||f\n200||f\n" if i in attackers else f"{i}|n1|job{i}\n" for i in ids
        )

    listing = JobListing(slurm)
    seen: list[set[int]] = []
    for _ in range(3):
        seen.append({j.job_id for j in listing.jobs()})
        tick[0] += 1
    assert all(100 in ids for ids in seen)
    assert 200 in seen[1] and 200 in seen[2]
    assert {j.job_id: j for j in listing.jobs()}[200].excluded_nodes == ["n1"]


def test_a_squeue_without_array_unique_is_asked_without_it() -> None:
    """Slurm 24.11's squeue refuses --array-unique (an unknown option): the listing
    asks once more without it, and from then on never with it."""
    from coda.slurm.client import SlurmError
    from coda.slurm.listing import JobListing, listing_argv

    calls: list[list[str]] = []

    def run(argv: list[str]) -> str:
        calls.append(argv)
        if "--array-unique" in argv:
            raise SlurmError(f'{" ".join(argv)}: Try "squeue --help" for more information')
        return ""

    listing = JobListing(run)
    assert listing.jobs() == [] and listing.jobs() == []
    assert calls[0] == listing_argv() and not listing.array_unique
    assert calls[1:] == [[a for a in listing_argv() if a != "--array-unique"]] * 2


def test_another_squeue_failure_is_not_taken_for_a_missing_option() -> None:
    from coda.slurm.client import SlurmError
    from coda.slurm.listing import JobListing

    def run(argv: list[str]) -> str:
        raise SlurmError("squeue: Unable to contact slurm controller")

    listing = JobListing(run)
    with pytest.raises(SlurmError, match="contact"):
        listing.jobs()
    assert listing.array_unique


@pytest.mark.parametrize(
    ("text", "state", "want"),
    [
        ("0", "PENDING", 0),  # 22.05: a number
        ("2", "FAILED", 2),
        ("0:0", "COMPLETED", 0),  # 24.11: code:signal
        ("1:0", "FAILED", 1),
        ("0:0", "RUNNING", None),  # not ended: none, as squeue --json reads it
        ("0:0", "PENDING", None),
        ("N/A", "COMPLETED", None),
        ("x:0", "COMPLETED", None),
    ],
)
def test_exit_codes_of_22_05_and_24_11(text: str, state: str, want: int | None) -> None:
    from coda.slurm.listing import _exit_code

    assert _exit_code(text, state) == want


# ---------------------------------------------------------------- the splice
_GOOD = st.tuples(st.integers(1, 40), st.sampled_from(["held", "placed", "held,wait=x"]))
_PIECES = st.one_of(
    *[_GOOD] * 16,
    st.tuples(st.integers(1, 40), st.just("bad")),
    st.sampled_from([("", ""), ("x", ""), ("nl", "")]),  # an empty line, junk, a comment's newline
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    first=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    edits=st.lists(
        st.lists(st.tuples(st.integers(0, 40), _PIECES, st.booleans()), max_size=6),
        min_size=1,
        max_size=6,
    ),
    sort=st.booleans(),
    trailing=st.booleans(),
)
def test_the_splice_reads_what_every_line_read_gives(
    first: list[int],
    edits: list[list[tuple[int, tuple[object, str], bool]]],
    sort: bool,
    trailing: bool,
) -> None:
    """A listing that reads a changed text only where it differs from the last read
    gives at each read the jobs, changed, gone and unreadable lines a listing reading
    every line gives: jobs coming, changing and going, lines it cannot read, ids
    listed twice, lines out of order, junk, a comment's newline."""
    rows: list[str] = [_line(j, "held") for j in sorted(set(first))]
    by_splice, by_line = JobListing(_answering("")), JobListing(_answering(""))
    by_line.splice = False
    for k, read in enumerate(edits):
        for at, piece, insert in read:
            what, mark = piece
            if isinstance(what, int):
                row = _line(what, mark)
            else:
                row = {"": "", "x": "x|y", "nl": _line(7, "held") + "\nsecond line"}[str(what)]
            at = min(at, len(rows))
            ids = [r.partition("|")[0] for r in rows]
            if isinstance(what, int) and str(what) in ids and mark != "held,wait=x":
                at, insert = ids.index(str(what)), False  # its own row changes
            if insert or at == len(rows):
                rows.insert(at, row)
            elif mark == "bad" or k % 2:
                del rows[at]
            else:
                rows[at] = row
        if sort:
            rows.sort(key=lambda r: int(r.partition("|")[0]) if r[:1].isdigit() else 0)
        text = "\n".join(rows) + ("\n" if trailing and rows else "")
        got = []
        for listing in (by_splice, by_line):
            listing.run = _answering(text)
            jobs = listing.jobs()
            got.append((
                jobs, sorted(j.job_id for j in listing.changed), sorted(listing.gone),
                listing.unreadable, listing.parsed,
            ))  # fmt: skip
        assert got[0] == got[1]
        # Objects kept by both: a job whose line did not change is the last read's.
        assert [j.job_id for j in by_splice.changed] == [j.job_id for j in by_line.changed]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 600),
    edits=st.lists(st.tuples(st.integers(0, 700), st.sampled_from(["mark", "drop", "new"]))),
    trailing=st.booleans(),
)
def test_long_runs_of_lines_in_common_are_taken_whole(
    n: int, edits: list[tuple[int, str]], trailing: bool
) -> None:
    """Listings of hundreds of lines (runs of whole lines compared at once, doubling
    and halving): each line of the new text gets the last read's job where its text
    was read before, the rest are to parse, and the ids not listed again are gone."""
    marks = {jid: "held" for jid in range(1, n + 1)}
    rows = [_line(jid, mark) for jid, mark in marks.items()]
    old_text = "\n".join(rows) + ("\n" if trailing else "")
    before = {r: parse_line(r) for r in rows}
    for at, what in edits:
        if what == "new":
            marks[n + 1 + at] = "held"
        elif what == "drop":
            marks.pop(at, None)
        elif at in marks:  # a line that ends longer, or differs within
            marks[at] = {"held": "held,wait=x", "held,wait=x": "placed", "placed": "held"}[
                marks[at]
            ]
    new_rows = [_line(jid, marks[jid]) for jid in sorted(marks)]
    text = "\n".join(new_rows) + ("\n" if trailing and new_rows else "")
    got = splice(old_text, line_starts(rows), _ids(rows), _line_of(rows), text)
    if not new_rows:
        assert got is None
        return
    assert got is not None
    assert _spliced_lines(got, rows) == new_rows
    assert list(got.starts) == list(line_starts(new_rows))
    assert list(got.ids) == sorted(marks)
    assert [line for _, line in got.differing] == [r for r in new_rows if r not in before]
    assert sorted(got.gone) == [jid for jid in range(1, n + 1) if jid not in marks]


def _ids(rows: list[str]) -> np.ndarray:
    return np.array([int(r.partition("|")[0]) for r in rows], np.int64)


def _line_of(rows: list[str]) -> dict[int, str]:
    return {int(r.partition("|")[0]): r for r in rows}


def _spliced_lines(got: Spliced, old_rows: list[str]) -> list[str]:
    """The new text's lines as the splice describes them: the last read's line of each
    id, but where a line differs."""
    lines = [_line_of(old_rows).get(jid, "") for jid in got.ids.tolist()]
    for i, line in got.differing:
        lines[i] = line
    return lines


def test_a_last_read_whose_starts_are_not_its_lines_is_not_spliced() -> None:
    rows = [_line(jid, "held") for jid in (1, 2, 10)]
    old = "\n".join(rows)
    wrong = line_starts(rows) + np.array([0, 1, 1])  # each line but the first one off
    for new in (old, old + "\n" + _line(11, "held")):
        assert splice(old, wrong, _ids(rows), _line_of(rows), new) is None


def test_ids_that_are_not_the_lines_ids_or_an_id_on_two_lines_are_not_spliced() -> None:
    """The last read's ids must be its lines' where the texts differ (else a kept line
    would be read as another job's), and a new text with an id on two lines is read
    in full."""
    rows = [_line(jid, "held") for jid in range(1, 200)]
    old = "\n".join(rows)
    ids = _ids(rows)
    new = old.replace(_line(150, "held"), _line(150, "placed"))
    assert splice(old, line_starts(rows), ids, _line_of(rows), new) is not None
    wrong = ids.copy()
    wrong[149] = 151  # job 150's line, where the texts differ
    assert splice(old, line_starts(rows), wrong, _line_of(rows), new) is None
    twice = old.replace(_line(150, "held"), _line(150, "placed") + "\n" + _line(150, "held"))
    assert splice(old, line_starts(rows), ids, _line_of(rows), twice) is None
    again = old.replace(_line(150, "held"), _line(149, "placed"))
    assert splice(old, line_starts(rows), ids, _line_of(rows), again) is None


def test_the_splice_looks_only_at_what_differs() -> None:
    """1,000 jobs; then one ends (its line changes), one is forgotten, one arrives: the
    splice gives the new lines, the last read's jobs for every line it kept, two lines
    to parse (the changed and the new) and the forgotten id."""
    rows = [_line(j, "held") for j in range(1, 1001)]
    old_text = "".join(r + "\n" for r in rows)
    before = [parse_line(r) for r in rows]
    by_line = dict(zip(rows, before, strict=True))
    old_starts = line_starts(rows)
    rows[499] = _line(500, "placed")
    del rows[700]  # job 701
    rows.append(_line(1001, "held"))
    text = "".join(r + "\n" for r in rows)
    got = splice(old_text, old_starts, _ids(list(by_line)), _line_of(list(by_line)), text)
    assert got is not None
    assert _spliced_lines(got, list(by_line)) == rows
    assert list(got.starts) == list(line_starts(rows))
    assert [line.partition("|")[0] for _, line in got.differing] == ["500", "1001"]
    assert got.gone == [701]
    listing = JobListing(_answering(old_text))
    listing.jobs()
    listing.run = _answering(text)
    listing.jobs()
    assert sorted(j.job_id for j in listing.changed) == [500, 1001] and listing.gone == [701]


def test_the_jobs_a_controller_cycle_passes_on_are_the_reads_and_only_until_the_next() -> None:
    """``ListedJobs``: the read's jobs, in order, as ``listed()`` gives them (made only
    when looked at); looked at after the listing's next read, an error, never the
    next read's jobs."""
    from coda.slurm.controller import ListedJobs

    rows = [_line(j, "held") for j in range(1, 301)]
    listing = JobListing(_answering("\n".join(rows)))
    listing.read()
    rows[99] = _line(100, "placed")
    listing.run = _answering("\n".join(rows))
    listing.read()
    seen = ListedJobs(listing)
    assert [j.job_id for j in seen] == list(range(1, 301)) and len(seen) == 300
    assert seen[99].mark == {"state": "placed"} and list(seen[:2]) == listing.listed()[:2]
    listing.read()
    with pytest.raises(RuntimeError, match="after its next read"):
        list(seen)


def test_a_job_records_init_takes_each_of_its_fields_in_order_with_their_defaults() -> None:
    """``SlurmJob`` writes its own ``__init__`` (compiled): it must take the dataclass's
    fields, in order, with their defaults (a list's: a new empty one)."""
    import dataclasses
    import inspect

    params = list(inspect.signature(SlurmJob.__init__).parameters.values())[1:]
    fields = dataclasses.fields(SlurmJob)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        if f.default is not dataclasses.MISSING:
            assert p.default == f.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            assert p.default is None, f.name
        else:
            assert p.default is inspect.Parameter.empty, f.name
    a = parse_line(_line(7, "held"))
    b = SlurmJob(**{f.name: getattr(a, f.name) for f in fields})
    assert a == b and repr(a) == repr(b)
    c = SlurmJob(1, "n", 0, "PENDING", "", 1, 1, 0, [], [], "", 0, None)
    d = SlurmJob(2, "n", 0, "PENDING", "", 1, 1, 0, [], [], "", 0, None)
    assert c.partitions == [] and c.partitions is not d.partitions


def test_a_read_that_fails_half_way_leaves_the_next_to_read_every_line() -> None:
    """A read whose names query fails after its refresh forgot a renamed job's line:
    the next read, of a changed text, still gives every job (not a splice over a line
    with no job)."""
    rows = [_line(j, "held") for j in range(1, 6)]
    names = {j: f"n{j}" for j in range(1, 8)}
    state = {"text": "\n".join(rows), "fail": 0}

    def slurm(argv: Sequence[str]) -> str:
        if list(argv) == list(LISTING):
            return state["text"]  # type: ignore[return-value]
        if state["fail"]:
            state["fail"] -= 1  # type: ignore[operator]
            if not state["fail"]:
                raise SlurmError("squeue: timed out")
        asked = [int(x) for x in argv[4].removeprefix("--jobs=").split(",")]
        return "".join(f"{jid}||{names[jid]}\n" for jid in asked)

    now = [0.0]
    listing = JobListing(slurm, clock=lambda: now[0])
    listing.read()
    now[0], names[4], state["fail"] = 61.0, "renamed", 2  # the refresh's second query fails
    with pytest.raises(SlurmError):
        listing.read()
    now[0], state["text"] = 62.0, "\n".join([*rows, _line(6, "held")])
    listing.read()
    assert [(j.job_id, j.name) for j in listing.listed()] == [
        (1, "n1"), (2, "n2"), (3, "n3"), (4, "renamed"), (5, "n5"), (6, "n6")
    ]  # fmt: skip


def test_reads_without_the_splice_keep_what_a_later_splice_needs() -> None:
    listing = JobListing(_answering("\n".join(_line(j, "held") for j in (11, 12, 13, 14))))
    listing.read()
    listing.splice = False
    listing.run = _answering("\n".join(_line(j, "held") for j in (11, 15, 13, 14)))
    listing.read()
    listing.splice = True
    listing.run = _answering("\n".join(_line(j, "held") for j in (11, 15, 13, 14, 16)))
    listing.read()
    assert [j.job_id for j in listing.listed()] == [11, 15, 13, 14, 16]
