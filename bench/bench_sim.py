"""Simulator speed and memory benchmark.

    python bench/bench_sim.py                 # bundled trace under every policy, 3 runs each
    python bench/bench_sim.py --large         # also 1,000,000 jobs on 10,000 nodes
    python bench/bench_sim.py --large-only --jobs 100000 --nodes 1000   # a smaller large run

Reports medians of wall time, events/s and jobs/s measured in this one run
(machines are shared and noisy: compare ratios within a run, not across runs).
The large case runs in a child process so that its peak memory (max RSS) is its own.
Targets (issue 2): bundled trace under 10 s per policy on a 2-core machine;
1M jobs / 10k nodes under 10 minutes and 4 GiB.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import sys
import time

from coda.policy import POLICIES


def bundled(policies: list[str], repeats: int) -> list[dict]:
    from coda.sim.run import RunConfig, prepare, run_policy

    t0 = time.perf_counter()
    prepared = prepare(RunConfig())
    prep_s = time.perf_counter() - t0
    rows = []
    for name in policies:
        walls, events = [], 0
        for _ in range(repeats):
            res = run_policy(prepared, name)
            walls.append(res.summary["wall_seconds"])
            events = res.summary["events"]
        wall = statistics.median(walls)
        n = len(prepared.workload.jobs)
        rows.append(
            {
                "case": "bundled",
                "policy": name,
                "jobs": n,
                "nodes": len(prepared.cluster.nodes),
                "prepare_s": prep_s,
                "wall_s_median": wall,
                "wall_s_all": walls,
                "events": events,
                "events_per_s": events / wall,
                "jobs_per_s": n / wall,
            }
        )
    return rows


def _large_child(policy: str, n_jobs: int, n_nodes: int, load: float, out: mp.Queue) -> None:
    from coda.policy import make_policy
    from coda.sim.engine import Simulator
    from coda.sim.run import resolve_cluster
    from coda.workload.cluster import resample_cluster
    from coda.workload.perf import build_workload, load_profile_set
    from coda.workload.scaling import resample_jobs, scale_to_load, window_bounds
    from coda.workload.traces import bundled_trace_path, load_trace

    t0 = time.perf_counter()
    profiles = load_profile_set("coda")
    base = load_trace(bundled_trace_path()).jobs
    cluster = resample_cluster(resolve_cluster("openb", profiles.node_bw_gbps_per_core), n_nodes, 0)
    jobs = resample_jobs(base, n_jobs, seed=0)
    jobs, _ = scale_to_load(jobs, cluster.gpus, load)
    workload = build_workload(jobs, profiles, seed=0)
    prep_s = time.perf_counter() - t0
    sim = Simulator(workload, cluster, make_policy(policy), window=window_bounds(jobs.submit))
    res = sim.run()
    s = res.summary
    out.put(
        {
            "case": "large",
            "policy": policy,
            "jobs": n_jobs,
            "nodes": n_nodes,
            "gpus": cluster.gpus,
            "load": load,
            "prepare_s": prep_s,
            "wall_s_median": s["wall_seconds"],
            "events": s["events"],
            "events_per_s": s["events"] / s["wall_seconds"],
            "jobs_per_s": n_jobs / s["wall_seconds"],
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "finished": s["jobs"]["finished"],
            "gpu_util_allocated": s["gpu_util_allocated"],
            "dnn_queue_delay_mean_s": s["dnn_queue_delay_s"]["mean"],
        }
    )


def large(policies: list[str], n_jobs: int, n_nodes: int, load: float) -> list[dict]:
    rows = []
    ctx = mp.get_context("spawn")
    for name in policies:
        q = ctx.Queue()
        p = ctx.Process(target=_large_child, args=(name, n_jobs, n_nodes, load, q))
        t0 = time.perf_counter()
        p.start()
        row = q.get()
        p.join()
        row["process_s"] = time.perf_counter() - t0
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--policies", default=",".join(sorted(POLICIES)))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--large", action="store_true", help="also run the 1M-job / 10k-node case")
    ap.add_argument("--large-only", action="store_true")
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    rows = []
    if not args.large_only:
        rows += bundled(policies, args.repeats)
    if args.large or args.large_only:
        rows += large(policies, args.jobs, args.nodes, args.load)
    header = (
        f"{'case':8} {'policy':16} {'jobs':>9} {'nodes':>6} {'wall s':>8} "
        f"{'events/s':>10} {'jobs/s':>9} {'max RSS MiB':>11}"
    )
    print(header)
    for r in rows:
        rss = f"{r['max_rss_mib']:.0f}" if "max_rss_mib" in r else "-"
        print(
            f"{r['case']:8} {r['policy']:16} {r['jobs']:>9} {r['nodes']:>6} "
            f"{r['wall_s_median']:>8.2f} {r['events_per_s']:>10.0f} "
            f"{r['jobs_per_s']:>9.0f} {rss:>11}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
