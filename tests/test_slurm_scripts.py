"""The Slurm scripts as shipped (deploy/slurm/), run as slurmd and slurmstepd run
them: with the operator's coda-slurm.conf beside them they make each job's files;
without it, or with a bad value, they refuse in one line instead of doing nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "deploy" / "slurm"


def installed(tmp_path: Path, conf: str | None) -> Path:
    etc = tmp_path / "etc"
    etc.mkdir()
    for f in ("prolog.sh", "task_prolog.sh"):
        shutil.copy(SHIPPED / f, etc / f)
    if conf is not None:
        (etc / "coda-slurm.conf").write_text(conf)
    return etc


def run(script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_UID": str(os.getuid()),
        "SLURM_JOB_GID": str(os.getgid()),
        "SLURMD_NODENAME": "n1",
    }
    return subprocess.run(
        [str(script)], env={**base, **env}, capture_output=True, text=True, timeout=30
    )


def test_the_shipped_example_configuration_names_every_setting() -> None:
    keys = {
        line.split("=", 1)[0]
        for line in (SHIPPED / "coda-slurm.conf").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert keys == {"PROGRESS_DIR", "BOARD_DIR", "LEASE", "FAIL_OPEN_S"}
    lua = (SHIPPED / "job_submit.lua").read_text()
    assert "@" not in lua.replace('"@"', "")  # no placeholder left to fill


def test_configured_prologs_make_the_jobs_files(tmp_path: Path) -> None:
    progress, board = tmp_path / "progress", tmp_path / "board"
    progress.mkdir()
    board.mkdir()
    etc = installed(tmp_path, f"# a comment\nPROGRESS_DIR={progress}\nBOARD_DIR={board}\n"
                               "LEASE=/x\nFAIL_OPEN_S=30\n")  # fmt: skip
    p = run(etc / "prolog.sh")
    assert p.returncode == 0, p.stderr
    assert (progress / "job_77").stat().st_uid == os.getuid()
    assert (board / "n1" / "job_77.use").exists()
    t = run(etc / "task_prolog.sh")
    assert t.returncode == 0, t.stderr
    assert t.stdout.splitlines() == [
        f"export CODA_PROGRESS_FILE={progress}/job_77",
        f"export CODA_BOARD_DIR={board}/n1",
    ]
    e = run(etc / "prolog.sh", SLURM_SCRIPT_CONTEXT="epilog_slurmd")
    assert e.returncode == 0, e.stderr
    assert not (progress / "job_77").exists() and not (board / "n1" / "job_77.use").exists()


def test_a_last_line_without_its_newline_still_counts(tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    progress.mkdir()
    etc = installed(tmp_path, f"BOARD_DIR=\nPROGRESS_DIR={progress}")  # no final newline
    assert run(etc / "prolog.sh").returncode == 0
    assert (progress / "job_77").exists()
    assert run(etc / "task_prolog.sh").stdout.startswith(f"export CODA_PROGRESS_FILE={progress}/")


def test_no_board_is_fine(tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    progress.mkdir()
    etc = installed(tmp_path, f"PROGRESS_DIR={progress}\nBOARD_DIR=\n")
    assert run(etc / "prolog.sh").returncode == 0
    assert run(etc / "task_prolog.sh").stdout.splitlines() == [
        f"export CODA_PROGRESS_FILE={progress}/job_77"
    ]


@pytest.mark.parametrize(
    "conf, why",
    [
        (None, "not there"),
        ("", "not an absolute path"),
        ("PROGRESS_DIR=@PROGRESS_DIR@\n", "not an absolute path"),
        ("PROGRESS_DIR=/tmp/@PROGRESS_DIR@\n", "letters, digits"),
        ("PROGRESS_DIR=relative/dir\n", "not an absolute path"),
        ("PROGRESS_DIR=/tmp\nBOARD_DIR=/b;rm -rf /\n", "letters, digits"),
        ("PROGRESS_DIR=/nonexistent/coda-progress\n", "not a directory"),
        ("PROGRESS_DIR=/tmp/../etc\n", "no '..'"),
        ("PROGRESS_DIR=//\n", "no '..'"),
        ("PROGRESS_DIR=/tmp\nPROGRESS_DIR=/var/tmp\n", "given twice"),
        ("PROGRESS_DIR=/tmp\nBOARD_DIR=/nonexistent/board\n", "not a directory"),
    ],
)
def test_an_unconfigured_prolog_refuses_in_one_line(
    tmp_path: Path, conf: str | None, why: str
) -> None:
    etc = installed(tmp_path, conf)
    p = run(etc / "prolog.sh")
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("CODA prolog: ") and why in lines[0], lines
    assert not list(tmp_path.glob("@*")) and not (etc / "@PROGRESS_DIR@").exists()


@pytest.mark.parametrize("conf", [None, "PROGRESS_DIR=\n", "PROGRESS_DIR=a b\n"])
def test_an_unconfigured_task_prolog_refuses(tmp_path: Path, conf: str | None) -> None:
    t = run(installed(tmp_path, conf) / "task_prolog.sh")
    assert t.returncode == 1 and t.stdout == ""
    assert "PROGRESS_DIR" in t.stderr


@pytest.mark.parametrize("job_id", ["", "1 2", "$(id)", "1/../../x", "-1", "7\nexport X=1"])
def test_a_job_id_that_is_not_one_is_refused(tmp_path: Path, job_id: str) -> None:
    progress = tmp_path / "progress"
    progress.mkdir()
    etc = installed(tmp_path, f"PROGRESS_DIR={progress}\n")
    p = run(etc / "prolog.sh", SLURM_JOB_ID=job_id)
    assert p.returncode == 1 and "is not a job id" in p.stderr, p.stderr
    t = run(etc / "task_prolog.sh", SLURM_JOB_ID=job_id)
    assert t.returncode == 1 and t.stdout == ""
    assert list(progress.iterdir()) == [] and sorted(x.name for x in tmp_path.iterdir()) == [
        "etc", "progress"]  # fmt: skip


@pytest.mark.parametrize("uid", ["", "nosuchuser", "-1"])
def test_a_prolog_that_cannot_make_the_file_fails(tmp_path: Path, uid: str) -> None:
    progress = tmp_path / "progress"
    progress.mkdir()
    etc = installed(tmp_path, f"PROGRESS_DIR={progress}\n")
    p = run(etc / "prolog.sh", SLURM_JOB_UID=uid)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr
