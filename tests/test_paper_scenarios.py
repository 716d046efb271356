"""The paper's scenarios on a small month: the eliminator with and without heavy CPU
jobs (`coda experiment eliminator`) and the verdict under every reading of the paper
(`coda experiment sensitivity`)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from coda.cli import main
from coda.experiment.eliminator_scenario import (
    QUIET,
    WITH,
    WITHOUT,
    ScenarioConfig,
    prepare_runs,
    run_scenario,
    summarise,
)
from coda.experiment.sensitivity import SensitivityConfig, run_readings
from coda.experiment.sensitivity import prepare_runs as prepare_readings
from coda.experiment.sensitivity import summarise as summarise_readings
from coda.report.eliminator_report import report_markdown
from coda.report.sensitivity_report import report_markdown as readings_markdown
from coda.workload.traces import load_trace

JOBS = 300


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    cfg = ScenarioConfig(
        out=tmp_path_factory.mktemp("elim"), seeds=2, shares=(0.005, 0.05), jobs=JOBS
    )
    cfg.validate()
    arms = prepare_runs(cfg)
    return cfg, arms, summarise(cfg, run_scenario(cfg, arms))


@pytest.mark.slow
def test_each_share_runs_three_arms_per_seed(scenario):
    cfg, arms, res = scenario
    assert len(arms) == 2 * 2 * 3 and res["errors"] == []
    assert {a.arm for a in arms} == {WITH, WITHOUT, QUIET}
    # The quiet arm is the ablation on the same month with no CPU bandwidth.
    quiet = next(a for a in arms if a.arm == QUIET)
    assert quiet.run.policy == WITHOUT
    table = load_trace(quiet.run.config.trace).jobs
    cpu = table.gpus == 0
    assert table.cpu_bw is not None and (table.cpu_bw[cpu] == 0).all()
    plain = load_trace(next(a for a in arms if a.arm == WITH).run.config.trace).jobs
    assert (plain.submit == table.submit).all() and (plain.cpu_bw[cpu] > 0).all()


def test_heavy_jobs_raise_what_cpu_co_runners_cost(scenario):
    _, _, res = scenario
    by = {s["share"]: s for s in res["shares"]}
    for s in by.values():
        # The quiet month loses no more to interference than the plain one.
        arms = s["arms"]
        lost = {a: arms[a]["gpu_busy_lost_contention"]["mean"] for a in (WITHOUT, QUIET)}
        assert lost[QUIET] <= lost[WITHOUT] + 1e-9
        assert s["effects"]["cpu_caused"]["mean"] <= 1e-9
    assert by[0.05]["effects"]["cpu_caused"]["mean"] <= by[0.005]["effects"]["cpu_caused"]["mean"]


def test_the_report_sets_the_paper_beside_ours_and_says_why(scenario):
    _, _, res = scenario
    md = report_markdown(res, "coda experiment eliminator")
    assert "| paper, 0.5% | -2.3" in md and "| 0.5% |" in md and "| 5% |" in md
    v = res["verdict"]
    assert ("MISSED" in md) == (not v["met"])
    if not v["met"]:
        assert v["why"] and "why:" in md
    json.dumps(res, allow_nan=False)


def test_bad_shares_are_one_line(tmp_path):
    runner = CliRunner()
    many = ",".join(f"0.{k:03d}" for k in range(1, 30))
    for bad, says in (
        ("0.5,0.5", "given twice"),
        ("2", "[0, 1]"),
        ("x", "is not a number"),
        (many, "at most 20 values"),
    ):
        result = runner.invoke(
            main, ["experiment", "eliminator", "--heavy-shares", bad, "--out", str(tmp_path)]
        )
        assert result.exit_code == 2 and says in result.output, (bad, result.output)
        assert "Traceback" not in result.output


def test_a_verdict_needs_a_measurement(tmp_path):
    # One job: nothing queues, no oracle busy share under some readings; the verdicts
    # say so instead of "missed" or "out of reach".
    runner = CliRunner()
    out = tmp_path / "e"
    args = ["--heavy-shares", "-0,0.005", "--seeds", "1", "--jobs", "1", "--workers", "1"]
    result = runner.invoke(main, ["experiment", "eliminator", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    res = json.loads((out / "results.json").read_text())
    assert res["setting"]["shares"] == [0.0, 0.005]  # -0 is 0
    assert (out / "heavy-0").is_dir()
    assert any(c["met"] is None for c in res["verdict"]["checks"])
    assert "NOT MEASURED" in (out / "report.md").read_text()


def test_the_readings_change_what_gpus_read_not_what_is_decided(tmp_path):
    cfg = SensitivityConfig(out=tmp_path, seeds=1, jobs=JOBS, speech_readings=("dnn",))
    runs, marginals = prepare_readings(cfg)
    res = summarise_readings(cfg, run_readings(cfg, runs), marginals)
    assert res["errors"] == []
    rows = {r["busy_reading"]: r for r in res["readings"]}
    assert set(rows) == {"mid", "low", "high"}
    for policy in ("fifo", "coda", "oracle"):
        busy = {k: rows[k]["policies"][policy]["gpu_util_busy"]["mean"] for k in rows}
        assert busy["low"] <= busy["mid"] <= busy["high"], policy
        grants = {rows[k]["policies"][policy]["dnn_fewer_cores_share"]["mean"] for k in rows}
        assert len(grants) == 1, policy  # the same decisions under each reading
    assert rows["mid"]["speech_share_of_dnn"] == pytest.approx(0.864, abs=0.01)
    for r in rows.values():
        gain, oracle = r["gain_pct"], r["oracle_gain_pct"]
        assert r["coda_meets_gain"] == (gain is not None and gain >= 36.8)
        assert r["oracle_meets_gain"] == (oracle is not None and oracle >= 36.8)
    v = res["verdict"]
    assert v["gain_out_of_reach"] == (v["measured"] and not v["gain_reachable_under"])
    md = readings_markdown(res, "coda experiment sensitivity")
    assert "62.1% is" in md and "+36.8% over FIFO is" in md
    assert "| 86.4% of DNN jobs | low |" in md


def test_the_commands_default_to_the_presets_reading():
    from coda.cli.eliminator_command import eliminator
    from coda.cli.paper_command import paper
    from coda.workload.busy_derivation import DEFAULT_READING, READINGS
    from coda.workload.generate import PRESETS
    from coda.workload.generate.paper import DEFAULT_SPEECH_READING, SPEECH_READINGS

    for command in (paper, eliminator):
        (opt,) = [p for p in command.params if p.name == "speech_reading"]
        assert opt.default == DEFAULT_SPEECH_READING
        assert tuple(opt.type.choices) == SPEECH_READINGS
    (busy,) = [p for p in paper.params if p.name == "busy_reading"]
    assert busy.default == DEFAULT_READING and tuple(busy.type.choices) == READINGS
    assert PRESETS["paper"].speech_reading == DEFAULT_SPEECH_READING
    assert {p.speech_reading for p in PRESETS.values()} == set(SPEECH_READINGS)


def test_an_open_reading_also_runs_its_most_nlp_mix(tmp_path):
    cfg = SensitivityConfig(out=tmp_path, seeds=1, jobs=JOBS)
    readings = cfg.readings()
    corner = [r for r in readings if r.mix == "most-nlp"]
    assert {r.speech for r in corner} == {"all"} and len(corner) == 3
    weights = dict(corner[0].domain_weights() or ())
    assert weights["speech"] == pytest.approx(0.568, abs=1e-3)
    assert weights["nlp"] == pytest.approx(1 - weights["speech"]) and weights["cv"] == 0.0
    params = cfg.paper_config(corner[0]).params()
    assert dict(params.domain_weights) == weights  # the month, its mix replaced
    assert all(r.domain_weights() is None for r in readings if r.mix == "fitted")
    cfg.validate()
