"""Two real Slurm test clusters on one machine at once (deploy/slurm-test-cluster in
two directories): their ports, node names and cgroups are their own, a port in use is
refused, and `down` stops and removes only its own cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import SCRIPT, START_VAR, unavailable

from coda.replay.stack import parse_exports

CPUSET = Path("/sys/fs/cgroup/cpuset")


class Cluster:
    """One test cluster in a directory of its own, brought down by its own script."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.env = {**os.environ, "CODA_SLURM_DIR": str(directory)}

    def script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args], env=self.env, capture_output=True, text=True, timeout=180
        )

    def up(self, *args: str) -> None:
        p = self.script("up", *args)
        assert p.returncode == 0, p.stderr
        self.env.update(parse_exports(p.stdout))

    def slurm(self, *argv: str) -> str:
        p = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, (argv, p.stderr)
        return p.stdout

    @property
    def nodes(self) -> list[str]:
        return self.env["CODA_SLURM_NODE_NAMES"].split()

    @property
    def port(self) -> int:
        conf = (self.dir / "etc" / "slurm.conf").read_text()
        return int(next(ln for ln in conf.splitlines() if ln.startswith("SlurmctldPort="))[14:])

    def pids(self) -> list[int]:
        files = [*self.dir.glob("run/*.pid"), self.dir / "munge" / "munged.pid"]
        return [int(f.read_text().strip()) for f in files if f.exists()]

    def running_job(self) -> str:
        """A job started on the cluster's first node, once it runs (no controller
        runs here: job_submit.lua, failing open, holds nothing)."""
        argv = ["sbatch", "--parsable", "-c", "1", "-o", "/dev/null", "--wrap", "sleep 120"]
        jid = self.slurm(*argv).strip()
        mark = self.slurm("squeue", "-h", "-j", jid, "-O", "admin_comment:100").strip()
        assert mark == "coda:passed,why=controller-down", mark
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.slurm("squeue", "-h", "-j", jid, "-o", "%T").strip() == "RUNNING":
                return jid
            time.sleep(0.2)
        raise AssertionError(f"job {jid} on {self.dir} did not start")


@pytest.fixture
def two_dirs() -> Iterator[tuple[Path, Path]]:
    if sys.platform != "linux" or os.geteuid() != 0:
        unavailable("needs root on Linux (slurmd, cgroups); runs in CI as root")
    if not (os.environ.get(START_VAR) or os.environ.get("CODA_REQUIRE_SLURM")):
        unavailable(f"starts two Slurm test clusters of its own: set {START_VAR}=1")
    if not shutil.which("slurmctld") or not shutil.which("slurmd"):
        unavailable("Slurm is not installed (sudo deploy/slurm-test-cluster install)")
    # Under /var/tmp: munged (user munge) must reach its socket there, which pytest's
    # private temporary directories do not allow.
    dirs = [Path(tempfile.mkdtemp(prefix=f"coda-two-{k}-", dir="/var/tmp")) for k in "ab"]
    for d in dirs:
        d.chmod(0o755)
    try:
        yield dirs[0], dirs[1]
    finally:
        for d in dirs:
            Cluster(d).script("down")
            shutil.rmtree(d, ignore_errors=True)


def test_two_test_clusters_run_side_by_side_and_go_down_alone(
    two_dirs: tuple[Path, Path],
) -> None:
    a, b = Cluster(two_dirs[0]), Cluster(two_dirs[1])
    a.up("--nodes", "1", "--gpu-nodes", "0")
    b.up("--nodes", "2", "--gpu-nodes", "1")
    assert a.port != b.port and not set(a.nodes) & set(b.nodes)
    assert b.env["CODA_SLURM_GPU_NODE_NAMES"].split() == b.nodes[:1]
    for c in (a, b):
        assert "UP" in c.slurm("scontrol", "ping")
        assert c.slurm("sinfo", "-h", "-N", "-o", "%N").split() == c.nodes

    # A third cluster on a port one of them holds is refused, and starts nothing.
    with tempfile.TemporaryDirectory(prefix="coda-two-c-", dir="/var/tmp") as d:
        Path(d).chmod(0o755)
        c = Cluster(Path(d))
        p = c.script("up", "--nodes", "1", "--gpu-nodes", "0", "--port", str(b.port))
        assert p.returncode != 0 and f"port {b.port} is in use" in p.stderr
        assert c.pids() == []

    a.running_job()
    jb = b.running_job()
    for c in (a, b):
        if CPUSET.is_dir():  # cgroup v1: Slurm names each node's group after the node
            # slurmd makes it as the job's step starts, which may be just after squeue
            # says RUNNING (seen on a loaded machine).
            group = CPUSET / f"slurm_{c.nodes[0]}"
            deadline = time.monotonic() + 30
            while not group.is_dir() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert group.is_dir()
    a_pids = a.pids()
    down = a.script("down")
    assert down.returncode == 0, down.stderr
    assert not [p for p in a_pids if Path(f"/proc/{p}").exists()], "a's daemons stopped"
    if CPUSET.is_dir():
        assert not (CPUSET / f"slurm_{a.nodes[0]}").exists(), "a's cgroups removed"
        assert (CPUSET / f"slurm_{b.nodes[0]}").is_dir(), "b's cgroups left alone"
    assert "UP" in b.slurm("scontrol", "ping")
    assert b.slurm("squeue", "-h", "-j", jb, "-o", "%T").strip() == "RUNNING"
