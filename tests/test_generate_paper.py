"""The paper workload generator: seeded, every marginal the paper publishes matched,
every parameter sourced, every job fitting one paper server, and the CLI around it."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import pytest
from cli_errors import one_error_line
from click.testing import CliRunner

from coda.cli import main
from coda.study.clusters import resolve_cluster
from coda.workload.generate import PRESETS, generate_preset, write_csv
from coda.workload.generate.arrivals import daily_poisson
from coda.workload.generate.paper import (
    PaperParams,
    describe,
    generate,
    marginals,
    parameter_table,
)
from coda.workload.jobs import JobTable
from coda.workload.perf import build_workload, load_profile_set
from coda.workload.traces import bundled_trace_path, load_trace

PAPER = PaperParams()
COLUMNS = ("ids", "submit", "duration", "gpus", "cores", "mem_mib", "nodes", "flags")
OPTIONAL = ("time_limit", "user", "model", "cpu_bw")

# Tolerances at 100,000 jobs. Shares the generator makes exact may be off by rounding
# only; drawn ones by sampling error (a share p of 25,000 DNN jobs has a standard error
# of at most 0.0032, so 0.01 is three of them).
EXACT = 1e-4
DRAWN = 0.01


def same_columns(a: JobTable, b: JobTable) -> None:
    for name in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, list):
            assert x == y, name
        else:
            assert x.dtype == y.dtype and np.array_equal(x, y), name
    for name in OPTIONAL:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if isinstance(x, list):
            assert x == y, name
        elif x is not None:
            assert np.array_equal(x, y, equal_nan=True), name


@pytest.fixture(scope="module")
def seed0() -> JobTable:
    return generate(PAPER, 0)


# ---- determinism ---------------------------------------------------------------------


def test_the_same_seed_gives_the_same_table(seed0):
    same_columns(seed0, generate(PAPER, 0))


def test_different_seeds_give_different_tables(seed0):
    other = generate(PAPER, 1)
    assert not np.array_equal(seed0.submit, other.submit)
    assert not np.array_equal(seed0.duration, other.duration)
    assert seed0.user != other.user and seed0.model != other.model


def test_the_arrival_scale_moves_only_the_arrival_times(seed0):
    fast = generate(dataclasses.replace(PAPER, arrival_scale=2.0), 0)
    for name in (*COLUMNS, *OPTIONAL):
        if name != "submit":
            a, b = getattr(seed0, name), getattr(fast, name)
            assert (a == b) if isinstance(a, list) else np.array_equal(a, b, equal_nan=True)
    span0, span2 = seed0.submit[-1], fast.submit[-1]
    assert span2 == pytest.approx(span0 / 2, rel=0.01)


def test_generation_is_fast():
    best = math.inf
    for _ in range(2):
        t0 = time.perf_counter()
        generate(PAPER, 7)
        best = min(best, time.perf_counter() - t0)
    assert best < 2.0, f"100,000 jobs took {best:.2f} s"


# ---- the paper's marginals -------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_marginals_match_the_paper(seed, seed0):
    table = seed0 if seed == 0 else generate(PAPER, seed)
    m = marginals(table)
    assert m["jobs"]["ours"] == 100_000
    assert m["cpu_jobs"]["ours"] == 75_000 and m["dnn_jobs"]["ours"] == 25_000
    assert m["cpu_job_share"]["ours"] == pytest.approx(0.75, abs=EXACT)
    assert m["span_days"]["ours"] == pytest.approx(30, abs=0.5)
    for key in ("dnn_cores_1_2_per_gpu", "dnn_cores_over_10", "cpu_bw_heavy_share"):
        assert m[key]["ours"] == pytest.approx(m[key]["paper"], abs=EXACT), key
    for key in ("dnn_over_1h", "dnn_over_2h"):
        assert m[key]["ours"] == pytest.approx(m[key]["paper"], abs=DRAWN), key
    assert m["dnn_nlp_speech_share"]["ours"] > 0.75  # "mostly"
    # Figure 2b read as of all jobs (the preset's reading): at least 56.8% of DNN jobs
    # train speech, in the fitted share exactly.
    speech = dict(PAPER.domain_weights)["speech"] / sum(w for _, w in PAPER.domain_weights)
    assert m["speech_share_of_dnn"]["ours"] == pytest.approx(speech, abs=EXACT)
    assert speech >= 0.568
    assert m["users"]["ours"] == 80
    assert m["cpu_only_users"]["detail"] == [f"u{k}" for k in range(15, 21)]


def test_marginals_computed_independently(seed0):
    """The marginals function against a plain recomputation from the columns."""
    t = seed0
    dnn = t.gpus > 0
    per_gpu = t.cores[dnn] / t.gpus[dnn]
    assert np.mean((per_gpu >= 1) & (per_gpu <= 2)) == pytest.approx(0.761, abs=EXACT)
    assert np.mean(t.cores[dnn] > 10) == pytest.approx(0.153, abs=EXACT)
    assert np.mean(t.duration[dnn] > 7200) == pytest.approx(0.396, abs=DRAWN)
    assert np.mean(t.duration[dnn] > 3600) == pytest.approx(0.685, abs=DRAWN)
    # A heavy job takes 25-95% of a paper server's memory bandwidth (28 cores x 2.0 GB/s
    # in coda.json) at full quota, Figure 7's pressures; the others stay below 25%.
    server = 28 * 2.0
    draw = t.cpu_bw[~dnn] * t.cores[~dnn]
    heavy = draw >= 0.25 * server
    assert heavy.sum() == 375  # 0.5% of 75,000
    assert draw[heavy].max() <= 0.95 * server + 0.001 * 16
    assert t.cpu_bw[~dnn][~heavy].max() <= 1.0 * 1.25  # light and medium classes only
    # Light and medium jobs keep their class where 25% of a server allows it.
    assert np.median(t.cpu_bw[~dnn][~heavy]) < 1.0


def test_cpu_only_users_submit_no_dnn_job(seed0):
    users = np.array(seed0.user)
    cpu_only = [f"u{k}" for k in PAPER.cpu_only_users]
    mine = np.isin(users, cpu_only)
    assert mine.sum() > 1000  # they do submit (CPU) jobs
    assert not np.any(seed0.gpus[mine] > 0)
    # Everyone else submits some DNN jobs.
    others = set(seed0.user) - set(cpu_only)
    assert others == set(users[seed0.gpus > 0].tolist())


def test_every_job_fits_one_paper_server(seed0):
    nodes = resolve_cluster("paper", 2.0).nodes  # the paper cluster preset
    cores = min(n.cores for n in nodes)
    gpus = min(n.gpus for n in nodes)
    assert len(nodes) == 80 and sum(n.gpus for n in nodes) == 400
    assert cores == 28 and gpus >= 4
    assert seed0.cores.min() >= 1 and seed0.cores.max() <= cores
    assert seed0.gpus.max() <= gpus
    assert np.all(seed0.nodes == 1)
    assert set(np.unique(seed0.gpus).tolist()) == {0, 1, 2, 4}


def test_models_come_from_the_profile_set_and_only_gpu_jobs_name_one(seed0):
    profiles = load_profile_set("coda")
    named = {m for m, g in zip(seed0.model, seed0.gpus.tolist(), strict=True) if g}
    assert named <= set(profiles.models) and len(named) == len(profiles.models)
    assert all(m == "" for m, g in zip(seed0.model, seed0.gpus.tolist(), strict=True) if not g)
    assert np.all(np.isnan(seed0.cpu_bw[seed0.gpus > 0]))
    assert not np.any(np.isnan(seed0.cpu_bw[seed0.gpus == 0]))


def test_time_limits_cover_runtimes_in_whole_hours(seed0):
    tl, d = seed0.time_limit, seed0.duration
    assert np.all(tl >= d) and np.all(tl <= PAPER.runtime_cap_s)
    capped = tl == PAPER.runtime_cap_s
    assert np.all(tl[~capped] % 3600 == 0)
    # f is log-uniform on [1, 4]: half the jobs ask for more than twice their runtime,
    # a little more after rounding up (little for long jobs, a lot for short ones).
    long = d > 10 * 3600
    assert long.sum() > 500
    assert 0.45 < np.mean(tl[long] > 2 * d[long]) < 0.6
    assert np.mean(tl > 2 * d) > 0.65  # more where runtimes are short (rounding up to hours)


def test_times_are_whole_seconds_from_zero(seed0):
    assert seed0.submit[0] == 0 and np.all(np.diff(seed0.submit) >= 0)
    assert np.all(seed0.submit == np.round(seed0.submit))
    assert np.all(seed0.duration == np.round(seed0.duration))
    assert seed0.duration.min() >= PAPER.cpu_min_runtime_s


def test_the_runtime_lognormal_passes_through_both_published_points():
    from statistics import NormalDist

    mu, sigma = PAPER.dnn_runtime_lognormal
    over = [1 - NormalDist(mu, sigma).cdf(math.log(h * 3600)) for h in (1, 2)]
    assert over == pytest.approx([0.685, 0.396], abs=1e-12)


# ---- arrivals ----------------------------------------------------------------------


def first_harmonic(submit: np.ndarray) -> tuple[float, float]:
    """(amplitude a, peak hour) of a rate 1 + a cos(2 pi (t - peak) / day) fitted to
    arrivals' times of day: E[exp(i phase)] = a / 2 exp(i peak phase)."""
    z = np.mean(np.exp(2j * np.pi * (submit % 86_400) / 86_400))
    return 2 * abs(z), (np.angle(z) / (2 * np.pi) * 24) % 24


