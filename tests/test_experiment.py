"""The headline experiment: statistics, decomposition, verdict, files, and the CLI."""

from __future__ import annotations

import csv
import json
import math
import shlex
from pathlib import Path

import pytest

from coda.cli import main
from coda.experiment import (
    PAPER_GAIN_PCT,
    ExperimentConfig,
    RunRecord,
    ablation_chain,
    analyse,
    decompose,
    judge_load,
    mean_ci,
    paired,
    relative_gain_pct,
    robustness,
    run_experiment,
    signed,
    t_critical,
)
from coda.policy import POLICIES
from coda.policy.baselines import static_shared
from coda.report.experiment import REPORT_FILES, fmt_estimate, write_experiment
from coda.study.config import RunConfig

HEADER = "job_id,submit_s,duration_s,gpus,cores,mem_mib,nodes,censored"
CLUSTER = "4x8g96c,2x0g32c"
BASELINES = "static-separate,static-shared"


def trace_rows() -> list[str]:
    """48 jobs, 4 minutes apart: 36 DNN jobs of 1-8 GPUs and 12 CPU jobs."""
    rows = []
    for i in range(48):
        submit = i * 240
        if i % 4 == 3:
            rows.append(f"cpu-{i},{submit},{900 + 60 * (i % 5)},0,{4 + i % 12},4096,1,0")
        else:
            gpus = (1, 2, 4, 8)[i % 4]
            rows.append(f"dnn-{i},{submit},{2400 + 300 * (i % 7)},{gpus},{6 * gpus},16384,1,0")
    return rows


@pytest.fixture
def trace(tmp_path) -> Path:
    p = tmp_path / "small.csv"
    p.write_text("\n".join([HEADER, *trace_rows()]) + "\n", encoding="utf-8")
    return p


def headline(runner, trace, out, *extra):
    args = ["experiment", "headline", "--trace", str(trace), "--cluster", CLUSTER]
    args += ["--loads", "0.5,0.9", "--seeds", "2", "--workers", "1", "--out", str(out)]
    return runner.invoke(main, [*args, *extra])


def assert_user_error(result, *needles: str) -> str:
    """Exit != 0, no traceback, one 'Error' line holding every needle."""
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    for needle in needles:
        assert needle in text, (needle, text)
    return text


# ---------------------------------------------------------------- statistics


def test_t_critical_table_and_normal_fallback():
    assert t_critical(1) == 12.706
    assert t_critical(4) == 2.776
    assert t_critical(30) == 2.042
    assert t_critical(31) == 1.96
    assert t_critical(1000) == 1.96
    with pytest.raises(ValueError):
        t_critical(0)


def test_mean_ci_on_known_numbers():
    est = mean_ci([1, 2, 3, 4, 5])
    sd = math.sqrt(2.5)
    assert est.n == 5 and est.mean == 3.0
    assert est.sd == pytest.approx(sd)
    assert est.half == pytest.approx(2.776 * sd / math.sqrt(5))  # t(4) = 2.776
    assert est.low == pytest.approx(3.0 - 1.963, abs=1e-3)
    assert est.high == pytest.approx(3.0 + 1.963, abs=1e-3)
    # Two values: t(1) = 12.706, sd = |a - b| / sqrt 2.
    two = mean_ci([10.0, 12.0])
    assert two.half == pytest.approx(12.706 * math.sqrt(2) / math.sqrt(2))
    # 40 values: normal approximation.
    many = mean_ci([0.0, 1.0] * 20)
    assert many.half == pytest.approx(1.96 * many.sd / math.sqrt(40))


def test_mean_ci_leaves_out_missing_values():
    est = mean_ci([None, 4.0, float("nan"), 6.0])
    assert est.n == 2 and est.mean == 5.0
    one = mean_ci([7.0, None])
    assert (one.n, one.mean, one.half, one.low) == (1, 7.0, None, None)
    none = mean_ci([None])
    assert (none.n, none.mean) == (0, None)
    assert fmt_estimate(none, "pct") == "—"
    assert fmt_estimate(one, "duration") == "7.00 s"


