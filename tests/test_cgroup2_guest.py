"""deploy/cgroup2-guest's parts that run anywhere: its help and its argument checks
(each refused before anything is built or booted). The guest run itself is CI's
(.ci/run): the Slurm end-to-end and kernel tests on real cgroup v2 under Slurm 24.11,
and the Slurm ones under Debian 12's Slurm 22.05 (--suite bookworm)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "cgroup2-guest"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=30)


def test_help_names_every_option() -> None:
    out = run("--help")
    assert out.returncode == 0, out.stderr
    for opt in ("--suite", "--out", "--cache", "--timeout", "--test-timeout", "--cpus", "--memory"):
        assert opt in out.stdout
    assert "cgroup_no_v1=all" in out.stdout and "set -euo" not in out.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--timeout", "5"),  # below 60
        ("--timeout", "1e3"),
        ("--test-timeout", "-1"),
        ("--cpus", "0"),
        ("--memory", "64"),
        ("--out", "a b"),  # goes into qemu's -virtfs: plain path characters only
        ("--out", "x,readonly=off"),
        ("--cache", "-rf"),
        ("--timeout", "100", "--test-timeout", "100"),  # pytest must end first
        ("--timeout",),
        ("--bogus",),
        ("build", "extra"),
        ("-k", "a;b"),  # pytest -k: words only
        ("--suite", "sid"),  # trixie or bookworm
        ("--suite", "../x"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(args: tuple[str, ...]) -> None:
    out = run(*args)
    assert out.returncode == 2, (args, out.stdout, out.stderr)
    assert out.stderr.startswith("cgroup2-guest: ") and "--help" in out.stderr


def test_the_tests_it_runs_exist() -> None:
    text = SCRIPT.read_text()
    m = re.search(r"^TESTS=\(([^)]*)\)", text, re.M)
    assert m is not None
    tests = m.group(1).split()
    assert "tests/test_slurm_e2e.py" in tests and "tests/test_runtime_kernel.py" in tests
    assert all((ROOT / t).is_file() for t in tests)