def test_arrivals_follow_the_stated_daily_cycle(seed0):
    a, peak = first_harmonic(seed0.submit)
    assert a == pytest.approx(PAPER.daily_amplitude, abs=0.02)
    assert peak == pytest.approx(PAPER.peak_hour, abs=0.5)


def test_the_daily_amplitude_source_quotes_the_bundled_openb_traces():
    # The amplitude is fitted; its source names the openb trace's own value beside it.
    a, _ = first_harmonic(load_trace(bundled_trace_path()).jobs.submit)
    source = {name: src for name, _, src in describe(PAPER)}["daily_amplitude"]
    assert f"openb 2023 trace has {round(a, 2):g}" in source


def test_without_a_cycle_arrivals_are_a_plain_poisson_process():
    rng = np.random.default_rng(3)
    t = daily_poisson(rng, 86_400, 0.1, 0.0, 0.0)  # about 10 whole days
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(10.0, rel=0.02)
    assert gaps.std() == pytest.approx(10.0, rel=0.03)  # exponential: sd == mean
    a, _ = first_harmonic(t)
    assert a < 0.03


def test_a_strong_cycle_still_converges_and_keeps_the_mean_rate():
    t = daily_poisson(np.random.default_rng(4), 20_000, 0.01, 0.9, 3600.0)
    assert np.all(np.diff(t) >= 0)
    assert t[-1] == pytest.approx(2e6, rel=0.05)
    a, peak = first_harmonic(t)
    assert a == pytest.approx(0.9, abs=0.05) and peak == pytest.approx(1.0, abs=0.3)


