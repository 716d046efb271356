"""The `coda` command: simulate, compare, policies; outputs and one-line user errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_errors import one_error_line

from coda.cli import main

HEADER = "job_id,submit_s,duration_s,gpus,cores,mem_mib,nodes,censored"
CLUSTER = "2x4g32c,1x0g32c"
RUN_FILES = ("summary.json", "timeseries.csv", "jobs.csv", "utilisation.png", "queue_delay_cdf.png")
VOLATILE = ("wall_seconds", "events_per_s")


def trace_rows() -> list[str]:
    """40 jobs, 5 minutes apart: 30 DNN jobs of 1-4 GPUs and 10 CPU jobs."""
    rows = []
    for i in range(40):
        submit = i * 300
        if i % 4 == 3:
            rows.append(f"cpu-{i},{submit},{600 + 60 * (i % 5)},0,{2 + i % 6},4096,1,0")
        else:
            gpus = 1 + i % 4
            rows.append(f"dnn-{i},{submit},{1800 + 300 * (i % 7)},{gpus},{4 * gpus},16384,1,0")
    return rows


@pytest.fixture
def trace(tmp_path) -> Path:
    p = tmp_path / "small.csv"
    p.write_text("\n".join([HEADER, *trace_rows()]) + "\n", encoding="utf-8")
    return p


def simulate(runner, trace, out, *extra, command="simulate"):
    args = [command, "--trace", str(trace), "--cluster", CLUSTER, "--out", str(out)]
    return runner.invoke(main, [*args, *extra])


def stable(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in VOLATILE}


def test_policies_lists_baselines(runner):
    result = runner.invoke(main, ["policies"])
    assert result.exit_code == 0, result.output
    assert "static-separate" in result.output
    assert "static-shared" in result.output


def test_simulate_writes_outputs(runner, trace, tmp_path):
    out = tmp_path / "run"
    result = simulate(runner, trace, out, "--load", "0.5", "--seed", "1")
    assert result.exit_code == 0, result.output
    printed = " ".join(result.output.split())  # rich wraps lines at the console width
    assert "coda" in printed
    assert CLUSTER in printed
    assert "load 0.5" in printed
    assert "seed 1" in printed
    for name in RUN_FILES:
        assert (out / name).is_file(), name
        assert (out / name).stat().st_size > 0, name
    s = json.loads((out / "summary.json").read_text())
    assert s["policy"] == "coda"  # the default policy
    assert s["cluster"]["spec"] == CLUSTER
    assert (s["cluster"]["nodes"], s["cluster"]["gpus"], s["cluster"]["cores"]) == (3, 8, 96)
    assert s["load"] == 0.5
    assert s["offered_gpu_load"] == pytest.approx(0.5, rel=1e-6)
    assert s["seed"] == 1
    assert s["trace"] == str(trace)
    jobs = s["jobs"]
    assert (jobs["dnn"], jobs["cpu"]) == (30, 10)
    assert jobs["finished"] + jobs["unfinished"] == jobs["dnn"] + jobs["cpu"] == 40
    assert 0.0 <= s["gpu_util_effective"] <= 1.0
    assert s["gpu_util_effective"] <= s["gpu_util_allocated"] + 1e-12
    assert s["trace_report"]["jobs_loaded"] == 40
    assert s["trace_report"]["skipped_bad_rows"] == 0
    header = (out / "jobs.csv").read_text().splitlines()
    assert len(header) == 41
    assert header[0].startswith("job_id,is_dnn,submit,start,end")
    # The trace's ids, in submit order: the column identifies each job.
    ids = [line.split(",")[0] for line in header[1:]]
    assert ids == [r.split(",")[0] for r in trace_rows()]
    assert (out / "timeseries.csv").read_text().startswith("t,gpu_util_effective")
    for png in ("utilisation.png", "queue_delay_cdf.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_simulate_is_deterministic(runner, trace, tmp_path):
    summaries = []
    for name in ("a", "b"):
        result = simulate(runner, trace, tmp_path / name, "--load", "0.5", "--seed", "1")
        assert result.exit_code == 0, result.output
        summaries.append(json.loads((tmp_path / name / "summary.json").read_text()))
    assert stable(summaries[0]) == stable(summaries[1])
    jobs = [(tmp_path / n / "jobs.csv").read_text() for n in ("a", "b")]
    assert jobs[0] == jobs[1]


def test_simulate_native_time(runner, trace, tmp_path):
    out = tmp_path / "native"
    result = simulate(runner, trace, out, "--native-time", "--load", "0.5")
    assert result.exit_code == 0, result.output
    s = json.loads((out / "summary.json").read_text())
    assert s["load"] is None
    assert s["time_scale"] == 1.0
    assert s["config"]["load"] is None
    # The trace's own timing: job k arrives at 300 k seconds.
    lines = (out / "jobs.csv").read_text().splitlines()
    col = lines[0].split(",").index("submit")
    submits = [float(line.split(",")[col]) for line in lines[1:]]
    assert submits == [300.0 * k for k in range(40)]


def test_malformed_row_is_one_clear_line(runner, trace, tmp_path):
    lines = trace.read_text().splitlines()
    lines[5] = "dnn-bad,1500,1800,abc,8,16384,1,0"  # line 6 of the file
    trace.write_text("\n".join(lines) + "\n")
    result = simulate(runner, trace, tmp_path / "bad", "--load", "0.5")
    one_error_line(result, trace.name, ":6:", "gpus")
    assert not (tmp_path / "bad" / "summary.json").exists()

    out = tmp_path / "skipped"
    result = simulate(runner, trace, out, "--load", "0.5", "--skip-bad-rows")
    assert result.exit_code == 0, result.output
    s = json.loads((out / "summary.json").read_text())
    assert s["trace_report"]["skipped_bad_rows"] == 1
    assert s["jobs"]["dnn"] + s["jobs"]["cpu"] == 39


def test_unknown_policy_lists_known(runner, trace, tmp_path):
    result = simulate(runner, trace, tmp_path / "o", "--policy", "nonesuch")
    one_error_line(result, "nonesuch", "static-separate", "static-shared")


def test_bad_cluster_spec(runner, trace, tmp_path):
    result = runner.invoke(
        main,
        ["simulate", "--trace", str(trace), "--cluster", "2x4g", "--out", str(tmp_path / "o")],
    )
    one_error_line(result, "2x4g")


def test_unreachable_load(runner, trace, tmp_path):
    result = simulate(runner, trace, tmp_path / "o", "--load", "50")
    one_error_line(result, "cannot be reached")


def test_nan_load_rejected(runner, trace, tmp_path):
    result = simulate(runner, trace, tmp_path / "o", "--load", "nan")
    one_error_line(result, "load")


@pytest.mark.slow
def test_compare_two_policies(runner, trace, tmp_path):
    out = tmp_path / "cmp"
    policies = ("--policies", "static-separate,static-shared")
    result = simulate(
        runner, trace, out, "--load", "0.5", "--seed", "3", *policies, command="compare"
    )
    assert result.exit_code == 0, result.output
    assert "static-separate" in result.output
    assert "static-shared" in result.output
    summaries = json.loads((out / "comparison.json").read_text())
    assert isinstance(summaries, list) and len(summaries) == 2
    assert [s["policy"] for s in summaries] == ["static-separate", "static-shared"]
    for s in summaries:
        assert s["cluster"]["spec"] == CLUSTER
        assert s["load"] == 0.5
        assert s["seed"] == 3
        assert s["trace"] == str(trace)
        assert s["jobs"]["dnn"] + s["jobs"]["cpu"] == 40
    md = (out / "comparison.md").read_text()
    assert "static-separate" in md and "static-shared" in md
    for policy in ("static-separate", "static-shared"):
        assert (out / policy / "summary.json").is_file()


def test_compare_rejects_repeated_policy(runner, trace, tmp_path):
    out = tmp_path / "cmp"
    result = simulate(
        runner, trace, out, "--policies", "static-shared, static-shared", command="compare"
    )
    one_error_line(result, "twice")
    assert not out.exists()


@pytest.mark.slow
def test_simulate_defaults_on_bundled_trace(runner, tmp_path):
    out = tmp_path / "default"
    result = runner.invoke(main, ["simulate", "--policy", "static-separate", "--out", str(out)])
    assert result.exit_code == 0, result.output
    s = json.loads((out / "summary.json").read_text())
    assert s["trace"] == "bundled:alibaba-openb-2023"
    assert s["jobs"]["dnn"] == 6203
    assert s["jobs"]["cpu"] == 1052
    assert s["cluster"]["spec"] == "openb:0.1"
    assert s["load"] == 1.0
    assert s["seed"] == 0
    # Under the baseline the default configuration must make DNN jobs queue.
    assert s["dnn_queue_delay_s"]["mean"] > 0


def test_trace_command_accounts_for_every_row(runner, trace):
    result = runner.invoke(main, ["trace", "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "rows read │ 40" in text and "jobs loaded │ 40" in text
    assert "DNN (GPU) jobs │ 30" in text and "CPU jobs │ 10" in text


def test_trace_command_shows_bad_rows_when_skipping(runner, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_s,duration_s,gpus,cores\na,0,10,1,4\nb,1,ten,1,4\n")
    failed = runner.invoke(main, ["trace", "--trace", str(bad)])
    one_error_line(failed, "bad.csv", ":3:", "duration_s")
    result = runner.invoke(main, ["trace", "--trace", str(bad), "--skip-bad-rows"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "skipped bad rows │ 1" in text and "bad row:" in text


def test_noise_and_perturbation_reach_the_run(runner, trace, tmp_path):
    out = tmp_path / "noisy"
    result = simulate(runner, trace, out, "--noise", "0.1", "--perturb", "0.3")
    assert result.exit_code == 0, result.output
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["noise"] == 0.1 and s["config"]["perturb"] == 0.3
    assert "perturbed" in s["profile_set"]
    bad = simulate(runner, trace, tmp_path / "bad", "--perturb", "1.5")
    assert bad.exit_code != 0 and "--perturb" in bad.output


def test_python_dash_m_coda_is_the_same_command_line():
    out = subprocess.run(
        [sys.executable, "-m", "coda", "policies"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "static-separate" in out.stdout and "coda" in out.stdout
