"""Clusters (specs, node lists, openb fractions, resampling) and load scaling of job tables."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.study.clusters import resolve_cluster
from coda.workload.cluster import (
    DEFAULT_BW_PER_CORE,
    ClusterSpec,
    NodeSpec,
    load_node_list,
    parse_cluster_spec,
    resample_cluster,
)
from coda.workload.jobs import JobTable
from coda.workload.scaling import (
    max_reachable_load,
    offered_gpu_load,
    resample_jobs,
    scale_to_load,
    window_bounds,
)
from coda.workload.traces import bundled_nodes_path, bundled_trace_path, load_trace

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def synthetic_jobs(n: int = 80, seed: int = 7) -> JobTable:
    """Sorted arrivals over ~2 days, a mix of 1-8 GPU jobs and CPU jobs."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(0, 2 * 86400, n)) + 1000.0  # origin not at 0
    rows = []
    for i in range(n):
        gpus = int(rng.choice([0, 0, 1, 2, 4, 8]))
        cores = int(gpus * 8 if gpus else rng.integers(1, 17))
        duration = float(rng.lognormal(8.0, 1.0))
        rows.append((f"j{i}", float(submit[i]), duration, gpus, cores, 0, 1, 0))
    return JobTable.from_rows(rows)


def shifted(jobs: JobTable, scale: float) -> JobTable:
    """jobs with arrival offsets (from the first arrival) multiplied by scale."""
    a0 = jobs.submit[0]
    return dataclasses.replace(jobs, submit=a0 + (jobs.submit - a0) * scale)


@pytest.fixture(scope="module")
def bundled_jobs() -> JobTable:
    return load_trace(bundled_trace_path()).jobs


@pytest.fixture(scope="module")
def full_openb() -> ClusterSpec:
    return load_node_list(bundled_nodes_path())


# ---- parse_cluster_spec ------------------------------------------------------------------


def test_spec_counts_gpus_and_cores():
    c = parse_cluster_spec("48x8g96c,16x0g96c")
    assert len(c.nodes) == 64
    assert c.gpus == 384
    assert c.cores == 64 * 96
    assert c.gpu_nodes == 48
    assert Counter((n.gpus, n.cores) for n in c.nodes) == {(8, 96): 48, (0, 96): 16}
    assert all(n.mem_mib == 0 for n in c.nodes)  # no 'm': memory not constrained
    assert len({n.name for n in c.nodes}) == 64  # names unique across groups
    assert c.label == "48x8g96c,16x0g96c"


def test_spec_describe():
    d = parse_cluster_spec("16x0g96c,48x8g96c").describe()
    assert d == {
        "spec": "16x0g96c,48x8g96c",
        "shape": "48x8g96c,16x0g96c",  # most common shape first
        "nodes": 64,
        "gpu_nodes": 48,
        "cpu_nodes": 16,
        "gpus": 384,
        "cores": 6144,
    }


def test_spec_memory_and_bandwidth_suffixes():
    c = parse_cluster_spec("2x8g96c512m200b,1x0g32c64m,1x4g48c150.5b")
    n0, n1, n2, n3 = c.nodes
    assert n0 == NodeSpec(n0.name, 8, 96, 512 * 1024, 200.0)
    assert (n1.mem_mib, n1.bw_gbps) == (512 * 1024, 200.0)
    assert (n2.gpus, n2.cores, n2.mem_mib) == (0, 32, 64 * 1024)
    assert n2.bw_gbps == pytest.approx(DEFAULT_BW_PER_CORE * 32)
    assert (n3.mem_mib, n3.bw_gbps) == (0, 150.5)


def test_spec_default_bandwidth_follows_bw_per_core():
    c = parse_cluster_spec("2x8g96c,1x0g10c", bw_per_core=3.5)
    assert [n.bw_gbps for n in c.nodes] == [3.5 * 96, 3.5 * 96, 35.0]
    # An explicit bandwidth wins over bw_per_core.
    assert parse_cluster_spec("1x8g96c100b", bw_per_core=3.5).nodes[0].bw_gbps == 100.0


def test_spec_whitespace_and_case():
    c = parse_cluster_spec(" 2 X 8G96C , 1x0g32c ")
    assert Counter((n.gpus, n.cores) for n in c.nodes) == {(8, 96): 2, (0, 32): 1}


