"""bench/bench_slurm_controller.py: its fake Slurm, its measuring and its command line,
on tiny clusters (speed itself is measured by running the benchmark, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.slurm.client import SlurmClient, SlurmError
from coda.slurm.listing import JobListing
from tests.bench_module import load_bench

bench = load_bench("bench_slurm_controller")
BENCH = bench.__file__


def _consistent(s: bench.FakeSlurm) -> None:
    """Each node's allocation is the sum of what runs on it, within its capacity."""
    cpus = dict.fromkeys(s.nodes, 0)
    gpus = dict.fromkeys(s.nodes, 0)
    for j in s.jobs.values():
        if j["job_state"] == "RUNNING":
            for name in j["nodes"].split(","):
                cpus[name] += j["cpus"]
                gpus[name] += s.gpus_of(j)
    for name, node in s.nodes.items():
        assert (node.cpu_alloc, node.gpu_used) == (cpus[name], gpus[name]), name
        assert 0 <= node.cpu_alloc <= node.cores and 0 <= node.gpu_used <= node.gpus


def test_backed_up_cluster_reads_back_through_the_client() -> None:
    s = bench.FakeSlurm.backed_up(6, 20, seed=3)
    _consistent(s)
    client = SlurmClient(s)
    nodes = client.nodes()
    assert [n.gpus for n in nodes] == [8, 8, 8, 0, 0, 0]
    assert all(n.cpus == 64 and n.cpus_alloc >= 48 and n.usable for n in nodes)
    jobs = JobListing(s).jobs()
    # The controller's listing reads what --json would of the same records.
    as_json = SlurmClient(lambda argv: json.dumps({"jobs": list(s.jobs.values())}))
    assert jobs == as_json.jobs()
    held = [j for j in jobs if j.held_for_coda]
    assert len(held) == 20
    assert all(j.time_limit_s is not None and j.time_limit_s > 0 for j in jobs)
    running = [j for j in jobs if j.state == "RUNNING"]
    assert running and all(j.requeueable == (not j.is_dnn) for j in running)
    assert all(j.start_time is not None and j.start_time <= s.now for j in running)


def test_released_placements_start_and_changes_end_and_arrive() -> None:
    with tempfile.TemporaryDirectory() as d:
        b = bench.Bench(4, 10, 1, d)
        first = b.cycle(None)
        assert first.placed > 0 and first.decide > 0 and first.parse > 0
        placed = [j for j in b.slurm.jobs.values() if j["admin_comment"].startswith("coda:placed")
                  and j["job_state"] == "PENDING"]  # fmt: skip
        assert len(placed) == first.placed and all(j["priority"] > 0 for j in placed)
        held_before = sum(j["priority"] == 0 for j in b.slurm.jobs.values())
        running_before = len(b.slurm.running())
        b.slurm.tick(2)
        assert len(b.slurm.ended) == 2
        started = [j for j in placed if j["job_id"] not in b.slurm.ended]
        assert started and all(
            j["job_state"] == "RUNNING" and j["nodes"] == j["required_nodes"] for j in started
        )
        _consistent(b.slurm)
        assert len(b.slurm.running()) == running_before + len(placed) - 2
        assert sum(j["priority"] == 0 for j in b.slurm.jobs.values()) == held_before + 2
        ended = list(b.slurm.ended)
        b.slurm.tick(0)
        assert not any(jid in b.slurm.jobs for jid in ended)  # forgotten a tick later


def test_slurms_clock_moves_on_by_the_period_a_tick() -> None:
    slow = bench.FakeSlurm.backed_up(4, 10, 1, period_s=10.0)
    fast = bench.FakeSlurm.backed_up(4, 10, 1)
    t0 = fast.now
    for _ in range(3):
        slow.tick(0)
        fast.tick(0)
    assert fast.now - t0 == 3 * bench.PERIOD_S == 3.0 and slow.now - t0 == 30.0


def test_a_released_job_waits_when_its_node_is_full() -> None:
    s = bench.FakeSlurm.backed_up(2, 2, seed=4)
    node = s.nodes["node00000"]
    held = [j for j in s.jobs.values() if j["priority"] == 0]
    room = node.cores - node.cpu_alloc
    assert room > 0  # this seed leaves some
    fits, too_big = held
    s.change(fits, cpus=room, required_nodes=node.name, priority=1000, tres_per_node="")
    s.change(too_big, cpus=1, required_nodes=node.name, priority=1000, tres_per_node="")
    s.tick(0)
    assert fits["job_state"] == "RUNNING" and node.cpu_alloc == node.cores
    assert (too_big["job_state"], too_big["state_reason"]) == ("PENDING", "Resources")
    assert s.blocked() == [too_big["job_id"]]
    _consistent(s)


def test_requeuehold_only_for_requeueable_running_jobs() -> None:
    s = bench.FakeSlurm.backed_up(4, 0, seed=2)
    dnn = next(j for j in s.jobs.values() if j["job_state"] == "RUNNING" and s.gpus_of(j))
    cpu = next(j for j in s.jobs.values() if j["job_state"] == "RUNNING" and not s.gpus_of(j))
    with pytest.raises(SlurmError):
        s(["scontrol", "requeuehold", str(dnn["job_id"])])
    s(["scontrol", "requeuehold", str(cpu["job_id"])])
    assert (cpu["job_state"], cpu["priority"], cpu["restart_cnt"]) == ("PENDING", 0, 1)
    _consistent(s)
    with pytest.raises(ValueError, match="not modelled"):
        s(["scontrol", "suspend", str(cpu["job_id"])])


