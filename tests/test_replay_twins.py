"""bench/replay_twins.py: the twins of a recorded replay, run again from its output."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coda.replay import outcome as O
from coda.replay.plan import ClusterShape, compress, load_table, plan, prepare_replay
from coda.replay.run import ReplayConfig, run_sim, sim_timing
from coda.study.config import DEFAULT_POLICY, RunConfig
from coda.study.run import Prepared, prepare
from tests.bench_module import load_bench

rt = load_bench("replay_twins")

SEED = 0
WINDOW_S = 5.0  # not ReplayConfig's default either
PERIOD_S = 3.0  # not ReplayConfig's default: the script must read it
LATENCY = {"plain": [0.4, 0.6, 0.5], "coda": [1.2, 0.8, 1.0]}
REAL_UTIL = {"plain": 0.5, "coda": 0.6}
# Two GPU nodes of 2 GPUs and 8 cores: DNN and CPU jobs contend for the cores, so the
# reclaim, the books, the control period and the settle windows change the twins.
SHAPE = ClusterShape(2, 2, 2, 8)
# Generated jobs in the replay (the paper preset): enough that each twin setting changes
# some row (on 60 of the fitted preset, reclaim alone changed none).
N_JOBS = 80


def _real_run(mode: str, jct: dict[int, float]) -> dict[str, Any]:
    return {
        "gpu_util_effective": REAL_UTIL[mode],
        "cpu_queue_delay_mean_s": 12.5,
        "jobs_finished": len(jct),
        "jobs_lost": 0,
        "jobs_started_twice": 0,
        "jct_s": {str(k): v for k, v in jct.items()},
        "start_latency_s": LATENCY[mode],
    }


def _write_replay(out: Path, dnn_only: bool = False) -> Path:
    """A replay's output as `coda replay` leaves it: its trace and replay.json (the real
    runs' figures are made up; the script reads them, it never reruns them)."""
    table = compress(load_table(None, None, SEED, N_JOBS), N_JOBS, 300.0, ["coda-u1", "coda-u2"])
    if dnn_only:
        table = table.take(np.flatnonzero(table.gpus > 0))
    prepared = prepare_replay(table, SHAPE, out, SEED, 0.9)
    jobs = plan(prepared)
    jct = {j.idx: 100.0 + 10 * j.idx for j in jobs[:10]}
    setting = {
        "jobs": len(jobs), "speed": 300.0, "load": 0.9, "seed": SEED, "cluster": SHAPE.spec,
        "controller_period_s": PERIOD_S, "agent_window_s": WINDOW_S,
    }  # fmt: skip
    doc = {"setting": setting, "jobs": [j.record() for j in jobs],
           "plain": _real_run("plain", jct), "coda": _real_run("coda", jct)}  # fmt: skip
    (out / "replay.json").write_text(json.dumps(doc))
    return out


@pytest.fixture(scope="module")
def replay_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_replay(tmp_path_factory.mktemp("replay"))


def _rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| plain ") or line.startswith("| coda ")
    ]


def _prepared(replay_dir: Path) -> Prepared:
    """The replay's workload as `coda replay` prepared it for its twins."""
    config = RunConfig(
        trace=str(replay_dir / "replay-trace.csv"), format="csv", cluster=SHAPE.spec,
        load=0.9, seed=SEED, warmup=0.0,
        policy=dataclasses.replace(DEFAULT_POLICY, estimates="time-limits"),
    )  # fmt: skip
    return prepare(config)


def _twin_util(replay_dir: Path, mode: str, seeds: list[int]) -> float:
    """The twin's mean effective GPU utilisation as `coda replay` computes it
    (coda.replay.run: the same prepared jobs, its timing, each noise seed)."""
    prepared = _prepared(replay_dir)
    jobs = plan(prepared)
    timing = sim_timing(ReplayConfig(window_s=WINDOW_S), mode, LATENCY[mode])
    utils = []
    for seed in seeds:
        r = run_sim(prepared, mode, timing, seed)
        utils.append(
            O.sim_metrics(jobs, r.jobs, r.summary, timing.start_delay_s).gpu_util_effective
        )
    return statistics.fmean(utils)


