"""`coda experiment paper`: the runs, results.json, report.md, plots, failures, bad
options and the targets logic."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_errors import one_error_line
from click.testing import CliRunner

from coda.cli import main
from coda.experiment.paper import PAPER_ARRIVAL_SCALE, PaperConfig, run_all
from coda.experiment.paper_results import METRIC_KEYS, METRICS, PUBLISHED, targets
from coda.policy import POLICIES
from coda.report.paper_plots import PLOT_FILES

REQUIRED_SHARES = (
    "gpu_util_busy",
    "gpu_util_effective",
    "gpu_util_allocated",
    "gpu_frag_cores",
    "dnn_no_queue_share",
    "cpu_within_10s_share",
    "cpu_within_180s_share",
)
REQUIRED_TIMES = ("cpu_jct_mean_s", "dnn_jct_mean_s")
# results.json's policies.<name> keys the paper's table needs (fractions 0-1, seconds).
RESULTS_KEYS = (
    "gpu_util_busy",
    "gpu_active_queued",
    "dnn_queue_over_10min_share",
    "dnn_queue_over_1h_share",
    "dnn_queue_p99_s",
    "cpu_queue_p99_s",
    "user_queue_p99_max_s",
)
PNG = b"\x89PNG"


def paper(runner: CliRunner, out: Path, *extra: str):
    return runner.invoke(main, ["experiment", "paper", "--workers", "1", "--out", str(out), *extra])


@pytest.mark.slow
def test_tiny_generated_run_writes_every_output(runner, tmp_path):
    out = tmp_path / "p"
    result = paper(runner, out, "--jobs", "300", "--seeds", "2", "--policies", "fifo,coda")
    assert result.exit_code == 0, result.output
    res = json.loads((out / "results.json").read_text())
    s = res["setting"]
    assert s["seeds"] == 2 and s["jobs"] == 300 and s["policies"] == ["fifo", "coda"]
    assert s["arrival_scale"] == PAPER_ARRIVAL_SCALE and "400 GPUs" in s["cluster"]
    assert "--jobs 300" in s["command"] and "--seeds 2" in s["command"]
    for seed in (0, 1):
        assert (out / f"workload-seed{seed}.csv").stat().st_size > 0
    for name in ("fifo", "coda"):
        block = res["policies"][name]
        assert block["seeds_ok"] == 2 and len(block["runs"]) == 2
        for key in REQUIRED_SHARES:
            assert 0.0 <= block[key] <= 1.0, (name, key, block[key])
            lo, hi = block["ci"][key]["low"], block["ci"][key]["high"]
            assert lo <= block[key] <= hi
        for key in REQUIRED_TIMES:
            assert block[key] > 0
        # The mean is the mean of the per-seed values.
        per_seed = [r["gpu_util_effective"] for r in block["runs"]]
        assert math.isclose(block["gpu_util_effective"], sum(per_seed) / 2)
        # gpu_active_queued is None where no DNN job ever queued, else a share.
        v = block["gpu_active_queued"]
        assert v is None or 0.0 <= v <= 1.0
        assert set(RESULTS_KEYS) <= set(block)
        for key in ("dnn_queue_p99_s", "cpu_queue_p99_s", "user_queue_p99_max_s"):
            assert block[key] >= 0.0
        # The paper's busy share of active GPUs is not work done over all GPUs.
        assert block["gpu_util_busy"] != block["gpu_util_effective"]
    assert res["paper"]["gpu_util_busy"]["fifo"]["value"] == 0.454
    assert "gpu_util_effective" not in res["paper"]
    assert [t["key"] for t in res["targets"]] == [
        "gpu_util_busy",
        "gpu_gain_pct",
        "gpu_frag_cores",
        "dnn_no_queue_share",
        "cpu_within_180s_share",
        "dnn_jct",
        "cpu_jct",
        "user_queue_p99_max_s",
    ]
    assert all(isinstance(t["met"], bool) for t in res["targets"])
    # The baselines against every published figure (the fit's table), and the split of
    # coda's busy gain, which adds up exactly.
    fit_keys = {(r["key"], r["policy"]) for r in res["fit"]}
    assert ("gpu_util_busy", "fifo") in fit_keys and ("dnn_request_1", "workload") in fit_keys
    assert ("gpu_util_busy", "drf") in fit_keys  # drf not run: its row has no value
    assert all(r["ours"] is None for r in res["fit"] if r["policy"] == "drf")
    d = res["decomposition"]
    assert d["gain"] == pytest.approx(sum(d["split"].values()), abs=1e-9)
    assert "## Where coda's gain in busy utilisation comes from" in (out / "report.md").read_text()
    assert res["workload_marginals"]["jobs"]["ours"] == 300
    report = (out / "report.md").read_text()
    assert (
        "| metric | fifo paper | fifo ours [95% CI] | coda paper | coda ours [95% CI] |" in report
    )
    assert "| GPU utilisation (busy share of active GPUs) | 45.4% |" in report
    assert "| work done over all GPUs (effective) | - |" in report
    assert "## Targets" in report and "## Workload marginals" in report
    assert "| share of jobs that are CPU jobs | 75.0% | 75% |" in report
    days = next(line for line in report.splitlines() if "days from first to last" in line)
    assert "%" not in days.split("|")[2] and "a shortened run" in report
    for name in PLOT_FILES:
        assert (out / name).read_bytes()[:4] == PNG
        assert f"]({name})" in report


@pytest.mark.slow
def test_first_seed_runs_the_seeds_from_there(runner, tmp_path):
    out = tmp_path / "p"
    result = paper(
        runner, out, "--jobs", "150", "--seeds", "2", "--first-seed", "5", "--policies", "fifo"
    )
    assert result.exit_code == 0, result.output
    res = json.loads((out / "results.json").read_text())
    assert [r["seed"] for r in res["policies"]["fifo"]["runs"]] == [5, 6]
    assert res["setting"]["first_seed"] == 5 and "--first-seed 5" in res["setting"]["command"]
    assert sorted(p.name for p in out.glob("workload-seed*.csv")) == [
        "workload-seed5.csv",
        "workload-seed6.csv",
    ]
    assert "- seeds: 2 (5..6)" in (out / "report.md").read_text()


def test_a_failed_run_is_recorded_and_the_others_kept(runner, tmp_path, monkeypatch):
    def broken(options):
        raise RuntimeError("policy exploded")

    monkeypatch.setitem(POLICIES, "coda", broken)
    out = tmp_path / "p"
    result = paper(runner, out, "--jobs", "200", "--seeds", "2", "--policies", "fifo,coda")
    line = one_error_line(result)
    assert "2 of 4 runs failed" in line
    res = json.loads((out / "results.json").read_text())
    assert res["policies"]["fifo"]["seeds_ok"] == 2
    assert res["policies"]["coda"]["seeds_ok"] == 0
    assert res["policies"]["coda"]["gpu_util_effective"] is None
    assert {e["error"] for e in res["errors"]} == {"RuntimeError: policy exploded"}
    assert not res["targets"][0]["met"]  # coda never ran: the gain cannot be met
    report = (out / "report.md").read_text()
    assert "## Failed runs" in report and "policy exploded" in report


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--seeds", "0"], "--seeds"),
        (["--jobs", "0"], "--jobs"),
        (["--policies", "fifo,nope"], "unknown policy 'nope'"),
        (["--policies", "fifo,fifo"], "named twice"),
        (["--policies", ","], "no policy"),
        (["--trace", "/nonexistent/trace.csv"], "--trace"),
        (["--load", "1.0"], "--load rescales a --trace"),
        (["--format", "csv"], "--format names a --trace's format"),  # was ignored
        (["--arrival-scale", "0"], "--arrival-scale"),
        (["--cluster", "nonsense"], "nonsense"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_bad_options_exit_with_one_line(runner, tmp_path, args, needle):
    result = paper(runner, tmp_path / "p", "--jobs", "50", "--seeds", "1", *args)
    assert needle in one_error_line(result)


def test_jobs_and_arrival_scale_refused_with_a_trace(runner, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(small_trace())
    result = paper(runner, tmp_path / "p", "--trace", str(trace), "--jobs", "10")
    assert "with --trace use --load" in one_error_line(result)


def small_trace() -> str:
    rows = ["job_id,submit_s,duration_s,gpus,cores,mem_mib,nodes,censored"]
    for i in range(60):
        if i % 4 == 3:
            rows.append(f"cpu-{i},{i * 120},{600 + 60 * (i % 5)},0,{2 + i % 8},4096,1,0")
        else:
            gpus = (1, 2, 4)[i % 3]
            rows.append(f"dnn-{i},{i * 120},{3000 + 300 * (i % 7)},{gpus},{2 * gpus},8192,1,0")
    return "\n".join(rows) + "\n"


@pytest.mark.slow
def test_runs_on_a_csv_trace(runner, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(small_trace())
    out = tmp_path / "p"
    result = paper(
        runner,
        out,
        *("--trace", str(trace), "--cluster", "4x4g28c", "--seeds", "2"),
        *("--policies", "fifo,drf,coda"),
    )
    assert result.exit_code == 0, result.output
    res = json.loads((out / "results.json").read_text())
    assert res["setting"]["trace"] == str(trace) and res["setting"]["load"] == 1.0
    assert res["setting"]["jobs"] is None and not list(out.glob("workload-seed*.csv"))
    for name in ("fifo", "drf", "coda"):
        assert 0 < res["policies"][name]["gpu_util_effective"] <= 1
    assert res["workload_marginals"]["jobs"]["ours"] == 60
    assert (
        "| metric | fifo paper | fifo ours [95% CI] | drf paper |"
        in (out / "report.md").read_text()
    )


def test_process_pool_runs_every_seed(tmp_path):
    from coda.experiment.paper import write_workloads

    cfg = PaperConfig(out=tmp_path, jobs=100, seeds=2, policies=("fifo", "drf"), workers=2)
    write_workloads(cfg)
    records = run_all(cfg)
    assert [(r.seed, r.policy) for r in records] == [
        (0, "fifo"),
        (0, "drf"),
        (1, "fifo"),
        (1, "drf"),
    ]
    assert all(r.ok for r in records), [r.error for r in records]
    assert records[0].series and not records[2].series  # plot data from seed 0 only


def test_jobs_keeps_the_paper_rate():
    p = PaperConfig(out=Path("x"), jobs=2000).params()
    assert p.n_jobs == 2000 and math.isclose(p.days, 30 * 2000 / 100_000)
    assert p.arrival_scale == PAPER_ARRIVAL_SCALE


def _means(**coda: float) -> dict[str, dict[str, float | None]]:
    fifo = {
        "gpu_util_busy": 0.45,
        "dnn_jct_mean_s": 10_000.0,
        "cpu_jct_mean_s": 1_000.0,
        "gpu_frag_cores": 0.14,
        "cpu_within_180s_share": 0.9,
        "user_queue_p99_max_s": 9_000.0,
    }
    drf = {**fifo, "user_queue_p99_max_s": 5_000.0}
    good = {
        "gpu_util_busy": 0.63,  # +40%
        "gpu_frag_cores": 0.005,
        "dnn_no_queue_share": 0.93,
        "cpu_within_180s_share": 0.96,
        "dnn_jct_mean_s": 9_000.0,
        "cpu_jct_mean_s": 1_050.0,
        "user_queue_p99_max_s": 1_500.0,
    }
    return {"fifo": fifo, "drf": drf, "coda": {**good, **coda}}


def test_targets_all_met():
    got = {t["key"]: t for t in targets(_means())}
    assert all(t["met"] for t in got.values()), got
    assert math.isclose(got["gpu_gain_pct"]["value"], 40.0)
    assert math.isclose(got["cpu_jct"]["value"], 1.05)


@pytest.mark.parametrize(
    ("change", "missed"),
    [
        ({"gpu_util_busy": 0.62}, "gpu_util_busy"),  # +37.8% but under the paper's 62.1%
        # 62.1% but only +36.0% over a fifo of 45.66%: checked apart below
        ({"gpu_frag_cores": 0.01}, "gpu_frag_cores"),  # not below 1%
        ({"dnn_no_queue_share": 0.92}, "dnn_no_queue_share"),
        ({"user_queue_p99_max_s": 5_000.0}, "user_queue_p99_max_s"),  # not below drf's
        ({"cpu_within_180s_share": 0.94}, "cpu_within_180s_share"),
        ({"dnn_jct_mean_s": 10_001.0}, "dnn_jct"),
        ({"cpu_jct_mean_s": 1_101.0}, "cpu_jct"),  # 1.101 x fifo
        ({"cpu_jct_mean_s": None}, "cpu_jct"),  # no CPU job finished: not met
    ],
)
def test_each_target_missed_alone(change, missed):
    got = {t["key"]: t["met"] for t in targets(_means(**change))}
    assert [k for k, met in got.items() if not met] == [missed]


def test_the_busy_gain_is_a_target_of_its_own():
    means = _means(gpu_util_busy=0.622)
    means["fifo"]["gpu_util_busy"] = 0.456  # coda above 62.1%, but +36.4% < +36.8%
    got = {t["key"]: t["met"] for t in targets(means)}
    assert [k for k, met in got.items() if not met] == ["gpu_gain_pct"]


def test_the_fairness_target_needs_both_baselines():
    means = _means()
    del means["drf"]
    got = {t["key"]: t["met"] for t in targets(means)}
    assert [k for k, met in got.items() if not met] == ["user_queue_p99_max_s"]


def test_targets_without_coda_are_missed_not_errors():
    got = targets({"fifo": _means()["fifo"]})
    assert not any(t["met"] for t in got) and all(t["value"] is None for t in got)


def test_published_values_are_known_metrics():
    assert set(PUBLISHED) <= set(METRIC_KEYS)
    units = {k: u for k, _, u in METRICS}
    for key, by in PUBLISHED.items():
        assert set(by) <= {"fifo", "drf", "coda"}
        if units[key] == "share":
            assert all(0 < v <= 1 for v, _ in by.values())
        else:
            assert all(v > 0 for v, _ in by.values())


def test_a_missed_target_says_whether_the_oracle_reaches_it():
    means = _means(gpu_util_busy=0.55, cpu_within_180s_share=0.90)
    means["oracle"] = {**means["coda"], "gpu_util_busy": 0.58, "cpu_within_180s_share": 0.97}
    got = {t["key"]: t for t in targets(means)}
    busy, placed = got["gpu_util_busy"], got["cpu_within_180s_share"]
    assert not busy["met"] and busy["oracle_value"] == 0.58 and not busy["oracle_met"]
    assert not placed["met"] and placed["oracle_met"]
    assert "oracle_value" not in targets(_means())[0]  # no oracle run: no bound given
    from coda.report.paper_report import target_lines

    md = "\n".join(line for line in target_lines(list(got.values())) if "MISSED" in line)
    assert "(the oracle: 58.00%, also missed: out of reach of any core allocation" in md
    assert "(the oracle: 97.00%, met: within reach" in md
