"""Reporting: files parse, tables state their context, relative changes are right."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from coda.report import (
    comparison_table,
    markdown_comparison,
    safe_name,
    summary_table,
    to_jsonable,
    write_comparison,
    write_run,
)
from coda.report.files import _unique_folder_names
from coda.report.plots import plot_comparison_bars, plot_queue_delay_cdf, plot_utilisation
from coda.sim.result import TIMESERIES_COLUMNS, SimResult, describe


def fake_result(
    policy: str = "static-separate",
    *,
    gpu_eff: float = 0.60,
    seed: int = 0,
    n_dnn: int = 300,
    n_cpu: int = 100,
    hours: float = 24.0,
) -> SimResult:
    """A plausible run: random submits, a share of zero delays, a few unstarted jobs."""
    rng = np.random.default_rng(seed + sum(map(ord, policy)))
    n = n_dnn + n_cpu
    is_dnn = np.zeros(n, dtype=bool)
    is_dnn[rng.choice(n, n_dnn, replace=False)] = True
    submit = np.sort(rng.uniform(0, hours * 3600, n))
    delay = np.where(rng.random(n) < 0.4, 0.0, rng.lognormal(4.0, 2.0, n))
    start = submit + delay
    end = start + rng.lognormal(8.0, 1.0, n)
    start[-5:] = np.nan  # never started
    end[-8:] = np.nan  # never finished
    gpus = np.where(is_dnn, rng.choice([1, 2, 4, 8], n), 0)
    cores_req = np.where(is_dnn, gpus * 8, rng.integers(1, 32, n))
    cores_granted = np.where(np.isnan(start), 0, cores_req)

    t = np.linspace(0, hours * 3600, 289)
    wave = 0.5 + 0.5 * np.sin(t / 7200.0)
    ts = {
        "t": t,
        "gpu_util_effective": gpu_eff * (0.8 + 0.2 * wave),
        "gpu_util_allocated": np.minimum(1.0, (gpu_eff + 0.1) * (0.8 + 0.2 * wave)),
        "gpu_util_busy": 0.6 * (0.8 + 0.2 * wave),
        "gpu_frag_cores": 0.05 * (1.0 - wave),
        "cpu_util": 0.5 * (0.7 + 0.3 * wave),
        "dnn_queued": rng.integers(0, 20, t.size).astype(float),
        "cpu_queued": rng.integers(0, 5, t.size).astype(float),
        "dnn_running": rng.integers(10, 50, t.size).astype(float),
        "cpu_running": rng.integers(5, 20, t.size).astype(float),
    }
    started, finished = ~np.isnan(start), ~np.isnan(end)
    summary = {
        "policy": policy,
        "trace": "bundled:alibaba-openb-2023",
        "format": "openb",
        "cluster": {
            "spec": "openb-nodes",
            "nodes": 1523,
            "gpu_nodes": 1213,
            "cpu_nodes": 310,
            "gpus": 6212,
            "cores": 125514,
        },
        "load": 0.9,
        "load_basis": "GPU-hours offered / GPU-hours available",
        "time_scale": 0.0123,
        "seed": seed,
        "profile_set": "coda",
        "window": {"start": 0.0, "end": hours * 3600, "basis": "arrivals"},
        "jobs": {
            "dnn": n_dnn,
            "cpu": n_cpu,
            "finished": int(finished.sum()),
            "unfinished": int((~finished).sum()),
            "unschedulable": 0,
        },
        "gpu_util_effective": gpu_eff,
        "gpu_util_allocated": gpu_eff + 0.1,
        "cpu_util": 0.5,
        "cpu_util_useful": 0.4,
        "dnn_queue_delay_s": describe((start - submit)[is_dnn & started]),
        "dnn_jct_s": describe((end - submit)[is_dnn & finished]),
        "cpu_queue_delay_s": describe((start - submit)[~is_dnn & started]),
        "cpu_jct_s": describe((end - submit)[~is_dnn & finished]),
        "wall_seconds": 3.2,
        "events": 20000,
        "events_per_s": 6250.0,
        "trace_report": {
            "path": "openb_pod_list_default.csv",
            "format": "openb",
            "rows_read": 8152,
            "jobs_loaded": n,
            "skipped_bad_rows": 0,
            "bad_row_examples": [],
            "excluded": {"never_started": 897},
            "adjusted": {"fractional_gpu": 12},
            "treatments": {"fractional": "rounded up to one GPU"},
        },
        "notes": ["synthetic run for tests"],
    }
    jobs = {
        "is_dnn": is_dnn,
        "submit": submit,
        "start": start,
        "end": end,
        "gpus": gpus.astype(np.int32),
        "cores_requested": cores_req.astype(np.int32),
        "cores_granted": cores_granted.astype(np.int32),
    }
    return SimResult(summary=summary, timeseries=ts, jobs=jobs)


def render(table) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


# ---------------------------------------------------------------- files


def test_write_run_files_exist_and_parse(tmp_path: Path) -> None:
    r = fake_result()
    r.summary["weird"] = float("nan")  # the engine should not, but JSON must survive it
    r.summary["cpu_jct_s"] = {"n": 0, "mean": None, "p50": None, "p95": None, "p99": None}
    r.summary["numpy_scalar"] = np.float32(1.5)
    out = tmp_path / "run"
    paths = write_run(r, out)
    names = {p.name for p in paths}
    assert names == {
        "summary.json",
        "timeseries.csv",
        "jobs.csv",
        "utilisation.png",
        "queue_delay_cdf.png",
    }
    assert all(p.exists() and p.stat().st_size > 0 and p.parent == out for p in paths)

    text = (out / "summary.json").read_text()
    for token in ("NaN", "Infinity"):
        assert token not in text
    summary = json.loads(text)
    assert summary["weird"] is None
    assert summary["numpy_scalar"] == 1.5
    assert summary["cluster"]["gpus"] == 6212

    with (out / "timeseries.csv").open() as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == TIMESERIES_COLUMNS
    assert len(rows) == 1 + len(r.timeseries["t"])
    assert math.isclose(float(rows[1][1]), r.timeseries["gpu_util_effective"][0])

    with (out / "jobs.csv").open() as f:
        jobs = list(csv.DictReader(f))
    assert len(jobs) == len(r.jobs["submit"])
    assert list(jobs[0]) == [
        "is_dnn",
        "submit",
        "start",
        "end",
        "gpus",
        "cores_requested",
        "cores_granted",
    ]
    assert jobs[-1]["start"] == "" and jobs[-1]["end"] == ""  # NaN -> empty cell
    assert jobs[-1]["cores_granted"] == "0"
    assert {j["is_dnn"] for j in jobs} == {"0", "1"}
    assert float(jobs[0]["submit"]) == r.jobs["submit"][0]  # round-trips exactly

    for png in ("utilisation.png", "queue_delay_cdf.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_run_timeseries_header_is_columns_present(tmp_path: Path) -> None:
    r = fake_result()
    del r.timeseries["cpu_running"]
    write_run(r, tmp_path)
    header = (tmp_path / "timeseries.csv").read_text().splitlines()[0].split(",")
    assert header == [c for c in TIMESERIES_COLUMNS if c != "cpu_running"]


def test_write_run_tolerates_empty_result(tmp_path: Path) -> None:
    r = SimResult(summary={"policy": "empty"})
    paths = write_run(r, tmp_path)
    assert all(p.exists() for p in paths)
    assert (tmp_path / "timeseries.csv").read_text().splitlines() == [",".join(TIMESERIES_COLUMNS)]


def test_write_run_rejects_ragged_jobs(tmp_path: Path) -> None:
    r = fake_result()
    r.jobs["start"] = r.jobs["start"][:-1]
    with pytest.raises(ValueError, match="length"):
        write_run(r, tmp_path)


@pytest.mark.slow
def test_write_comparison(tmp_path: Path) -> None:
    results = [
        fake_result("static-separate", gpu_eff=0.6),
        fake_result("coda/v2 (slim)", gpu_eff=0.75),
        fake_result("../escape", gpu_eff=0.7),
    ]
    paths = write_comparison(results, tmp_path, baseline="static-separate")
    top = {p.name for p in paths if p.parent == tmp_path}
    assert top == {
        "comparison.json",
        "comparison.md",
        "utilisation.png",
        "queue_delay_cdf.png",
        "comparison_bars.png",
    }
    folders = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert folders == ["_._escape", "coda_v2__slim_", "static-separate"]
    for folder in folders:
        assert (tmp_path / folder / "summary.json").exists()
        assert (tmp_path / folder / "jobs.csv").exists()
    # Nothing escaped the output folder.
    assert all(tmp_path in p.resolve().parents for p in paths)

    text = (tmp_path / "comparison.json").read_text()
    assert "NaN" not in text
    loaded = json.loads(text)
    assert [s["policy"] for s in loaded] == ["static-separate", "coda/v2 (slim)", "../escape"]

    md = (tmp_path / "comparison.md").read_text()
    assert "static-separate" in md and "+25.0%" in md


def test_write_comparison_unknown_baseline(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="baseline"):
        write_comparison([fake_result("a"), fake_result("b")], tmp_path, baseline="nope")


def test_duplicate_policies_get_distinct_folders() -> None:
    # Folder naming only: writing three whole runs again would just repeat the test above.
    results = [fake_result("x"), fake_result("x"), fake_result("comparison.md"), fake_result("x/")]
    assert _unique_folder_names(results) == ["x", "x-2", "comparison.md-2", "x_"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("static-separate", "static-separate"),
        ("coda_v1.2", "coda_v1.2"),
        ("a/b", "a_b"),
        ("..", "_."),
        (".hidden", "_hidden"),
        ("", "_"),
        ("c o d a*", "c_o_d_a_"),
        ("ü", "_"),
    ],
)
def test_safe_name(name: str, expected: str) -> None:
    assert safe_name(name) == expected


def test_to_jsonable_handles_numpy_and_nonfinite() -> None:
    data = {"a": np.array([1.0, np.nan]), "b": (np.int64(3), float("-inf")), "c": np.bool_(True)}
    assert to_jsonable(data) == {"a": [1.0, None], "b": [3, None], "c": True}


# ---------------------------------------------------------------- tables


def test_summary_table_states_context_and_units() -> None:
    s = fake_result("static-separate").summary
    s["dnn_queue_delay_s"] = {"n": 3, "mean": 30.0, "p50": 0.0, "p95": 600.0, "p99": 36000.0}
    text = render(summary_table(s))
    for expected in (
        "static-separate",
        "bundled:alibaba-openb-2023",
        "openb-nodes",
        "6,212 GPUs",
        "load 0.9",
        "seed 0",
        "60.0%",  # gpu_util_effective
        "70.0%",  # gpu_util_allocated
        "50.0%",
        "40.0%",
        "30.0 s",
        "10.0 min",
        "10.0 h",
        "0 s",
        "6,250/s",
        "3.20 s",  # wall time
        "never_started",
        "synthetic run for tests",
    ):
        assert expected in text, expected


def test_none_stats_render_as_dash() -> None:
    s = fake_result().summary
    s["cpu_queue_delay_s"] = {"n": 0, "mean": None, "p50": None, "p95": None, "p99": None}
    s["cpu_util_useful"] = float("nan")
    text = render(summary_table(s))
    lines = [ln for ln in text.splitlines() if "mean" in ln or "CPU util (useful)" in ln]
    assert any("—" in ln for ln in lines)
    assert "nan" not in text.lower()
    assert "None" not in text


def test_missing_optional_keys_do_not_crash() -> None:
    minimal = {"policy": "bare"}
    text = render(summary_table(minimal))
    assert "bare" in text and "—" in text
    assert "bare" in render(comparison_table([minimal, {"policy": "other", "extra": [1, 2]}]))
    assert "bare" in markdown_comparison([minimal])


def test_comparison_table_relative_change() -> None:
    base = fake_result("static-separate", gpu_eff=0.60).summary
    coda = fake_result("coda", gpu_eff=0.75).summary
    base["dnn_queue_delay_s"]["mean"] = 100.0
    coda["dnn_queue_delay_s"]["mean"] = 80.0
    text = render(comparison_table([base, coda]))
    assert "static-separate" in text and "coda" in text
    assert "75.0% (+25.0%)" in text  # 0.75 vs 0.60
    assert "85.0% (+21.4%)" in text  # allocated 0.85 vs 0.70
    assert "80.0 s (-20.0%)" in text  # lower mean delay
    assert "60.0% (" not in text  # the baseline column carries no change
    assert "load 0.9" in text and "seed 0" in text and "openb-nodes" in text

    # Another baseline flips the direction.
    text = render(comparison_table([base, coda], baseline="coda"))
    assert "60.0% (-20.0%)" in text
    assert "75.0% (" not in text


def test_comparison_zero_baseline_has_no_change() -> None:
    a = {"policy": "a", "cpu_util": 0.0, "gpu_util_effective": 0.0}
    b = {"policy": "b", "cpu_util": 0.5, "gpu_util_effective": 0.0}
    text = render(comparison_table([a, b]))
    assert "50.0%" in text and "50.0% (" not in text
    assert "0.0% (+0.0%)" in text


def test_comparison_shows_differing_context() -> None:
    a = fake_result("a", seed=0).summary
    b = fake_result("b", seed=1).summary
    text = render(comparison_table([a, b]))
    assert "seed varies" in text
    md = markdown_comparison([a, b])
    assert "| seed | 0 | 1 |" in md


def test_markdown_comparison() -> None:
    base = fake_result("static-separate", gpu_eff=0.60).summary
    coda = fake_result("co|da", gpu_eff=0.75).summary
    md = markdown_comparison([base, coda])
    lines = md.splitlines()
    assert "load 0.9" in lines[0] and "seed 0" in lines[0] and "openb-nodes" in lines[0]
    assert "bundled:alibaba-openb-2023" in lines[0]
    header = next(ln for ln in lines if ln.startswith("| Metric"))
    assert header == "| Metric | static-separate | co\\|da |"
    table = [ln for ln in lines if ln.startswith("|")]
    assert len({ln.count(" | ") for ln in table if not ln.startswith("|---")}) == 1
    assert "| GPU work done (effective, all GPUs) | 60.0% | 75.0% (+25.0%) |" in md


def test_unknown_baseline_raises() -> None:
    with pytest.raises(ValueError, match="baseline"):
        comparison_table([fake_result("a").summary], baseline="b")


def test_plot_comparison_bars_with_missing_values(tmp_path: Path) -> None:
    a = fake_result("a").summary
    b = {"policy": "b", "gpu_util_effective": 0.5}
    out = plot_comparison_bars([a, b], tmp_path / "bars.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_plots_reject_empty_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        plot_utilisation([], tmp_path / "u.png")
    with pytest.raises(ValueError):
        plot_queue_delay_cdf([], tmp_path / "q.png")
    with pytest.raises(ValueError):
        plot_comparison_bars([], tmp_path / "b.png")


def test_cdf_plot_without_jobs(tmp_path: Path) -> None:
    r = fake_result()
    r.jobs = {}
    assert plot_queue_delay_cdf([r], tmp_path / "q.png").exists()


def test_names_are_not_rich_markup() -> None:
    a = {"policy": "coda[bold]", "trace": "[t]", "notes": ["x [/red] y"]}
    b = {"policy": "b[/]"}
    text = render(comparison_table([a, b])) + render(summary_table(a))
    for expected in ("coda[bold]", "b[/]", "[t]", "x [/red] y"):
        assert expected in text


def test_notes_shared_by_every_run_are_listed_once():
    from coda.report.tables import _notes

    a = {"policy": "a", "notes": ["workload note", "only a"]}
    b = {"policy": "b", "notes": ["workload note"]}
    assert _notes([a, b], with_policy=True) == ["workload note", "a: only a"]
    assert _notes([a], with_policy=False) == ["workload note", "only a"]


def test_coda_mechanism_rows_show_when_a_run_reports_them() -> None:
    base = fake_result("static-separate").summary
    coda = fake_result("coda", seed=1).summary
    coda["preemption"] = {"count": 3, "jobs": 2, "lost_core_s": 120.0}
    coda["contention"] = {"episodes": 7, "detected": 5, "detect_s": describe(np.array([20.0]))}
    coda["contention"]["recover_s"] = describe(np.array([40.0, 60.0]))
    coda["policy_stats"] = {
        "allocator": {"searches": 9, "converged": 8, "reference_only": 6, "probes": 4},
        "eliminator": {"throttle_steps": 11, "nodes_tracked": 0},
    }
    md = markdown_comparison([base, coda])
    assert "| preemptions | — | 3 |" in md
    assert "| detected (co-runner throttled) | — | 5 |" in md
    assert "| converged | — | 8 |" in md and "| from a learned profile | — | 6 |" in md
    assert "| throttle steps | — | 11 |" in md and "nodes tracked" not in md
    # Runs without them (the baselines alone) show none of these sections.
    assert "Allocator" not in markdown_comparison([base])


def test_clusters_whose_long_specs_differ_in_the_middle_are_not_one_cluster() -> None:
    """A long spec is shown by its ends; runs are compared by the whole spec (cut
    first, two clusters that differ in their middles read as one, shared)."""
    from coda.report.plots import _title

    groups = ["1x8g96c"] * 20
    a, b = fake_result("a").summary, fake_result("b").summary
    a["cluster"] = {"spec": ",".join(groups), "nodes": 20}
    b["cluster"] = {"spec": ",".join(groups[:10] + ["1x8g95c"] + groups[11:]), "nodes": 20}
    assert "cluster varies" in render(comparison_table([a, b]))
    assert "cluster varies" in markdown_comparison([a, b])
    assert "varies" in _title([a, b]).split("\n")[0]
    same = render(comparison_table([a, a]))
    assert "cluster 1x8g96c" in same and " ... " in same and a["cluster"]["spec"] not in same
    assert " ... " in _title([a, a])


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_file_of_a_run_that_fails_to_write_is_named(tmp_path: Path) -> None:
    """A failed write names no file in its OSError: the run's files are many."""
    (tmp_path / "summary.json").symlink_to("/dev/full")
    with pytest.raises(OSError, match=r"No space left on device: '.*summary\.json'"):
        write_run(fake_result("a"), tmp_path)