# ---- parameters, sources, docs -------------------------------------------------------


def test_every_parameter_has_a_source():
    rows = describe(PAPER)
    assert [r[0] for r in rows] == [f.name for f in dataclasses.fields(PaperParams)]
    for name, value, source in rows:
        assert value, name
        assert source.startswith(("PAPER", "ASSUMPTION", "CALIBRATION", "FIT", "The bundled")), name


def test_the_docs_show_the_parameter_table():
    doc = (Path(__file__).parent.parent / "docs" / "trace-formats.md").read_text()
    between = doc.split("<!-- paper-params:begin -->\n", 1)[1].split("\n<!-- paper-params", 1)[0]
    assert between == parameter_table(PAPER)


def test_presets_register_the_paper_workload():
    assert PRESETS["paper"] == PAPER
    small = generate_preset("paper", 5, n_jobs=400, days=2.0, arrival_scale=2.0)
    assert len(small) == 400 and small.submit[-1] < 86_400 * 1.3
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        generate_preset("nope")


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"n_jobs": 0}, "n_jobs"),
        ({"n_jobs": 10**9}, "n_jobs"),
        ({"days": 0.0}, "days"),
        ({"days": math.nan}, "days"),
        ({"arrival_scale": -1.0}, "arrival_scale"),
        ({"arrival_scale": math.inf}, "arrival_scale"),
        ({"days": 3000.0, "arrival_scale": 0.01}, "days / arrival_scale"),
        ({"cpu_share": 1.5}, "cpu_share"),
        ({"daily_amplitude": 1.0}, "daily_amplitude"),
        ({"cpu_only_users": (80,)}, "cpu_only_users"),
        ({"n_users": 1, "cpu_only_users": (0,)}, "cpu_only_users"),
        ({"gpu_counts": (1, 8), "gpu_weights": (1.0, 1.0)}, "gpu_counts"),
        ({"gpu_weights": (1.0, 1.0)}, "gpu_counts"),
        ({"dnn_high_share": 0.5}, "dnn_high_share"),
        ({"dnn_over_1h": 0.3}, "dnn_over_1h"),
        ({"cpu_core_counts": (1, 32), "cpu_core_weights": (1.0, 1.0)}, "cpu_core_counts"),
        ({"domain_weights": (("nlp", -1.0),)}, "domain_weights"),
    ],
)
def test_bad_parameters_are_one_line_errors_naming_them(change, needle):
    with pytest.raises(ValueError) as e:
        dataclasses.replace(PAPER, **change)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_domain_the_profile_set_lacks_is_named():
    params = dataclasses.replace(PAPER, n_jobs=100, domain_weights=(("robotics", 1.0),))
    with pytest.raises(ValueError, match="'robotics'"):
        generate(params, 0)


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_a_bad_seed_is_refused(seed):
    with pytest.raises(ValueError, match="seed"):
        generate(PAPER, seed)


