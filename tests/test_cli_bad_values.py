"""A corpus of bad option values for the simulator commands (issue 11): each ends
with a non-zero exit and one 'Error:' line naming the option or the file, never a
traceback, and never after a simulation (every case fails before simulating)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_errors import one_error_line
from click.testing import CliRunner

from coda.cli import FiniteFloat, main
from coda.study.config import RunConfig, SimulationOptions

TRACE = "job_id,submit_s,duration_s,gpus,cores\na,0,100,1,4\nb,300,100,0,2\n"
CLUSTER = "1x8g96c"

# (extra arguments, text the error line must hold). Option errors are click's
# usage errors (exit 2); input files and specs are rejected while loading (exit 1).
OPTION_CASES = [
    (["--noise", "nan"], "'--noise'"),
    (["--noise", "inf"], "'--noise'"),
    (["--noise", "-0.1"], "'--noise'"),
    (["--noise", "2"], "'--noise'"),
    (["--noise", "abc"], "'--noise'"),
    (["--perturb", "nan"], "'--perturb'"),
    (["--perturb", "1"], "'--perturb'"),
    (["--perturb", "-1e-9"], "'--perturb'"),
    (["--horizon", "nan"], "'--horizon'"),
    (["--horizon", "-5"], "'--horizon'"),
    (["--horizon", "0"], "'--horizon'"),
    (["--horizon", "inf"], "'--horizon'"),
    (["--horizon", "1e400"], "'--horizon'"),
    (["--load", "nan"], "'--load'"),
    (["--load", "-1"], "'--load'"),
    (["--load", "0"], "'--load'"),
    (["--load", "inf"], "'--load'"),
    (["--load", "1e400"], "'--load'"),
    (["--load", "1e6"], "'--load'"),
    (["--load", ""], "'--load'"),
    (["--warmup", "nan"], "'--warmup'"),
    (["--warmup", "1"], "'--warmup'"),
    (["--warmup", "-0.5"], "'--warmup'"),
    (["--seed", "-1"], "'--seed'"),
    (["--seed", "99999999999999999999999"], "'--seed'"),
    (["--seed", "1.5"], "'--seed'"),
    (["--seed", "nan"], "'--seed'"),
    (["--seed", "٣"], "'--seed'"),  # Arabic-Indic 3: int() takes it, a seed must not
    (["--seed", "1_000"], "'--seed'"),
    (["--fractional", "half"], "'--fractional'"),
    (["--censored", "maybe"], "'--censored'"),
    (["--format", "xml"], "'--format'"),
    (["--policy", "nonesuch"], "nonesuch"),
    (["--grants", "loose"], "'--grants'"),
    (["--grants", "fixed"], "--grants fixed needs --reclaim requeue"),  # the default: shrink
    (["--settle-windows", "11"], "'--settle-windows'"),
    (["--settle-windows", "-1"], "'--settle-windows'"),
]

INPUT_CASES = [
    (["--cluster", "1x0g0c"], "1x0g0c"),
    (["--cluster", "99999999999x8g96c"], "99999999999x8g96c"),
    (["--cluster", "1x8g99999999999c"], "1x8g99999999999c"),
    (["--cluster", "2x4g"], "2x4g"),
    (["--cluster", ""], "cluster"),
    (["--cluster", "openb:nan"], "openb:nan"),
    (["--cluster", "openb:0"], "openb:0"),
    (["--cluster", "openb:1e-9"], "openb:1e-9"),
    (["--cluster", "openb:x"], "openb:x"),
    (["--cluster", "openb:٠.١"], "openb:"),
    (["--cluster", "١x٢g١٦c"], "cluster"),
    (["--mix", "AlexNet=nan"], "AlexNet"),
    (["--mix", "AlexNet=-1"], "AlexNet"),
    (["--mix", "AlexNet=inf"], "AlexNet"),
    (["--mix", "AlexNet=1e400"], "AlexNet"),
    (["--mix", "AlexNet=x"], "AlexNet"),
    (["--mix", "Nope=1"], "Nope"),
    (["--mix", ","], "mix"),
    (["--mix", "AlexNet=\u0661"], "AlexNet"),  # ARABIC-INDIC DIGIT ONE
    (["--profiles", "nonesuch"], "nonesuch"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    out = {"trace": d / "t.csv", "bad_json": d / "bad.json", "wrong_json": d / "wrong.json"}
    out["trace"].write_text(TRACE, encoding="utf-8")
    out["bad_json"].write_text("{not json", encoding="utf-8")
    out["wrong_json"].write_text('{"models": 3}', encoding="utf-8")
    out["latin1"] = d / "latin1.csv"
    out["latin1"].write_bytes(TRACE.encode() + b"c\xff\xfe,600,100,1,4\n")
    out["huge"] = d / "huge.csv"
    out["huge"].write_text(TRACE + f"c,600,{10**30},1,4\n", encoding="utf-8")
    out["empty"] = d / "empty.csv"
    out["empty"].write_text("job_id,submit_s,duration_s,gpus,cores\n", encoding="utf-8")
    out["nodes"] = d / "nodes.csv"
    out["nodes"].write_text("sn,cpu_milli,memory_mib,gpu\nn1,0,1024,1\n", encoding="utf-8")
    out["dir"] = d
    return out


def invoke(files: dict[str, Path], tmp_path: Path, extra: list[str], command="simulate"):
    args = [command, "--trace", str(files["trace"])]
    if command != "trace":
        args += ["--cluster", CLUSTER, "--native-time", "--out", str(tmp_path / "o")]
    return CliRunner().invoke(main, [*args, *extra])


def assert_one_line_error(result, needle: str, tmp_path: Path | None = None) -> str:
    line = one_error_line(result, needle)
    if tmp_path is not None:
        assert not (tmp_path / "o" / "summary.json").exists()  # failed before simulating
    return line


@pytest.mark.parametrize(("extra", "needle"), OPTION_CASES)
def test_bad_option_values_are_usage_errors(files, tmp_path, extra, needle):
    result = invoke(files, tmp_path, extra)
    assert result.exit_code == 2, result.output
    assert_one_line_error(result, needle, tmp_path)


@pytest.mark.parametrize(("extra", "needle"), INPUT_CASES)
def test_bad_specs_are_one_line_errors(files, tmp_path, extra, needle):
    result = invoke(files, tmp_path, extra)
    assert result.exit_code == 1, result.output
    assert_one_line_error(result, needle, tmp_path)


@pytest.mark.parametrize(
    ("key", "args"),
    [
        ("bad_json", ["--profiles"]),
        ("wrong_json", ["--profiles"]),
        ("nodes", ["--cluster"]),
        ("latin1", ["--trace"]),
        ("huge", ["--trace"]),
        ("empty", ["--trace"]),
    ],
)
def test_bad_files_are_one_line_errors_naming_the_file(files, tmp_path, key, args):
    path = files[key]
    result = invoke(files, tmp_path, [*args, str(path)])
    assert result.exit_code == 1, result.output
    assert_one_line_error(result, path.name, tmp_path)


def test_a_trace_with_no_job_left_says_where_its_rows_went(files, tmp_path):
    trace = tmp_path / "zero.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,cores\na,0,0,1,4\nb,5,0,0,2\n", "utf-8")
    result = invoke(files, tmp_path, ["--trace", str(trace)])
    line = assert_one_line_error(result, "zero.csv: no jobs left to simulate", tmp_path)
    assert line.endswith("2 rows read, left out: 2 zero duration"), line  # not the report dict


LONG = "9" * 5000


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "--seed", LONG], "'--seed'"),
        (["simulate", "--order", LONG], "'--order'"),
        (["simulate", "--trace", "/" + LONG], "'--trace'"),
        (["simulate", "--cluster", LONG], "bad cluster spec"),  # a name the OS refuses
        (["submit", "--cores", LONG, "--", "true"], "'--cores'"),
        (["submit", "--time", LONG, "--", "true"], "is not a time limit"),
    ],
)
def test_an_overlong_value_gives_a_short_error_line(tmp_path, args, needle):
    result = CliRunner().invoke(main, args)
    line = assert_one_line_error(result, needle)
    assert len(line) < 400, len(line)  # the value is cut, its start and the verdict kept
    assert line.count("9") < 300


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "--policy", "a\nb"], "'a\\nb'"),  # shown escaped, on one line
        (["compare", "--policies", " , "], "names no policy"),
        (["simulate", "--out", ""], "'--out'"),
        (["status", "--state-dir", "/"], "'--state-dir'"),
        (["status", "--state-dir", ""], "'--state-dir'"),
        (["status", "--state-dir", "a\nb"], "a\\nb"),
        (["experiment", "paper", "--trace", "x" * 5000], "--trace"),  # a name the OS refuses
        (["experiment", "paper", "--policies", ","], "names no policy"),
        (["experiment", "regimes", "--cores-per-gpu", "\u0661"], "--cores-per-gpu"),
    ],
)
def test_empty_unprintable_or_rootless_values_are_one_line(tmp_path, args, needle):
    result = CliRunner().invoke(main, args)
    assert_one_line_error(result, needle)


def test_a_state_dir_variable_naming_root_is_one_line(monkeypatch):
    monkeypatch.setenv("CODA_STATE_DIR", "/")
    assert_one_line_error(CliRunner().invoke(main, ["status"]), "'--state-dir'")


@pytest.mark.slow
def test_an_ascii_only_terminal_gets_escapes_not_a_traceback(files, tmp_path):
    """The summary table prints '·': with PYTHONIOENCODING=ascii it is escaped."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    argv = [sys.executable, "-m", "coda.cli", "simulate", "--trace", str(files["trace"]),
            "--cluster", CLUSTER, "--native-time", "--out", str(tmp_path / "o")]  # fmt: skip
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "\\xb7" in run.stdout


