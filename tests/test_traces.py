"""Trace loaders: every format, the shared rules, and the real bundled openb trace."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda.workload.jobs import FLAG_CENSORED, FLAG_FRACTIONAL, TraceFormatError, TraceReport
from coda.workload.traces import (
    FORMATS,
    bundled_nodes_path,
    bundled_trace_path,
    detect_format,
    load_trace,
)
from coda.workload.traces._common import EXTRA_JOBS

OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
HELIOS_HEADER = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
)
DERIVED_HEADER = "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status"
PAI_HEADER = (
    "job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type"
)
CSV_HEADER = "job_id,submit_s,duration_s,gpus,cores,mem_mib,nodes,censored"


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def identity_holds(r: TraceReport) -> bool:
    """Nothing is dropped silently: each row is a job, an exclusion or a skipped bad row."""
    extra = r.adjusted.get(EXTRA_JOBS, 0)
    return r.rows_read == r.jobs_loaded - extra + sum(r.excluded.values()) + r.skipped_bad_rows


def job(trace, job_id: str) -> dict:
    i = trace.jobs.ids.index(job_id)
    t = trace.jobs
    return {
        "submit": float(t.submit[i]),
        "duration": float(t.duration[i]),
        "gpus": int(t.gpus[i]),
        "cores": int(t.cores[i]),
        "mem_mib": int(t.mem_mib[i]),
        "nodes": int(t.nodes[i]),
        "flags": int(t.flags[i]),
    }


# ---- the real bundled Alibaba openb 2023 trace ------------------------------------------


def _bundled_truth() -> dict[str, int]:
    """The counts worked out straight from the file, independently of the loader."""
    with open(bundled_trace_path(), newline="") as f:
        rows = list(csv.DictReader(f))
    started = [r for r in rows if r["scheduled_time"]]
    frac = [r for r in started if int(r["num_gpu"]) >= 1 and 0 < int(r["gpu_milli"]) < 1000]
    return {
        "rows": len(rows),
        "never_started": len(rows) - len(started),
        "started": len(started),
        "fractional_all": sum(
            1 for r in rows if int(r["num_gpu"]) >= 1 and 0 < int(r["gpu_milli"]) < 1000
        ),
        "fractional_started": len(frac),
        "running": sum(1 for r in started if r["pod_phase"] == "Running"),
        "cpu_only_started": sum(1 for r in started if r["num_gpu"] == "0"),
        "running_not_fractional": sum(
            1 for r in started if r["pod_phase"] == "Running" and r not in frac
        ),
    }


def test_bundled_trace_counts_match_the_data():
    truth = _bundled_truth()
    assert truth == {
        "rows": 8152,
        "never_started": 897,
        "started": 7255,
        "fractional_all": 3078,
        "fractional_started": 2573,
        "running": 5193,
        "cpu_only_started": 1052,
        "running_not_fractional": 3781,
    }


def test_bundled_trace_loads_with_documented_counts():
    assert detect_format(bundled_trace_path()) == "openb"
    trace = load_trace(bundled_trace_path())
    r = trace.report
    assert r.format == "openb"
    assert r.rows_read == 8152
    assert r.excluded == {"never_started": 897}
    assert r.jobs_loaded == len(trace.jobs) == 7255
    assert r.skipped_bad_rows == 0
    # 3,078 pods ask for a GPU fraction; 505 of them never started, so 2,573 are loaded.
    assert r.adjusted == {"fractional_gpu_rounded_up": 2573, "censored_kept": 5193}
    jobs = trace.jobs
    assert int(((jobs.flags & FLAG_FRACTIONAL) > 0).sum()) == 2573
    assert int(((jobs.flags & FLAG_CENSORED) > 0).sum()) == 5193
    assert identity_holds(r)
    assert np.all(np.diff(jobs.submit) >= 0)
    assert jobs.submit[0] == 0.0  # the original time origin, not shifted
    assert np.all(jobs.duration > 0)
    assert np.all(jobs.cores >= 1) and np.all(jobs.nodes == 1)
    assert int(jobs.is_dnn.sum()) == 6203  # 7,255 less the 1,052 CPU-only pods that started
    assert jobs.cores[jobs.ids.index("openb-pod-0000")] == 12


@pytest.mark.parametrize(
    ("kwargs", "loaded", "excluded", "adjusted"),
    [
        (
            {"fractional": "drop"},
            4682,
            {"never_started": 897, "fractional_gpu": 2573},
            {"censored_kept": 3781},
        ),
        (
            {"censored": "drop"},
            2062,
            {"never_started": 897, "censored": 5193},
            {"fractional_gpu_rounded_up": 1161},
        ),
        (
            {"fractional": "drop", "censored": "drop"},
            901,
            {"never_started": 897, "fractional_gpu": 2573, "censored": 3781},
            {},
        ),
    ],
)
def test_bundled_trace_drop_options(kwargs, loaded, excluded, adjusted):
    r = load_trace(bundled_trace_path(), **kwargs).report
    assert r.jobs_loaded == loaded
    assert r.excluded == excluded
    assert r.adjusted == adjusted
    assert identity_holds(r)


def test_bundled_nodes_file_is_there():
    with open(bundled_nodes_path(), newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1523
    assert set(rows[0]) == {"sn", "cpu_milli", "memory_mib", "gpu", "model"}
    readme = bundled_trace_path().parent / "README.md"
    assert "Fragmentation Gradient Descent" in readme.read_text(encoding="utf-8")


# ---- openb ---------------------------------------------------------------------------


def openb_file(tmp_path: Path, *rows: str) -> Path:
    return write(tmp_path, "pods.csv", OPENB_HEADER, *rows)


def test_openb_rules(tmp_path):
    p = openb_file(
        tmp_path,
        "whole,12000,16384,1,1000,,LS,Succeeded,10,110,20",
        "frac,1500,2048,1,460,,LS,Failed,5,50,10",
        "cpu,0,0,0,0,,BE,Succeeded,0,30,0",
        "pending,4000,1024,1,1000,,LS,Pending,7,100,",
        "pending2,4000,1024,1,1000,,LS,Pending,7,,",
        "run,8000,1024,8,1000,V100,LS,Running,3,500,3",
        "zero,1000,1024,0,0,,BE,Failed,9,9,9",
    )
    trace = load_trace(p)
    r = trace.report
    assert r.rows_read == 7
    assert r.excluded == {"never_started": 2, "zero_duration": 1}
    assert r.adjusted == {
        "fractional_gpu_rounded_up": 1,
        "censored_kept": 1,
        "cores_raised_to_1": 1,
    }
    assert trace.jobs.ids == ["cpu", "run", "frac", "whole"]  # by submit
    assert job(trace, "whole") == {
        "submit": 10.0,
        "duration": 90.0,
        "gpus": 1,
        "cores": 12,
        "mem_mib": 16384,
        "nodes": 1,
        "flags": 0,
    }
    assert job(trace, "frac")["gpus"] == 1
    assert job(trace, "frac")["cores"] == 2  # 1.5 cores rounded up
    assert job(trace, "frac")["flags"] == FLAG_FRACTIONAL
    assert job(trace, "cpu")["cores"] == 1 and job(trace, "cpu")["gpus"] == 0
    assert job(trace, "run")["flags"] == FLAG_CENSORED
    assert job(trace, "run")["gpus"] == 8
    assert set(r.treatments) >= {"fractional_gpu", "censored", "never_started", "zero_duration"}
    assert "whole GPU" in r.treatments["fractional_gpu"]
    assert identity_holds(r)


def test_openb_drop_options(tmp_path):
    p = openb_file(
        tmp_path,
        "frac,1500,2048,1,460,,LS,Failed,5,50,10",
        "run,8000,1024,8,1000,,LS,Running,3,500,3",
        "both,8000,1024,1,500,,LS,Running,3,500,3",
    )
    r = load_trace(p, fractional="drop").report
    assert r.excluded == {"fractional_gpu": 2}
    assert r.jobs_loaded == 1
    r = load_trace(p, censored="drop").report
    assert r.excluded == {"censored": 2}
    assert r.adjusted == {"fractional_gpu_rounded_up": 1}  # only kept jobs are counted
    assert "left out" in r.treatments["censored"]


@pytest.mark.parametrize(
    ("row", "column", "text"),
    [
        ("p,abc,1,1,1000,,LS,Failed,0,10,0", "cpu_milli", "not a number"),
        ("p,1000,1,-1,1000,,LS,Failed,0,10,0", "num_gpu", "must be in [0, 65535]"),
        ("p,1000,1,1,1500,,LS,Failed,0,10,0", "gpu_milli", "must be in [0, 1000]"),
        ("p,1000,1,0,500,,LS,Failed,0,10,0", "gpu_milli", "num_gpu is 0"),
        ("p,1000,1,1,1000,,LS,Failed,0,5,8", "deletion_time", "before start"),
        ("p,1000,1,1,1000,,LS,Failed,9,20,8", "scheduled_time", "before creation"),
        ("p,1000,1,1,1000,,LS,Failed,,20,8", "creation_time", "missing"),
        ("p,1000,1,1,1000,,LS,Failed,0,,8", "deletion_time", "missing"),
        ("p,1000,1,1.5,1000,,LS,Failed,0,20,8", "num_gpu", "whole number"),
        ("p,nan,1,1,1000,,LS,Failed,0,20,8", "cpu_milli", "finite"),
        (",1000,1,1,1000,,LS,Failed,0,20,8", "name", "missing"),
    ],
)
def test_openb_bad_values_name_file_line_and_column(tmp_path, row, column, text):
    p = openb_file(tmp_path, "ok,1000,1,1,1000,,LS,Failed,0,10,0", row)
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.line == 3 and e.value.column == column and e.value.path == str(p)
    assert text in str(e.value) and f"{p}:3" in str(e.value)


def test_skip_bad_rows_counts_and_keeps_examples(tmp_path):
    bad = [f"b{i},x,1,1,1000,,LS,Failed,0,10,0" for i in range(25)]
    p = openb_file(tmp_path, "ok,1000,1,1,1000,,LS,Failed,0,10,0", *bad, "short,1,2")
    r = load_trace(p, skip_bad_rows=True).report
    assert r.skipped_bad_rows == 26
    assert r.jobs_loaded == 1
    assert len(r.bad_row_examples) == 20
    assert r.bad_row_examples[0].startswith(f"{p}:3:")
    assert "cpu_milli" in r.bad_row_examples[0]
    assert identity_holds(r)
    with pytest.raises(TraceFormatError, match="expected 11 fields, found 3") as e:
        load_trace(write(tmp_path, "s.csv", OPENB_HEADER, "short,1,2"))
    assert e.value.line == 2


@pytest.mark.parametrize("skip", [False, True])
def test_missing_column_is_an_error_at_line_1(tmp_path, skip):
    p = write(tmp_path, "p.csv", "name,cpu_milli,memory_mib", "a,1,2")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, "openb", skip_bad_rows=skip)
    assert e.value.line == 1
    assert "num_gpu" in e.value.column and "pod_phase" in str(e.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_file_is_a_clear_error(tmp_path, fmt):
    p = tmp_path / "empty.csv"
    p.write_text("", encoding="utf-8")
    with pytest.raises(TraceFormatError, match="empty") as e:
        load_trace(p, fmt)
    assert e.value.line == 1
    with pytest.raises(TraceFormatError, match="empty"):
        detect_format(p)


def test_header_only_file_gives_no_jobs(tmp_path):
    trace = load_trace(write(tmp_path, "h.csv", OPENB_HEADER))
    assert len(trace.jobs) == 0 and trace.report.rows_read == 0


def test_blank_lines_and_bom_and_header_case(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text(
        "\ufeff" + OPENB_HEADER.upper() + "\n\na,1000,1,1,1000,,LS,Failed,0,10,0\n\n",
        encoding="utf-8",
    )
    r = load_trace(p).report
    assert r.rows_read == 1 and r.jobs_loaded == 1


# ---- helios ----------------------------------------------------------------------------


def test_helios_numeric_times(tmp_path):
    p = write(
        tmp_path,
        "cluster_log.csv",
        HELIOS_HEADER,
        "1,u,vc,8,64,2,COMPLETED,100,150,1150,1000,50",
        "2,u,vc,0,4,1,FAILED,90,90,100,10,0",
        "3,u,vc,1,0,0,CANCELLED,95,,,0,0",
        "4,u,vc,1,2,1,CANCELLED,96,96,96,0,0",
        "5,u,vc,2,6.5,1,RUNNING,97,98,,500,1",
    )
    trace = load_trace(p)
    r = trace.report
    assert r.format == "helios"
    assert r.excluded == {"never_started": 2}
    assert r.adjusted == {"censored_kept": 1}
    # Submit times count from the first kept job's submit_time (job 2, at 90).
    assert r.time_origin == "90"
    assert job(trace, "1") == {
        "submit": 10.0,
        "duration": 1000.0,
        "gpus": 8,
        "cores": 64,
        "mem_mib": 0,
        "nodes": 2,
        "flags": 0,
    }
    assert job(trace, "2")["gpus"] == 0 and job(trace, "2")["submit"] == 0.0
    assert job(trace, "5")["cores"] == 7 and job(trace, "5")["flags"] == FLAG_CENSORED
    assert identity_holds(r)


def test_helios_datetimes_become_seconds_since_first_kept_submit(tmp_path):
    p = write(
        tmp_path,
        "cluster_log.csv",
        HELIOS_HEADER,
        "1425511,uX,vcJ,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,"
        "2020-06-10 04:55:09,36848,0",
        "1425512,uV,vch,4,16,0,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,"
        "2020-06-09 18:45:36,249,0",
        "1425500,uV,vch,4,16,1,CANCELLED,2020-06-09 18:40:00,,,0,0",
    )
    trace = load_trace(p)
    # The never-started job submitted first does not set the origin: kept jobs do.
    assert job(trace, "1425511")["submit"] == 0.0
    assert job(trace, "1425512")["submit"] == 26.0
    assert trace.report.time_origin == "2020-06-09 18:41:01"
    assert job(trace, "1425512")["nodes"] == 1  # node_num 0 -> 1
    assert job(trace, "1425511")["duration"] == 36848.0
    assert trace.report.excluded == {"never_started": 1}


def test_helios_bad_rows(tmp_path):
    p = write(
        tmp_path,
        "cluster_log.csv",
        HELIOS_HEADER,
        "1,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:42:01,60,0",
        "2,u,vc,1,1,1,COMPLETED,1000,1000,1060,60,0",
        "3,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:40:01,60,0",
        "4,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:42:01,-5,0",
    )
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.line == 3 and e.value.column == "submit_time"
    r = load_trace(p, skip_bad_rows=True).report
    assert r.skipped_bad_rows == 3 and r.jobs_loaded == 1
    assert "end_time" in r.bad_row_examples[1] and "duration" in r.bad_row_examples[2]
    assert identity_holds(r)


def test_helios_derived(tmp_path):
    p = write(
        tmp_path,
        "derived.csv",
        DERIVED_HEADER,
        "a,u1,1,4,1,5,100,200,COMPLETED",
        "b,u2,0,2,1,10,0,60,FAILED",
        "c,u1,2,8,1,7,50,100,Running",
        "d,u3,x,8,1,3,50,100,COMPLETED",
        "e,u3,4,8,1,1,50,100,COMPLETED",
    )
    trace = load_trace(p, skip_bad_rows=True)
    r = trace.report
    assert r.format == "helios-derived"
    assert r.excluded == {"zero_duration": 1}
    assert r.skipped_bad_rows == 1
    # Arrivals 5, 22, 26 (running sums); submit counts from the first kept one (5).
    assert job(trace, "a")["submit"] == 0.0 and job(trace, "a")["duration"] == 100.0
    assert job(trace, "c")["submit"] == 17.0 and job(trace, "c")["flags"] == FLAG_CENSORED
    # The bad row's interval (3) still advanced the clock: 22 + 3 + 1.
    assert job(trace, "e")["submit"] == 21.0 and job(trace, "e")["gpus"] == 4
    assert identity_holds(r)
    with pytest.raises(TraceFormatError, match=r"must be in \[0, ") as e:
        load_trace(write(tmp_path, "neg.csv", DERIVED_HEADER, "a,u,1,1,1,-1,5,5,X"))
    assert e.value.column == "interval" and e.value.line == 2


# ---- PAI -------------------------------------------------------------------------------

PAI_ROWS = (
    # GPU gang of 2 instances, half a GPU each
    "j1,worker,2,Terminated,100,400,600,29.296875,50,T4",
    # GPU, whole GPUs
    "j2,tensorflow,1,Terminated,50,150,1200,10,200,V100",
    # CPU-only, 3 independent instances
    "j3,ps,3,Terminated,10,70,250,2,,",
    # never ran
    "j4,worker,1,Waiting,,,100,1,100,MISC",
    # Running with no end: censored, runs to the last time stamp (400)
    "j5,worker,1,Running,300,,100,1,100,MISC",
    # Failed with end before start: excluded as zero duration
    "j6,worker,1,Failed,200,190,100,1,100,MISC",
    # Failed with no end: runtime unknown
    "j7,worker,1,Failed,200,,100,1,100,MISC",
    # empty plan_cpu on a 2-node GPU gang
    "j8,worker,2,Terminated,20,40,,,100,MISC",
)


@pytest.mark.parametrize("with_header", [False, True])
def test_pai_with_and_without_header(tmp_path, with_header):
    lines = ((PAI_HEADER,) if with_header else ()) + PAI_ROWS
    p = write(tmp_path, "pai_task_table.csv", *lines)
    assert detect_format(p) == "pai"
    trace = load_trace(p)
    r = trace.report
    assert r.format == "pai"
    assert r.rows_read == 8
    assert r.excluded == {"never_started": 1, "zero_duration": 1, "no_end_time": 1}
    assert r.adjusted == {
        "fractional_gpu_rounded_up": 1,
        EXTRA_JOBS: 2,
        "censored_kept": 1,
        "cores_raised_to_1": 1,
    }
    assert r.jobs_loaded == 7
    # Submit counts from the first kept task's start_time (j3, at 10).
    assert job(trace, "j1/worker") == {
        "submit": 90.0,
        "duration": 300.0,
        "gpus": 2,
        "cores": 12,
        "mem_mib": 2 * 30000,
        "nodes": 2,
        "flags": FLAG_FRACTIONAL,
    }
    assert job(trace, "j2/tensorflow")["gpus"] == 2
    assert job(trace, "j2/tensorflow")["flags"] == 0
    for k in range(3):
        assert job(trace, f"j3/ps#{k}") == {
            "submit": 0.0,
            "duration": 60.0,
            "gpus": 0,
            "cores": 3,
            "mem_mib": 2048,
            "nodes": 1,
            "flags": 0,
        }
    assert job(trace, "j5/worker")["duration"] == 100.0
    assert job(trace, "j5/worker")["flags"] == FLAG_CENSORED
    assert job(trace, "j8/worker")["cores"] == 2  # one per node
    assert job(trace, "j8/worker")["mem_mib"] == 0
    assert identity_holds(r)


def test_pai_terminated_end_before_start_is_bad(tmp_path):
    p = write(tmp_path, "pai.csv", "j,t,1,Terminated,200,100,100,1,100,T4")
    assert detect_format(p) == "pai"
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert e.value.line == 1 and e.value.column == "end_time"  # no header: data on line 1
    with pytest.raises(TraceFormatError, match=r"must be in \[1, 10000\]"):
        load_trace(write(tmp_path, "pai0.csv", "j,t,0,Terminated,1,2,100,1,100,T4"), "pai")


def test_pai_drop_options_with_expansion(tmp_path):
    p = write(tmp_path, "pai.csv", *PAI_ROWS)
    r = load_trace(p, fractional="drop", censored="drop").report
    assert r.excluded == {
        "never_started": 1,
        "zero_duration": 1,
        "no_end_time": 1,
        "fractional_gpu": 1,
        "censored": 1,
    }
    assert r.jobs_loaded == 5  # j2, j3 x3, j8
    assert identity_holds(r)


# ---- generic csv -----------------------------------------------------------------------


def test_generic_csv(tmp_path):
    p = write(
        tmp_path,
        "jobs.csv",
        "cores,job_id,gpus,submit_s,duration_s,extra,nodes,censored,mem_mib",
        "4,a,2,10,100,zzz,2,0,4096",
        "0.5,b,0,5,50,,,1,",
        "8,c,0.5,20,30,,,,",
        "8,d,1,20,0,,,,",
    )
    assert detect_format(p) == "csv"
    trace = load_trace(p)
    r = trace.report
    assert trace.jobs.ids == ["b", "a", "c"]
    assert job(trace, "a") == {
        "submit": 5.0,  # seconds since b, the first arrival
        "duration": 100.0,
        "gpus": 2,
        "cores": 4,
        "mem_mib": 4096,
        "nodes": 2,
        "flags": 0,
    }
    assert job(trace, "b")["cores"] == 1 and job(trace, "b")["flags"] == FLAG_CENSORED
    assert job(trace, "b")["nodes"] == 1 and job(trace, "b")["mem_mib"] == 0
    assert job(trace, "c")["gpus"] == 1 and job(trace, "c")["flags"] == FLAG_FRACTIONAL
    assert r.excluded == {"zero_duration": 1}
    assert identity_holds(r)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("a,1,10,-1,1,,,", "gpus"),
        ("a,1,10,1,-2,,,", "cores"),
        ("a,1,10,1,0,,,", "cores"),
        ("a,1,-10,1,1,,,", "duration_s"),
        ("a,x,10,1,1,,,", "submit_s"),
        ("a,1,10,1,1,1.5,,", "mem_mib"),
        ("a,1,10,1,1,,0,", "nodes"),
        ("a,1,10,1,1,,,2", "censored"),
        ("a,1,inf,1,1,,,", "duration_s"),
    ],
)
def test_generic_csv_bad_values(tmp_path, row, column):
    p = write(tmp_path, "jobs.csv", CSV_HEADER, "ok,0,1,0,1,,,", row)
    with pytest.raises(TraceFormatError) as e:
        load_trace(p)
    assert (e.value.line, e.value.column) == (3, column)
    r = load_trace(p, skip_bad_rows=True).report
    assert (r.jobs_loaded, r.skipped_bad_rows) == (1, 1)


def test_generic_csv_missing_required_column(tmp_path):
    p = write(tmp_path, "jobs.csv", "job_id,submit_s,duration_s,gpus", "a,1,2,3")
    with pytest.raises(TraceFormatError, match="cores") as e:
        load_trace(p, "csv", skip_bad_rows=True)
    assert e.value.line == 1


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**6),  # submit
            st.integers(0, 10**5),  # duration (0 is excluded)
            st.sampled_from(["0", "1", "4", "0.5", "-1", "x"]),  # gpus (some bad)
            st.integers(1, 64),  # cores
            st.sampled_from(["", "0", "1"]),  # censored
        ),
        max_size=30,
    ),
    st.sampled_from(["whole", "drop"]),
    st.sampled_from(["keep", "drop"]),
)
def test_generic_csv_never_drops_silently(tmp_path, rows, fractional, censored):
    lines = [f"j{i},{s},{d},{g},{c},,,{z}" for i, (s, d, g, c, z) in enumerate(rows)]
    p = write(tmp_path, "prop.csv", CSV_HEADER, *lines)
    trace = load_trace(p, skip_bad_rows=True, fractional=fractional, censored=censored)
    r = trace.report
    assert r.rows_read == len(rows)
    assert identity_holds(r)
    assert r.skipped_bad_rows == sum(1 for row in rows if row[2] in ("-1", "x"))
    assert np.all(trace.jobs.duration > 0)
    assert np.all(np.diff(trace.jobs.submit) >= 0)


def test_generic_csv_loads_many_rows(tmp_path):
    # Speed is measured by bench/bench_sim.py, not asserted here (shared, noisy machines).
    n = 100_000
    p = tmp_path / "big.csv"
    with open(p, "w", encoding="utf-8") as f:
        f.write(CSV_HEADER + "\n")
        f.writelines(f"j{i},{i},{1 + i % 97},{i % 9},{1 + i % 32},1024,1,0\n" for i in range(n))
    trace = load_trace(p)
    assert len(trace.jobs) == n
    assert trace.jobs.gpus.sum() == sum(i % 9 for i in range(n))


# ---- detection and options -------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "fmt"),
    [
        (OPENB_HEADER, "openb"),
        (HELIOS_HEADER, "helios"),
        (DERIVED_HEADER, "helios-derived"),
        (PAI_HEADER, "pai"),
        (CSV_HEADER, "csv"),
        ("j1,worker,1.0,Terminated,1,2,600,29,50,T4", "pai"),
    ],
)
def test_detect_format(tmp_path, header, fmt):
    assert detect_format(write(tmp_path, "f.csv", header)) == fmt


def test_detect_format_unknown(tmp_path):
    with pytest.raises(TraceFormatError, match="cannot tell") as e:
        load_trace(write(tmp_path, "f.csv", "a,b,c", "1,2,3"))
    assert e.value.line == 1


def test_bad_options():
    with pytest.raises(ValueError, match="fractional"):
        load_trace(bundled_trace_path(), fractional="round")
    with pytest.raises(ValueError, match="censored"):
        load_trace(bundled_trace_path(), censored="maybe")
    with pytest.raises(ValueError, match="unknown trace format"):
        load_trace(bundled_trace_path(), "philly")


def test_explicit_format_is_honoured(tmp_path):
    # A PAI header is read as PAI only when asked; as openb it lacks openb's columns.
    p = write(tmp_path, "pai.csv", PAI_HEADER, PAI_ROWS[0])
    assert load_trace(p, "pai").report.jobs_loaded == 1
    with pytest.raises(TraceFormatError, match="cpu_milli"):
        load_trace(p, "openb")


@pytest.mark.parametrize(
    ("fmt", "lines"),
    [
        (
            "openb",
            (
                OPENB_HEADER,
                "a,1000,1,1,1000,,LS,Failed,0,10,0",
                "b,q,1,1,1000,,LS,Failed,0,1,0",
                "c,1000,1,1,1000,,LS,Pending,0,10,",
            ),
        ),
        (
            "helios",
            (
                HELIOS_HEADER,
                "1,u,v,1,1,1,COMPLETED,0,0,5,5,0",
                "2,u,v,1,1,1,FAILED,0,,,0,0",
                "3,u,v,q,1,1,FAILED,0,0,1,1,0",
            ),
        ),
        (
            "helios-derived",
            (DERIVED_HEADER, "a,u,1,1,1,0,5,5,X", "b,u,1,1,1,0,0,5,X", "c,u,1,1,1,0,q,5,X"),
        ),
        ("pai", PAI_ROWS + ("j9,t,2,Terminated,q,1,1,1,,",)),
        ("csv", (CSV_HEADER, "a,0,1,0,1,,,", "b,0,0,0,1,,,", "c,0,1,q,1,,,")),
    ],
)
def test_every_row_is_accounted_for(tmp_path, fmt, lines):
    r = load_trace(write(tmp_path, "t.csv", *lines), fmt, skip_bad_rows=True).report
    assert r.skipped_bad_rows == 1
    assert sum(r.excluded.values()) >= 1
    assert identity_holds(r)


@pytest.mark.parametrize("fails_at", [1, 2])
def test_a_read_error_names_the_file_and_line(fails_at: int) -> None:
    """A read's OSError names no file; the reader says which, wherever it reads (the
    second read here is the one that drops the rest of an overlong line)."""
    import errno

    from coda.workload import limits
    from coda.workload.traces._reading import _lines

    class Failing:
        name = "trace.csv"
        calls = 0

        def readline(self, n: int) -> str:
            self.calls += 1
            if self.calls < fails_at:
                return "x" * limits.MAX_LINE_CHARS  # longer than a line may be
            raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(TraceFormatError, match=r"trace\.csv:1: cannot read it: Input/output"):
        list(_lines(Failing(), []))  # type: ignore[arg-type]


def test_a_status_in_another_case_means_the_same(tmp_path):
    """'running' was not Running (kept under --censored drop), PAI 'waiting' ran and a
    'terminated' task ending before its start was quietly a zero-duration job."""
    p = openb_file(tmp_path, "run,8000,1024,8,1000,,LS,running,3,500,3")
    assert load_trace(p, censored="drop").report.excluded == {"censored": 1}
    waiting = write(tmp_path, "w.csv", "j,t,1,waiting,200,300,100,1,100,T4")
    assert load_trace(waiting, "pai").report.excluded.get("never_started") == 1
    with pytest.raises(TraceFormatError, match="before start"):
        load_trace(write(tmp_path, "t.csv", "j,t,1,TERMINATED,200,100,100,1,100,T4"), "pai")