def test_relative_gain_and_signed_formatting():
    assert relative_gain_pct(0.72, 0.6) == pytest.approx(20.0)
    assert relative_gain_pct(0.5, 0.0) is None
    assert relative_gain_pct(None, 0.5) is None
    assert signed(-0.0001, 2) == "0.00"
    assert signed(1.234, 1) == "+1.2"


def test_estimate_formatting():
    est = mean_ci([0.80, 0.82, 0.84])
    assert fmt_estimate(est, "pct").startswith("82.0% ± ")
    gain = mean_ci([20.0, 22.0])
    assert fmt_estimate(gain, "gain").startswith("+21.0% [")
    # One unit for a duration and its CI, chosen from the larger.
    wide = mean_ci([-60.0, 58.0])  # mean -1 s, half-width 12.5 min
    assert fmt_estimate(wide, "duration") == "0.0 ± 12.5 min"


# ---------------------------------------------------------------- fake summaries


def summary(
    policy: str,
    seed: int,
    *,
    load: float = 1.0,
    eff: float = 0.60,
    alloc: float | None = None,
    lost_cores: float | None = 0.02,
    lost_contention: float | None = 0.03,
    dnn_queue: float = 600.0,
    cpu_queue: float = 100.0,
    dnn_jct: float = 5000.0,
) -> dict:
    """A summary with the keys the experiment reads; allocated = effective + losses."""
    if alloc is None:
        alloc = eff + (lost_cores or 0.0) + (lost_contention or 0.0)
    s = {
        "policy": policy,
        "load": load,
        "seed": seed,
        "trace": "fake.csv",
        "cluster": {"spec": "fake", "gpus": 8, "cores": 96},
        "gpu_util_effective": eff,
        "gpu_util_allocated": alloc,
        "cpu_util": 0.5,
        "cpu_util_useful": 0.3,
        "dnn_queue_delay_s": {"n": 10, "mean": dnn_queue, "p50": dnn_queue, "p95": dnn_queue},
        "cpu_queue_delay_s": {"n": 5, "mean": cpu_queue, "p50": cpu_queue, "p95": cpu_queue},
        "dnn_jct_s": {"n": 10, "mean": dnn_jct},
        "cpu_jct_s": {"n": 5, "mean": 900.0},
        "jobs": {"dnn": 10, "cpu": 5, "finished": 15, "unfinished": 0},
        "notes": ["a shared note"],
    }
    if lost_cores is not None:
        s["gpu_lost_cores"] = lost_cores
    if lost_contention is not None:
        s["gpu_lost_contention"] = lost_contention
    return s


def records(*summaries: dict, kind: str = "main") -> list[RunRecord]:
    return [RunRecord.from_summary(kind, s) for s in summaries]


def base_and_coda(seeds=(0, 1, 2), kind: str = "main", base_kw=None, **coda_kw) -> list:
    """static-separate at 60% effective util; coda as given (default: +25%, all better)."""
    base_kw = base_kw or {}
    coda = {"eff": 0.75, "cpu_queue": 80.0, "dnn_jct": 4800.0, **coda_kw}
    out = []
    for seed in seeds:
        jitter = 0.01 * seed
        out += records(
            summary("static-separate", seed, **{"eff": 0.60 + jitter, **base_kw}),
            summary("coda", seed, **{**coda, "eff": coda["eff"] + jitter}),
            kind=kind,
        )
    return out


def test_paired_differences_pair_by_seed():
    recs = base_and_coda()
    est = paired(recs, "coda", "static-separate", 1.0, lambda a, b: a.get("gpu_util_effective"))
    assert est.n == 3
    # A seed that only one policy has is left out of paired comparisons.
    recs += records(summary("coda", 9, eff=0.99))
    est = paired(
        recs,
        "coda",
        "static-separate",
        1.0,
        lambda a, b: a.get("gpu_util_effective") - b.get("gpu_util_effective"),
    )
    assert est.n == 3 and est.mean == pytest.approx(0.15)