@pytest.mark.parametrize("group", [[], ["slurm"], ["experiment"]])
def test_a_group_run_bare_prints_its_help_whole(group):
    """Its 'error' is its help, longer than any error line: shown as it is, not cut."""
    result = CliRunner().invoke(main, group)
    assert "Error:" not in result.output and " ... " not in result.output
    # The top group lists its commands by body (coda.cli.SECTIONS), the last one Slurm's.
    assert ("Commands:" if group else "Slurm:") in result.output


def test_an_unwritable_out_folder_is_one_line(files, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder", encoding="utf-8")
    result = invoke(files, tmp_path, ["--out", str(blocker / "sub")])
    assert result.exit_code != 0
    assert_one_line_error(result, "file")


def test_the_trace_command_reports_bad_files_in_one_line(files, tmp_path):
    result = invoke(files, tmp_path, ["--trace", str(files["latin1"])], command="trace")
    assert result.exit_code == 1
    assert_one_line_error(result, "latin1.csv")
    # --skip-bad-rows skips that row and counts it: no error.
    ok = invoke(files, tmp_path, ["--trace", str(files["latin1"]), "--skip-bad-rows"], "trace")
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--loads", "nan"], "--loads"),
        (["--loads", "1,inf"], "--loads"),
        (["--loads", "0"], "--loads"),
        (["--loads", "1,1"], "--loads"),
        (["--loads", "1e9"], "--loads"),
        (["--loads", ","], "--loads"),
        (["--loads", "\u0661"], "--loads"),
        (["--seeds", "0"], "'--seeds'"),
        (["--seeds", "100000"], "'--seeds'"),
        (["--workers", "0"], "'--workers'"),
        (["--headline-load", "nan"], "'--headline-load'"),
        (["--headline-load", "2"], "--headline-load"),
        (["--noise", "nan"], "'--noise'"),
        (["--perturb", "nan"], "'--perturb'"),
        (["--horizon", "-1"], "'--horizon'"),
        (["--policies", "coda"], "--policies"),
    ],
)
def test_experiment_headline_bad_values(files, tmp_path, extra, needle):
    args = ["experiment", "headline", "--trace", str(files["trace"]), "--cluster", CLUSTER]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "e"), *extra])
    assert_one_line_error(result, needle)
    assert not (tmp_path / "e").exists()


