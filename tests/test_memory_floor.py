"""bench/memory_floor.py: fixed work per operation over live sets of the ladder's sizes."""

from __future__ import annotations

import pytest

from tests.bench_module import load_bench

mf = load_bench("memory_floor")


def test_live_jobs_are_distinct_queued_looking_jobs() -> None:
    jobs = mf.live_jobs(500)
    assert len({id(j) for j in jobs}) == 500
    assert [j.idx for j in jobs] == list(range(500))
    assert all(j.start < 0 for j in jobs)  # queued-looking: none has started


def test_each_rung_gets_its_median_and_its_ratio_to_the_first() -> None:
    rows = mf.measure([10, 40], per_node=3, touches=2, ops=2000, rounds=3, seed=1)
    assert [(n, live) for n, live, _, _ in rows] == [(10, 30), (40, 120)]
    assert all(ns > 0 for _, _, ns, _ in rows)
    assert rows[0][3] == 1.0
    assert rows[1][3] == pytest.approx(rows[1][2] / rows[0][2])


def test_rounds_run_largest_first_after_a_warm_up_and_report_medians(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, int, int]] = []
    # ns per operation by (live jobs, seed): medians 30 (rung 10) and 90 (rung 20).
    answers = {(30, 1): 10.0, (30, 2): 30.0, (30, 3): 50.0, (60, 1): 90.0, (60, 2): 10.0}
    answers[(60, 3)] = 95.0

    def fake(jobs: list[object], touches: int, ops: int, seed: int) -> float:
        calls.append((len(jobs), ops * touches, seed))
        return answers.get((len(jobs), seed), 1e6) if len(calls) > 1 else -1.0

    monkeypatch.setattr(mf, "ns_per_op", fake)
    rows = mf.measure([10, 20], per_node=3, touches=2, ops=50_000, rounds=3, seed=1)
    # The warm-up: the first rung, fewer operations, its result dropped.
    assert calls[0] == (30, 2 * mf.WARMUP_OPS, 1)
    # Then each round: largest rung first, every operation, the round's seed.
    assert calls[1:] == [
        (60, 100_000, s) if i % 2 == 0 else (30, 100_000, s) for s in (1, 2, 3) for i in (0, 1)
    ]
    assert rows == [(10, 30, 30.0, 1.0), (20, 60, 90.0, 3.0)]


def test_the_picks_are_the_work_asked_for() -> None:
    jobs = mf.live_jobs(100)
    # Nine touches per operation take several times one: the clock covers every pick.
    touches_one = min(mf.ns_per_op(jobs, 1, 20_000, 1) for _ in range(3))
    assert touches_one > 0
    touches_nine = min(mf.ns_per_op(jobs, 9, 20_000, 1) for _ in range(3))
    assert touches_nine > 3 * touches_one  # each touch is timed, not one per operation


def test_the_table_names_every_rung(capsys: pytest.CaptureFixture[str]) -> None:
    assert mf.main(["--nodes", "10,20", "--ops", "500", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 10 | 70 |" in out and "| 20 | 140 |" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--nodes", "1000,x"],
        ["--nodes", "5000,1000"],
        ["--nodes", "10,10"],
        ["--rounds", "0"],
        ["--live-per-node", "-3"],
        ["--nodes", "10000000", "--live-per-node", "100"],
        ["stray"],
        ["--measure-live", "1000"],
        ["--measure-live", "1,5"],
        ["--measure-live", "10,0"],
        ["--measure-live", "10,5", "--nodes", "10"],
        ["--measure-live", "999999999999,10"],
        ["--measure-live", "1000,1000000"],
        ["--nodes", "7000000", "--live-per-node", "7"],
        ["--ops", "999999999999"],
        ["--ops", "100000000", "--touches", "100"],
        ["--rounds", "999999999"],
        ["--nodes", "1_000"],
        ["--nodes", "\u0661\u0660"],
        ["--meas", "300,3"],
        ["--seed", "-1"],
        ["--seed", "x"],
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        mf.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("memory_floor: ") and err.count("\n") == 1


def test_seed_zero_is_a_seed(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--nodes", "10,20", "--live-per-node", "2", "--ops", "50", "--rounds", "1"]
    assert mf.main([*argv, "--seed", "0"]) == 0
    cells = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines()]
    rungs = [[c.strip() for c in row[:2]] for row in cells if row and row[0].strip().isdigit()]
    assert rungs == [["10", "20"], ["20", "40"]]  # nodes, live jobs (2 per node)


def test_live_jobs_per_node_are_measured_on_a_ladder_case(
    capsys: pytest.CaptureFixture[str],
) -> None:
    queued, running = mf.live_per_node(300, 3)
    assert queued > 0 and running > 0
    # A node of the bundled cluster holds at most a few dozen jobs at once.
    assert running < 64
    assert mf.main(["--measure-live", "300,3"]) == 0
    out = capsys.readouterr().out
    assert f"queued {queued:.2f}, running {running:.2f}" in out


def test_a_case_that_cannot_reach_its_load_gets_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert mf.main(["--measure-live", "2,1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memory_floor: --measure-live 2,1: ") and err.count("\n") == 1
