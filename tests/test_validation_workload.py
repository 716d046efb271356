"""Stated ranges, caps, exact relative times, encodings and duplicate ids of the loaders."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from coda.workload import cluster, limits
from coda.workload.cluster import load_node_list, parse_cluster_spec, resample_cluster
from coda.workload.jobs import JobTable, TraceFormatError
from coda.workload.perf import PROFILE_DIR, load_profile_set
from coda.workload.traces import load_trace
from coda.workload.traces._builder import TraceBuilder

OPENB = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
HELIOS = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
)
DERIVED = "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status"
CSV = "job_id,submit_s,duration_s,gpus,cores,mem_mib,nodes,censored"
BIG = "9" * 40


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


# ---- the ranges are written once, and the docs show them ------------------------------


def test_docs_show_the_ranges_table_of_limits():
    doc = (Path(__file__).parent.parent / "docs" / "trace-formats.md").read_text()
    between = doc.split("<!-- ranges:begin -->\n", 1)[1].split("\n<!-- ranges:end -->", 1)[0]
    assert between == limits.markdown_table()


def test_every_loader_column_has_a_range():
    from coda.workload.traces import generic_csv, helios, openb, pai

    numeric = {
        "openb": set(openb.REQUIRED) - {"name", "pod_phase"},
        "helios": set(helios.REQUIRED) - {"job_id", "state"},
        "helios-derived": set(helios.DERIVED_REQUIRED) - {"u_id"},
        "pai": set(pai.REQUIRED) - {"job_name", "task_name", "status"},
        "csv": (set(generic_csv.REQUIRED) | {"mem_mib", "nodes"}) - {"job_id"},
    }
    for fmt, cols in numeric.items():
        assert cols == set(limits.FIELDS[fmt]), fmt


# ---- time origin: exact, relative to the first kept arrival ---------------------------

# (format, file name, header or None, row template with {t0},{t1},{t2} time stamps)
SHIFTABLE = [
    ("openb", "pods.csv", OPENB, "p{i},1000,10,1,1000,,LS,Succeeded,{t0},{t2},{t1}"),
    ("helios", "log.csv", HELIOS, "{i},u,vc,1,2,1,COMPLETED,{t0},{t1},{t2},{d},0"),
    ("pai", "pai.csv", None, "j{i},t,1,Terminated,{t1},{t2},100,1,100,T4"),
    ("csv", "jobs.csv", CSV, "j{i},{t0},{d},1,2,,,"),
]
# (submit, start, end) per job; the earliest kept one is not first in the file.
TIMES = [(7, 9, 1000), (3, 3, 50), (5, 6, 7), (20, 21, 86421)]


def _shifted(tmp_path: Path, fmt, name, header, template, shift, scale=1):
    rows = []
    for i, (a, b, c) in enumerate(TIMES):
        t0, t1, t2 = (shift + scale * x for x in (a, b, c))
        rows.append(template.format(i=i, t0=t0, t1=t1, t2=t2, d=c - b))
    lines = ([header] if header else []) + rows
    return write(tmp_path, f"{shift}-{scale}-{name}", *lines)


@pytest.mark.parametrize(("fmt", "name", "header", "template"), SHIFTABLE)
@pytest.mark.parametrize("shift", [1_700_000_000, 1_700_000_000_000_000_000, -(10**15)])
def test_shifted_trace_gives_identical_submit_and_duration(
    tmp_path, fmt, name, header, template, shift
):
    base = load_trace(_shifted(tmp_path, fmt, name, header, template, 0), fmt)
    moved = load_trace(_shifted(tmp_path, fmt, name, header, template, shift), fmt)
    assert np.array_equal(base.jobs.submit, moved.jobs.submit)
    assert np.array_equal(base.jobs.duration, moved.jobs.duration)
    assert base.jobs.ids == moved.jobs.ids
    assert base.jobs.submit[0] == 0.0
    first = min(b if fmt == "pai" else a for a, b, _ in TIMES)
    assert moved.report.time_origin == str(shift + first)


def test_decimal_times_are_exact_at_nanosecond_magnitudes(tmp_path):
    rows = ["a,0.25,10.5,1,1,,,", "b,0.75,3,1,1,,,", "c,100.000000001,1,1,1,,,"]
    base = load_trace(write(tmp_path, "a.csv", CSV, *rows))
    shifted = [
        r.replace(",0.", ",1700000000000000000.").replace(",100.", ",1700000000000000100.")
        for r in rows
    ]
    moved = load_trace(write(tmp_path, "b.csv", CSV, *shifted))
    assert np.array_equal(base.jobs.submit, moved.jobs.submit)
    assert list(base.jobs.submit) == [0.0, 0.5, 99.750000001]
    assert moved.report.time_origin == "1700000000000000000.25"


def test_helios_derived_interval_sum_is_exact(tmp_path):
    rows = [f"j{i},u,1,1,1,0.1,5,5,X" for i in range(10)]
    trace = load_trace(write(tmp_path, "d.csv", DERIVED, *rows))
    # Exact sums: 0.1 x 9 after the first arrival is 0.9, not 0.8999999999999999.
    assert trace.jobs.submit[-1] == 0.9
    assert trace.report.time_origin == "0.1"


def test_helios_datetimes_with_zone_and_microseconds(tmp_path):
    p = write(
        tmp_path,
        "log.csv",
        HELIOS,
        "1,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01.500000,2020-06-09 18:41:02,"
        "2020-06-09 18:42:02,60,0",
        "2,u,vc,1,1,1,COMPLETED,2020-06-09 20:41:01+02:00,2020-06-09 20:41:01+02:00,"
        "2020-06-09 20:42:01+02:00,60,0",
    )
    trace = load_trace(p)
    assert list(trace.jobs.submit) == [0.0, 0.5]  # job 2 is 18:41:01 UTC
    assert trace.jobs.ids == ["2", "1"]
    assert trace.report.time_origin == "2020-06-09 18:41:01"


def test_span_over_cap_is_one_error_naming_both_lines(tmp_path):
    far = 101 * limits.YEAR_S
    p = write(tmp_path, "span.csv", CSV, "a,5,10,1,1,,,", "b,0,10,1,1,,,", f"c,{far},10,1,1,,,")
    for skip in (False, True):
        with pytest.raises(TraceFormatError) as e:
            load_trace(p, skip_bad_rows=skip)
        assert e.value.line == 4 and e.value.column == "submit_s"
        assert "(line 3)" in str(e.value) and "100 years" in str(e.value)
    # 31 years apart is legal and exact.
    p = write(tmp_path, "ok.csv", CSV, "a,0,10,1,1,,,", f"b,{31 * limits.YEAR_S},10,1,1,,,")
    assert load_trace(p).jobs.submit[-1] == 31 * limits.YEAR_S


def test_relative_times_fall_back_to_exact_python_beyond_int64(tmp_path):
    t = 10**19 + 1  # > 2^63: not int64, still exact
    p = write(tmp_path, "big.csv", CSV, f"a,{t},10,1,1,,,", f"b,{t + 3},10,1,1,,,")
    assert list(load_trace(p).jobs.submit) == [0.0, 3.0]


# ---- ranges and caps: bad rows, never a traceback --------------------------------------

OUT_OF_RANGE = [
    ("openb", OPENB, f"p,1000,1,{BIG},1000,,LS,Failed,0,10,0", "num_gpu"),
    ("openb", OPENB, f"p,{BIG},1,1,1000,,LS,Failed,0,10,0", "cpu_milli"),
    ("openb", OPENB, f"p,1000,{BIG},1,1000,,LS,Failed,0,10,0", "memory_mib"),
    ("openb", OPENB, f"p,1000,1,1,1000,,LS,Failed,{BIG},{BIG},{BIG}", "creation_time"),
    ("openb", OPENB, "p,1000,1,1,1000,,LS,Failed,0,1e999,0", "deletion_time"),
    ("openb", OPENB, f"p,1000,1,1,1000,,LS,Failed,0,{11 * limits.YEAR_S},0", "deletion_time"),
    ("helios", HELIOS, f"1,u,vc,{BIG},1,1,COMPLETED,1,1,2,1,0", "gpu_num"),
    ("helios", HELIOS, f"1,u,vc,1,1,{BIG},COMPLETED,1,1,2,1,0", "node_num"),
    ("helios", HELIOS, "1,u,vc,1,inf,1,COMPLETED,1,1,2,1,0", "cpu_num"),
    ("helios", HELIOS, f"1,u,vc,1,1,1,COMPLETED,1,1,2,{BIG},0", "duration"),
    ("helios-derived", DERIVED, "a,u,1,1,1,1e999,5,5,X", "interval"),
    ("helios-derived", DERIVED, "a,u,1,1,1,nan,5,5,X", "interval"),
    ("helios-derived", DERIVED, f"a,u,1,1,1,1,{BIG},5,X", "run_time"),
    ("pai", None, f"j,t,{10**12},Terminated,1,2,100,1,,", "inst_num"),
    ("pai", None, f"j,t,1,Terminated,1,2,{BIG},1,,", "plan_cpu"),
    ("pai", None, "j,t,1,Terminated,1,2,100,nan,,", "plan_mem"),
    ("pai", None, "j,t,1,Terminated,1,2,100,1,-inf,", "plan_gpu"),
    ("pai", None, "j,t,10000,Terminated,1,2,100,1,6400,", "inst_num, plan_gpu"),
    ("pai", None, "j,t,10000,Terminated,1,2,409600,1,100,", "inst_num, plan_cpu"),
    ("csv", CSV, f"a,0,10,{BIG},1,,,", "gpus"),
    ("csv", CSV, f"a,0,10,1,{BIG},,,", "cores"),
    ("csv", CSV, f"a,0,10,1,1,{BIG},,", "mem_mib"),
    ("csv", CSV, f"a,0,10,1,1,,{BIG},", "nodes"),
    ("csv", CSV, "a,-1e999,10,1,1,,,", "submit_s"),
    ("csv", CSV, f"a,{'9' * 5000},10,1,1,,,", "submit_s"),
    ("csv", CSV, "a,0,1e999,1,1,,,", "duration_s"),
]


@pytest.mark.parametrize(("fmt", "header", "row", "column"), OUT_OF_RANGE)
def test_out_of_range_is_a_bad_row_naming_the_column(tmp_path, fmt, header, row, column):
    lines = ([header] if header else []) + [row]
    p = write(tmp_path, "t.csv", *lines)
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, fmt)
    assert e.value.column == column and "\n" not in str(e.value) and len(str(e.value)) < 300
    r = load_trace(p, fmt, skip_bad_rows=True).report
    assert r.skipped_bad_rows == 1 and r.jobs_loaded == 0 and r.rows_read == 1


def test_huge_pai_instance_count_is_refused_before_any_job_is_made(tmp_path, monkeypatch):
    p = write(tmp_path, "pai.csv", f"j,t,{10**12},Terminated,1,2,100,1,,")

    def no_job(*args: object, **kwargs: object) -> None:
        raise AssertionError("a job was made before the instance count was refused")

    monkeypatch.setattr(TraceBuilder, "job", no_job)
    r = load_trace(p, skip_bad_rows=True).report
    assert r.skipped_bad_rows == 1 and "inst_num" in r.bad_row_examples[0]


def test_pai_instance_cap_itself_is_legal(tmp_path):
    p = write(tmp_path, "pai.csv", f"j,t,{limits.MAX_JOB_NODES},Terminated,1,2,100,1,,")
    trace = load_trace(p)
    assert len(trace.jobs) == limits.MAX_JOB_NODES
    assert trace.jobs.ids[-1] == f"j/t#{limits.MAX_JOB_NODES - 1}"


def test_job_table_from_rows_refuses_overflow_with_a_value_error():
    with pytest.raises(ValueError, match="does not fit"):
        JobTable.from_rows([("a", 0.0, 1.0, 2**40, 1, 0, 1, 0)])


# ---- encodings, NUL bytes, long lines --------------------------------------------------


def test_undecodable_nul_and_overlong_lines_name_file_and_line(tmp_path):
    p = tmp_path / "jobs.csv"
    p.write_bytes(
        b"\xef\xbb\xbf" + CSV.encode() + b"\n"
        b"a,0,10,1,1,,,\n"
        b"b\xff,1,10,1,1,,,\n"
        b"c,2\x00,10,1,1,,,\n"
        b"d," + b"1" * (limits.MAX_LINE_CHARS + 10) + b",10,1,1,,,\n"
        b"e,3,10,1,1,,,\n"
        b'f,"4\n'
    )
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.line == 3 and "not UTF-8" in str(e.value) and str(p) in str(e.value)
    trace = load_trace(p, skip_bad_rows=True)
    r = trace.report
    assert trace.jobs.ids == ["a", "e"]  # the byte-order mark did not hide the header
    assert r.skipped_bad_rows == 4 and r.rows_read == 6
    lines = [ex.split(":")[1] for ex in r.bad_row_examples]
    assert lines == ["3", "4", "5", "7"]
    assert "NUL" in r.bad_row_examples[1] and "longer than" in r.bad_row_examples[2]


def test_undecodable_header_is_a_wrong_file_error(tmp_path):
    p = tmp_path / "jobs.csv"
    p.write_bytes(b"job_id\xff,submit_s\n")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.line == 1 and "not UTF-8" in str(e.value)
    with pytest.raises(TraceFormatError):
        load_trace(p, "csv", skip_bad_rows=True)


# ---- duplicate ids ---------------------------------------------------------------------


def test_duplicate_ids_are_kept_renamed_and_counted(tmp_path):
    p = write(
        tmp_path,
        "jobs.csv",
        CSV,
        "a,0,10,1,1,,,",
        "a,1,10,1,1,,,",
        "a#2,2,10,1,1,,,",
        "a,3,10,1,1,,,",
        "b,4,10,1,1,,,",
        "b,5,10,1,1,,,",
    )
    trace = load_trace(p)
    r = trace.report
    assert trace.jobs.ids == ["a", "a#3", "a#2", "a#4", "b", "b#2"]
    assert r.duplicate_ids == 3 and r.duplicate_id_examples == ["a", "b"]
    assert r.adjusted["duplicate_id_renamed"] == 3
    assert r.as_dict()["duplicate_ids"] == 3
    assert r.rows_read == r.jobs_loaded == 6  # renaming changes no count


def test_no_duplicates_reports_zero(tmp_path):
    r = load_trace(write(tmp_path, "jobs.csv", CSV, "a,0,10,1,1,,,")).report
    assert r.duplicate_ids == 0 and "duplicate_id_renamed" not in r.adjusted


# ---- cluster specs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("1000000000000x8g96c", "count must be in [1, 100000]"),
        (f"{BIG}x8g96c", "count must be in"),
        ("1x65g96c", "gpus must be in [0, 64]"),
        ("1x8g5000c", "cores must be in [1, 4096]"),
        ("1x8g0c", "cores must be in"),
        ("1x8g96c0m", "mem must be in [1, 16384]"),
        ("1x8g96c0b", "bw must be in"),
        ("1x8g96c0.0b", "bw must be in"),
        ("1x8g96c2000000000b", "bw must be in"),
        ("60000x8g96c,50000x0g8c", "more than 100000 nodes"),
        ("1x8g96c" + "1" * 5000 + "m", "mem must be in"),
    ],
)
def test_cluster_spec_ranges(spec, text, monkeypatch):
    def no_node(*args: object) -> None:
        raise AssertionError("a node was made before the spec was refused")

    monkeypatch.setattr(cluster, "NodeSpec", no_node)
    with pytest.raises(ValueError) as e:
        parse_cluster_spec(spec)
    assert text in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 400


def test_cluster_spec_at_its_caps_is_legal():
    c = parse_cluster_spec("2x64g4096c16384m1000000000b")
    assert c.nodes[0].bw_gbps == 1e9 and c.nodes[0].mem_mib == 16384 * 1024


def test_resample_cluster_node_count_is_capped():
    base = parse_cluster_spec("2x8g96c")
    with pytest.raises(ValueError, match="1..100000"):
        resample_cluster(base, 10**12, seed=0)
    assert len(resample_cluster(base, 5, seed=0).nodes) == 5


# ---- node lists ------------------------------------------------------------------------

NODES = "sn,cpu_milli,memory_mib,gpu,model"


@pytest.mark.parametrize(
    ("row", "column", "text"),
    [
        (f"n1,{BIG},1,1,V100", "cpu_milli", "must be in"),
        ("n1,500,1,1,V100", "cpu_milli", "must be in [1000,"),
        ("n1,96000,1,65,V100", "gpu", "must be in [0, 64]"),
        ("n1,96000,-1,1,V100", "memory_mib", "must be in"),
        ("n1,96000,1,nan,V100", "gpu", "finite"),
        ("n1,96000,1,x,V100", "gpu", "not a number"),
        (",96000,1,1,V100", "sn", "missing"),
        ("n0,96000,1,1,V100", "sn", "appears twice"),
        ("n1,96000,1", None, "expected 5 fields"),
    ],
)
def test_node_list_bad_rows_name_file_line_and_column(tmp_path, row, column, text):
    p = write(tmp_path, "nodes.csv", NODES, "n0,96000,262144,8,V100", row)
    with pytest.raises(TraceFormatError) as e:
        load_node_list(p)
    assert e.value.line == 3 and e.value.column == column and text in str(e.value)
    assert str(e.value).startswith(f"{p}:3:")


def test_node_list_encoding_and_node_cap(tmp_path, monkeypatch):
    p = tmp_path / "nodes.csv"
    p.write_bytes(NODES.encode() + b"\nn0,96000,1,1,V\xff100\n")
    with pytest.raises(TraceFormatError, match="not UTF-8") as e:
        load_node_list(p)
    assert e.value.line == 2
    monkeypatch.setattr(limits, "MAX_NODES", 3)
    rows = [f"n{i},8000,1,0," for i in range(4)]
    with pytest.raises(TraceFormatError, match="more than 3 nodes") as e:
        load_node_list(write(tmp_path, "many.csv", NODES, *rows))
    assert e.value.line == 5
    assert len(load_node_list(write(tmp_path, "three.csv", NODES, *rows[:3])).nodes) == 3


# ---- profile files ---------------------------------------------------------------------


def _profile(tmp_path: Path, edit, raw: str | None = None) -> Path:
    spec = json.loads((PROFILE_DIR / "coda.json").read_text(encoding="utf-8"))
    if edit is not None:
        edit(spec)
    p = tmp_path / "p.json"
    p.write_text(raw if raw is not None else json.dumps(spec, allow_nan=True), encoding="utf-8")
    return p


def _set(path: str, value):
    def edit(spec):
        keys = path.split(".")
        node = spec
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


@pytest.mark.parametrize(
    ("path", "value", "key"),
    [
        ("models.AlexNet.slowdown.1", 1e300, "models.AlexNet.slowdown[1]"),
        ("models.AlexNet.slowdown.1", float("nan"), "models.AlexNet.slowdown[1]"),
        ("models.AlexNet.slowdown.1", 10**400, "models.AlexNet.slowdown[1]"),
        ("models.AlexNet.slowdown", "fast", "models.AlexNet.slowdown"),
        ("models.AlexNet.bw_gbps.default.1N1G", -3, "models.AlexNet.bw_gbps.default.1N1G"),
        ("models.AlexNet.cores.default.1N4G", 10**6, "models.AlexNet.cores.default.1N4G"),
        ("node.bw_gbps_per_core", 0, "node.bw_gbps_per_core"),
        ("node.bw_gbps_per_core", float("inf"), "node.bw_gbps_per_core"),
        ("pcie.pair_slowdown", True, "pcie.pair_slowdown"),
        ("pcie.pair_overrides", 7, "pcie.pair_overrides"),
        ("cpu_jobs.jitter", 1.5, "cpu_jobs.jitter"),
        ("cpu_jobs.bw_per_core_classes", {}, "cpu_jobs.bw_per_core_classes"),
        ("default_mix.AlexNet", 10**400, "default_mix"),
        ("multi_gpu_floor.gpus", {"²": [0, 0, 0, 0]}, "multi_gpu_floor.gpus.²"),
        ("multi_gpu_floor.gpus", {"9" * 5000: [0, 0, 0, 0]}, "multi_gpu_floor.gpus.999"),
        ("models", [], "models"),
    ],
)
def test_profile_bad_values_name_file_and_key(tmp_path, path, value, key):
    p = _profile(tmp_path, _set(path, value))
    with pytest.raises(ValueError) as e:
        load_profile_set(str(p))
    msg = str(e.value)
    assert type(e.value) is ValueError and str(p) in msg and f"key {key!r}"[:-1] in msg
    assert "\n" not in msg and len(msg) < 400


def test_profile_missing_key_names_its_path(tmp_path):
    p = _profile(tmp_path, lambda s: s["models"]["VGG16"].pop("pcie"))
    with pytest.raises(ValueError, match=r"key 'models.VGG16.pcie': missing"):
        load_profile_set(str(p))


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("[" * 100_000, "unreadable JSON"),
        ('{"schema": ' + "9" * 5000 + "}", "unreadable JSON"),
        ("{", "invalid JSON"),
        ('{"schema": 1, "schema": 2}', "key 'schema' is given twice"),  # the last won
        ('{"notes": ' + "[" * 600 + "]" * 600 + "}", "nested more than 32 deep"),
    ],
)
def test_profile_unparseable_files_are_one_line(tmp_path, raw, text):
    p = _profile(tmp_path, None, raw=raw)
    with pytest.raises(ValueError, match=text) as e:
        load_profile_set(str(p))
    assert "\n" not in str(e.value) and str(p) in str(e.value) and len(str(e.value)) < 400


def test_profile_undecodable_and_oversized(tmp_path, monkeypatch):
    p = tmp_path / "bad.json"
    p.write_bytes(b'{"schema": "\xff"}')
    with pytest.raises(ValueError, match="not UTF-8 text at byte 12"):
        load_profile_set(str(p))
    monkeypatch.setattr(limits, "MAX_PROFILE_BYTES", 100)
    big = _profile(tmp_path, None)
    with pytest.raises(ValueError, match="larger than 100 bytes"):
        load_profile_set(str(big))


def test_shipped_profiles_still_load():
    for name in ("coda", "synergy"):
        assert load_profile_set(name).models


def test_decimal_is_not_truncated_by_the_int64_path(tmp_path):
    # One Decimal among ints must not be cut to an integer by numpy.
    p = write(tmp_path, "j.csv", CSV, "a,0,10,1,1,,,", "b,2.5,10,1,1,,,")
    assert list(load_trace(p).jobs.submit) == [0.0, 2.5]


# ---------------- inputs that must not get through: job counts, file kinds, quotes, dates, profiles
def test_a_few_pai_rows_cannot_make_millions_of_jobs(tmp_path: Path, monkeypatch) -> None:
    from coda.workload import limits

    monkeypatch.setattr(limits, "MAX_TRACE_JOBS", 25_000)
    p = tmp_path / "amp.csv"
    p.write_text("".join(f"j{i},t,10000,Terminated,{i},{i + 100},100,1,0,\n" for i in range(5)))
    with pytest.raises(TraceFormatError, match="more than 25000 jobs") as e:
        load_trace(p, "pai", skip_bad_rows=True)
    assert ":3:" in str(e.value)  # the line that crossed the cap


@pytest.mark.parametrize("what", ["fifo", "dir", "dev"])
def test_only_regular_files_are_read(tmp_path: Path, what: str) -> None:
    if what == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif what == "dir":
        path = tmp_path
    else:
        path = Path("/dev/zero")
    with pytest.raises(TraceFormatError, match="not a regular file"):
        load_trace(path, "csv", skip_bad_rows=True)


def test_a_stray_quote_is_one_bad_line_not_the_rest_of_the_file(tmp_path: Path) -> None:
    p = tmp_path / "stray.csv"
    rows = "".join(f"c{i},{i},100,1,4\n" for i in range(500))
    p.write_text(f'job_id,submit_s,duration_s,gpus,cores\na,0,100,1,4\n"b,1,100,1,4\n{rows}')
    t = load_trace(p, "csv", skip_bad_rows=True)
    assert t.report.skipped_bad_rows == 1 and len(t.jobs) == 501
    assert t.report.bad_row_examples[0].startswith(f"{p}:3:")
    with pytest.raises(TraceFormatError, match=r":3: .*unbalanced quote"):
        load_trace(p, "csv")


def test_a_running_pai_task_past_the_duration_cap_is_a_bad_row(tmp_path: Path) -> None:
    p = tmp_path / "long.csv"
    p.write_text(
        "j1,t1,1,Running,0,,100,1,100,T4\n"
        "j2,t1,1,Waiting,315360001,,100,1,100,T4\n"
        "j3,t1,1,Terminated,10,20,100,1,100,T4\n"
    )
    t = load_trace(p, "pai", skip_bad_rows=True)
    assert t.report.skipped_bad_rows == 1 and len(t.jobs) == 1


def test_a_helios_date_at_the_end_of_year_9999_keeps_its_microseconds(tmp_path: Path) -> None:
    head = (
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration\n"
    )
    p = tmp_path / "far.csv"
    p.write_text(
        head + "j1,u,vc,8,32,1,COMPLETED,9999-12-31 23:59:58.999999,"
        "9999-12-31 23:59:58.999999,9999-12-31 23:59:59.999999,1\n"
    )
    t = load_trace(p, "helios")
    assert t.report.time_origin == "9999-12-31 23:59:58.999999"
    assert list(t.jobs.duration) == [1.0]


def test_profile_pair_override_naming_a_non_string_is_one_line(tmp_path):
    """A list where a model name goes raised TypeError (unhashable), a traceback."""
    p = _profile(tmp_path, _set("pcie.pair_overrides", [{"models": [[1], [2]], "slowdown": 1.2}]))
    with pytest.raises(ValueError, match=r"pcie.pair_overrides\[0\].models"):
        load_profile_set(str(p))


def test_profile_with_too_many_models_is_refused_at_once(tmp_path):
    """Every ordered pair of models is precomputed: 20,000 models ran for minutes in
    gigabytes before doing anything."""

    def many(spec):
        one = spec["models"]["VGG16"]
        spec["models"] = {f"m{i}": one for i in range(limits.MAX_PROFILE_MODELS + 1)}
        spec.pop("default_mix", None)

    p = _profile(tmp_path, many)
    with pytest.raises(ValueError, match="at most 1000"):
        load_profile_set(str(p))
