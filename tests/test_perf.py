"""The performance model: table values, derived values, sampling and workload building."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.workload.jobs import JobTable
from coda.workload.perf import (
    PROFILE_DIR,
    JobPerf,
    ProfileSet,
    available_profile_sets,
    build_workload,
    load_profile_set,
    parse_mix,
)

CODA = load_profile_set("coda")
SYNERGY = load_profile_set("synergy")
CODA_MODELS = (
    "AlexNet",
    "VGG16",
    "Inception3",
    "ResNet50",
    "Bi-att-flow",
    "Transformer",
    "DeepSpeech",
    "WaveNet",
)
SYNERGY_MODELS = ("ResNet18", "ResNet50", "AlexNet", "MobileNet", "M5", "DeepSpeech", "Transformer")
# Derived by perf.py: least-squares line through the 1/2/4-GPU points, rounded, >= 4-GPU value.
C_OPT_8GPU = {
    "AlexNet": 20,
    "VGG16": 6,
    "Inception3": 11,
    "ResNet50": 11,
    "Bi-att-flow": 19,
    "Transformer": 7,
    "DeepSpeech": 13,
    "WaveNet": 15,
}


def raw(name: str) -> dict:
    return json.loads((PROFILE_DIR / f"{name}.json").read_text())


# ----------------------------------------------------------------------------- loading


def test_available_and_models() -> None:
    assert {"coda", "synergy"} <= set(available_profile_sets())
    assert CODA.models == CODA_MODELS
    assert SYNERGY.models == SYNERGY_MODELS
    assert CODA.node_bw_gbps_per_core == 2.0
    assert "10.1109/ICDCS47774.2020.00069" in CODA.source
    assert "OSDI 2022" in SYNERGY.source
    for ps in (CODA, SYNERGY):
        assert sum(ps.default_mix.values()) == pytest.approx(1.0)
        assert set(ps.default_mix) == set(ps.models)
        assert len(set(ps.default_mix.values())) == 1  # uniform


def test_unknown_profile_set_lists_names() -> None:
    with pytest.raises(ValueError, match="coda.*synergy"):
        load_profile_set("nope")


def test_load_from_path_and_schema_errors(tmp_path: Path) -> None:
    spec = raw("coda")
    p = tmp_path / "mine.json"
    p.write_text(json.dumps(spec))
    assert load_profile_set(str(p)).job_perf("AlexNet", 1, 1).c_opt == 6

    del spec["models"]["ResNet50"]["bw_gbps"]["default"]["1N4G"]
    p.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=r"models\.ResNet50\.bw_gbps\.default\.1N4G"):
        load_profile_set(str(p))

    spec = raw("coda")
    spec["models"]["WaveNet"]["slowdown"] = [1.0, 1.1]
    with pytest.raises(ValueError, match=r"models\.WaveNet\.slowdown"):
        ProfileSet(spec)
    spec = raw("coda")
    del spec["node"]
    with pytest.raises(ValueError, match="'node'"):
        ProfileSet(spec)
    p.write_text("{not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        load_profile_set(str(p))


def test_max_batch_column_is_selectable() -> None:
    spec = raw("coda")
    spec["batch"] = "max"
    ps = ProfileSet(spec)
    assert ps.job_perf("AlexNet", 1, 1).c_opt == 10
    assert ps.job_perf("AlexNet", 4, 1).bw_gbps == 40


# ----------------------------------------------------------------------------- CODA tables


def test_coda_table_values_round_trip() -> None:
    assert CODA.job_perf("AlexNet", 1, 1).c_opt == 6
    assert CODA.job_perf("ResNet50", 4, 1).c_opt == 6
    spec = raw("coda")
    for m in CODA_MODELS:
        cores = spec["models"][m]["cores"]["default"]
        bw = spec["models"][m]["bw_gbps"]["default"]
        for g, col in ((1, "1N1G"), (2, "1N2G"), (4, "1N4G")):
            p = CODA.job_perf(m, g, 1)
            assert p.c_opt == cores[col]
            assert p.bw_gbps == bw[col]
            assert p.curve_x == (0.0, cores[col]) and p.curve_y == (0.0, 1.0)
        p = CODA.job_perf(m, 1, 2)
        assert (p.c_opt, p.bw_gbps) == (cores["2N2G"], bw["2N2G"])


def test_below_one_gbps_is_half() -> None:
    for m in ("Bi-att-flow", "Transformer"):
        assert CODA.job_perf(m, 1, 1).bw_gbps == 0.5
        assert CODA.job_perf(m, 8, 1).bw_gbps == 0.5


def test_pcie_classes() -> None:
    heavy = {m for m in CODA_MODELS if CODA.job_perf(m, 1, 1).pcie_heavy}
    assert heavy == {"AlexNet", "ResNet50"}
    assert CODA.pcie_pair_slowdown("AlexNet", "ResNet50") == 1.15
    assert CODA.pcie_pair_slowdown("ResNet50", "AlexNet") == 1.15
    assert CODA.pcie_pair_slowdown("ResNet50", "ResNet50") == 1.25
    assert CODA.pcie_pair_slowdown("AlexNet", "AlexNet") == 1.15
    assert CODA.pcie_pair_slowdown("AlexNet", "VGG16") == 1.0
    assert CODA.pcie_pair_slowdown("WaveNet", "DeepSpeech") == 1.0
    with pytest.raises(ValueError, match="Foo"):
        CODA.pcie_pair_slowdown("AlexNet", "Foo")


def test_extrapolation_8_gpus() -> None:
    for m, c in C_OPT_8GPU.items():
        p8 = CODA.job_perf(m, 8, 1)
        assert p8.c_opt == c
        assert p8.c_opt >= CODA.job_perf(m, 4, 1).c_opt
        assert p8.bw_gbps >= CODA.job_perf(m, 4, 1).bw_gbps
        # g = 3 lies between the 2- and 4-GPU values
        c2, c3, c4 = (CODA.job_perf(m, g, 1).c_opt for g in (2, 3, 4))
        assert c2 <= c3 <= c4 and c3 == int(c3)
    # AlexNet's 1/2/4-GPU points lie exactly on c = 4 + 2g
    assert CODA.job_perf("AlexNet", 3, 1).c_opt == 10
    assert CODA.job_perf("AlexNet", 8, 1).bw_gbps == pytest.approx(64.2857, abs=1e-3)


def test_multi_node_scales_2n2g_by_gpus_per_node() -> None:
    for m in CODA_MODELS:
        base = CODA.job_perf(m, 1, 2)
        for g in (2, 4, 8):
            p = CODA.job_perf(m, g, 3)
            assert p.c_opt == base.c_opt * g
            assert p.bw_gbps == pytest.approx(base.bw_gbps * g)


def test_cache_returns_same_object() -> None:
    assert CODA.job_perf("VGG16", 2, 1) is CODA.job_perf("VGG16", 2, 1)


def test_job_perf_errors() -> None:
    with pytest.raises(ValueError, match="Foo.*AlexNet"):
        CODA.job_perf("Foo", 1, 1)
    with pytest.raises(ValueError):
        CODA.job_perf("AlexNet", 0, 1)


# ----------------------------------------------------------------------------- slowdown


def test_slowdown_interpolation() -> None:
    p = CODA.job_perf("AlexNet", 1, 1)
    assert p.slowdown_p == (0.0, 0.25, 0.5, 0.75, 0.95)
    assert p.slowdown_s == (1.0, 1.05, 1.10, 1.18, 1.55)
    assert p.slowdown(0.5) == pytest.approx(1.10)
    assert p.slowdown(0.375) == pytest.approx(1.075)
    assert p.slowdown(1.0) == pytest.approx(1.55)
    assert p.slowdown(0.95) == pytest.approx(1.55)
    assert p.slowdown(0.0) == 1.0
    assert p.slowdown(-0.3) == 1.0
    assert p.slowdown(0.125) == pytest.approx(1.025)


def test_shared_cv_row_and_multi_gpu_floor() -> None:
    for m in ("VGG16", "Inception3", "ResNet50"):
        assert CODA.job_perf(m, 1, 1).slowdown_s == (1.0,) * 5
        two = CODA.job_perf(m, 2, 1)
        assert two.slowdown(0.75) == pytest.approx(1.03)
        assert two.slowdown(0.99) == pytest.approx(1.10)
        assert two.slowdown(0.25) == pytest.approx(1.01)
        four = CODA.job_perf(m, 4, 1)
        assert four.slowdown(0.95) == pytest.approx(1.30)
        assert four.slowdown(0.75) == pytest.approx(1.09)
        assert four.slowdown(0.5) == pytest.approx(1.06)
        assert CODA.job_perf(m, 8, 1).slowdown_s == four.slowdown_s  # 8 uses the 4-GPU floor
        assert CODA.job_perf(m, 3, 1).slowdown(0.95) == pytest.approx(1.20)  # between 2 and 4
    # a model already more sensitive than the floor keeps its own row
    assert CODA.job_perf("AlexNet", 4, 1).slowdown_s == CODA.job_perf("AlexNet", 1, 1).slowdown_s
    # max taken per point: Transformer 4 GPUs -> (1.03, 1.06, 1.10, 1.30)
    t4 = CODA.job_perf("Transformer", 4, 1).slowdown_s
    assert t4 == pytest.approx((1.0, 1.03, 1.06, 1.10, 1.30))
    # the floor follows GPUs per node, not nodes
    assert CODA.job_perf("ResNet50", 1, 4).slowdown_s == (1.0,) * 5


@given(st.sampled_from(CODA_MODELS), st.integers(1, 8), st.floats(-1, 2), st.floats(-1, 2))
def test_slowdown_monotone(model: str, g: int, a: float, b: float) -> None:
    p = CODA.job_perf(model, g, 1)
    lo, hi = sorted((a, b))
    assert 1.0 <= p.slowdown(lo) <= p.slowdown(hi) <= p.slowdown_s[-1] + 1e-12


# ----------------------------------------------------------------------------- Synergy


def test_synergy_curves() -> None:
    r18 = SYNERGY.job_perf("ResNet18", 1, 1)
    assert r18.c_opt == 9
    assert r18.core_speed(9) == 1.0 and r18.core_speed(8.99) < 1.0
    assert r18.core_speed(3) == pytest.approx(1 / 2.4)
    assert r18.core_speed(1) == pytest.approx(0.37 / 2.4)
    assert r18.core_speed(0.5) == pytest.approx(0.37 / 2.4 / 2)
    assert SYNERGY.job_perf("ResNet18", 2, 1).c_opt == 18
    assert SYNERGY.job_perf("ResNet18", 2, 1).core_speed(6) == pytest.approx(1 / 2.4)
    assert SYNERGY.job_perf("ResNet50", 1, 1).c_opt == 4
    assert SYNERGY.job_perf("AlexNet", 1, 1).c_opt == 9
    assert SYNERGY.job_perf("MobileNet", 1, 1).c_opt == 6
    assert SYNERGY.job_perf("M5", 1, 1).c_opt == 6
    assert SYNERGY.job_perf("DeepSpeech", 1, 1).c_opt == 3
    tr = SYNERGY.job_perf("Transformer", 4, 1)
    assert tr.c_opt == 4 and tr.curve_x == (0.0, 4.0)


def test_synergy_borrows_from_coda() -> None:
    mapping = {
        "ResNet18": "ResNet50",
        "MobileNet": "Inception3",
        "M5": "WaveNet",
        "DeepSpeech": "DeepSpeech",
        "Transformer": "Transformer",
        "AlexNet": "AlexNet",
        "ResNet50": "ResNet50",
    }
    for s, c in mapping.items():
        assert raw("synergy")["models"][s]["borrowed_from"] == c
        for g, nodes in ((1, 1), (2, 1), (4, 1), (8, 1), (2, 2)):
            ps, pc = SYNERGY.job_perf(s, g, nodes), CODA.job_perf(c, g, nodes)
            assert ps.bw_gbps == pc.bw_gbps
            assert ps.slowdown_s == pc.slowdown_s
            assert ps.pcie_heavy == pc.pcie_heavy
    assert SYNERGY.pcie_pair_slowdown("ResNet50", "ResNet50") == 1.25
    assert SYNERGY.pcie_pair_slowdown("ResNet18", "AlexNet") == 1.15
    assert SYNERGY.pcie_pair_slowdown("M5", "AlexNet") == 1.0


# ----------------------------------------------------------------------------- curves


def _all_shapes(ps: ProfileSet) -> list[JobPerf]:
    return [ps.job_perf(m, g, n) for m in ps.models for g in (1, 2, 3, 4, 5, 8) for n in (1, 2)]


@settings(max_examples=200)
@given(st.sampled_from(["coda", "synergy"]), st.data())
def test_core_speed_monotone(name: str, data: st.DataObject) -> None:
    ps = CODA if name == "coda" else SYNERGY
    p = data.draw(st.sampled_from(_all_shapes(ps)))
    a = data.draw(st.floats(-5, 300, allow_nan=False))
    b = data.draw(st.floats(-5, 300, allow_nan=False))
    lo, hi = sorted((a, b))
    s_lo, s_hi = p.core_speed(lo), p.core_speed(hi)
    assert 0.0 <= s_lo <= s_hi <= 1.0
    assert p.core_speed(p.c_opt) == 1.0
    assert p.core_speed(0.0) == 0.0
    assert p.core_speed(1.0) > 0.0


def test_coda_curve_is_proportional_below_optimum() -> None:
    p = CODA.job_perf("AlexNet", 1, 1)
    assert p.core_speed(3) == pytest.approx(0.5)
    assert p.core_speed(100) == 1.0


# ----------------------------------------------------------------------------- mixes


def test_parse_mix() -> None:
    assert parse_mix("AlexNet=2,ResNet50=1", CODA) == pytest.approx(
        {"AlexNet": 2 / 3, "ResNet50": 1 / 3}
    )
    assert parse_mix(" alexnet = 1 , VGG16 ", CODA) == {"AlexNet": 0.5, "VGG16": 0.5}
    u = parse_mix("uniform", CODA)
    assert set(u) == set(CODA_MODELS) and all(v == pytest.approx(1 / 8) for v in u.values())
    with pytest.raises(ValueError, match="LeNet.*AlexNet.*WaveNet"):
        parse_mix("AlexNet=1,LeNet=2", CODA)
    with pytest.raises(ValueError, match="ResNet18"):
        parse_mix("ResNet18=1", CODA)  # a Synergy model is not in the CODA set
    with pytest.raises(ValueError, match="not a number"):
        parse_mix("AlexNet=x", CODA)
    with pytest.raises(ValueError, match=">= 0"):
        parse_mix("AlexNet=-1", CODA)
    with pytest.raises(ValueError, match="sum"):
        parse_mix("AlexNet=0", CODA)
    with pytest.raises(ValueError, match="twice"):
        parse_mix("AlexNet=1,alexnet=2", CODA)
    with pytest.raises(ValueError, match="empty"):
        parse_mix("", CODA)


# ----------------------------------------------------------------------------- workload


def _jobs(n: int, seed: int = 0) -> JobTable:
    rng = np.random.default_rng(seed)
    gpus = rng.choice([0, 0, 1, 2, 4, 8, 16], size=n).astype(np.int32)
    nodes = np.where(gpus >= 16, 2, 1).astype(np.int32)
    nodes[(gpus == 4) & (rng.random(n) < 0.3)] = 2
    cores = rng.integers(1, 64, size=n).astype(np.int32)
    return JobTable(
        ids=[str(i) for i in range(n)],
        submit=np.sort(rng.uniform(0, 1e6, n)),
        duration=rng.uniform(10, 1e5, n),
        gpus=gpus,
        cores=cores,
        mem_mib=np.zeros(n, np.int64),
        nodes=nodes,
        flags=np.zeros(n, np.uint8),
    )


def test_work_is_duration_times_speed_at_requested_cores() -> None:
    jobs = _jobs(2000)
    for ps in (CODA, SYNERGY):
        w = build_workload(jobs, ps, seed=7)
        assert w.model.dtype == np.int16 and w.model_names == ps.models
        dnn = jobs.gpus > 0
        assert (w.model[~dnn] == -1).all() and (w.model[dnn] >= 0).all()
        assert (w.cpu_bw_per_core[dnn] == 0).all() and (w.cpu_bw_per_core[~dnn] > 0).all()
        assert np.array_equal(w.work[~dnn], jobs.duration[~dnn])
        for i in np.flatnonzero(dnn)[:300]:
            nodes = int(jobs.nodes[i])
            g = -(-int(jobs.gpus[i]) // nodes)
            req = -(-int(jobs.cores[i]) // nodes)
            perf = ps.job_perf(ps.models[w.model[i]], g, nodes)
            assert w.work[i] == pytest.approx(jobs.duration[i] * perf.core_speed(req))
        assert (w.work > 0).all() and (w.work <= jobs.duration).all()


def test_work_hand_example() -> None:
    jobs = JobTable.from_rows(
        [
            ("a", 0, 100.0, 1, 3, 0, 1, 0),  # AlexNet 1 GPU, 3 of 6 cores -> half speed
            ("b", 1, 100.0, 0, 4, 0, 1, 0),  # CPU job
            ("c", 2, 100.0, 4, 5, 0, 2, 0),  # AlexNet 2/node on 2 nodes, 3 cores/node of 4
        ]
    )
    w = build_workload(jobs, CODA, seed=1, mix={"AlexNet": 1.0})
    assert w.work.tolist() == pytest.approx([50.0, 100.0, 75.0])
    assert w.model.tolist() == [0, -1, 0]
    assert w.mix == {"AlexNet": 1.0}


def test_workload_deterministic_for_seed() -> None:
    jobs = _jobs(5000, seed=3)
    a = build_workload(jobs, CODA, seed=42)
    b = build_workload(jobs, load_profile_set("coda"), seed=42)
    c = build_workload(jobs, CODA, seed=43)
    assert np.array_equal(a.model, b.model)
    assert np.array_equal(a.cpu_bw_per_core, b.cpu_bw_per_core)
    assert np.array_equal(a.work, b.work)
    assert not np.array_equal(a.model, c.model)
    assert a.seed == 42 and a.mix == CODA.default_mix


def test_mix_restricts_models() -> None:
    jobs = _jobs(5000)
    mix = parse_mix("AlexNet=3,WaveNet=1", CODA)
    w = build_workload(jobs, CODA, seed=0, mix=mix)
    drawn = w.model[w.model >= 0]
    names = np.array(CODA.models)[drawn]
    assert set(names) == {"AlexNet", "WaveNet"}
    assert (names == "AlexNet").mean() == pytest.approx(0.75, abs=0.03)
    with pytest.raises(ValueError, match="LeNet"):
        build_workload(jobs, CODA, seed=0, mix={"LeNet": 1.0})


def test_cpu_bw_distribution() -> None:
    x = CODA.sample_cpu_bw_per_core(np.random.default_rng(0), 200_000)
    assert x.dtype == np.float64
    assert x.min() >= 0.2 * 0.75 and x.max() <= 3.0 * 1.25
    assert x.mean() == pytest.approx(1.0, rel=0.02)
    assert (x > 2.25 - 1e-9).mean() == pytest.approx(0.2, abs=0.01)  # the heavy class


def test_a_million_jobs_get_a_model_and_work() -> None:
    # Its speed is bench/bench_sim.py's to measure; here, that nothing breaks at this size.
    n = 1_000_000
    rng = np.random.default_rng(0)
    gpus = rng.choice([0, 1, 2, 4, 8], size=n).astype(np.int32)
    jobs = JobTable(
        ids=[""] * n,  # ids are not used by build_workload
        submit=np.arange(n, dtype=np.float64),
        duration=rng.uniform(1, 1e4, n),
        gpus=gpus,
        cores=rng.integers(1, 97, n).astype(np.int32),
        mem_mib=np.zeros(n, np.int64),
        nodes=np.ones(n, np.int32),
        flags=np.zeros(n, np.uint8),
    )
    w = build_workload(jobs, CODA, seed=0)
    assert len(w.work) == n
    dnn = gpus > 0
    assert (w.model[dnn] >= 0).all() and (w.model[~dnn] == -1).all()
    assert np.isfinite(w.work).all() and (w.work > 0).all()
    assert (w.cpu_bw_per_core[dnn] == 0.0).all() and (w.cpu_bw_per_core[~dnn] > 0).all()


# ----------------------------------------------------------------------------- perturbation


@pytest.mark.parametrize("name", ["coda", "synergy"])
@pytest.mark.parametrize("seed", range(8))
def test_perturbation_keeps_invariants(name: str, seed: int) -> None:
    base = load_profile_set(name)
    p = base.perturbed(np.random.default_rng(seed), 0.5)
    assert p.name.startswith(name) and p.name != name
    assert p.models == base.models
    changed = False
    for m in base.models:
        for g in (1, 2, 3, 4, 8):
            for nodes in (1, 2):
                a, b = base.job_perf(m, g, nodes), p.job_perf(m, g, nodes)  # JobPerf validates
                assert b.c_opt >= 1.0
                assert all(y1 <= y2 for y1, y2 in zip(b.curve_y, b.curve_y[1:], strict=False))
                assert all(s1 <= s2 for s1, s2 in zip(b.slowdown_s, b.slowdown_s[1:], strict=False))
                assert b.bw_gbps > 0
                assert 0.5 * a.bw_gbps - 1e-9 <= b.bw_gbps or g not in (1, 2, 4)
                changed |= (a.c_opt != b.c_opt) or (a.bw_gbps != b.bw_gbps)
        assert p.pcie_pair_slowdown(m, m) >= 1.0
    assert changed
    heavy = [m for m in base.models if base.job_perf(m, 1, 1).pcie_heavy]
    s = p.pcie_pair_slowdown(heavy[0], heavy[-1])
    assert 1.0 + 0.15 * 0.5 <= s <= 1.0 + 0.25 * 1.5
    # unperturbed assumptions
    assert p.node_bw_gbps_per_core == base.node_bw_gbps_per_core
    assert p.to_dict()["perturbation"] == {"base": name, "magnitude": 0.5}


def test_perturbation_deterministic_and_zero() -> None:
    a = CODA.perturbed(np.random.default_rng(5), 0.2)
    b = CODA.perturbed(np.random.default_rng(5), 0.2)
    assert a.to_dict() == b.to_dict()
    z = CODA.perturbed(np.random.default_rng(5), 0.0)
    for m in CODA.models:
        for g in (1, 2, 4, 8):
            p, q = CODA.job_perf(m, g, 1), z.job_perf(m, g, 1)
            assert (p.c_opt, p.bw_gbps, p.slowdown_s) == (q.c_opt, q.bw_gbps, q.slowdown_s)
    with pytest.raises(ValueError):
        CODA.perturbed(np.random.default_rng(0), 1.0)
    # the base set is not modified
    assert CODA.job_perf("AlexNet", 1, 1).c_opt == 6
