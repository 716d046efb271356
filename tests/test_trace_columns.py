"""The optional trace columns (time limit, user, model, CPU-job bandwidth): read from
csv and Helios files, kept with their rows, hostile values refused in one line, and
written back by write_csv."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda.cli import main
from coda.workload.jobs import JobTable, TraceFormatError
from coda.workload.traces import load_trace
from coda.workload.traces.generic_csv import write_csv

HEADER = "job_id,submit_s,duration_s,gpus,cores,user,model,time_limit_s,cpu_bw_gbps_per_core"
HELIOS = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
)
DERIVED = "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status"


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


# ---- carried with their rows -------------------------------------------------------------


def test_values_follow_their_rows_through_sorting_and_renaming(tmp_path):
    p = write(
        tmp_path,
        "t.csv",
        HEADER,
        "c,30,10,0,1,carol,,600,0.5",
        "a,10,10,1,2,alice,Transformer,3600,",
        "a,20,10,2,4,,wavenet,,",
        "b,0,10,0,2,bob,,,",
    )
    t = load_trace(p).jobs
    assert t.ids == ["b", "a", "a#2", "c"]  # sorted by submit; the repeat renamed
    assert t.user == ["bob", "alice", "", "carol"]
    assert t.model == ["", "Transformer", "wavenet", ""]
    assert np.array_equal(t.time_limit, [np.nan, 3600, np.nan, 600], equal_nan=True)
    assert np.array_equal(t.cpu_bw, [np.nan, np.nan, np.nan, 0.5], equal_nan=True)


def test_excluded_and_skipped_rows_do_not_shift_the_values(tmp_path):
    p = write(
        tmp_path,
        "t.csv",
        HEADER,
        "a,0,10,0,1,ann,,100,1",
        "z,1,0,0,1,zed,,200,2",  # zero duration: excluded
        "b,2,ten,0,1,bad,,300,3",  # bad row: skipped
        "m,3,10,0,1,mod,Transformer,400,",  # bad row: a CPU job naming a model
        "c,4,10,0,1,cid,,500,4",
        "d,5,10,1,1,dee,,600,",
    )
    trace = load_trace(p, skip_bad_rows=True)
    assert trace.report.skipped_bad_rows == 2 and trace.report.excluded == {"zero_duration": 1}
    t = trace.jobs
    assert t.ids == ["a", "c", "d"]
    assert t.user == ["ann", "cid", "dee"]
    assert t.time_limit.tolist() == [100, 500, 600]
    assert np.array_equal(t.cpu_bw, [1, 4, np.nan], equal_nan=True)
    assert t.model is None  # the only row that named one was bad


def test_a_column_no_row_gives_is_none(tmp_path):
    p = write(tmp_path, "t.csv", HEADER, "a,0,10,0,1, ,, ,", "b,1,10,1,2,,,,")
    t = load_trace(p).jobs
    assert (t.user, t.model, t.time_limit, t.cpu_bw) == (None, None, None, None)
    plain = load_trace(
        write(tmp_path, "p.csv", "job_id,submit_s,duration_s,gpus,cores", "a,0,1,0,1")
    )
    assert plain.jobs.user is None and plain.jobs.time_limit is None


def test_a_column_only_later_rows_give_fills_the_earlier_ones(tmp_path):
    p = write(tmp_path, "t.csv", HEADER, "a,0,10,0,1,,,,", "b,1,10,0,1,,,,", "c,2,10,0,1,cy,,,")
    t = load_trace(p).jobs
    assert t.user == ["", "", "cy"] and t.time_limit is None


def test_names_are_kept_as_written_without_surrounding_spaces(tmp_path):
    p = write(tmp_path, "t.csv", HEADER, 'a,0,10,1,1,"  Dr. O\'Brien, lab 3 ",  ResNet50 ,,')
    t = load_trace(p).jobs
    assert t.user == ["Dr. O'Brien, lab 3"] and t.model == ["ResNet50"]


# ---- hostile values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "column", "needle"),
    [
        ("a\x07b,,,", "user", "not printable"),
        ("\u202eevil,,,", "user", "not printable"),
        ("x" * 129 + ",,,", "user", "longer than 128"),
        (",Trans\x1bformer,,", "model", "not printable"),
        ("," + "m" * 200 + ",,", "model", "longer than 128"),
        (",,0,", "time_limit_s", "> 0"),
        (",,-1,", "time_limit_s", "must be in"),
        (",,nan,", "time_limit_s", "not a finite number"),
        (",,inf,", "time_limit_s", "not a finite number"),
        (",,1e999,", "time_limit_s", "not a finite number"),
        (",,31622401,", "time_limit_s", "must be in"),
        (",,1h,", "time_limit_s", "not a number"),
        (",,,-0.5", "cpu_bw_gbps_per_core", "must be in"),
        (",,,nan", "cpu_bw_gbps_per_core", "not a finite number"),
        (",,,1e400", "cpu_bw_gbps_per_core", "not a finite number"),
        (",,,1001", "cpu_bw_gbps_per_core", "must be in"),
        (",ResNet50,,", "model", "CPU job"),
    ],
)
def test_hostile_values_are_one_line_errors_naming_file_line_and_column(
    tmp_path, fields, column, needle
):
    p = write(tmp_path, "hostile.csv", HEADER, "ok,0,10,0,1,,,,", f"bad,1,10,0,2,{fields}")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    msg = str(e.value)
    assert e.value.line == 3 and e.value.column == column
    assert msg.startswith(f"{p}:3: column {column!r}:") and needle in msg
    assert "\n" not in msg and len(msg) < len(str(p)) + 200
    result = CliRunner().invoke(main, ["trace", str(p)])
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "hostile.csv:3:" in errors[0] and column in errors[0]


@pytest.mark.parametrize(
    ("header", "column"),
    [
        ("job_id,submit_s,duration_s,gpus,gpus,cores", "gpus"),
        (HEADER + ", Time_Limit_S ", "time_limit_s"),  # the same name once normalised
        ("u_id,gpu_num,cpu_num,node_num,interval,run_time,gpu_num", "gpu_num"),
    ],
)
def test_a_column_named_twice_is_refused_naming_it(tmp_path, header, column):
    # Read as a dict, the last copy would win: a GPU job could load as a CPU job.
    width = header.count(",") + 1
    p = write(tmp_path, "twice.csv", header, ",".join(["1"] * width))
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.line == 1 and e.value.column == column
    assert "named more than once" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("value", ["\u0663", "1_0", "\uff11", "\xa03"])
@pytest.mark.parametrize("column", ["submit_s", "duration_s", "cores", "time_limit_s"])
def test_a_number_in_another_script_is_refused(tmp_path, column, value):
    # Python's float() and int() take them; no trace writer means them.
    values = {"job_id": "a", "submit_s": "0", "duration_s": "10", "gpus": "0", "cores": "1"}
    values[column] = value
    header = "job_id,submit_s,duration_s,gpus,cores,time_limit_s"
    row = ",".join(values.get(c, "") for c in header.split(","))
    p = write(tmp_path, "digits.csv", header, row)
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.line == 2 and e.value.column == column
    assert "not a plain ASCII number" in str(e.value)


def test_a_bandwidth_on_a_gpu_job_is_a_bad_row(tmp_path):
    p = write(tmp_path, "t.csv", HEADER, "a,0,10,0.5,1,,,,1.5")  # half a GPU is a GPU job
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.column == "cpu_bw_gbps_per_core" and "GPU job" in str(e.value)


def test_a_bad_value_counts_even_on_a_row_that_would_be_excluded(tmp_path):
    p = write(tmp_path, "t.csv", HEADER, "a,0,0,0,1,,ResNet50,,")
    with pytest.raises(TraceFormatError, match="CPU job"):
        load_trace(p)


TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=140
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(user=TEXT, model=TEXT)
def test_any_name_loads_as_written_or_is_one_line_error(tmp_path, user, model):
    rows = [["a", "0", "10", "1", "1", user, model, "", ""]]
    p = tmp_path / "h.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER.split(","))
        w.writerows(rows)
    try:
        t = load_trace(p, "csv").jobs
    except TraceFormatError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(f"{p}:")
        assert e.column in ("user", "model", None), msg
        return
    for given_, got in ((user, t.user), (model, t.model)):
        s = given_.strip()
        assert s.isprintable() and len(s) <= 128
        assert got == ([s] if s else None) or got == [s]


NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["", " ", "nan", "-0", "0.0", "1e-320", "1_000", "0x10", "٣"]),
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(limit=NUMBER_TEXT, bw=NUMBER_TEXT)
def test_any_number_is_kept_in_range_or_is_one_line_error(tmp_path, limit, bw):
    p = write(tmp_path, "n.csv", HEADER, f"a,0,10,0,1,,,{limit},{bw}")
    try:
        t = load_trace(p).jobs
    except TraceFormatError as e:
        assert "\n" not in str(e) and e.line == 2
        assert e.column in ("time_limit_s", "cpu_bw_gbps_per_core"), str(e)
        return
    if t.time_limit is not None:
        assert 0 < t.time_limit[0] <= 366 * 86_400
    if t.cpu_bw is not None:
        assert 0 <= t.cpu_bw[0] <= 1000


# ---- Helios ------------------------------------------------------------------------------


def test_helios_gives_users(tmp_path):
    p = write(
        tmp_path,
        "cluster_log.csv",
        HELIOS,
        "1,uA,vc,1,4,1,COMPLETED,100,150,1150,1000,0",
        "2,,vc,0,4,1,COMPLETED,90,90,100,10,0",
        "3,uB,vc,1,0,0,CANCELLED,95,,,0,0",
    )
    t = load_trace(p).jobs
    assert t.ids == ["2", "1"] and t.user == ["", "uA"]
    assert t.time_limit is None and t.model is None


def test_helios_without_a_user_column_has_none(tmp_path):
    header = "job_id,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration"
    p = write(tmp_path, "c.csv", header, "1,1,4,1,COMPLETED,100,150,1150,1000")
    assert load_trace(p, "helios").jobs.user is None


def test_helios_derived_gives_users_and_time_limits(tmp_path):
    p = write(
        tmp_path,
        "derived.csv",
        DERIVED,
        "a,u1,1,4,1,5,100,200,COMPLETED",
        "b,u2,0,2,1,10,50,0,FAILED",
        "c,,2,8,1,7,50,,Running",
        "d,u3,1,1,1,1,500,300,COMPLETED",
    )
    t = load_trace(p).jobs
    assert t.ids == ["a", "b", "c", "d"]
    assert t.user == ["u1", "u2", "", "u3"]
    # 0 and empty are no limit; a limit below the runtime is kept as given.
    assert np.array_equal(t.time_limit, [200, np.nan, np.nan, 300], equal_nan=True)
    assert "time_limit" in load_trace(p).report.treatments


@pytest.mark.parametrize(("wall", "needle"), [("-5", "must be in"), ("4e7", "must be in")])
def test_helios_derived_bad_wall_time_is_a_bad_row(tmp_path, wall, needle):
    p = write(tmp_path, "d.csv", DERIVED, "a,u,1,1,1,0,5,5,X", f"b,u,1,1,1,0,5,{wall},X")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.line == 3 and e.value.column == "wall_time" and needle in str(e.value)
    trace = load_trace(p, skip_bad_rows=True)
    assert trace.jobs.ids == ["a"] and trace.jobs.time_limit.tolist() == [5]


def test_a_bad_user_in_helios_is_a_bad_row(tmp_path):
    p = write(tmp_path, "c.csv", HELIOS, "1,u\x01,vc,1,4,1,COMPLETED,100,150,1150,1000,0")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.column == "user"


# ---- write_csv -------------------------------------------------------------------------------


NAME = (
    st.text(
        st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_categories=("Cc", "Cs")),
        min_size=1,
        max_size=12,
    )
    .map(str.strip)
    .filter(lambda s: s.isprintable())
)


@st.composite
def tables(draw: st.DrawFn) -> JobTable:
    n = draw(st.integers(1, 12))
    gpus = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    ids = [f"j{i}" for i in range(n)]
    submit = sorted(draw(st.lists(st.integers(0, 10**9), min_size=n, max_size=n)))
    submit = [s - submit[0] for s in submit]
    dur = draw(st.lists(st.floats(0.001, 1e8, allow_nan=False), min_size=n, max_size=n))
    cores = draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n))
    table = JobTable.from_columns(ids, submit, dur, gpus, cores, [0] * n, [1] * n, [0] * n)
    if draw(st.booleans()):
        table.user = [draw(st.one_of(st.just(""), NAME)) for _ in range(n)]
    if draw(st.booleans()):
        table.model = [draw(st.one_of(st.just(""), NAME)) if g else "" for g in gpus]
    if draw(st.booleans()):
        lim = st.one_of(st.just(math.nan), st.floats(0.001, 3e7))
        table.time_limit = np.array([draw(lim) for _ in range(n)])
    if draw(st.booleans()):
        bw = st.one_of(st.just(math.nan), st.floats(0, 1000))
        table.cpu_bw = np.array([math.nan if g else draw(bw) for g in gpus])
    return table


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(table=tables())
def test_write_csv_round_trips_every_column(tmp_path, table):
    loaded = load_trace(write_csv(table, tmp_path / "w.csv")).jobs
    assert loaded.ids == table.ids
    for col in ("submit", "duration", "gpus", "cores", "mem_mib", "nodes", "flags"):
        assert np.array_equal(getattr(loaded, col), getattr(table, col)), col
    # A column of only "" or NaN reads back as not given.
    for col in ("user", "model"):
        want = getattr(table, col)
        want = want if want is not None and any(want) else None
        assert getattr(loaded, col) == want, col
    for col in ("time_limit", "cpu_bw"):
        want = getattr(table, col)
        want = want if want is not None and not np.all(np.isnan(want)) else None
        got = getattr(loaded, col)
        assert (got is None) == (want is None), col
        if want is not None:
            assert np.array_equal(got, want, equal_nan=True), col


def test_write_csv_refuses_a_name_with_a_line_break(tmp_path):
    table = JobTable.from_columns(["a"], [0], [1], [0], [1], [0], [1], [0])
    table.user = ["two\nlines"]
    with pytest.raises(ValueError, match="line break"):
        write_csv(table, tmp_path / "w.csv")


def test_write_csv_of_an_empty_table_is_a_header(tmp_path):
    path = write_csv(JobTable.empty(), tmp_path / "e.csv")
    assert path.read_text(encoding="utf-8").splitlines() == [
        "job_id,submit_s,duration_s,gpus,cores,mem_mib,nodes,censored"
    ]