@pytest.mark.parametrize("bad", ["8g96c", "2x8g", "0x8g96c", "2x8g0c", "2x8gc", "2x-1g8c"])
def test_spec_bad_group_is_named(bad):
    with pytest.raises(ValueError) as e:
        parse_cluster_spec(f"4x8g96c,{bad}")
    assert repr(bad) in str(e.value)


@pytest.mark.parametrize("bad", ["", "  ", ",", " , "])
def test_spec_empty(bad):
    with pytest.raises(ValueError, match="empty cluster spec"):
        parse_cluster_spec(bad)


# ---- load_node_list ------------------------------------------------------------------------


def test_bundled_node_list(full_openb):
    assert len(full_openb.nodes) == 1523
    assert full_openb.gpus == 6212
    assert full_openb.label == str(bundled_nodes_path())
    assert all(n.cores >= 1 and n.gpus >= 0 for n in full_openb.nodes)
    assert all(n.bw_gbps == pytest.approx(DEFAULT_BW_PER_CORE * n.cores) for n in full_openb.nodes)


def test_node_list_small(tmp_path):
    p = write(
        tmp_path,
        "nodes.csv",
        NODE_HEADER,
        "a,96000,393216,8,V100",
        "b,32500,131072,0,",
    )
    c = load_node_list(p, bw_per_core=1.5)
    a, b = c.nodes
    assert (a.name, a.gpus, a.cores, a.mem_mib, a.gpu_model) == ("a", 8, 96, 393216, "V100")
    assert a.bw_gbps == 1.5 * 96
    assert (b.gpus, b.cores, b.gpu_model) == (0, 32, "")  # whole cores, rounded down


def test_node_list_without_model_column(tmp_path):
    p = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu", "a,8000,0,1")
    assert load_node_list(p).nodes[0].gpu_model == ""


@pytest.mark.parametrize("column", ["sn", "cpu_milli", "memory_mib", "gpu"])
def test_node_list_missing_column(tmp_path, column):
    cols = [c for c in NODE_HEADER.split(",") if c != column]
    p = write(tmp_path, "nodes.csv", ",".join(cols), ",".join("1" for _ in cols))
    with pytest.raises(ValueError, match=column):
        load_node_list(p)


def test_node_list_bad_number_names_file_and_line(tmp_path):
    p = write(tmp_path, "nodes.csv", NODE_HEADER, "a,96000,393216,8,V100", "b,lots,1024,0,")
    with pytest.raises(ValueError) as e:
        load_node_list(p)
    assert f"{p}:3:" in str(e.value)


def test_node_list_no_cores_and_no_nodes(tmp_path):
    p = write(tmp_path, "nodes.csv", NODE_HEADER, "a,500,1024,0,")
    with pytest.raises(ValueError, match=r"nodes\.csv:2:"):
        load_node_list(p)
    empty = write(tmp_path, "empty.csv", NODE_HEADER)
    with pytest.raises(ValueError, match="no nodes"):
        load_node_list(empty)


# ---- resolve_cluster -------------------------------------------------------------------------


def test_openb_fraction_keeps_shape_mix(full_openb):
    small = resolve_cluster("openb:0.1", 2.0)
    full = Counter((n.gpus, n.cores) for n in full_openb.nodes)
    kept = Counter((n.gpus, n.cores) for n in small.nodes)
    for shape, count in full.items():
        assert kept.get(shape, 0) == round(count * 0.1), shape
    assert set(kept) <= set(full)
    assert small.label == "openb:0.1"
    assert small.gpus == 626
    # Kept nodes are real nodes of the list, in file order.
    order = [n.name for n in full_openb.nodes]
    idx = [order.index(n.name) for n in small.nodes]
    assert idx == sorted(idx)


def test_openb_whole_and_fraction_one(full_openb):
    whole = resolve_cluster("openb", 2.0)
    assert whole.label == "openb" and len(whole.nodes) == 1523
    assert len(resolve_cluster("openb:1", 2.0).nodes) == 1523