def test_marginals_of_a_trace_without_the_optional_columns():
    m = marginals(load_trace(bundled_trace_path()).jobs)
    assert m["jobs"]["ours"] == 7255
    assert m["users"]["ours"] is None and m["dnn_nlp_speech_share"]["ours"] is None
    assert m["cpu_bw_heavy_share"]["ours"] is None
    assert 0 < m["dnn_cores_1_2_per_gpu"]["ours"] < 1


# ---- files and the simulator -----------------------------------------------------------


@pytest.mark.slow
def test_a_written_workload_loads_back_with_identical_columns(tmp_path, seed0):
    path = write_csv(seed0, tmp_path / "paper.csv")
    loaded = load_trace(path)
    assert loaded.report.format == "csv" and loaded.report.skipped_bad_rows == 0
    same_columns(seed0, loaded.jobs)


def test_the_workload_uses_the_models_and_bandwidths_the_trace_names(tmp_path):
    table = generate(dataclasses.replace(PAPER, n_jobs=2000), 2)
    jobs = load_trace(write_csv(table, tmp_path / "w.csv")).jobs
    w = build_workload(jobs, load_profile_set("coda"), seed=9)
    dnn = np.flatnonzero(jobs.gpus > 0)
    assert [w.model_names[w.model[i]] for i in dnn] == [table.model[i] for i in dnn]
    cpu = jobs.gpus == 0
    assert np.array_equal(w.cpu_bw_per_core[cpu], table.cpu_bw[cpu])


# ---- the command -----------------------------------------------------------------------


def test_cli_generate_writes_a_trace_that_coda_trace_describes(tmp_path):
    out = tmp_path / "sub" / "g.csv"
    runner = CliRunner()
    args = ["trace", "generate", "--preset", "paper", "--seed", "3", "--jobs", "1200"]
    result = runner.invoke(main, [*args, "--days", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "wrote 1,200 jobs" in text and "76.1%" in text and "ids 15-20" in text
    expected = generate_preset("paper", 3, n_jobs=1200, days=2.0)
    same_columns(load_trace(out).jobs, expected)
    users = len(set(expected.user))
    for form in ([str(out)], ["--trace", str(out)], ["info", str(out)]):
        described = runner.invoke(main, ["trace", *form])
        assert described.exit_code == 0, described.output
        text = " ".join(described.output.split())
        assert "jobs loaded │ 1,200" in text and "CPU jobs │ 900" in text, form
        assert f"users │ {users}" in text and "jobs with a time limit │ 1,200" in text, form


def test_cli_trace_without_a_path_still_describes_the_bundled_trace():
    result = CliRunner().invoke(main, ["trace"])
    assert result.exit_code == 0, result.output
    assert "jobs loaded │ 7,255" in " ".join(result.output.split())


def test_cli_trace_refuses_two_different_paths(tmp_path):
    a = write_csv(generate(dataclasses.replace(PAPER, n_jobs=10), 0), tmp_path / "a.csv")
    result = CliRunner().invoke(main, ["trace", str(a), "--trace", str(bundled_trace_path())])
    assert result.exit_code == 2
    one_error_line(result, "give the trace once")


@pytest.mark.parametrize(
    ("extra", "needle", "code"),
    [
        (["--jobs", "-5"], "--jobs", 2),
        (["--jobs", "0"], "--jobs", 2),
        (["--jobs", "x"], "--jobs", 2),
        (["--days", "0"], "--days", 2),
        (["--days", "nan"], "--days", 2),
        (["--days", "-1"], "--days", 2),
        (["--arrival-scale", "0"], "--arrival-scale", 2),
        (["--arrival-scale", "inf"], "--arrival-scale", 2),
        (["--seed", "-1"], "--seed", 2),
        (["--preset", "nope"], "--preset", 2),
        (["--days", "3000", "--arrival-scale", "0.01"], "days / arrival_scale", 1),
    ],
)
def test_cli_generate_bad_values_are_one_line(tmp_path, extra, needle, code):
    out = tmp_path / "g.csv"
    result = CliRunner().invoke(main, ["trace", "generate", *extra, "--out", str(out)])
    assert result.exit_code == code, result.output
    one_error_line(result, needle)
    assert not out.exists()


def test_cli_generate_needs_an_out_file(tmp_path):
    result = CliRunner().invoke(main, ["trace", "generate"])
    assert result.exit_code == 2
    one_error_line(result, "--out")
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    bad = CliRunner().invoke(
        main, ["trace", "generate", "--jobs", "10", "--out", str(blocker / "g.csv")]
    )
    assert bad.exit_code == 2  # refused as an option, before generating
    one_error_line(bad, "is not a directory")
