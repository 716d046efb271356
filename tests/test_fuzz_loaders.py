"""Fuzzing every loader: any file ends as a Trace whose rows are all accounted for, or as
one TraceFormatError / ValueError line naming the file. Nothing else may escape."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda.workload.cluster import load_node_list, parse_cluster_spec
from coda.workload.jobs import TraceFormatError, TraceReport
from coda.workload.perf import load_profile_set
from coda.workload.traces import load_trace
from coda.workload.traces._common import EXTRA_JOBS

HEADERS = {
    "openb": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time",
    "helios": "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,"
    "end_time,duration,queue",
    "helios-derived": "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status",
    "pai": None,  # ships without a header
    "csv": "job_id,submit_s,duration_s,gpus,cores,mem_mib,nodes,censored",
}
# One plausible row per format, as fields, that the fuzzer mutates.
GOOD = {
    "openb": ["p", "4000", "1024", "1", "500", "", "LS", "Running", "0", "100", "10"],
    "helios": ["1", "u", "vc", "8", "64", "2", "COMPLETED", "100", "150", "1150", "1000", "0"],
    "helios-derived": ["a", "u", "1", "4", "1", "5", "100", "200", "COMPLETED"],
    "pai": ["j", "t", "2", "Terminated", "100", "400", "600", "29.5", "50", "T4"],
    "csv": ["a", "10", "100", "2", "4", "4096", "2", "0"],
}

NASTY = st.sampled_from(
    [
        "",
        " ",
        "nan",
        "-nan",
        "inf",
        "-inf",
        "1e999",
        "-1e999",
        "9" * 40,
        "-" + "9" * 40,
        "9" * 5000,
        "1e20",
        "1e-300",
        "0",
        "-1",
        "-0.5",
        "0.5",
        "1.7e18",
        "1700000000000000000",
        "2020-06-09 18:41:01",
        "0001-01-01 00:00:00+05:00",
        "9999-12-31 23:59:59-05:00",
        "x",
        "1_0",
        "0x10",
        '"',
        "\x00",
        "Running",
        "Waiting",
        "RUNNING",
        "10000",
        "10001",
        "1000000000000",
    ]
)
FIELD = st.one_of(NASTY, st.text(max_size=12), st.integers(-(10**25), 10**25).map(str))


@st.composite
def row_text(draw: st.DrawFn, fmt: str) -> str:
    kind = draw(st.integers(0, 9))
    fields = list(GOOD[fmt])
    if kind <= 3:  # a valid row, maybe a different id
        fields[0] = draw(st.sampled_from(["a", "b", "p", "j"]))
    elif kind <= 7:  # some fields replaced by nasty values
        for _ in range(draw(st.integers(1, 3))):
            fields[draw(st.integers(0, len(fields) - 1))] = draw(FIELD)
    elif kind == 8:  # wrong field count
        fields = fields[: draw(st.integers(0, len(fields) - 1))] or ["", ""]
        fields += draw(st.lists(FIELD, max_size=3))
    else:  # random text
        return draw(st.text(max_size=40)).replace("\r", "").replace("\n", "")
    return ",".join(fields)


@st.composite
def trace_bytes(draw: st.DrawFn, fmt: str) -> bytes:
    lines = [] if HEADERS[fmt] is None else [HEADERS[fmt]]
    lines += draw(st.lists(row_text(fmt), max_size=8))
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    extra = draw(st.sampled_from([b"", b"\n\xff\xfe,1\n", b"\n\xc3(", b"\x00", b"\r\n"]))
    bom = draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))
    return bom + data + extra


def check_one_line(e: Exception, path: Path | str) -> None:
    assert type(e) in (TraceFormatError, ValueError), type(e)
    msg = str(e)
    assert "\n" not in msg and str(path) in msg, msg
    assert len(msg) < 600, msg


def identity(r: TraceReport) -> bool:
    extra = r.adjusted.get(EXTRA_JOBS, 0)
    return r.rows_read == r.jobs_loaded - extra + sum(r.excluded.values()) + r.skipped_bad_rows


SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _fuzz_trace(tmp_path: Path, fmt: str, data: bytes, skip: bool) -> None:
    p = tmp_path / f"fuzz-{fmt}.csv"
    p.write_bytes(data)
    for chosen in (fmt, None):  # the explicit format, and detection
        try:
            trace = load_trace(p, chosen, skip_bad_rows=skip)
        except (TraceFormatError, ValueError) as e:
            check_one_line(e, p)
            continue
        r, jobs = trace.report, trace.jobs
        assert identity(r), r.as_dict()
        assert len(set(jobs.ids)) == len(jobs.ids) == r.jobs_loaded
        if len(jobs):
            assert np.all(np.isfinite(jobs.submit)) and jobs.submit[0] == 0.0
            assert np.all(np.diff(jobs.submit) >= 0)
            assert np.all(jobs.duration > 0) and np.all(np.isfinite(jobs.duration))
            assert np.all(jobs.cores >= 1) and np.all(jobs.nodes >= 1) and np.all(jobs.gpus >= 0)
            assert r.time_origin is not None


@SETTINGS
@given(data=trace_bytes("openb"), skip=st.booleans())
def test_fuzz_openb(tmp_path, data, skip):
    _fuzz_trace(tmp_path, "openb", data, skip)


@SETTINGS
@given(data=trace_bytes("helios"), skip=st.booleans())
def test_fuzz_helios(tmp_path, data, skip):
    _fuzz_trace(tmp_path, "helios", data, skip)


@SETTINGS
@given(data=trace_bytes("helios-derived"), skip=st.booleans())
def test_fuzz_helios_derived(tmp_path, data, skip):
    _fuzz_trace(tmp_path, "helios-derived", data, skip)


@SETTINGS
@given(data=trace_bytes("pai"), skip=st.booleans())
def test_fuzz_pai(tmp_path, data, skip):
    _fuzz_trace(tmp_path, "pai", data, skip)


@SETTINGS
@given(data=trace_bytes("csv"), skip=st.booleans())
def test_fuzz_generic_csv(tmp_path, data, skip):
    _fuzz_trace(tmp_path, "csv", data, skip)


@SETTINGS
@given(data=st.binary(max_size=200), fmt=st.sampled_from([*HEADERS, None]))
def test_fuzz_any_bytes_any_format(tmp_path, data, fmt):
    p = tmp_path / "bytes.csv"
    p.write_bytes(data)
    try:
        trace = load_trace(p, fmt, skip_bad_rows=True)
    except (TraceFormatError, ValueError) as e:
        check_one_line(e, p)
    else:
        assert identity(trace.report)


NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
NODE_GOOD = ["n1", "96000", "262144", "8", "V100"]


@st.composite
def node_list_bytes(draw: st.DrawFn) -> bytes:
    lines = [NODE_HEADER]
    for k in range(draw(st.integers(0, 6))):
        fields = list(NODE_GOOD)
        fields[0] = f"n{k}"
        for _ in range(draw(st.integers(0, 2))):
            fields[draw(st.integers(0, 4))] = draw(FIELD)
        if draw(st.integers(0, 9)) == 0:
            fields = fields[:3]
        lines.append(",".join(fields))
    extra = draw(st.sampled_from([b"", b"\nx\xff,1,1,1\n", b"\n\x00"]))
    return "\n".join(lines).encode("utf-8", "surrogatepass") + extra


@SETTINGS
@given(data=node_list_bytes())
def test_fuzz_node_list(tmp_path, data):
    p = tmp_path / "nodes.csv"
    p.write_bytes(data)
    try:
        cluster = load_node_list(p)
    except (TraceFormatError, ValueError) as e:
        check_one_line(e, p)
    else:
        assert cluster.nodes and len({n.name for n in cluster.nodes}) == len(cluster.nodes)
        for n in cluster.nodes:
            assert 1 <= n.cores <= 4096 and 0 <= n.gpus <= 64 and n.bw_gbps > 0


SPEC_PART = st.one_of(
    st.integers(0, 10**6).map(str),
    st.sampled_from(["9" * 40, "0", "00", "1" * 5000, "1.5", "", "x"]),
)


@st.composite
def spec_text(draw: st.DrawFn) -> str:
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        c, g, k = draw(SPEC_PART), draw(SPEC_PART), draw(SPEC_PART)
        mem = draw(st.one_of(st.just(""), SPEC_PART.map(lambda s: s + "m")))
        bw = draw(st.one_of(st.just(""), SPEC_PART.map(lambda s: s + "b")))
        groups.append(f"{c}x{g}g{k}c{mem}{bw}")
    if draw(st.booleans()):
        groups.append(draw(st.text(max_size=10)))
    return ",".join(groups)


@settings(max_examples=150, deadline=None)
@given(text=spec_text())
def test_fuzz_cluster_spec(text):
    try:
        cluster = parse_cluster_spec(text)
    except ValueError as e:
        assert type(e) is ValueError and "\n" not in str(e) and len(str(e)) < 600
    else:
        assert 1 <= len(cluster.nodes) <= 100_000
        assert all(n.bw_gbps > 0 and 1 <= n.cores <= 4096 for n in cluster.nodes)


def _coda_profile() -> dict:
    from coda.workload.perf import PROFILE_DIR

    return json.loads((PROFILE_DIR / "coda.json").read_text(encoding="utf-8"))


JSON_NASTY = st.one_of(
    st.sampled_from(
        [None, True, "x", [], {}, -1, 0, 1e308, -1e308, 10**400, math.nan, math.inf, 0.5, 2.0]
    ),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
)


def _paths(d: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(d, dict):
        for k, v in d.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out += _paths(v, (*prefix, i))
    return out


BASE_PROFILE = _coda_profile()
PROFILE_PATHS = [p for p in _paths(BASE_PROFILE) if p]


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    edits=st.lists(st.tuples(st.sampled_from(PROFILE_PATHS), JSON_NASTY), min_size=1, max_size=3),
    delete=st.booleans(),
)
def test_fuzz_profile_file(tmp_path, edits, delete):
    spec = json.loads(json.dumps(BASE_PROFILE))
    for path, value in edits:
        node = spec
        try:
            for k in path[:-1]:
                node = node[k]
            if delete and isinstance(node, dict):
                node.pop(path[-1], None)
            else:
                node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit replaced a parent
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(spec, allow_nan=True), encoding="utf-8")
    try:
        load_profile_set(str(p))
    except ValueError as e:
        check_one_line(e, p)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.one_of(st.binary(max_size=100), st.text(max_size=60).map(str.encode)))
def test_fuzz_profile_bytes(tmp_path, data):
    p = tmp_path / "profile.json"
    p.write_bytes(data)
    try:
        load_profile_set(str(p))
    except ValueError as e:
        check_one_line(e, p)
