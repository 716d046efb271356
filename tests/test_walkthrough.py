"""The one-machine walkthrough (deploy/walkthrough, docs/slurm.md's "Trying it on one
machine") on a real Slurm: it shows CODA's point (a training job granted fewer cores
than it asked, CPU jobs on the cores that freed on a GPU node) and leaves nothing
running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from slurm_cluster import ROOT, START_VAR, unavailable


def test_the_walkthrough_shows_the_point_and_stops_what_it_started() -> None:
    if sys.platform != "linux" or os.geteuid() != 0:
        unavailable("needs root on Linux (slurmd, cgroups); runs in CI as root")
    if not (os.environ.get(START_VAR) or os.environ.get("CODA_REQUIRE_SLURM")):
        unavailable(f"starts a Slurm test cluster of its own: set {START_VAR}=1")
    if not shutil.which("slurmctld") or not shutil.which("slurmd"):
        unavailable("Slurm is not installed (sudo deploy/slurm-test-cluster install)")
    directory = Path("/var/tmp/coda-walkthrough-test")
    coda = Path(sys.executable).parent / "coda"
    env = {**os.environ, "CODA_SLURM_DIR": str(directory), "CODA": str(coda)}
    for k in ("SLURM_CONF", "CODA_SLURM_PROGRESS_DIR", "CODA_SLURM_BOARD_DIR"):
        env.pop(k, None)  # the walkthrough's own cluster, not the one the tests share
    p = subprocess.run(
        [str(ROOT / "deploy" / "walkthrough")], env=env, capture_output=True, text=True,
        timeout=420,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "asked 4 cores and was granted 2;" in p.stdout, p.stdout[-2000:]
    assert "settled=2" in p.stdout  # the first job's agent found the model's optimum
    assert "Slurm test cluster down" in p.stdout
    pidfiles = [*directory.glob("run/*.pid"), directory / "munge" / "munged.pid"]
    pids = [int(f.read_text().strip()) for f in pidfiles if f.exists()]
    assert not [q for q in pids if Path(f"/proc/{q}").exists()], "a daemon left running"
    logs = sorted(directory.glob("coda-state-*.log"))
    assert len(logs) == 4  # the controller and three agents, each stopped by its PID
    for log in logs:
        assert "stopped" in log.read_text(), log