@pytest.mark.parametrize("text", ["openb:0", "openb:x", "openb:2", "openb:", "openb:-0.5"])
def test_openb_bad_fraction(text):
    with pytest.raises(ValueError, match="openb"):
        resolve_cluster(text, 2.0)


def test_openb_tiny_fraction_keeps_nothing():
    with pytest.raises(ValueError, match="keeps no nodes"):
        resolve_cluster("openb:0.0001", 2.0)


def test_resolve_path_and_spec(tmp_path):
    p = write(tmp_path, "nodes.csv", NODE_HEADER, "a,16000,0,2,T4")
    from_file = resolve_cluster(str(p), 3.0)
    assert (from_file.gpus, from_file.cores, from_file.nodes[0].bw_gbps) == (2, 16, 48.0)
    spec = resolve_cluster("2x4g32c", 3.0)
    assert (spec.gpus, spec.nodes[0].bw_gbps) == (8, 96.0)
    with pytest.raises(ValueError, match="bad cluster spec group"):
        resolve_cluster(str(tmp_path / "missing.csv"), 3.0)


# ---- resample_cluster ------------------------------------------------------------------------


def test_resample_cluster_deterministic(full_openb):
    a = resample_cluster(full_openb, 300, seed=3)
    b = resample_cluster(full_openb, 300, seed=3)
    c = resample_cluster(full_openb, 300, seed=4)
    assert len(a.nodes) == 300
    assert a.nodes == b.nodes
    assert a.nodes != c.nodes
    shapes = {(n.gpus, n.cores, n.mem_mib, n.gpu_model) for n in full_openb.nodes}
    assert all((n.gpus, n.cores, n.mem_mib, n.gpu_model) in shapes for n in a.nodes)
    assert len({n.name for n in a.nodes}) == 300
    assert "seed 3" in a.label


# ---- window_bounds -------------------------------------------------------------------------


def test_window_bounds():
    submit = np.arange(101, dtype=float) * 10.0 + 5.0
    assert window_bounds(submit, 0.0) == (5.0, 1005.0)
    assert window_bounds(submit, 0.01) == (15.0, 1005.0)  # index 1
    assert window_bounds(submit, 0.5) == (505.0, 1005.0)
    assert window_bounds(np.zeros(0), 0.01) == (0.0, 0.0)


@pytest.mark.parametrize("warmup", [-0.01, 1.0, 1.5, math.nan])
def test_window_bounds_bad_warmup(warmup):
    with pytest.raises(ValueError, match="warmup"):
        window_bounds(np.arange(10.0), warmup)


# ---- scale_to_load -------------------------------------------------------------------------


@pytest.mark.parametrize("warmup", [0.0, 0.01, 0.2])
@pytest.mark.parametrize("fraction_of_ceiling", [0.05, 0.3, 0.7, 0.99])
def test_scale_to_load_hits_target_synthetic(warmup, fraction_of_ceiling):
    jobs = synthetic_jobs()
    gpus = 32
    target = fraction_of_ceiling * max_reachable_load(jobs, gpus, warmup)
    out, scale = scale_to_load(jobs, gpus, target, warmup)
    assert offered_gpu_load(out, gpus, warmup) == pytest.approx(target, rel=1e-6)
    assert scale > 0
    assert out.submit[0] == jobs.submit[0]
    np.testing.assert_allclose(out.submit - out.submit[0], (jobs.submit - jobs.submit[0]) * scale)
    np.testing.assert_array_equal(out.duration, jobs.duration)
    np.testing.assert_array_equal(out.gpus, jobs.gpus)
    np.testing.assert_array_equal(out.cores, jobs.cores)
    assert out.ids == jobs.ids
    assert np.all(np.diff(out.submit) >= 0)


@pytest.mark.parametrize(("load", "warmup"), [(0.5, 0.01), (1.0, 0.01), (2.0, 0.01), (1.0, 0.0)])
def test_scale_to_load_hits_target_bundled(bundled_jobs, load, warmup):
    out, _ = scale_to_load(bundled_jobs, 626, load, warmup)
    assert offered_gpu_load(out, 626, warmup) == pytest.approx(load, rel=1e-6)
    np.testing.assert_array_equal(out.duration, bundled_jobs.duration)
    np.testing.assert_array_equal(out.gpus, bundled_jobs.gpus)
    assert out.ids == bundled_jobs.ids