def test_help_states_every_numeric_range():
    text = CliRunner().invoke(main, ["simulate", "--help"], terminal_width=200).output
    for option, shown in [
        ("--load", "0.0<x<=1000.0"),
        ("--seed", "0<=x<=4294967295"),
        ("--horizon", "0.0<x<=10000000000.0"),
        ("--warmup", "0.0<=x<1.0"),
        ("--noise", "0.0<=x<=1.0"),
        ("--perturb", "0.0<=x<1.0"),
    ]:
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(option + " "))
        assert shown in text[text.index(line) :].split("\n  --")[0], option


def test_finite_float_refuses_nan_where_float_range_does_not():
    import click

    assert math.isnan(click.FloatRange(0, 1).convert("nan", None, None))  # click's gap
    with pytest.raises(click.BadParameter, match="finite"):
        FiniteFloat(0, 1).convert("nan", None, None)
    with pytest.raises(click.BadParameter, match="finite"):
        FiniteFloat().convert("-inf", None, None)
    assert FiniteFloat(0, 1).convert("0.25", None, None) == 0.25


@pytest.mark.parametrize(
    "field",
    [
        {"load": math.nan},
        {"load": -1.0},
        {"load": math.inf},
        {"perturb": 1.0},
        {"warmup": math.nan},
        {"seed": -1},
        {"seed": 1.5},
        {"seed": True},
        {"fractional": "half"},
        {"censored": None},
        {"cluster": 3},
        {"trace": 5},
    ],
)
def test_run_config_refuses_bad_fields(field):
    with pytest.raises(ValueError, match=next(iter(field))):
        RunConfig(**field)