def test_the_replay_rows_are_the_twins_coda_replay_ran(
    replay_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rt.main([str(replay_dir), "--replay-only", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert [(r[0], r[-1]) for r in rows] == [("plain", "replay"), ("coda", "replay")]
    for row in rows:
        mode = row[0]
        seeds = [SEED, SEED + 1] if mode == "coda" else [SEED]  # plain Slurm's twin: no noise
        assert float(row[9]) == pytest.approx(_twin_util(replay_dir, mode, seeds), abs=5e-4)
        assert float(row[10]) == REAL_UTIL[mode]  # read from replay.json
        assert float(row[2]) == pytest.approx(statistics.median(LATENCY[mode]), abs=5e-3)
    coda, plain = float(rows[1][9]), float(rows[0][9])
    m = re.search(r"simulated ([+-][0-9.]+)%, real ([+-][0-9.]+)%", out)
    assert m is not None
    assert float(m.group(2)) == pytest.approx(100 * (REAL_UTIL["coda"] / REAL_UTIL["plain"] - 1))
    # The rows show each utilisation to 3 decimals (+-0.0005), the gain to 0.1%: the gain
    # from the rows is the printed one within what that rounding moves it.
    rounding = 100 * 0.0005 * (1 / plain + coda / plain**2) + 0.05
    assert float(m.group(1)) == pytest.approx(100 * (coda / plain - 1), abs=rounding)


@pytest.mark.slow
def test_every_setting_gets_a_row_and_one_per_run_is_the_replays(
    replay_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rt.main([str(replay_dir), "--seeds", "1"]) == 0
    rows = _rows(capsys.readouterr().out)
    plain = [r for r in rows if r[0] == "plain"]
    coda = [r for r in rows if r[0] == "coda"]
    # plain: 2 policies x 2 timings; coda: 3 timings x 2 periods x 3 books x 2 starts x 2
    # settle windows.
    assert (len(plain), len(coda)) == (4, 72)
    assert [r[-1] for r in plain].count("replay") == 1
    assert [r[-1] for r in coda].count("replay") == 1
    assert {r[4] for r in plain} == {"10"}  # the simulator's own period: no agents
    assert {r[4] for r in coda} == {"10", f"{WINDOW_S:g}"}  # and the replay's agent window
    # The controller's cycle simulated at the replay's own period.
    assert {r[3] for r in coda} == {"0", f"{PERIOD_S:g}"}
    # Each setting reaches the simulation: some rows differing in it alone differ in
    # effective GPU utilisation or CPU queue delay. (Where the allocator starts does
    # not show on N_JOBS jobs: few shapes recur, so little is learned. Nor does how CPU
    # jobs are taken back: 300x compressed, every CPU job is minutes old, and each CPU
    # job's harm budget lets no reclaim take so young a job.)
    settings = {"start delay": (2,), "cycle": (3,), "control period": (4,),
                "grants": (6,), "settle windows": (8,)}  # fmt: skip
    for name, cols in settings.items():
        outcomes: dict[tuple[str, ...], set[tuple[str, str]]] = {}
        for r in coda:
            rest = tuple(r[i] for i in range(2, 9) if i not in cols)
            outcomes.setdefault(rest, set()).add((r[9], r[11]))
        assert any(len(o) > 1 for o in outcomes.values()), name


def _broken(replay_dir: Path, tmp_path: Path, edit: Any) -> Path:
    out = tmp_path / "broken"
    out.mkdir()
    (out / "replay-trace.csv").write_bytes((replay_dir / "replay-trace.csv").read_bytes())
    doc = json.loads((replay_dir / "replay.json").read_text())
    edit(doc)
    (out / "replay.json").write_text(json.dumps(doc))
    return out


def _refusal(out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The script's one line on a replay directory it refuses (exit status 2)."""
    with pytest.raises(SystemExit) as e:
        rt.main([str(out), "--replay-only", "--seeds", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("replay_twins: ") and err.count("\n") == 1, err
    return err


def _set(path: tuple[str, ...], value: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    "edit",
    [
        _set(("setting", "seed"), "3; rm -rf /"),
        _set(("setting", "seed"), -1),
        _set(("setting", "agent_window_s"), 0),
        _set(("setting", "agent_window_s"), "2"),
        _set(("setting", "controller_period_s"), float("nan")),
        _set(("setting", "cluster"), 7),
        _set(("setting", "cluster"), "../../etc/passwd"),  # a spec, never a node-list file
        _set(("setting", "agent_window_s"), 1e308),
        _set(("coda", "start_latency_s"), [1e308]),
        _set(("plain", "gpu_util_effective"), "high"),
        _set(("coda", "jobs_finished"), 2.5),
        _set(("coda", "jct_s"), {"x": 1.0}),
        _set(("coda", "jct_s"), [1, 2]),
        _set(("coda", "start_latency_s"), ["soon"]),
        _set(("coda",), "ran"),
        _set(("setting",), None),
        _set(("plain", "gpu_util_effective"), 10**400),  # no float holds it
        _set(("coda", "jct_s"), {"1\n| fake": 1.0}),  # still one line
        _set(("setting", "seed"), 2**32),  # past the simulator's seeds
        _set(("setting", "jobs"), 31),  # another replay's trace, or a trimmed one
        _set(("setting", "jobs"), "30"),
        _set(("coda", "jct_s"), {"9" * 5000: 1.0}),  # past int()'s digits, too
        _set(("plain", "gpu_util_effective"), -0.5),
        _set(("plain", "gpu_util_effective"), 1e308),  # not a share of the GPUs' time
        _set(("coda", "start_latency_s"), 0),  # not "none probed"
        _set(("coda", "start_latency_s"), {}),
        _set(("jobs",), "all of them"),
        lambda doc: doc["jobs"].pop(),
        lambda doc: doc["jobs"][3].update(user="root"),  # another trace than the replay's
        _set(("coda", "jct_s"), {"1": 100.0, "01": 90.0}),  # two keys for job 1
        _set(("coda", "jct_s"), {"+1": 100.0}),
        _set(("coda", "jct_s"), {str(N_JOBS): 100.0}),  # the trace's jobs are 0 .. N_JOBS - 1
        lambda doc: [doc.pop("plain"), doc.pop("coda")],
    ],
)
def test_a_broken_replay_output_gets_one_line_and_exit_2(
    replay_dir: Path, tmp_path: Path, edit: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _refusal(_broken(replay_dir, tmp_path, edit), capsys)


def test_a_missing_or_unreadable_replay_gets_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for out in (tmp_path / "nothing-here", tmp_path):
        with pytest.raises(SystemExit) as e:
            rt.main([str(out)])
        assert e.value.code == 2
        assert capsys.readouterr().err.startswith("replay_twins: ")
    for text in ("{not json", "[" * 100_000 + "]" * 100_000):
        (tmp_path / "replay.json").write_text(text)
        with pytest.raises(SystemExit) as e:
            rt.main([str(tmp_path)])
        assert e.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "replay.json").unlink()
    os.mkfifo(tmp_path / "replay.json")  # would block a plain read for ever
    with pytest.raises(SystemExit) as e:
        rt.main([str(tmp_path)])
    assert e.value.code == 2
    assert "not a regular file" in capsys.readouterr().err


def test_a_plain_run_with_no_gpu_use_gets_no_gain_line(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _broken(replay_dir, tmp_path, _set(("plain", "gpu_util_effective"), 0))
    assert rt.main([str(out), "--replay-only", "--seeds", "1"]) == 0
    assert "real +" not in capsys.readouterr().out  # no division by the zero


def test_a_trace_without_users_is_not_a_replays(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _broken(replay_dir, tmp_path, lambda doc: None)
    lines = (out / "replay-trace.csv").read_text().splitlines()
    cols = lines[0].split(",")
    keep = [i for i, c in enumerate(cols) if c != "user"]
    assert len(keep) < len(cols)
    rows = [",".join(line.split(",")[i] for i in keep) for line in lines]
    (out / "replay-trace.csv").write_text("\n".join(rows) + "\n")
    assert "not a replay's trace" in _refusal(out, capsys)


def test_no_cpu_queue_delay_is_not_a_zero(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run where no CPU job started has no CPU queue delay (replay.json: null)."""
    out = _broken(replay_dir, tmp_path, _set(("coda", "cpu_queue_delay_mean_s"), None))
    assert rt.main([str(out), "--replay-only", "--seeds", "1"]) == 0
    rows = {r[0]: r for r in _rows(capsys.readouterr().out)}
    assert rows["coda"][12] == "n/a"  # the real column
    assert float(rows["plain"][12]) == 12.5
    assert float(rows["coda"][11]) >= 0.0  # the twin's CPU jobs did start


def test_a_replay_of_dnn_jobs_alone_has_no_simulated_cpu_queue_delay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _write_replay(tmp_path, dnn_only=True)
    assert rt.main([str(out), "--replay-only", "--seeds", "2"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert [r[11] for r in rows] == ["n/a", "n/a"]  # not 0.0
    assert all(float(r[9]) > 0 for r in rows)


def test_no_probed_latency_gives_each_timing_once(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay run with --probes 0 records no latency: the start delay is 0 s, the same
    timing as none, so one row each, not two."""

    def edit(doc: dict[str, Any]) -> None:
        doc["plain"]["start_latency_s"] = []
        doc["coda"]["start_latency_s"] = []

    out = _broken(replay_dir, tmp_path, edit)
    assert rt.main([str(out), "--seeds", "1"]) == 0
    rows = _rows(capsys.readouterr().out)
    plain = [r for r in rows if r[0] == "plain"]
    coda = [r for r in rows if r[0] == "coda"]
    # plain: 2 policies x 1 timing; coda: 2 timings (none, the cycle) x 24 the rest.
    assert (len(plain), len(coda)) == (2, 48)
    assert [r[-1] for r in rows].count("replay") == 2
    assert len({tuple(r[1:9]) for r in coda}) == 48


@pytest.mark.parametrize(
    ("column", "was", "refusal"),
    [("user", "coda-u", "has no user"), ("time_limit_s", "", "has no time limit")],
)
def test_a_trace_row_missing_a_replay_field_is_not_a_replays(
    replay_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    column: str,
    was: str,
    refusal: str,
) -> None:
    out = _broken(replay_dir, tmp_path, lambda doc: None)
    lines = (out / "replay-trace.csv").read_text().splitlines()
    col = lines[0].split(",").index(column)
    cells = lines[3].split(",")
    assert cells[col] and cells[col].startswith(was)
    cells[col] = ""
    lines[3] = ",".join(cells)
    (out / "replay-trace.csv").write_text("\n".join(lines) + "\n")
    assert refusal in _refusal(out, capsys)


def test_no_real_gain_gets_the_difference_not_a_share_of_it(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _broken(replay_dir, tmp_path, _set(("coda", "gpu_util_effective"), REAL_UTIL["plain"]))
    assert rt.main([str(out), "--replay-only", "--seeds", "1"]) == 0
    text = capsys.readouterr().out
    m = re.search(
        r"simulated ([+-][0-9.]+)%, real \+0\.0%; the simulated gain is ([+-][0-9.]+) points off",
        text,
    )
    assert m is not None, text
    assert m.group(1) == m.group(2) and "inf" not in text


def _replay_row(out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, list[str]], str]:
    assert rt.main([str(out), "--replay-only", "--seeds", "1"]) == 0
    text = capsys.readouterr().out
    return {r[0]: r for r in _rows(text)}, text


def test_jct_errors_exactly_0_and_none_at_all(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real run whose JCTs are its twin's has error 0.000 (not nan); a real run with
    no job finished has none (n/a)."""
    prepared = _prepared(replay_dir)
    timing = sim_timing(ReplayConfig(window_s=WINDOW_S), "plain", LATENCY["plain"])
    r = run_sim(prepared, "plain", timing, SEED)
    twin = O.sim_metrics(plan(prepared), r.jobs, r.summary, timing.start_delay_s)
    assert twin.jct_s
    exact = {str(i): t for i, t in twin.jct_s.items()}

    def edit(doc: dict[str, Any]) -> None:
        doc["plain"]["jct_s"] = exact
        doc["coda"]["jct_s"] = {}

    rows, _ = _replay_row(_broken(replay_dir, tmp_path, edit), capsys)
    assert rows["plain"][13:15] == ["0.000", "0.000-0.000"]
    assert rows["coda"][13:15] == ["n/a", "n/a"]


def test_negative_real_jcts_are_read_and_left_out_of_the_error(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wall-clock step can make a real JCT negative: not a broken replay."""
    rows, _ = _replay_row(
        _broken(replay_dir, tmp_path, _set(("coda", "jct_s"), {"1": -3.0})), capsys
    )
    assert rows["coda"][13] == "n/a"  # its one job is left out


def test_job_index_keys_are_short_plain_decimals(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _broken(replay_dir, tmp_path, _set(("coda", "jct_s"), {"1234567890": 1.0}))
    assert "'1234567890' is not a job index" in _refusal(out, capsys)


def test_odd_real_utilisations(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    rows, _ = _replay_row(
        _broken(replay_dir, tmp_path / "a", _set(("coda", "gpu_util_effective"), -0.0)), capsys
    )
    assert rows["coda"][10] == "0.000"
    _, text = _replay_row(
        _broken(replay_dir, tmp_path / "b", _set(("plain", "gpu_util_effective"), 5e-324)),
        capsys,
    )
    assert "No gain: plain Slurm's effective GPU utilisation is 4.94e-324 (real)" in text
    assert "inf" not in text and "nan" not in text
