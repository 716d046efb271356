"""When CODA's controller dies, the real Slurm cluster keeps starting jobs.

In order, on the test cluster (deploy/slurm-test-cluster; its job_submit.lua and
coda-slurm.conf as shipped, FAIL_OPEN_S from the cluster's --fail-open):
1. `kill -9` of the active controller with a standby beside it: the standby takes
   the lease at once (the holder's process is gone) and places the next job;
2. the active one paused (SIGSTOP, as a hung host would be): the standby takes over
   once the beat is the lease's ttl old; the paused one, resumed, finds its lease
   lost and writes nothing;
3. every controller killed: a job held at that moment is handed back to Slurm by a
   node agent after FAIL_OPEN_S, and a job submitted later is not held at all;
4. a controller started again holds and places new jobs.

The time from each submission to the job's start is written to
$CODA_E2E_REPORT/../failover.md (default: the test's temp dir). Needs root and the
test cluster; skips elsewhere with the reason (CI runs it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_slurm_e2e import Daemons, Submitter, _wait
from time_scale import WORK_SCALE

from coda.slurm.client import SlurmClient, SlurmJob, run_command
from coda.slurm.lease import read_lease

TTL_S = 10.0  # the controllers' --lease-ttl (the default)


class Controllers(Daemons):
    """Controllers (active and standby) and one node agent, by PID."""

    def controller(self, name: str, standby: bool = False) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "coda.cli", "slurm", "controller", "--state-dir",
                str(self.tmp / name), *(["--standby"] if standby else [])]  # fmt: skip
        p = self.spawn(name, argv)
        if not standby:
            self.wait_active(name, p)
        return p

    def agent(self, node: str) -> None:
        self.spawn("agent", [sys.executable, "-m", "coda.cli", "slurm", "agent", "--node", node,
                             "--state-dir", str(self.tmp / "agent")])  # fmt: skip

    @property
    def lease(self) -> str:
        return self.env["CODA_SLURM_LEASE"]


def test_jobs_keep_starting_when_the_controller_dies_on_real_slurm(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    env = cluster
    if "CODA_SLURM_LEASE" not in env or "CODA_SLURM_FAIL_OPEN" not in env:
        raise AssertionError("the test cluster names no lease: deploy/slurm-test-cluster up")
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    fail_open_s = float(env["CODA_SLURM_FAIL_OPEN"])
    slurm = SlurmClient(lambda argv: run_command(argv))
    submit = Submitter(env)
    ctls = Controllers(env, tmp_path)
    agent_node = sorted(n.name for n in slurm.nodes())[-1]
    started: list[tuple[str, float]] = []

    def job(jid: int) -> SlurmJob:
        return next(j for j in slurm.jobs() if j.job_id == jid)

    def sbatch(name: str) -> tuple[int, float]:
        t = time.monotonic()
        return submit("-J", name, "-c", "1", "-t", "5", "--wrap", "sleep 1"), t

    def wait_start(what: str, jid: int, since: float, timeout: float) -> float:
        _wait(f"{what} (job {jid}) to start",
              lambda: job(jid).state in ("RUNNING", "COMPLETED"), timeout, 0.2)  # fmt: skip
        took = time.monotonic() - since
        started.append((what, took))
        return took

    def holder_pid() -> int:
        rec = read_lease(Path(ctls.lease))
        assert rec is not None
        return int(rec.holder.split(":")[2])

    try:
        ctls.agent(agent_node)
        first = ctls.controller("ctl-a")
        standby = ctls.controller("ctl-b", standby=True)
        jid, t = sbatch("before")
        wait_start("a job, one controller active", jid, t, 30)
        assert (job(jid).mark or {}).get("state") == "placed"

        # 1. kill -9 the active: the standby (this host: the holder's process is gone)
        #    takes over at once and places the next job.
        epoch = read_lease(Path(ctls.lease)).epoch  # type: ignore[union-attr]
        ctls.kill("ctl-a")
        jid, t = sbatch("after-kill")
        took = wait_start("a job after kill -9 of the active, with a standby", jid, t, 30)
        assert (job(jid).mark or {}).get("state") == "placed", job(jid).mark
        assert holder_pid() == standby.pid and first.pid != standby.pid
        assert read_lease(Path(ctls.lease)).epoch == epoch + 1  # type: ignore[union-attr]
        assert took < TTL_S * WORK_SCALE

        # 2. Pause the active (a hung host): a new standby takes over after the ttl; the
        #    paused one, resumed, finds the lease lost and writes nothing.
        third = ctls.controller("ctl-c", standby=True)
        _wait("the new standby to say so", lambda: "standby" in ctls.log("ctl-c"), 30)
        standby.send_signal(signal.SIGSTOP)
        jid, t = sbatch("after-pause")
        took = wait_start("a job after the active hung, with a standby", jid, t, 60)
        assert holder_pid() == third.pid
        assert took >= TTL_S - 1, took  # the standby waited out the ttl
        standby.send_signal(signal.SIGCONT)
        _wait("the resumed controller to stand by",
              lambda: "lost to" in ctls.log("ctl-b"), 30)  # fmt: skip
        assert standby.poll() is None and holder_pid() == third.pid

        # 3. No controller left: the job held when the last one died goes back to Slurm
        #    (the agent) after FAIL_OPEN_S; a job submitted after that is never held.
        ctls.kill("ctl-b")
        ctls.kill("ctl-c")
        jid, t = sbatch("held-at-death")
        assert job(jid).held_for_coda, job(jid).mark
        wait_start("a job held when every controller died", jid, t, fail_open_s * 1.25 + 30)
        assert job(jid).mark == {"state": "passed", "why": "controller-down"}
        jid, t = sbatch("no-controller")
        assert job(jid).mark == {"state": "passed", "why": "controller-down"}
        assert job(jid).priority != 0
        wait_start("a job submitted with no controller", jid, t, 30)

        # 4. Back: it takes the lease and holds and places new jobs again.
        ctls.controller("ctl-d")
        jid, t = sbatch("controller-back")
        wait_start("a job, the controller back", jid, t, 30)
        assert (job(jid).mark or {}).get("state") == "placed"
    finally:
        ctls.stop_all()
        submit.close()
        report = Path(os.environ.get("CODA_E2E_REPORT") or tmp_path / "report.md")
        out = report.with_name("failover.md")
        out.parent.mkdir(parents=True, exist_ok=True)
        rows = "\n".join(f"| {what} | {took:.1f} |" for what, took in started)
        out.write_text(
            "Time from `sbatch` to the job's start on the real Slurm test cluster "
            f"(lease ttl {TTL_S:g} s, FAIL_OPEN_S {fail_open_s:g} s; "
            "tests/test_slurm_e2e_failover.py):\n\n| case | seconds |\n|---|---:|\n"
            f"{rows}\n"
        )
