"""bench/bench_sim.py: its helpers, its command line, and tiny child-process cases
(speed itself is measured by running the benchmark, never asserted here)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.bench_module import load_bench

bench = load_bench("bench_sim")


@pytest.mark.parametrize(
    "n, text",
    [(1_000_000, "1M"), (250_000, "250k"), (2_500, "2.5k"), (10_000, "10k"), (20, "20"),
     (999_999, "1000k"), (123_456, "123.46k")],
)  # fmt: skip
def test_short_names_cases_as_the_issue_does(n: int, text: str) -> None:
    assert bench.short(n) == text


def test_ladder_has_jobs_over_100_nodes() -> None:
    cases = bench.ladder(list(bench.DEFAULT_SIZES))
    assert [c.name for c in cases] == ["100k/1k", "250k/2.5k", "500k/5k", "1M/10k"]
    assert all(c.nodes * bench.JOBS_PER_NODE == c.jobs for c in cases)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(bench.MIN_LADDER_JOBS, bench.MAX_JOBS), min_size=1, max_size=6))
def test_parse_sizes_sorted_distinct(sizes: list[int]) -> None:
    assert bench.parse_sizes(",".join(map(str, sizes))) == sorted(set(sizes))


@pytest.mark.parametrize(
    "text", ["", "abc", "2000,", "-5", "99", "2000001", "1e5", "2000;5000", "2²00"]
)
def test_parse_sizes_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        bench.parse_sizes(text)


def _row(case: str, policy: str, jobs: int, us: float | None, status: str = "ok") -> dict:
    return {
        "kind": "scaling",
        "case": case,
        "policy": policy,
        "jobs": jobs,
        "nodes": jobs // 100,
        "status": status,
        "us_per_job": us,
        "timeout_s": 900.0,
    }


def test_ratios_are_per_policy_against_the_smallest_case() -> None:
    rows = [
        _row("200k/2k", "coda", 200_000, 300.0),
        _row("100k/1k", "coda", 100_000, 200.0),
        _row("100k/1k", "static-separate", 100_000, 50.0),
        _row("200k/2k", "static-separate", 200_000, 40.0),
        {"kind": "bundled", "case": "bundled", "policy": "coda", "jobs": 7255, "status": "ok"},
    ]
    bench.add_ratios(rows)
    assert [r.get("vs_smallest") for r in rows] == [1.5, 1.0, 1.0, 0.8, None]
    assert {r.get("smallest_case") for r in rows[:4]} == {"100k/1k"}


def test_no_ratio_when_the_smallest_case_did_not_finish() -> None:
    rows = [
        _row("100k/1k", "coda", 100_000, None, status="timeout"),
        _row("200k/2k", "coda", 200_000, None, status="skipped"),
    ]
    bench.add_ratios(rows)
    assert [r["vs_smallest"] for r in rows] == [None, None]
    table = bench.markdown_table(rows).splitlines()
    assert table[0].endswith("| vs 100k |")
    assert "| timeout (900 s) |" in table[2] and "| skipped |" in table[3]


def test_rounds_alternate_the_ladder_order() -> None:
    cases = bench.ladder([200, 400, 800])
    order = [(r, c.jobs) for r, c in bench.round_order(cases, 3)]
    assert order == [(1, 200), (1, 400), (1, 800), (2, 800), (2, 400), (2, 200),
                     (3, 200), (3, 400), (3, 800)]  # fmt: skip
    assert bench.round_order(cases, 1) == [(1, c) for c in cases]


def _run(case: str, jobs: int, rnd: int, us: float, rss: float, status: str = "ok") -> dict:
    wall = us * jobs / 1e6
    return {**_row(case, "coda", jobs, us, status), "round": rnd, "wall_s": wall,
            "cpu_us_per_job": us + 1, "events_per_s": 1e6 / us, "max_rss_mib": rss}  # fmt: skip


def test_merge_rounds_gives_medians_and_each_rounds_figure() -> None:
    runs = [
        _run("100k/1k", 100_000, 1, 200.0, 150.0),
        _run("1M/10k", 1_000_000, 1, 300.0, 900.0),
        _run("1M/10k", 1_000_000, 2, 260.0, 950.0),
        _run("100k/1k", 100_000, 2, 240.0, 140.0),
        _run("100k/1k", 100_000, 3, 210.0, 160.0),
        _run("1M/10k", 1_000_000, 3, 280.0, 920.0),
    ]
    small, large = bench.merge_rounds(runs)
    assert (small["case"], large["case"]) == ("100k/1k", "1M/10k")
    assert small["us_per_job"] == 210.0 and large["us_per_job"] == 280.0
    assert small["wall_s"] == pytest.approx(21.0) and large["cpu_us_per_job"] == 281.0
    assert small["max_rss_mib"] == 160.0 and large["max_rss_mib"] == 950.0
    assert small["us_per_job_runs"] == [200.0, 240.0, 210.0]  # by round
    assert small["rounds"] == 3 and "round" not in small
    bench.add_ratios([small, large])
    assert large["vs_smallest"] == pytest.approx(280.0 / 210.0)
    table = bench.markdown_table([small, large]).splitlines()
    assert table[0].endswith("| µs per job by round |")
    assert table[2].endswith("| 1.00 | 200.0, 240.0, 210.0 |")


def test_merge_rounds_keeps_a_failed_round_and_single_rows() -> None:
    runs = [
        _run("100k/1k", 100_000, 1, 200.0, 150.0),
        {**_row("100k/1k", "coda", 100_000, None, "timeout"), "round": 2},
        _run("200k/2k", 200_000, 1, 250.0, 300.0),
    ]
    small, other = bench.merge_rounds(runs)
    assert small["status"] == "timeout" and small["rounds"] == 2
    assert other == runs[2]  # one round: unchanged


BAD_ARGS = [
    (["--sizes", "abc"], "--sizes"),
    (["--sizes", "50"], "--sizes"),
    (["--policies", "nope"], "--policies"),
    (["--case-timeout", "0"], "--case-timeout"),
    (["--case-timeout", "nan"], "--case-timeout"),
    (["--load", "-1"], "--load"),
    (["--jobs", "1"], "--jobs"),
    (["--nodes", "100001"], "--nodes"),
    (["--repeats", "0"], "--repeats"),
    (["--rounds", "0"], "--rounds"),
    (["--rounds", "2"], "--rounds"),  # the bundled trace: --repeats, not rounds
    (["--seed", "-1"], "--seed"),
    (["--sizes", "200", "--json", "/nonexistent-dir/x.json"], "--json"),
]


@pytest.mark.parametrize("argv, option", BAD_ARGS)
def test_bad_options_one_line(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and option in err


def test_json_that_is_a_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--sizes", "200", "--json", str(tmp_path)])
    assert "is a directory" in capsys.readouterr().err


def test_ladder_runs_in_children_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows.json"
    argv = ["--sizes", "200,400", "--policies", "static-separate", "--json", str(out)]
    assert bench.main(argv) == 0
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    assert [(r["case"], r["status"]) for r in rows] == [("200/2", "ok"), ("400/4", "ok")]
    for r in rows:
        assert r["events"] > 0 and r["max_rss_mib"] > 0 and r["wall_s"] > 0
        assert r["us_per_job"] == pytest.approx(r["wall_s"] / r["jobs"] * 1e6)
        assert r["offered_gpu_load"] == pytest.approx(1.0, rel=1e-3)
    assert rows[0]["vs_smallest"] == 1.0
    assert rows[1]["vs_smallest"] == pytest.approx(rows[1]["us_per_job"] / rows[0]["us_per_job"])
    assert {r["build"] for r in rows} == {"pure"}  # the tests run the editable install
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("pure build (") and lines[1] == ""
    assert lines[2].startswith("| case | policy | jobs | nodes | wall s |")
    assert "[2/2] 400/4 static-separate" in captured.err


def test_rounds_run_every_case_again_and_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows.json"
    argv = ["--sizes", "200", "--rounds", "2", "--policies", "static-separate", "--json", str(out)]
    assert bench.main(argv) == 0
    (row,) = json.loads(out.read_text())
    assert row["status"] == "ok" and row["rounds"] == 2 and len(row["us_per_job_runs"]) == 2
    assert row["us_per_job"] == pytest.approx(sum(row["us_per_job_runs"]) / 2)  # median of 2
    assert "[2/2] 200/2 static-separate (round 2)" in capsys.readouterr().err


def test_a_workload_that_cannot_be_built_is_an_error_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows.json"
    assert bench.main(["--sizes", "200", "--policies", "coda", "--load", "999",
                       "--json", str(out)]) == 1  # fmt: skip
    (row,) = json.loads(out.read_text())
    assert row["status"] == "error" and "cannot be reached" in row["error"]
    assert "Traceback" not in capsys.readouterr().err


def test_timeout_kills_the_child_by_pid(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[subprocess.Popen] = []
    real = subprocess.Popen

    def popen(*a: Any, **k: Any) -> subprocess.Popen:
        started.append(real(*a, **k))
        return started[-1]

    monkeypatch.setattr(bench.subprocess, "Popen", popen)
    monkeypatch.setattr(bench, "HEARTBEAT_S", 0.1)
    row = bench.run_case(bench.Case("scaling", 100_000, 1_000), "coda", 1.0, 0, 0.5)
    assert row["status"] == "timeout" and row["timeout_s"] == 0.5
    (proc,) = started
    assert proc.returncode == -signal.SIGKILL
    assert "running," in capsys.readouterr().err