def test_decomposition_identity_holds_exactly():
    recs = []
    for seed, (e0, c0, t0, e1, c1, t1) in enumerate(
        [(0.55, 0.05, 0.04, 0.70, 0.02, 0.01), (0.60, 0.03, 0.06, 0.74, 0.01, 0.02)]
    ):
        recs += records(
            summary("static-separate", seed, eff=e0, lost_cores=c0, lost_contention=t0),
            summary("coda", seed, eff=e1, lost_cores=c1, lost_contention=t1),
        )
    dec = decompose(recs, "static-separate", "coda", 1.0)
    assert dec is not None and dec.split and dec.seeds == 2
    assert dec.gain == pytest.approx(0.145)
    assert dec.cores == pytest.approx(((0.05 - 0.02) + (0.03 - 0.01)) / 2)
    assert dec.contention == pytest.approx(((0.04 - 0.01) + (0.06 - 0.02)) / 2)
    assert dec.allocated + dec.cores + dec.contention == pytest.approx(dec.gain)
    assert abs(dec.residual) < 1e-12
    parts = [dec.relative(v) for _, _, v in dec.terms()]
    assert sum(parts) == pytest.approx(dec.gain_pct)
    assert dec.gain_pct == pytest.approx(100 * 0.145 / 0.575)


def test_decomposition_without_the_loss_split_still_adds_up():
    recs = records(
        summary("static-separate", 0, eff=0.5, alloc=0.6, lost_cores=None, lost_contention=None),
        summary("coda", 0, eff=0.6, alloc=0.65, lost_cores=None, lost_contention=None),
    )
    dec = decompose(recs, "static-separate", "coda", 1.0)
    assert not dec.split and dec.residual is None
    assert [k for k, _, _ in dec.terms()] == ["allocated", "less_lost"]
    assert dec.allocated + dec.less_lost == pytest.approx(dec.gain)
    assert dec.less_lost == pytest.approx(0.05)
    assert decompose(recs, "static-separate", "oracle", 1.0) is None


def test_ablation_chain_steps_add_up_to_the_total():
    recs = []
    for seed in (0, 1):
        recs += records(
            summary("static-separate", seed, eff=0.60),
            summary("coda-no-colocation", seed, eff=0.62, lost_cores=0.01),
            summary("coda-no-eliminator", seed, eff=0.70, lost_contention=0.06),
            summary("coda", seed, eff=0.74, lost_contention=0.02),
            summary("oracle", seed, eff=0.80, lost_cores=0.0, lost_contention=0.0),
        )
    policies = ("static-separate", "coda-no-colocation", "coda-no-eliminator", "coda", "oracle")
    steps = ablation_chain(recs, 1.0, policies)
    assert [s.step.other for s in steps] == list(policies[1:])
    core = steps[:3]
    assert sum(s.step.gain_pct for s in core) == pytest.approx(core[-1].cumulative_pct)
    assert core[-1].cumulative_pct == pytest.approx(100 * 0.14 / 0.60)
    assert steps[-1].step.base == "coda" and "upper bound" in steps[-1].label
    # A missing middle step is skipped: the chain links what ran.
    assert [s.step.other for s in ablation_chain(recs, 1.0, policies[:1] + policies[3:4])] == [
        "coda"
    ]
    assert ablation_chain(recs, 1.0, ("static-separate", "static-shared")) == []


# ---------------------------------------------------------------- verdict


def test_verdict_met():
    v = judge_load(base_and_coda(), 1.0)
    assert v.status == "met", v.summary
    assert [c.met for c in v.conditions] == [True, True, True, True]
    assert "MET" in v.summary and "NOT" not in v.summary


