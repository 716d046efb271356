"""`coda experiment regimes`: the grid's clusters and workloads, the runs, results.json
(gains from the recorded utilisations), report.md, heat maps, failures and bad options."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli_errors import one_error_line
from click.testing import CliRunner

from coda.cli import main
from coda.experiment.paper import PaperRecord
from coda.experiment.regimes import (
    BASELINES,
    CLUSTERS,
    Cell,
    CellRecord,
    OptionError,
    RegimesConfig,
    clip_cores,
    cluster_spec,
    cores_per_server,
    cpu_servers,
    params_for,
    parse_values,
    plan,
    run_all,
    write_workloads,
)
from coda.experiment.stats import t_critical
from coda.policy import POLICIES
from coda.report.regimes_plots import heatmap_name
from coda.report.regimes_report import gain_block, is_paper_cell
from coda.study.config import MAX_LOAD, PAPER_CLUSTER
from coda.workload.cluster import parse_cluster_spec
from coda.workload.generate import generate
from coda.workload.traces import load_trace

PNG = b"\x89PNG\r\n\x1a\n"
TINY = ("--cores-per-gpu", "3,5.6", "--cpu-shares", "0.25", "--loads", "0.2", "--jobs", "300")


def regimes(runner: CliRunner, out: Path, *extra: str):
    return runner.invoke(
        main, ["experiment", "regimes", "--workers", "1", "--out", str(out), *extra]
    )


# ---------------------------------------------------------------- clusters


@pytest.mark.parametrize(("r", "cores"), [(3, 15), (5.6, 28), (8, 40), (16, 80), (0.1, 1)])
def test_cores_per_server_is_five_r_rounded(r, cores):
    assert cores_per_server(r) == cores


def test_the_paper_cell_is_the_paper_cluster():
    assert cluster_spec(5.6, split=False) == PAPER_CLUSTER
    assert is_paper_cell(Cell(5.6, 0.75, 1.0))
    assert not is_paper_cell(Cell(5.6, 0.5, 1.0)) and not is_paper_cell(Cell(8, 0.75, 1.0))


def test_split_cluster_adds_cpu_servers_at_the_openb_core_ratio():
    from coda.workload.cluster import load_node_list
    from coda.workload.traces import bundled_nodes_path

    nodes = load_node_list(bundled_nodes_path()).nodes
    ratio = sum(n.cores for n in nodes if n.gpus == 0) / sum(n.cores for n in nodes if n.gpus > 0)
    assert cpu_servers() == 14  # docs/regimes.md states this number
    for r in (3, 16):
        c = cores_per_server(r)
        split = parse_cluster_spec(cluster_spec(r, split=True)).nodes
        shared = parse_cluster_spec(cluster_spec(r, split=False)).nodes
        cpu_only = [n for n in split if n.gpus == 0]
        assert sum(n.gpus for n in split) == sum(n.gpus for n in shared) == 400
        assert len(shared) == 80 and all(n.cores == c for n in split)
        # Within half a server of the openb ratio of CPU-only to GPU-server cores.
        assert abs(len(cpu_only) - ratio * len(shared)) <= 0.5


def test_workloads_keep_the_dnn_count_and_clip_to_a_server():
    p = params_for(300, 0.75)
    assert p.cpu_share == 0.75 and p.n_jobs == 1200
    table = generate(p, 0)
    assert int((table.gpus > 0).sum()) == 300
    clipped, cut_dnn, cut_cpu = clip_cores(table, 15)
    over = table.cores > 15
    assert cut_dnn == int((over & (table.gpus > 0)).sum()) > 0
    assert cut_cpu == int((over & (table.gpus == 0)).sum()) > 0
    assert clipped.cores.max() == 15
    assert np.array_equal(clipped.cores[~over], table.cores[~over])
    assert np.array_equal(clipped.duration, table.duration)
    same, a, b = clip_cores(table, 28)
    assert same is table and a == b == 0


# ---------------------------------------------------------------- the command


def test_tiny_grid_writes_every_cell_policy_and_gain(runner, tmp_path):
    out = tmp_path / "r"
    result = regimes(runner, out, *TINY)
    assert result.exit_code == 0, result.output
    # Progress: one line per finished run.
    assert sum("seed 0: done in" in line for line in result.output.splitlines()) == 8
    res = json.loads((out / "results.json").read_text())
    assert res["schema"].startswith("coda.experiment.regimes/")
    s = res["setting"]
    assert s["grid"] == {"cores_per_gpu": [3.0, 5.6], "cpu_shares": [0.25], "loads": [0.2]}
    assert s["dnn_jobs"] == 300 and s["seeds"] == 1 and s["estimates"] == "time-limits"
    assert s["cpu_partition"]["servers"] == 14
    assert "--jobs 300" in s["command"] and "--cores-per-gpu 3,5.6" in s["command"]
    specs = {c["cores_per_gpu"]: c for c in s["clusters"]}
    assert specs[5.6]["shared"] == PAPER_CLUSTER
    assert specs[3.0]["split"] == "60x4g15c,20x8g15c,14x0g15c"
    cut = {
        w["cores_per_server"]: w["clipped_dnn_jobs"] + w["clipped_cpu_jobs"] for w in s["workloads"]
    }
    assert cut[15] > 0 and cut[28] == 0
    clipped = load_trace(out / "workload-share0.25-seed0-max15c.csv", None)
    assert int(clipped.jobs.cores.max()) == 15
    assert [(c["cores_per_gpu"], c["cpu_share"], c["load"]) for c in res["cells"]] == [
        (3.0, 0.25, 0.2),
        (5.6, 0.25, 0.2),
    ]
    for cell in res["cells"]:
        assert cell["cores_per_server"] == cores_per_server(cell["cores_per_gpu"])
        assert not cell["paper_cell"]  # share 0.25
        assert cell["window_h"] > 1.0  # hours, from the rescaled arrivals
        for cluster, policies in CLUSTERS.items():
            block = cell["clusters"][cluster]
            assert block["offered_core_load"] > 0
            assert list(block["policies"]) == list(policies)
            for p in policies:
                m = block["policies"][p]
                assert m["seeds_ok"] == 1 and not m["failed"]
                assert 0 < m["gpu_util_effective"] <= 1 and m["cpu_jct_mean_s"] > 0
        for baseline, cluster in BASELINES.items():
            g = cell["gains"][baseline]
            assert g["cluster"] == cluster and g["seeds_paired"] == [0]
            pols = cell["clusters"][cluster]["policies"]
            c, b = pols["coda"], pols[baseline]
            ce, be = c["gpu_util_effective"], b["gpu_util_effective"]
            assert math.isclose(g["gpu_util_gain_rel"]["mean"], ce / be - 1)
            assert math.isclose(g["gpu_util_gain_points"]["mean"], 100 * (ce - be))
            ca, ba = c["gpu_util_allocated"], b["gpu_util_allocated"]
            assert math.isclose(g["gpu_alloc_gain_points"]["mean"], 100 * (ca - ba))
            assert math.isclose(
                g["cpu_jct_ratio"]["mean"], c["cpu_jct_mean_s"] / b["cpu_jct_mean_s"]
            )
            assert g["gpu_util_gain_rel"]["ci95_half"] is None  # one seed
    assert res["errors"] == []
    report = (out / "report.md").read_text()
    assert "## Load 0.2" in report and "1 seed, no CI" in report
    assert "| cores per GPU (cores per server) | CPU share 25% |" in report
    g0 = res["cells"][0]["gains"]
    row = next(line for line in report.splitlines() if line.startswith("| 3 (15) |"))
    assert f"{100 * g0['fifo']['gpu_util_gain_rel']['mean']:+.1f}%" in row
    for baseline in BASELINES:
        name = heatmap_name(baseline, 0.2)
        assert (out / name).read_bytes()[:8] == PNG
        assert f"]({name})" in report


def test_a_failed_run_is_recorded_and_the_others_go_on(runner, tmp_path, monkeypatch):
    def broken(options):
        raise RuntimeError("policy exploded")

    monkeypatch.setitem(POLICIES, "static-separate", broken)
    out = tmp_path / "r"
    result = regimes(runner, out, *TINY)
    assert "2 of 8 runs failed" in one_error_line(result, code=1)
    assert "FAILED (RuntimeError: policy exploded)" in result.output
    res = json.loads((out / "results.json").read_text())
    assert len(res["errors"]) == 2
    assert {(e["policy"], e["cluster"], e["error"]) for e in res["errors"]} == {
        ("static-separate", "split", "RuntimeError: policy exploded")
    }
    for cell in res["cells"]:
        assert cell["clusters"]["split"]["policies"]["coda"]["seeds_ok"] == 1
        assert cell["clusters"]["split"]["policies"]["static-separate"]["seeds_ok"] == 0
        assert cell["gains"]["static-separate"]["gpu_util_gain_rel"]["mean"] is None
        assert cell["gains"]["fifo"]["gpu_util_gain_rel"]["mean"] is not None
    report = (out / "report.md").read_text()
    assert "## Failed runs" in report and "policy exploded" in report
    assert (out / heatmap_name("static-separate", 0.2)).read_bytes()[:8] == PNG


@pytest.mark.parametrize(
    ("args", "option", "needle"),
    [
        (["--cores-per-gpu", ","], "--cores-per-gpu", "no value"),
        (["--cores-per-gpu", "0"], "--cores-per-gpu", "must be in"),
        (["--cores-per-gpu", "-3"], "--cores-per-gpu", "must be in"),
        (["--cores-per-gpu", "nan"], "--cores-per-gpu", "not a finite number"),
        (["--cores-per-gpu", "3,x"], "--cores-per-gpu", "not a number"),
        (["--cores-per-gpu", "3,3"], "--cores-per-gpu", "given twice"),
        (["--cores-per-gpu", "5.6,5.62"], "--cores-per-gpu", "same 28 cores"),
        (["--cpu-shares", ""], "--cpu-shares", "no value"),
        (["--cpu-shares", "0"], "--cpu-shares", "(0, 1)"),
        (["--cpu-shares", "1"], "--cpu-shares", "(0, 1)"),
        (["--cpu-shares", "1.5"], "--cpu-shares", "(0, 1)"),
        (["--cpu-shares", "0.5,0.5"], "--cpu-shares", "given twice"),
        (["--cpu-shares", "0.5000001,0.5000004"], "--cpu-shares", "indistinguishable"),
        (["--loads", "0"], "--loads", "must be in"),
        (["--loads", f"{2 * MAX_LOAD:g}"], "--loads", "must be in"),
        (["--loads", "inf"], "--loads", "not a finite number"),
        (["--jobs", "0"], "--jobs", "range"),
        (["--jobs", "20", "--loads", "1.6"], "--loads", "cannot be reached"),
        (["--seeds", "0"], "--seeds", "range"),
        (["--workers", "0"], "--workers", "range"),
    ],
)
def test_bad_options_exit_2_with_one_line(runner, tmp_path, args, option, needle):
    base = dict(zip(TINY[::2], TINY[1::2], strict=True))
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    flat = [x for kv in base.items() for x in kv]
    result = runner.invoke(main, ["experiment", "regimes", "--out", str(tmp_path / "r"), *flat])
    line = one_error_line(result, code=2)
    assert option in line and needle in line, line


def test_config_validation_names_the_option():
    with pytest.raises(OptionError) as e:
        RegimesConfig(out=Path("x"), cpu_shares=()).validate()
    assert e.value.option == "--cpu-shares"
    with pytest.raises(OptionError) as e:
        parse_values("1,2,2", "--loads")
    assert e.value.option == "--loads" and "given twice" in str(e.value)


# ---------------------------------------------------------------- runs and gains


def test_pool_runs_every_cell_in_grid_order(tmp_path):
    cfg = RegimesConfig(
        out=tmp_path, cores_per_gpu=(5.6,), cpu_shares=(0.25, 0.5), loads=(0.2,), dnn_jobs=200,
        workers=2,
    )  # fmt: skip
    cfg.validate()
    workloads = write_workloads(cfg)
    runs = plan(cfg, workloads)
    # The costliest (most jobs) first, for the pool.
    assert {r.cell.cpu_share for r in runs[:4]} == {0.5}
    records = run_all(cfg, workloads)
    assert all(r.ok for r in records), [r.record.error for r in records]
    assert [(r.cell.cpu_share, r.cluster, r.policy) for r in records] == [
        (s, c, p) for s in (0.25, 0.5) for c, ps in CLUSTERS.items() for p in ps
    ]
    for r in records:
        run = next(
            x for x in runs if (x.cell, x.cluster, x.policy) == (r.cell, r.cluster, r.policy)
        )
        assert run.run.config.cluster == cluster_spec(5.6, r.cluster == "split")
        assert run.run.config.load == 0.2 and run.run.config.policy.estimates == "time-limits"


def _rec(policy: str, seed: int, util: float | None, cpu_jct: float = 100.0) -> CellRecord:
    cell = Cell(5.6, 0.75, 1.2)
    if util is None:
        return CellRecord(
            cell, "shared", policy, seed, PaperRecord(seed, policy, 0.0, error="X: y")
        )
    metrics = {"gpu_util_effective": util, "cpu_jct_mean_s": cpu_jct, "dnn_jct_mean_s": 50.0}
    return CellRecord(cell, "shared", policy, seed, PaperRecord(seed, policy, 1.0, metrics))


def test_gains_are_paired_by_seed_with_a_ci():
    records = [
        _rec("fifo", 0, 0.40),
        _rec("coda", 0, 0.50, 110.0),
        _rec("fifo", 1, 0.50),
        _rec("coda", 1, 0.55, 90.0),
        _rec("fifo", 2, 0.40),
        _rec("coda", 2, 0.44, 100.0),
        _rec("fifo", 3, 0.40),
        _rec("coda", 3, None),  # failed: seed 3 is not paired
    ]
    g = gain_block(records, "fifo")
    assert g["seeds_paired"] == [0, 1, 2]
    rel = [0.25, 0.10, 0.10]
    assert g["gpu_util_gain_rel"]["per_seed"] == pytest.approx(rel)
    mean = sum(rel) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in rel) / 2)
    assert g["gpu_util_gain_rel"]["mean"] == pytest.approx(mean)
    assert g["gpu_util_gain_rel"]["ci95_half"] == pytest.approx(t_critical(2) * sd / math.sqrt(3))
    assert g["gpu_util_gain_points"]["per_seed"] == pytest.approx([10.0, 5.0, 4.0])
    assert g["cpu_jct_ratio"]["per_seed"] == pytest.approx([1.1, 0.9, 1.0])


def test_a_zero_baseline_gives_no_gain_not_an_error():
    g = gain_block([_rec("fifo", 0, 0.0), _rec("coda", 0, 0.3)], "fifo")
    assert g["gpu_util_gain_rel"]["mean"] is None
    assert g["gpu_util_gain_points"]["mean"] == pytest.approx(30.0)


def test_a_cpu_share_that_gives_no_job_of_a_kind_is_refused():
    """3 DNN jobs at a CPU share of 1% make a workload of 3 jobs with no CPU job: its
    cells were labelled 'CPU share 1%' and ran without one."""
    with pytest.raises(OptionError, match="gives no CPU job") as e:
        RegimesConfig(out=Path("x"), cpu_shares=(0.01,), dnn_jobs=3).validate()
    assert e.value.option == "--cpu-shares"
    RegimesConfig(out=Path("x"), cpu_shares=(0.25,), dnn_jobs=3).validate()
