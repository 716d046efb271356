"""`coda experiment cpu-harm`: the workloads it builds, the report and its verdict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from coda.cli import main
from coda.experiment.cpu_harm_study import POLICIES, HarmStudyConfig, build_cases, cpu_twice
from coda.workload.traces import bundled_trace_path, load_trace


def test_every_cpu_only_pod_is_submitted_twice() -> None:
    once = load_trace(bundled_trace_path()).jobs
    twice = cpu_twice(bundled_trace_path())
    n_cpu = int((np.asarray(once.gpus) == 0).sum())
    assert len(twice) == len(once) + n_cpu
    assert len(set(twice.ids)) == len(twice)  # ids stay unique
    again = [i for i in twice.ids if i.endswith("#again")]
    assert len(again) == n_cpu
    assert np.all(np.diff(np.asarray(twice.submit)) >= 0)


def test_the_half_checkpointing_month_runs_the_day_long_jobs_with_half_checkpointing(
    tmp_path: Path,
) -> None:
    cfg = HarmStudyConfig(out=tmp_path, jobs=300, cases=("paper-month-cpu-days-half-ckpt",))
    cfg.validate()
    (case,) = build_cases(cfg)
    config = case.config(0)
    assert config.cpu_checkpoint_share == 0.5
    assert config.trace == str(tmp_path / "paper-month-cpu-days-seed0.csv")
    assert Path(config.trace).is_file()  # written though its own case was not asked for


def test_a_small_month_reports_every_policy_and_the_verdict(tmp_path: Path) -> None:
    out = tmp_path / "h"
    argv = ["experiment", "cpu-harm", "--cases", "paper-month", "--jobs", "400"]
    result = CliRunner().invoke(main, [*argv, "--workers", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    res = json.loads((out / "results.json").read_text())
    assert "--cases paper-month" in res["command"] and "--jobs 400" in res["command"]
    (case,) = res["cases"]
    assert case["name"] == "paper-month" and case["runs"] == 1
    assert list(case["policies"]) == list(POLICIES)
    fifo = case["policies"]["fifo"]
    assert fifo["stretch_max"] == pytest.approx(1.0) and fifo["cpu_jct_ratio"] == pytest.approx(1)
    for m in case["policies"].values():
        assert 0.0 <= m["stretch_over_2x_share"] <= m["stretch_over_1_5x_share"] <= 1.0
    assert len(case["verdict"]) == 4
    report = (out / "report.md").read_text()
    assert "## the paper's month" in report and "`coda-unbounded`" in report


def test_a_helios_trace_of_the_users_runs_beside_the_bundled_workloads(tmp_path: Path) -> None:
    # Helios' own columns: GPU jobs of hours and CPU jobs of days, as its CPU jobs are.
    header = (
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
        "duration,queue"
    )
    rows = []
    for i in range(80):
        gpu = i % 3 != 0
        submit = 600 * i
        duration = 3 * 3600 + 60 * i if gpu else 2 * 86400 + 600 * i
        rows.append(f"{i},u{i % 5},vc1,{8 if gpu else 0},{16 if gpu else 24},1,COMPLETED,"
                    f"{submit},{submit + 5},{submit + 5 + duration},{duration},5")  # fmt: skip
    trace = tmp_path / "helios.csv"
    trace.write_text("\n".join([header, *rows]) + "\n")
    out = tmp_path / "h"
    argv = ["experiment", "cpu-harm", "--cases", "trace", "--trace", str(trace),
            "--cluster", "4x8g48c", "--load", "1.5", "--workers", "1",
            "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    (case,) = json.loads((out / "results.json").read_text())["cases"]
    assert case["name"] == "trace" and "helios.csv on 4x8g48c, load 1.5" in case["label"]
    assert list(case["policies"]) == list(POLICIES)
    assert case["policies"]["coda"]["stretch_jobs"] > 0


def test_a_tuned_coda_is_measured_and_a_bad_knob_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "t"
    argv = ["experiment", "cpu-harm", "--cases", "paper-month", "--jobs", "300", "--workers",
            "1", "--tune", "harm.bus_share=0.9", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    res = json.loads((out / "results.json").read_text())
    assert "--tune harm.bus_share=0.9" in res["command"]
    for bad in ("harm.bus_share=7000", "harm.nope=1", "bus_share"):
        result = CliRunner().invoke(main, [*argv[:-4], "--tune", bad, "--out", str(out)])
        assert result.exit_code != 0 and "Traceback" not in result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error")]
        assert len(errors) == 1 and "tune" in errors[0], result.output


def test_an_unknown_workload_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["experiment", "cpu-harm", "--cases", "helios", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code != 0
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "unknown 'helios'" in errors[0], result.output
    assert "Traceback" not in result.output