def test_squeue_text_follows_every_change() -> None:
    s = bench.FakeSlurm.backed_up(2, 3, seed=0)
    listing = JobListing(s)
    held = next(j for j in listing.jobs() if j.held_for_coda)
    s(["scontrol", "update", f"JobId={held.job_id}", "ReqNodeList=node00000", "NumCPUs=3",
       "AdminComment=coda:placing,req=4,grant=3"])  # fmt: skip
    s(["scontrol", "release", str(held.job_id)])
    got = next(j for j in listing.jobs() if j.job_id == held.job_id)
    assert (got.cpus, got.required_nodes, got.priority) == (3, ["node00000"], 1000)
    assert got.mark is not None and got.mark["state"] == "placing"


def test_run_queue_measures_every_change_count() -> None:
    first, steady, restart = bench.run_queue(4, 12, [0, 3], cycles=2, seed=5)
    assert first.whole >= first.decide > 0
    assert restart.whole >= restart.decide > 0 and restart.parse > 0
    assert sorted(steady) == [0, 3] and all(len(cs) == 2 for cs in steady.values())
    for cs in steady.values():
        assert all(c.whole >= c.decide and c.parse > 0 and c.slurm > 0 for c in cs)
    rows = [bench.summary(4, 12, k, first, cs, restart) for k, cs in steady.items()]
    text = bench.table(rows).splitlines()
    assert len(text) == 4 and text[0].startswith("| nodes | queued | changes/cycle |")
    assert text[2].startswith("| 4 | 12 | 0 |") and text[3].startswith("| 4 | 12 | 3 |")


def test_warm_up_cycles_run_before_the_measured_ones_and_are_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks: list[int] = []
    tick = bench.FakeSlurm.tick

    def counted(self: Any, changes: int) -> None:
        ticks.append(changes)
        tick(self, changes)

    monkeypatch.setattr(bench.FakeSlurm, "tick", counted)
    logged: list[str] = []
    _, steady, _ = bench.run_queue(4, 12, [0, 2], cycles=2, seed=5, log=logged.append, warmup=3)
    assert all(len(cs) == 2 for cs in steady.values())
    # settling (0), per K its 3 warm-up and 2 measured cycles, then around the restart
    assert ticks == [0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 0, 0]
    assert any("changes=2, warm-up cycles 1-3" in line for line in logged)
    row = bench.summary(4, 12, 2, steady[2][0], steady[2], steady[2][0], warmup=3)
    assert "| 4 | 12 | 2 | 3 |" in bench.table([row])


def test_main_prints_one_row_per_case(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["--nodes", "3", "--queued", "6,4", "--changes", "1,0", "--cycles", "1"])
    out, err = capsys.readouterr()
    assert rc == 0
    rows = [line for line in out.splitlines() if line.startswith("| 3 |")]
    assert [r.split(" | ")[1:3] for r in rows] == [["4", "0"], ["4", "1"], ["6", "0"], ["6", "1"]]
    assert "queued=4" in err and "queued=6" in err


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, bench.MAX_QUEUED), min_size=1, max_size=5))
def test_int_list_sorted_distinct(values: list[int]) -> None:
    parse = bench._int_list(0, bench.MAX_QUEUED)
    assert parse(",".join(map(str, values))) == sorted(set(values))


@pytest.mark.parametrize(
    "args",
    [["--nodes", "1"], ["--nodes", "x"], ["--queued", ""], ["--queued", "1,,2"],
     ["--queued", "-1"], ["--changes", "a"], ["--cycles", "0"], ["--seed", "1.5"],
     ["--changes", "10001"], ["--bogus"], ["--period", "0"], ["--period", "nan"],
     ["--period", "x"]],
)  # fmt: skip
def test_bad_flags_one_line_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bench.build_parser().parse_args(args)
    out, err = capsys.readouterr()
    assert e.value.code == 2
    assert out == "" and len(err.strip().splitlines()) == 1 and "error:" in err
    assert args[0] in err


def test_runs_that_would_add_too_many_jobs_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bench.main(["--nodes", "2", "--queued", "1", "--changes", "10000", "--cycles", "21"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{bench.build_parser().prog}: error: --changes x (--cycles + --warmup): 210000 new "
        f"jobs over a run, at most {bench.MAX_ARRIVALS}"
    ]
    with pytest.raises(SystemExit) as e:  # the warm-up's arrivals count too
        bench.main(["--nodes", "2", "--queued", "1", "--changes", "10000", "--cycles", "1",
                    "--warmup", "20"])  # fmt: skip
    assert e.value.code == 2 and "210000 new jobs" in capsys.readouterr().err


def test_bad_flag_from_the_shell() -> None:
    p = subprocess.run(
        [sys.executable, str(BENCH), "--queued", "10,x"], capture_output=True, text=True
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        "bench_slurm_controller.py: error: argument --queued: expected an integer, got 'x'"
    ]