@pytest.mark.parametrize(
    ("coda_kw", "base_kw", "failed", "needle"),
    [
        ({"eff": 0.66}, {}, "gpu_gain", "points short of 20.8%"),
        ({"cpu_queue": 150.0}, {}, "cpu_queue", "longer by 50.0 s"),
        ({"dnn_jct": 5400.0}, {}, "dnn_jct", "longer by 6.7 min"),
        ({}, {"dnn_queue": 30.0}, "stress", "not above 60 s"),
    ],
)
def test_verdict_names_the_failed_condition_and_by_how_much(coda_kw, base_kw, failed, needle):
    v = judge_load(base_and_coda(base_kw=base_kw, **coda_kw), 1.0)
    assert v.status == "not met"
    assert [c.key for c in v.failed()] == [failed]
    detail = v.failed()[0].detail
    assert needle in detail, detail
    assert "NOT MET" in v.summary and v.failed()[0].label in v.summary


def test_a_missed_gain_points_at_the_decomposition():
    v = judge_load(base_and_coda(eff=0.66), 1.0)
    gain = v.failed()[0]
    assert gain.value == pytest.approx(100 * 0.06 / 0.61, rel=0.02)
    assert gain.target == PAPER_GAIN_PCT
    assert "decomposition" in gain.detail and "more GPUs allocated" in gain.detail


def test_verdict_reports_a_mean_that_meets_but_is_not_significant():
    recs = []
    for seed, eff in enumerate((0.70, 0.80)):  # gains +16.7% and +33.3%: mean above 20.8
        recs += records(summary("static-separate", seed), summary("coda", seed, eff=eff))
    v = judge_load(recs, 1.0)
    gain = next(c for c in v.conditions if c.key == "gpu_gain")
    assert gain.met and "not significant" in gain.detail


def test_verdict_not_judged_without_coda():
    v = judge_load(records(summary("static-separate", 0)), 1.0)
    assert v.status == "not judged" and "coda" in v.summary
    v = judge_load(base_and_coda(), 2.0)  # no runs at that load
    assert v.status == "not judged"


def test_robustness_per_seed():
    recs = base_and_coda(seeds=(0, 1), kind="robustness")
    recs += records(
        summary("static-separate", 2, eff=0.6),
        summary("coda", 2, eff=0.7, cpu_queue=500.0),  # better GPU, but CPU jobs wait longer
        kind="robustness",
    )
    rob = robustness(recs, 1.0, 0.3, 0.1)
    assert [r.holds for r in rob.rows] == [True, True, False]
    assert rob.rows[2].gpu_better and rob.rows[2].cpu_queue_ok is False
    assert rob.status == "does not survive" and "2 of 3" in rob.summary
    assert robustness(base_and_coda(seeds=(0, 1), kind="robustness"), 1.0, 0.3, 0.1).status == (
        "survives"
    )
    assert robustness(base_and_coda(), 1.0, 0.3, 0.1) is None  # no robustness runs


def test_analyse_on_fake_records():
    cfg = ExperimentConfig(loads=(1.0,), seeds=3, policies=("static-separate", "coda"))
    recs = base_and_coda() + base_and_coda(kind="robustness")
    a = analyse(recs, cfg, ("static-separate", "coda"))
    assert a.headline.status == "met" and a.met_at() == [1.0]
    assert a.stats[("coda", 1.0)]["gpu_util_effective"].mean == pytest.approx(0.76)
    assert a.gains[("coda", 1.0)]["gpu_gain_pct"].n == 3
    assert a.robustness.status == "survives"
    assert a.notes == [("a shared note", 12)]
    d = a.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["verdict"]["headline"]["status"] == "met"


# ---------------------------------------------------------------- running and files


