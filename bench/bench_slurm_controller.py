"""What one cycle of `coda slurm controller` costs on a big cluster's queue.

The controller's own work per cycle: parse `squeue --json` and `scontrol show node`
output, build the policy view, run one scheduling cycle (plan), write the placements,
read them back, release. Slurm's side (how
long squeue itself takes) is not measured here: the runner answers from memory with
output in Slurm 22.05's format. Updates are applied to the read-back only, so every
cycle sees the same queue (the steady state of a backed-up cluster).

    .venv/bin/python bench/bench_slurm_controller.py [--nodes 256] [--queued 100,1000,10000]

Prints one row per queue length: median and p90 cycle time, the share spent in
plan(), and the placements a cycle makes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Sequence

from coda.slurm import controller as ctl_mod
from coda.slurm.client import SlurmClient
from coda.slurm.controller import Controller


def _cluster(n_nodes: int, queued: int, seed: int = 0) -> tuple[str, str]:
    rng = random.Random(seed)
    gpu_nodes = n_nodes // 2
    node_lines = []
    jobs = []
    jid = 1
    for i in range(n_nodes):
        gpus = 8 if i < gpu_nodes else 0
        # Busy cluster: most cores and GPUs taken by running jobs.
        alloc = rng.randint(48, 64)
        used = rng.randint(6, 8) if gpus else 0
        node_lines.append(
            f"NodeName=node{i:04d} Arch=x86_64 CoresPerSocket=32 CPUAlloc={alloc} CPUEfctv=64 "
            f"CPUTot=64 Gres={'gpu:8' if gpus else '(null)'} GresUsed=gpu:{used} "
            f"State={'MIXED' if alloc < 64 else 'ALLOCATED'} Partitions=main"
        )
        jobs.append(_job(jid, "RUNNING", f"node{i:04d}", 8, used, "coda:placed,req=8,grant=8"))
        jid += 1
    for _ in range(queued):
        dnn = rng.random() < 0.4
        gpus = rng.choice((1, 2, 4, 8)) if dnn else 0
        cores = gpus * rng.choice((4, 6, 8)) if dnn else rng.choice((1, 2, 4, 8, 16))
        jobs.append(_job(jid, "PENDING", "", cores, gpus, "coda:held", model=f"m{jid % 20}"))
        jid += 1
    return json.dumps({"jobs": jobs}), "\n".join(node_lines) + "\n"


def _job(
    jid: int, state: str, node: str, cores: int, gpus: int, mark: str, model: str = "run"
) -> dict:
    return {
        "job_id": jid,
        "name": model,
        "user_id": 1000,
        "job_state": state,
        "state_reason": "JobHeldUser" if state == "PENDING" else "None",
        "cpus": cores,
        "node_count": 1,
        "tres_per_node": f"gres:gpu:{gpus}" if gpus else "",
        "tres_per_job": "",
        "tres_per_task": "",
        "tasks": 1,
        "nodes": node,
        "required_nodes": "",
        "dependency": "",
        "priority": 0 if state == "PENDING" else 1000,
        "admin_comment": mark,
        "submit_time": 1_700_000_000 + jid,
        "start_time": 0,
        "end_time": 0,
        "exit_code": 0,
        "restart_cnt": 0,
    }


def bench(n_nodes: int, queued: int, cycles: int) -> dict[str, float]:
    squeue, nodes = _cluster(n_nodes, queued)
    by_id = {j["job_id"]: j for j in json.loads(squeue)["jobs"]}
    updated: dict[int, dict] = {}

    def runner(argv: Sequence[str]) -> str:
        if argv[:2] == ["squeue", "--json"]:
            if not updated:
                return squeue  # the cycle's first read: the backed-up queue
            # The read-back before releasing: Slurm's answer for the updated jobs.
            return json.dumps({"jobs": list(updated.values())})
        if argv[:3] == ["scontrol", "show", "-o"]:
            return nodes
        if argv[1] == "update":
            jid = int(argv[2].removeprefix("JobId="))
            j = updated.setdefault(jid, dict(by_id[jid]))
            for a in argv[3:]:
                k, _, v = a.partition("=")
                key = {"ReqNodeList": "required_nodes", "NumCPUs": "cpus",
                       "AdminComment": "admin_comment"}.get(k)  # fmt: skip
                if key:
                    j[key] = int(v) if key == "cpus" else v
        return ""

    plan_s: list[float] = []
    real_plan = ctl_mod.plan

    def timed_plan(*a, **k):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = real_plan(*a, **k)
        plan_s.append(time.perf_counter() - t0)
        return out

    ctl_mod.plan = timed_plan  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as d:
            c = Controller(SlurmClient(runner), d)
            times = []
            placed = 0
            for _ in range(cycles):
                updated.clear()  # every cycle sees the same queue again
                t0 = time.perf_counter()
                placed = len(c.cycle())
                times.append(time.perf_counter() - t0)
    finally:
        ctl_mod.plan = real_plan  # type: ignore[assignment]
    times.sort()
    return {
        "median_ms": statistics.median(times) * 1e3,
        "p90_ms": times[int(0.9 * (len(times) - 1))] * 1e3,
        "plan_share": statistics.median(plan_s) / statistics.median(times),
        "placed": placed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--queued", default="100,1000,10000")
    ap.add_argument("--cycles", type=int, default=15)
    args = ap.parse_args()
    print(f"nodes={args.nodes} (half with 8 GPUs, 64 cores each), cycles={args.cycles}")
    print(f"{'queued':>8} {'median ms':>10} {'p90 ms':>8} {'plan share':>11} {'placed':>7}")
    for q in (int(x) for x in args.queued.split(",")):
        r = bench(args.nodes, q, args.cycles)
        print(
            f"{q:>8} {r['median_ms']:>10.1f} {r['p90_ms']:>8.1f} "
            f"{r['plan_share']:>10.0%} {r['placed']:>7}"
        )


if __name__ == "__main__":
    main()