def test_scale_to_load_unreachable():
    jobs = synthetic_jobs()
    ceiling = max_reachable_load(jobs, 32)
    for load in (ceiling, ceiling * 1.5, math.inf):
        with pytest.raises(ValueError, match="cannot be reached"):
            scale_to_load(jobs, 32, load)


def test_scale_to_load_unreachable_bundled_full_cluster(bundled_jobs):
    # On the whole 6,212-GPU cluster the trace cannot offer a load of 1.0.
    assert max_reachable_load(bundled_jobs, 6212) < 1.0
    with pytest.raises(ValueError, match="cannot be reached"):
        scale_to_load(bundled_jobs, 6212, 1.0)


@pytest.mark.parametrize("load", [0.0, -1.0])
def test_scale_to_load_nonpositive(load):
    with pytest.raises(ValueError, match="must be a number > 0"):
        scale_to_load(synthetic_jobs(), 32, load)


def test_scale_to_load_nan_rejected():
    with pytest.raises(ValueError):
        scale_to_load(synthetic_jobs(), 32, math.nan)


def test_scale_to_load_needs_gpu_jobs_and_spread():
    cpu_only = JobTable.from_rows([(f"c{i}", float(i), 10.0, 0, 1, 0, 1, 0) for i in range(5)])
    with pytest.raises(ValueError, match="some with GPUs"):
        scale_to_load(cpu_only, 8, 0.5)
    same_time = JobTable.from_rows([(f"g{i}", 5.0, 10.0, 1, 1, 0, 1, 0) for i in range(5)])
    with pytest.raises(ValueError, match="spread over time"):
        scale_to_load(same_time, 8, 0.5)


def test_offered_load_monotone_sweep():
    jobs = synthetic_jobs()
    scales = np.geomspace(1e-4, 1e4, 60)
    loads = [offered_gpu_load(shifted(jobs, s), 32) for s in scales]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(loads, loads[1:], strict=False))
    assert loads[0] <= max_reachable_load(jobs, 32) * (1 + 1e-12)
    assert loads[-1] < loads[0]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    s1=st.floats(1e-3, 1e3),
    s2=st.floats(1e-3, 1e3),
    warmup=st.sampled_from([0.0, 0.01, 0.3]),
)
def test_offered_load_monotone_property(seed, s1, s2, warmup):
    jobs = synthetic_jobs(n=20, seed=seed)
    lo, hi = sorted((s1, s2))
    a = offered_gpu_load(shifted(jobs, lo), 16, warmup)
    b = offered_gpu_load(shifted(jobs, hi), 16, warmup)
    assert b <= a * (1 + 1e-9) + 1e-15


# ---- resample_jobs -------------------------------------------------------------------------


def test_resample_jobs(bundled_jobs):
    a = resample_jobs(bundled_jobs, 2000, seed=5)
    b = resample_jobs(bundled_jobs, 2000, seed=5)
    c = resample_jobs(bundled_jobs, 2000, seed=6)
    assert len(a) == 2000
    assert a.ids == b.ids
    for name in ("submit", "duration", "gpus", "cores", "mem_mib", "nodes", "flags"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.ids != c.ids
    assert np.all(np.diff(a.submit) >= 0)
    assert a.submit[0] == bundled_jobs.submit[0]
    source = set(
        zip(
            bundled_jobs.duration.tolist(),
            bundled_jobs.gpus.tolist(),
            bundled_jobs.cores.tolist(),
            strict=True,
        )
    )
    rows = zip(a.duration.tolist(), a.gpus.tolist(), a.cores.tolist(), strict=True)
    assert all(r in source for r in rows)
    assert len(set(a.ids)) == 2000  # the ~k suffix keeps repeated draws apart


def test_resample_jobs_needs_two():
    one = JobTable.from_rows([("a", 0.0, 1.0, 1, 1, 0, 1, 0)])
    with pytest.raises(ValueError, match="at least two"):
        resample_jobs(one, 10, seed=0)


def test_resample_jobs_needs_a_positive_count():
    with pytest.raises(ValueError, match="at least 1"):
        resample_jobs(synthetic_jobs(), 0, seed=0)