@pytest.mark.slow
def test_cli_writes_every_output(runner, trace, tmp_path):
    out = tmp_path / "exp"
    result = headline(runner, trace, out, "--policies", BASELINES)
    assert result.exit_code == 0, result.output
    for name in REPORT_FILES:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    printed = " ".join(result.output.split())
    assert "VERDICT" in printed and "not judged" in printed
    assert "static-shared" in printed

    data = json.loads((out / "results.json").read_text())
    assert {"experiment", "verdict", "aggregates", "gains_vs_baseline", "decomposition",
            "robustness", "runs", "errors", "notes"} <= set(data)  # fmt: skip
    exp = data["experiment"]
    assert exp["loads"] == [0.5, 0.9] and exp["seeds"] == [0, 1]
    assert exp["headline_load"] == 0.9 and exp["policies_run"] == BASELINES.split(",")
    assert exp["robustness"]["policies"] == BASELINES.split(",")
    # 2 policies x 2 loads x 2 seeds, plus 2 policies x 2 seeds in the robustness sweep.
    assert len(data["runs"]) == exp["runs"] == 12 and data["errors"] == []
    kinds = [r["kind"] for r in data["runs"]]
    assert kinds.count("main") == 8 and kinds.count("robustness") == 4
    rob = [r for r in data["runs"] if r["kind"] == "robustness"]
    assert all(r["perturb"] == 0.3 and r["noise"] == 0.1 for r in rob)
    assert all(r["load"] == 0.9 for r in rob)
    cell = data["aggregates"][0]
    assert set(cell["gpu_util_effective"]) == {
        "n",
        "mean",
        "ci95_low",
        "ci95_high",
        "ci95_half",
        "sd",
    }
    assert cell["gpu_util_effective"]["n"] == 2
    assert data["verdict"]["headline"]["status"] == "not judged"

    with (out / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12
    assert {"kind", "policy", "load", "seed", "gpu_util_effective", "cpu_queue_mean"} <= set(
        rows[0]
    )

    md = (out / "report.md").read_text()
    assert md.index("## Verdict") < md.index("## What was run") < md.index("## Results per load")
    assert "coda experiment headline" in md and "## Robustness" in md


@pytest.mark.slow
def test_reproduce_command_reruns_the_same_experiment(runner, trace, tmp_path):
    out = tmp_path / "first"
    assert headline(runner, trace, out, "--policies", BASELINES).exit_code == 0
    first = json.loads((out / "results.json").read_text())
    args = shlex.split(first["experiment"]["command"])
    assert args[:3] == ["coda", "experiment", "headline"]
    args[args.index("--out") + 1] = str(tmp_path / "again")
    result = runner.invoke(main, [*args[1:], "--workers", "1"])
    assert result.exit_code == 0, result.output
    again = json.loads((tmp_path / "again" / "results.json").read_text())

    def key(run):
        return {k: v for k, v in run["metrics"].items() if k != "wall_seconds"}

    assert [key(r) for r in first["runs"]] == [key(r) for r in again["runs"]]


def test_worker_processes_give_the_inline_results(trace, tmp_path):
    cfg = ExperimentConfig(
        base=RunConfig(trace=str(trace), cluster=CLUSTER),
        loads=(0.9,),
        seeds=2,
        policies=("static-separate", "static-shared"),
        robustness=False,
    )
    inline = run_experiment(cfg)
    cfg.workers = 2
    seen = []
    pooled = run_experiment(cfg, progress=lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)

    def key(rec):
        return (rec.policy, rec.seed, {k: v for k, v in rec.metrics.items() if k != "wall_seconds"})

    assert [key(r) for r in inline.records] == [key(r) for r in pooled.records]


@pytest.mark.slow
def test_with_coda_registered_everything_is_judged(trace, tmp_path, monkeypatch):
    # Stand-ins, so that the coda rows, decomposition, chain and plots have runs to show.
    for name in ("coda", "coda-no-colocation", "oracle"):
        monkeypatch.setitem(POLICIES, name, static_shared)
    cfg = ExperimentConfig(
        base=RunConfig(trace=str(trace), cluster=CLUSTER),
        loads=(0.5, 0.9),
        seeds=2,
        policies=("static-separate", "static-shared", "coda", "coda-no-colocation", "oracle"),
        workers=1,
    )
    result = run_experiment(cfg)
    assert not result.errors
    a = result.analysis
    assert a.headline.status in ("met", "not met", "undetermined")
    assert len(a.headline.conditions) == 4
    for load in cfg.loads:
        dec = a.decomposition[load]
        assert dec is not None and dec.seeds == 2
        assert dec.allocated + dec.less_lost == pytest.approx(dec.gain)
        if dec.split:  # the engine reports the loss split
            assert abs(dec.residual) < 1e-6
        assert [s.step.other for s in a.chain[load]] == ["coda-no-colocation", "coda", "oracle"]
    assert [r.seed for r in a.robustness.rows] == [0, 1]
    paths = write_experiment(result, tmp_path / "judged")
    assert [p.name for p in paths] == list(REPORT_FILES)
    md = (tmp_path / "judged" / "report.md").read_text()
    assert "Ablation chain" in md and "coda-no-colocation" in md
    if a.headline.status == "not met":  # says how far even the oracle gets
        assert "Why: the `oracle`" in md and "pp to too few cores" in md
    assert "Not reported by these runs" in md or "allocator" in md


def test_a_failing_run_is_reported_with_its_config(runner, trace, tmp_path, monkeypatch):
    def broken(options):
        raise RuntimeError("policy exploded")

    monkeypatch.setitem(POLICIES, "coda", broken)
    out = tmp_path / "exp"
    result = headline(runner, trace, out, "--policies", "static-separate,coda", "--no-robustness")
    text = assert_user_error(result, "4 of 8 runs failed", "results.json")
    assert "policy exploded" in text and "seed 1" in text
    data = json.loads((out / "results.json").read_text())
    assert len(data["errors"]) == 4
    err = data["errors"][0]
    assert err["policy"] == "coda" and "policy exploded" in err["error"]
    assert err["config"]["cluster"] == CLUSTER and err["config"]["trace"] == str(trace)
    assert "RuntimeError" in err["traceback"]
    assert "## Failed runs" in (out / "report.md").read_text()


def test_unregistered_known_policy_is_skipped_with_a_warning(runner, trace, tmp_path, monkeypatch):
    monkeypatch.delitem(POLICIES, "oracle", raising=False)
    out = tmp_path / "exp"
    result = headline(runner, trace, out, "--policies", "static-separate,oracle", "--seeds", "1")
    assert result.exit_code == 0, result.output
    assert "skipped: oracle" in " ".join(result.output.split())
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"]["policies_skipped"] == ["oracle"]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--policies", "static-separate,cdoa"], ["--policies", "unknown policy 'cdoa'"]),
        (["--policies", "static-shared"], ["--policies", "must include static-separate"]),
        (["--policies", "static-separate,static-separate"], ["named twice"]),
        (["--loads", "0.8,abc"], ["--loads", "bad load 'abc'"]),
        (["--loads", "0.8,-1"], ["--loads", "bad load '-1'", "in (0, 1000]"]),
        (["--loads", ","], ["--loads", "no loads"]),
        (["--headline-load", "0.7"], ["--headline-load", "0.7 is not among"]),
        (["--loads", "50"], ["offer"]),  # unreachable load: one clear line from the loader
    ],
)
def test_bad_input_is_one_clear_error(runner, trace, tmp_path, args, needles):
    result = headline(runner, trace, tmp_path / "x", *args)
    assert_user_error(result, *needles)
    assert not (tmp_path / "x" / "results.json").exists()


def test_cli_defaults_match_the_experiment_module():
    from coda.cli import headline as command
    from coda.experiment import DEFAULT_LOADS, DEFAULT_NOISE, DEFAULT_PERTURB, DEFAULT_POLICIES

    params = {p.name: p for p in command.params}
    assert params["policies"].default == ",".join(DEFAULT_POLICIES)
    assert tuple(float(x) for x in params["loads"].default.split(",")) == DEFAULT_LOADS
    assert (params["perturb"].default, params["noise"].default) == (DEFAULT_PERTURB, DEFAULT_NOISE)
    # simulate's single-run options are replaced by --loads and --seeds here.
    assert not {"load", "native_time", "seed"} & set(params)
    assert {"trace", "fmt", "cluster", "profiles", "warmup"} <= set(params)
