"""The scheduling cycle's backfill and reclaim on a real Slurm (the cluster of
tests/test_slurm_e2e.py: n1, n2 with one fake GPU each, n3, n4 CPU only, every node
with this machine's CPUs).

1. Backfill from time limits: a two-node DNN job waits for a GPU a running job
   holds and reserves both GPU nodes; a job with no time limit may not use the free
   one (its mark says ``wait=reservation:<head>``), a short job with a limit may, and
   starts at once, past the blocked head.
2. Reclaim by requeue: with every core taken by CPU jobs, a DNN job's start requeues
   the CPU job on its GPU node (``scontrol requeuehold``); Slurm sends that job
   SIGTERM first, and its trap writes a checkpoint line before the DNN job starts;
   the DNN job runs there, and the CPU job is placed again and completes once cores
   are free.

Needs root and a cluster, like test_slurm_e2e.py (CI has both).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from fakes import LOOSE_HARM
from test_slurm_e2e import Daemons, Submitter, _wait, split_nodes

from coda.slurm.client import SlurmClient, SlurmJob, run_command


def _decisions(ctl_dir: Path) -> list[dict]:
    path = ctl_dir / "decisions.jsonl"
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_backfill_and_reclaim_by_requeue_on_real_slurm(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    env = cluster
    os.environ.update({k: env[k] for k in ("SLURM_CONF", "CODA_SLURM_PROGRESS_DIR")})
    slurm = SlurmClient(lambda argv: run_command(argv))
    node_cpus = {n.name: n.cpus for n in slurm.nodes()}
    gpu_nodes, cpu_nodes = split_nodes(slurm)
    ask = str(node_cpus[gpu_nodes[0]])  # a whole node's cores
    # A day's harm budget from each CPU job's start: the test's jobs are minutes old, and
    # the default budget lets no requeue take so young a job (tests/test_harm_budget.py).
    daemons = Daemons(
        env, tmp_path, controller_tune=tuple(f"{k}={v}" for k, v in LOOSE_HARM.items())
    )
    submit = Submitter(env)
    report: list[str] = []

    def wrap(seconds: int) -> str:
        return f"sleep {seconds}"

    def sbatch(name: str, seconds: int, *args: str) -> int:
        return submit("-J", name, *args, "--wrap", wrap(seconds))

    def job(jid: int) -> SlurmJob:
        return next(j for j in slurm.jobs() if j.job_id == jid)

    def running(jid: int) -> bool:
        return job(jid).state == "RUNNING"

    t0 = time.time()

    def at() -> str:
        return f"{time.time() - t0:.1f} s"

    try:
        daemons.start("controller")
        # ---- 1. backfill past a blocked head
        first = sbatch("dnn-first", 60, "-c", "1", "--gres=gpu:1", "-t", "3")
        _wait("the first DNN job to run", lambda: running(first), 30)
        busy = job(first).nodes[0]
        head = sbatch("dnn-head", 5, "-N", "2", "-c", "1", "--gres=gpu:1", "-t", "5")
        endless = sbatch("dnn-no-limit", 5, "-c", "1", "--gres=gpu:1")
        waits = _wait(
            "the job without a time limit to show why it waits",
            lambda: (job(endless).mark or {}).get("wait", "").startswith("reservation"),
            30,
        )
        assert waits
        assert (job(endless).mark or {})["wait"] == f"reservation:{head}"
        assert job(endless).state == "PENDING" and job(head).state == "PENDING"
        report.append(
            f"- {at()}: job {first} holds {busy}'s GPU; the two-node job {head} waits and "
            f"reserves both GPU nodes; job {endless} (no time limit) waits, its mark says "
            f"`wait=reservation:{head}`."
        )
        short = sbatch("dnn-short", 5, "-c", "1", "--gres=gpu:1", "-t", "1")
        _wait("the short job to backfill", lambda: running(short), 30)
        other = job(short).nodes[0]
        assert other != busy and other in gpu_nodes
        assert job(head).state == "PENDING", "the head did not start: the short job passed it"
        report.append(
            f"- {at()}: job {short} (`-t 1`, 1 minute) started on {other} at once, past the "
            f"blocked head {head}: it ends before the head's reserved start."
        )
        run_command(["scancel", *(str(j) for j in (head, endless, first, short))])
        _wait("the GPU nodes to drain", lambda: all(
            job(j).state not in ("RUNNING", "PENDING", "COMPLETING")
            for j in (head, endless, first, short)), 60)  # fmt: skip

        # ---- 2. reclaim by requeue
        # Each CPU job checkpoints on SIGTERM: Slurm's requeue sends it (then SIGKILL
        # KillWait later), so a job that says it gives cores back cheaply is told first.
        told = submit.dir / "checkpoints.log"
        told.touch()
        told.chmod(0o666)
        checkpointing = (
            f"trap 'echo \"$SLURM_JOB_ID $(date +%s.%N)\" >> {told}; exit 0' TERM; sleep 90 & wait"
        )
        hogs = [
            submit("-J", f"cpu-hog{i}", "-c", ask, "-t", "5", "--requeue", "--wrap", checkpointing)
            for i in range(4)
        ]
        _wait("four CPU jobs to fill every node", lambda: all(running(j) for j in hogs), 60)
        on = {j: job(j).nodes[0] for j in hogs}
        assert set(on.values()) == {*gpu_nodes, *cpu_nodes}, on
        dnn = sbatch("dnn-reclaim", 20, "-c", ask, "--gres=gpu:1", "-t", "2")
        _wait("the DNN job to start on a reclaimed node", lambda: running(dnn), 90)
        where = job(dnn).nodes[0]
        victim = next(j for j, n in on.items() if n == where)
        v = job(victim)
        assert v.restarts == 1, (victim, v.state, v.restarts)
        requeued = [d for d in _decisions(tmp_path / "ctl") if d["action"] == "requeue"]
        assert [d["job"] for d in requeued] == [victim]
        assert requeued[0]["lost_core_s"] > 0
        started = job(dnn).start_time
        said = [line.split() for line in told.read_text().splitlines()]
        assert [int(w[0]) for w in said] == [victim], said
        assert started and float(said[0][1]) <= started + 1, (said, started)
        report.append(
            f"- {at()}: every core held by CPU jobs {', '.join(map(str, hogs))}; DNN job {dnn} "
            f"was placed on {where} by requeueing CPU job {victim} (`scontrol requeuehold`, "
            f"{requeued[0]['lost_core_s']:.0f} core-seconds of work lost) and ran there. "
            f"CPU job {victim} was told first: Slurm's requeue sent it SIGTERM, and its "
            "trap wrote a checkpoint line before the DNN job started."
        )
        _wait("the requeued CPU job to run again", lambda: running(victim), 120, step=1.0)
        rerun = job(victim)
        assert rerun.restarts == 1 and (rerun.mark or {}).get("state") == "placed"
        report.append(
            f"- {at()}: CPU job {victim} was placed again once cores were free and ran "
            f"on {rerun.nodes[0]} (Slurm's restart count 1)."
        )
    finally:
        daemons.stop_all()
        submit.close()
        for f in sorted(tmp_path.glob("*.log")):
            print(f"---- {f.name}\n{f.read_text()[-3000:]}")
    text = "\n".join(["", "## Backfill and reclaim by requeue", "", *report])
    out = Path(os.environ.get("CODA_E2E_REPORT", tmp_path / "report.md"))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as f:
        f.write(text + "\n")
    print(text)