@pytest.mark.parametrize(
    "field",
    [
        {"horizon": math.nan},
        {"horizon": -5.0},
        {"noise": math.nan},
        {"noise": 3.0},
        {"samples": 0},
        {"samples": 10**9},
        {"samples": 2.0},
    ],
)
def test_simulation_options_refuse_bad_fields(field):
    with pytest.raises(ValueError, match=next(iter(field))):
        SimulationOptions(**field)


def test_run_config_accepts_its_defaults_and_native_time():
    RunConfig()
    RunConfig(
        load=None,
        seed=2**32 - 1,
        perturb=0.5,
        simulation=SimulationOptions(horizon=3600.0, noise=0.0),
    )


# -------------------------------------------- outputs, loads and horizons refused before simulating
def test_an_out_that_is_not_a_directory_fails_before_simulating(files, tmp_path):
    result = invoke(files, tmp_path, ["--out", "/dev/null"])
    assert result.exit_code == 2
    assert_one_line_error(result, "'--out'")


def test_a_load_too_small_to_reach_is_an_error_not_a_silent_other_load(files, tmp_path):
    args = ["simulate", "--trace", str(files["trace"]), "--cluster", CLUSTER]
    result = CliRunner().invoke(main, [*args, "--load", "1e-300", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert_one_line_error(result, "cannot be reached", tmp_path)


def test_a_horizon_before_the_window_is_an_error_not_zero_utilisation(tmp_path):
    trace = tmp_path / "t.csv"
    rows = "".join(f"j{i},{100 * i},50,1,4\n" for i in range(11))
    trace.write_text("job_id,submit_s,duration_s,gpus,cores\n" + rows, encoding="utf-8")
    args = ["simulate", "--trace", str(trace), "--cluster", CLUSTER, "--native-time"]
    out = ["--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, [*args, "--warmup", "0.5", "--horizon", "100", *out])
    assert result.exit_code == 1
    assert_one_line_error(result, "ends before the measurement window", tmp_path)


# ------------------------------------------------------------ coda submit --time
@pytest.mark.parametrize(
    "value",
    ["", "0", "00:00", "abc", "1h", "1.5", "-5", "+5", " 5", "1:60", "60:60:00", "1-24",
     "1-00:60", "1:2:3:4", "1-2-3", "1-", "-1", "1::2", "367-00", "366-00:00:01",
     "99999999999", "\u0665", "UNLIMITED"],
)  # fmt: skip
def test_a_bad_time_limit_is_one_line_naming_the_option(tmp_path, value):
    sd = str(tmp_path / "s")
    result = CliRunner().invoke(main, ["submit", "--state-dir", sd, "--time", value, "--", "true"])
    assert result.exit_code == 2, result.output
    assert_one_line_error(result, "'--time'")
    assert not (tmp_path / "s").exists()  # refused before anything was made


def test_submit_help_states_the_time_forms():
    text = CliRunner().invoke(main, ["submit", "--help"], terminal_width=200).output
    assert "--time DURATION" in text and "D-HH:MM:SS" in text and "366 days" in text


# ------------------------------------------------------------ errors that named no file
@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs Linux's /proc")
@pytest.mark.parametrize("option", ["--trace", "--cluster"])
def test_a_file_that_fails_to_read_is_named(tmp_path, option):
    """/proc/self/mem opens, and its first read fails (EIO): the OSError of a read
    names no file, so the message was only 'Input/output error'."""
    other = ["--cluster", CLUSTER] if option == "--trace" else []
    args = ["simulate", option, "/proc/self/mem", *other, "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert_one_line_error(result, "/proc/self/mem:1: cannot read it")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_file_that_fails_to_write_is_named(tmp_path):
    """/dev/full opens, and its writes fail (ENOSPC), naming no file."""
    args = ["trace", "generate", "--preset", "paper", "--out", "/dev/full"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert_one_line_error(result, "No space left on device: '/dev/full'")


def test_a_cluster_spec_of_many_groups_is_shown_cut_and_kept_whole(tmp_path):
    """A spec of 700 groups is a valid cluster; the table's header and the loading line
    show its two ends, not 5,600 characters, and summary.json keeps it whole."""
    import json

    spec = ",".join(["1x8g96c"] * 699 + ["1x4g28c"])
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE, encoding="utf-8")
    out = tmp_path / "o"
    args = ["simulate", "--trace", str(trace), "--cluster", spec, "--native-time"]
    result = CliRunner().invoke(main, [*args, "--policy", "coda", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert spec not in result.output and " ... " in result.output and "1x4g28c" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cluster"]["spec"] == spec


# ------------------------------------------------------------ outputs: FIFOs, odd paths
def _coda(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command in its own process: a hang fails the test instead of the run."""
    argv = [sys.executable, "-m", "coda", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["summary.json", "jobs.csv", "utilisation.png"])
def test_an_output_that_is_a_fifo_nothing_reads_is_an_error_not_a_hang(files, tmp_path, name):
    out = tmp_path / "o"
    out.mkdir()
    os.mkfifo(out / name)
    args = ["--trace", str(files["trace"]), "--cluster", CLUSTER, "--native-time"]
    done = _coda("simulate", *args, "--out", str(out))
    assert done.returncode == 1, done.stderr
    errors = [x for x in done.stderr.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and "no process reads" in errors[0] and name in errors[0]


def test_a_trace_written_into_a_fifo_a_process_reads_arrives(tmp_path):
    """Not waiting for a reader must not refuse one that is there (a pipe)."""
    import threading

    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)
    alone = _coda("trace", "generate", "--jobs", "5", "--out", str(fifo))
    assert alone.returncode == 1 and "no process reads" in alone.stderr
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    done = _coda("trace", "generate", "--jobs", "5", "--out", str(fifo))
    reader.join(60)
    assert done.returncode == 0, done.stderr
    assert got and len(got[0].splitlines()) == 6  # a header and 5 jobs


@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="needs Linux's /proc")
def test_a_plot_into_a_pipe_is_refused_naming_it():
    """A PNG writer seeks: into a pipe that a process reads it failed half-way with
    'File or stream is not seekable', naming no file."""
    from coda.writing import seekable_output

    r, w = os.pipe()
    try:
        with pytest.raises(OSError, match=r"not a regular file .*/fd/"):
            with seekable_output(f"/proc/self/fd/{w}"):
                pass
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("newdir/", "names a directory"),
        ("t.csv/", "names a directory"),
        ("t.csv/x.csv", "is not a directory"),
        ("t.csv/a/b.csv", "is not a directory"),
    ],
)
def test_trace_generate_out_names_a_file_it_can_make(tmp_path, value, needle, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("t.csv").write_text("keep\n")
    result = CliRunner().invoke(main, ["trace", "generate", "--jobs", "3", "--out", value])
    assert result.exit_code == 2
    assert_one_line_error(result, needle)
    assert Path("t.csv").read_text() == "keep\n" and not Path("newdir").exists()


@pytest.mark.parametrize(
    ("value", "needle"),
    [("dangling", "symbolic link to nothing"), ("x/..", "'..' after 'x'"), ("f/sub", "not a dir")],
)
def test_an_out_directory_that_cannot_be_made_is_refused_before_the_run(
    files, tmp_path, value, needle, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    os.symlink("/nonexistent/x", "dangling")
    Path("f").write_text("")
    args = ["simulate", "--trace", str(files["trace"]), "--cluster", CLUSTER, "--native-time"]
    result = CliRunner().invoke(main, [*args, "--out", value])
    assert result.exit_code == 2
    assert_one_line_error(result, needle)
    assert not Path("x").exists()


def test_a_cluster_that_is_a_directory_or_fifo_is_said_to_be_one(files, tmp_path):
    (tmp_path / "d.csv").mkdir()
    os.mkfifo(tmp_path / "f.csv")
    for name in ("d.csv", "f.csv"):
        args = ["simulate", "--trace", str(files["trace"]), "--native-time"]
        result = CliRunner().invoke(main, [*args, "--cluster", str(tmp_path / name)])
        assert_one_line_error(result, "not a regular file")


def test_a_cluster_spec_is_read_as_one_beside_a_directory_of_its_name(files, tmp_path, monkeypatch):
    """An --out named after the cluster must not make its spec unusable on the next run:
    a spec that parses is a spec, whatever exists by its name."""
    monkeypatch.chdir(tmp_path)
    Path(CLUSTER).mkdir()
    args = ["simulate", "--trace", str(files["trace"]), "--native-time", "--out", CLUSTER]
    result = CliRunner().invoke(main, [*args, "--cluster", CLUSTER])
    assert result.exit_code == 0, result.output


def test_an_out_path_through_a_symlink_then_dotdot_is_read_as_the_kernel_does(
    files, tmp_path, monkeypatch
):
    """lk/../f is beside lk's target, not beside lk: refused by reading it as text."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep" / "a" / "b").mkdir(parents=True)
    os.symlink("deep/a/b", "lk")
    Path("f").write_text("")  # a file where lk/../f would be read as text
    result = CliRunner().invoke(
        main, ["trace", "generate", "--jobs", "3", "--out", "lk/../f/t.csv"]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "deep" / "a" / "f" / "t.csv").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["replay", "--format", "bogus"], "'--format'"),
        (["replay", "--format", "csv"], "--format goes with --trace"),
        (["replay", "--out", "/proc/coda-replay"], "'--out'"),
        (["experiment", "paper", "--fit", "--out", "/proc/coda-fit"], "'--out'"),
        (["experiment", "paper", "--fit", "--out", "/sys/kernel"], "'--out'"),
        (["replay", "--out", "/proc"], "'--out'"),
    ],
)
def test_long_commands_check_every_option_before_any_work(args, needle):
    """Refused at once: nothing brought up, nothing searched."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert needle in result.output
