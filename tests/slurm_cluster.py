"""The real Slurm test cluster the end-to-end tests share (deploy/slurm-test-cluster):
a session fixture, registered for every test file by tests/conftest.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coda.replay.stack import parse_exports

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "slurm-test-cluster"
# Set (to anything non-empty), the tests may start a test cluster of their own, in
# $CODA_SLURM_DIR (default /var/tmp/coda-slurm-test); CI sets it through
# CODA_REQUIRE_SLURM. Unset, they use a running one or skip.
START_VAR = "CODA_SLURM_TESTS"


def unavailable(reason: str) -> None:
    if os.environ.get("CODA_REQUIRE_SLURM"):
        pytest.fail(f"CODA_REQUIRE_SLURM is set but: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def cluster() -> Iterator[dict[str, str]]:
    """The environment that points Slurm's commands at a running test cluster: the
    one SLURM_CONF names if it answers, else, when asked (START_VAR), one this fixture
    brings up and down (once for the whole session: every Slurm test file shares it)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        unavailable("needs root on Linux (slurmd, cgroups); runs in CI as root")
    env = dict(os.environ)
    if env.get("SLURM_CONF") and env.get("CODA_SLURM_PROGRESS_DIR"):
        ok = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True)
        if ok.returncode == 0 and "UP" in ok.stdout:
            yield env
            return
    if not (os.environ.get(START_VAR) or os.environ.get("CODA_REQUIRE_SLURM")):
        unavailable(
            "no running Slurm test cluster (SLURM_CONF and CODA_SLURM_PROGRESS_DIR from "
            f"`deploy/slurm-test-cluster env`), and not asked to start one: set {START_VAR}=1"
        )
    if not shutil.which("slurmctld") or not shutil.which("slurmd"):
        unavailable("Slurm is not installed (sudo deploy/slurm-test-cluster install)")
    env["CODA_SLURM_DIR"] = env.get("CODA_SLURM_DIR", "/var/tmp/coda-slurm-test")
    up = subprocess.run([str(SCRIPT), "up"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        subprocess.run([str(SCRIPT), "down"], env=env, capture_output=True)
        pytest.fail(f"deploy/slurm-test-cluster up failed:\n{up.stdout}\n{up.stderr}")
    env.update(parse_exports(up.stdout))
    try:
        yield env
    finally:
        d = Path(env["CODA_SLURM_DIR"])
        pidfiles = [*d.glob("run/*.pid"), d / "munge" / "munged.pid"]
        pids = [int(f.read_text().strip()) for f in pidfiles if f.exists()]
        down = subprocess.run([str(SCRIPT), "down"], env=env, capture_output=True, text=True)
        assert down.returncode == 0, down.stderr
        alive = [p for p in pids if Path(f"/proc/{p}").exists()]
        assert not alive, f"daemons left running after down: {alive}"
