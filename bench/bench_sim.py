"""Simulator speed and memory benchmark.

    python bench/bench_sim.py                  # bundled trace under every policy, median of 3
    python bench/bench_sim.py --scaling        # 100k/1k, 250k/2.5k, 500k/5k, 1M/10k jobs/nodes
    python bench/bench_sim.py --scaling --rounds 2   # the ladder twice, ABBA order, medians
    python bench/bench_sim.py --scaling --sizes 2000,5000 --json out/scaling.json  # quick check
    python bench/bench_sim.py --large          # bundled, then 1,000,000 jobs on 10,000 nodes
    python bench/bench_sim.py --large-only --jobs 100000 --nodes 1000   # one large case only

Modes (they combine; the bundled trace runs unless --large-only, --scaling or --sizes):
  (default)      the bundled trace in this process, --repeats runs per policy, median wall.
  --scaling      the scaling ladder: every size in --sizes (default 100000,250000,500000,
                 1000000 jobs on jobs/100 nodes), each under every --policies.
  --sizes A,B    the ladder's sizes in jobs (nodes = jobs // 100); implies --scaling.
  --rounds K     run the ladder K times (default 1), odd rounds smallest case first, even
                 rounds largest first, and report each case's median (each round's µs per
                 job beside it): a shared host's speed drifts over a run, and alternating
                 the order keeps that drift off the ratios.
  --large        also one case of --jobs jobs on --nodes nodes (defaults 1M / 10k).
  --large-only   that case alone.

Every case except the bundled trace runs in its own child process (this script again,
sys.executable, no shell), so its max RSS is its own; it is built the same way for every
size: jobs resampled from the bundled trace (bootstrapped arrival gaps), nodes resampled
from its node list, both with --seed, arrivals then scaled to the offered GPU load --load
of that cluster, so the arrival rate grows with the node count and the load stays the same
(per node it still moves by some 10% between sizes, as the resampled jobs' GPU time does;
the JSON rows give arrivals_per_node_h and offered_gpu_load). Each case runs the way
`coda simulate` does (coda.study.run.run_policy, the RunConfig defaults: sample noise 5%).
A case still running after --case-timeout seconds (default 900) is killed by its PID and
reported as "timeout" (max RSS as read from /proc just before); the larger ladder cases
of that policy are then "skipped" (time per job does not fall with size). While a case
runs, a "running, N s" line each minute shows a stall between its progress marks.

Options: --policies (default: every policy for the bundled trace and --large but those
meant for replay-sized clusters, coda.policy.REPLAY_SCALE_POLICIES; static-separate,coda
for the ladder), --repeats (bundled), --rounds (ladder), --load (default 1.0),
--seed (default 0), --case-timeout, --json PATH (also write the rows there).

Progress (which case runs, elapsed) goes to stderr; stdout gets one Markdown table:
case, policy, jobs, nodes, wall s (simulation only, preparation excluded), µs per job,
CPU µs per job (the process's CPU time over the run, building its result included: on a
shared machine other work inflates wall time, much less CPU time), events/s, max RSS MiB,
and each ladder row's µs per job over that of the smallest ladder case of the same policy
("vs 100k": flat from 100k to 1M means about 1.0). Ratios are reported, never asserted:
machines are shared and noisy, so compare within one run.
Exit status 1 if any case failed (a timeout is a result, not a failure).
Build: run with a compiled build's interpreter (bench/build-compiled makes .venv-compiled;
`.venv-compiled/bin/python bench/bench_sim.py --scaling`) for mypyc's speed, with the same
decisions (tests/test_compiled_build.py); the first stdout line and each JSON row say which
build ran ("compiled" or "pure").
Targets (issue 12): 1M jobs / 10k nodes under `coda` in under 5 minutes and 4 GiB on a
2-core machine, with time per job flat from 100k to 1M.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from coda.policy import POLICIES, REPLAY_SCALE_POLICIES
from coda.workload.limits import MAX_NODES
from coda.workload.limits import MAX_TRACE_JOBS as MAX_JOBS  # the loaders' cap per trace

if TYPE_CHECKING:
    from coda.study.run import Prepared

DEFAULT_SIZES = (100_000, 250_000, 500_000, 1_000_000)
JOBS_PER_NODE = 100
LADDER_POLICIES = ("static-separate", "coda")
MIN_LADDER_JOBS = JOBS_PER_NODE  # one node at least
DEFAULT_CASE_TIMEOUT_S = 900.0
HEARTBEAT_S = 60.0  # seconds between "running" lines while a case runs
MAX_LOAD = 1000.0  # coda.study.config.MAX_LOAD


@dataclass(frozen=True)
class Case:
    kind: str  # "scaling" (a ladder rung) or "large"
    jobs: int
    nodes: int

    @property
    def name(self) -> str:
        return f"{short(self.jobs)}/{short(self.nodes)}"


def short(n: int) -> str:
    """1000000 -> 1M, 2500 -> 2.5k, 20 -> 20: case names as the issue writes them."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size:
            return f"{n / size:.2f}".rstrip("0").rstrip(".") + unit  # no 1e+03k
    return str(n)


def parse_sizes(text: str) -> list[int]:
    """'100000,250000' -> [100000, 250000]: distinct job counts, ascending."""
    sizes = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not re.fullmatch(r"[0-9]+", part):
            raise ValueError(f"expected job counts like 2000,5000, got {text!r}")
        n = int(part)
        if not MIN_LADDER_JOBS <= n <= MAX_JOBS:
            raise ValueError(
                f"each size must be in [{MIN_LADDER_JOBS}, {MAX_JOBS}] jobs "
                f"(nodes = jobs // {JOBS_PER_NODE}), got {n}"
            )
        sizes.append(n)
    return sorted(set(sizes))


def ladder(sizes: list[int]) -> list[Case]:
    return [Case("scaling", n, n // JOBS_PER_NODE) for n in sizes]


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each ladder row gets its µs per job over that of the smallest ladder case of its
    policy (None where either did not finish)."""
    base: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["kind"] != "scaling":
            continue
        b = base.get(r["policy"])
        if b is None or r["jobs"] < b["jobs"]:
            base[r["policy"]] = r
    for r in rows:
        if r["kind"] != "scaling":
            continue
        b = base[r["policy"]]
        ok = r["status"] == "ok" and b["status"] == "ok"
        r["vs_smallest"] = r["us_per_job"] / b["us_per_job"] if ok else None
        r["smallest_case"] = b["case"]


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    smallest = next((r["smallest_case"] for r in rows if "smallest_case" in r), None)
    ratio_head = f"vs {smallest.split('/')[0]}" if smallest else "vs smallest"
    # Rows merged over rounds give medians, and each round's µs per job beside them.
    runs = any("us_per_job_runs" in r for r in rows)
    lines = [
        f"| case | policy | jobs | nodes | wall s | µs per job | CPU µs per job | events/s "
        f"| max RSS MiB | {ratio_head} |" + (" µs per job by round |" if runs else ""),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if runs else ""),
    ]
    for r in rows:
        by_round = ", ".join(format(v, ".1f") for v in r.get("us_per_job_runs", []))
        wall = _num(r.get("wall_s"), ".2f") if r["status"] == "ok" else r["status"]
        if r["status"] == "timeout":
            wall = f"timeout ({r['timeout_s']:g} s)"
        lines.append(
            f"| {r['case']} | {r['policy']} | {r['jobs']:,} | {r['nodes']:,} | {wall} "
            f"| {_num(r.get('us_per_job'), ',.1f')} | {_num(r.get('cpu_us_per_job'), ',.1f')} "
            f"| {_num(r.get('events_per_s'), ',.0f')} "
            f"| {_num(r.get('max_rss_mib'), ',.0f')} | {_num(r.get('vs_smallest'), '.2f')} |"
            + (f" {by_round or '-'} |" if runs else "")
        )
    return "\n".join(lines)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def bundled(policies: list[str], repeats: int, seed: int) -> list[dict[str, Any]]:
    from coda.study.config import RunConfig
    from coda.study.run import prepare, run_policy

    t0 = time.perf_counter()
    prepared = prepare(RunConfig(seed=seed))
    prep_s = time.perf_counter() - t0
    n = len(prepared.workload.jobs)
    rows = []
    for name in policies:
        log(f"bundled {name}: {repeats} run(s)")
        walls, cpus, events = [], [], 0
        for _ in range(repeats):
            c0 = time.process_time()
            res = run_policy(prepared, name)
            cpus.append(time.process_time() - c0)
            walls.append(res.summary["wall_seconds"])
            events = res.summary["events"]
        wall = statistics.median(walls)
        rows.append(
            {
                "kind": "bundled",
                "case": "bundled",
                "policy": name,
                "status": "ok",
                "jobs": n,
                "nodes": len(prepared.cluster.nodes),
                "prepare_s": prep_s,
                "wall_s": wall,
                "wall_s_all": walls,
                "events": events,
                "us_per_job": wall / n * 1e6,
                "cpu_us_per_job": statistics.median(cpus) / n * 1e6,
                "events_per_s": events / wall,
                "jobs_per_s": n / wall,
                "max_rss_mib": None,  # shared with every other run in this process
            }
        )
    return rows


def _pick(d: Any, *keys: str) -> Any:
    # Optional summary fields: the summary's layout may move, the benchmark should not break.
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def prepare_case(spec: dict[str, Any]) -> Prepared:
    """The case's workload, built the same way for every size (see the module docstring)."""
    from coda.study.clusters import resolve_cluster
    from coda.study.config import RunConfig
    from coda.study.run import Prepared
    from coda.workload.cluster import resample_cluster
    from coda.workload.perf import build_workload, load_profile_set
    from coda.workload.scaling import resample_jobs, scale_to_load
    from coda.workload.traces import bundled_trace_path, load_trace

    seed, load = spec["seed"], spec["load"]
    config = RunConfig(cluster="openb", load=load, seed=seed)
    profiles = load_profile_set(config.profiles)
    trace = load_trace(bundled_trace_path())
    base = resolve_cluster("openb", profiles.node_bw_gbps_per_core)
    cluster = resample_cluster(base, spec["nodes"], seed)
    jobs = resample_jobs(trace.jobs, spec["jobs"], seed=seed)
    jobs, scale = scale_to_load(jobs, cluster.gpus, load, config.warmup)
    workload = build_workload(jobs, profiles, seed)
    return Prepared(config, trace.report, cluster, workload, scale)


def child(spec: dict[str, Any], prepared: Prepared, prep_s: float) -> dict[str, Any]:
    """Simulate one prepared case under one policy, in this (child) process; its row."""
    from coda.study.run import run_policy

    label = f"{spec['case']} {spec['policy']}"
    n_jobs, n_nodes = len(prepared.workload.jobs), len(prepared.cluster.nodes)
    submit = prepared.workload.jobs.submit
    span = float(submit[-1] - submit[0])
    per_node_h = (n_jobs - 1) / span * 3600 / n_nodes if span > 0 else math.inf
    log(
        f"  {label}: prepared in {prep_s:.1f} s ({prepared.cluster.gpus:,} GPUs, "
        f"{per_node_h:.3g} arrivals per node-hour at load {spec['load']:g}); simulating"
    )
    import coda.report  # noqa: F401  (the result imports it: keep that out of the CPU time)

    t0 = time.perf_counter()
    marks = iter(range(10, 101, 10))
    mark = [next(marks)]

    def progress(done: int, total: int) -> None:
        # Every 10% of arrivals, so a stall shows where it starts.
        if total and done * 100 >= mark[0] * total and mark[0] <= 100:
            log(f"  {label}: {done * 100 // total}% of arrivals, {time.perf_counter() - t0:.0f} s")
            mark[0] = next(marks, 101)

    c0 = time.process_time()
    s = run_policy(prepared, spec["policy"], progress=progress).summary
    cpu = time.process_time() - c0
    wall = s["wall_seconds"]
    return {
        "prepare_s": prep_s,
        "wall_s": wall,
        "events": s["events"],
        "us_per_job": wall / n_jobs * 1e6,
        "cpu_s": cpu,
        "cpu_us_per_job": cpu / n_jobs * 1e6,
        "events_per_s": s["events"] / wall if wall > 0 else None,
        "jobs_per_s": n_jobs / wall if wall > 0 else None,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB
        "gpus": prepared.cluster.gpus,
        "time_scale": prepared.time_scale,
        "arrivals_per_node_h": per_node_h,
        "offered_gpu_load": _pick(s, "offered_gpu_load"),
        "finished": _pick(s, "jobs", "finished"),
        "gpu_util_allocated": _pick(s, "gpu_util_allocated"),
        "dnn_queue_delay_mean_s": _pick(s, "dnn_queue_delay_s", "mean"),
    }


def child_main(spec_text: str) -> int:
    """The child's side: its row as one JSON line on stdout (progress on stderr)."""
    try:
        spec = json.loads(spec_text)
        t0 = time.perf_counter()
        prepared = prepare_case(spec)
    except (ValueError, KeyError, TypeError) as e:  # e.g. a load out of reach
        print(json.dumps({"status": "error", "error": f"{type(e).__name__}: {e}"}), flush=True)
        return 2
    # Past this point a failure is the simulator's: its traceback goes to stderr.
    print(json.dumps(child(spec, prepared, time.perf_counter() - t0)), flush=True)
    return 0


def vm_hwm_mib(pid: int) -> float | None:
    """Peak resident memory of a live process, from /proc (None where unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def run_case(case: Case, policy: str, load: float, seed: int, timeout_s: float) -> dict[str, Any]:
    """Run one case in a child process; its row, with status ok, timeout or error."""
    row: dict[str, Any] = {
        "kind": case.kind,
        "case": case.name,
        "policy": policy,
        "jobs": case.jobs,
        "nodes": case.nodes,
        "load": load,
        "seed": seed,
    }
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(row)]
    t0 = time.perf_counter()
    deadline = t0 + timeout_s
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        while True:
            left = deadline - time.perf_counter()
            try:
                out, _ = proc.communicate(timeout=max(0.0, min(HEARTBEAT_S, left)))
                break
            except subprocess.TimeoutExpired:
                if time.perf_counter() < deadline:  # a stall between progress marks shows too
                    log(f"  {case.name} {policy}: running, {time.perf_counter() - t0:.0f} s")
                    continue
                hwm = vm_hwm_mib(proc.pid)
                proc.kill()  # SIGKILL to this child's PID only
                proc.communicate()
                return {**row, "status": "timeout", "timeout_s": timeout_s, "max_rss_mib": hwm}
    except BaseException:  # Ctrl-C: take the child down with us
        proc.kill()
        proc.wait()
        raise
    row["process_s"] = time.perf_counter() - t0
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        got = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        got = None
    if isinstance(got, dict) and got.get("status") == "error":
        return {**row, **got}
    if proc.returncode != 0 or not isinstance(got, dict):
        return {**row, "status": "error", "error": f"child exited with status {proc.returncode}"}
    return {**row, "status": "ok", **got}


def round_order(cases: list[Case], rounds: int) -> list[tuple[int, Case]]:
    """(round, case) in the order they run: odd rounds smallest case first, even rounds
    largest first, so a host whose speed drifts over the run (a shared machine's does)
    weighs on the small cases as on the large ones."""
    order: list[tuple[int, Case]] = []
    for r in range(1, rounds + 1):
        order += [(r, c) for c in (cases if r % 2 else cases[::-1])]
    return order


def run_cases(
    cases: list[Case],
    policies: list[str],
    load: float,
    seed: int,
    timeout_s: float,
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """Every case under every policy, ``rounds`` times (``round_order``); one row per
    run, with its round."""
    rows: list[dict[str, Any]] = []
    timed_out: dict[str, int] = {}  # policy -> jobs of its smallest ladder case that timed out
    order = round_order(cases, rounds)
    total, k, t_start = len(order) * len(policies), 0, time.perf_counter()
    for rnd, case in order:
        for policy in policies:
            k += 1
            head = f"[{k}/{total}] {case.name} {policy}"
            if rounds > 1:
                head += f" (round {rnd})"
            if case.kind == "scaling" and case.jobs > timed_out.get(policy, math.inf):
                log(f"{head}: skipped (a smaller case timed out)")
                rows.append(
                    {"kind": case.kind, "case": case.name, "policy": policy, "status": "skipped",
                     "jobs": case.jobs, "nodes": case.nodes, "load": load, "seed": seed}
                )  # fmt: skip
                continue
            log(f"{head}: {case.jobs:,} jobs on {case.nodes:,} nodes")
            row = run_case(case, policy, load, seed, timeout_s)
            elapsed = time.perf_counter() - t_start
            if row["status"] == "ok":
                log(
                    f"{head}: sim {row['wall_s']:.1f} s, process {row['process_s']:.1f} s, "
                    f"max RSS {row['max_rss_mib']:,.0f} MiB (elapsed {elapsed:.0f} s)"
                )
            elif row["status"] == "timeout":
                log(f"{head}: timeout after {timeout_s:g} s, killed (elapsed {elapsed:.0f} s)")
                if case.kind == "scaling":
                    timed_out[policy] = min(timed_out.get(policy, case.jobs), case.jobs)
            else:
                log(f"{head}: error: {row['error']} (elapsed {elapsed:.0f} s)")
            rows.append({**row, "round": rnd})
    return rows


MEDIAN_FIELDS = ("wall_s", "us_per_job", "cpu_s", "cpu_us_per_job", "events_per_s", "jobs_per_s")


def merge_rounds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per case and policy over its rounds, in first-run order: the median of
    each time field and the largest max RSS. A
    case that failed or timed out in any round keeps that row (the failure is the
    result). Rows from a single round pass through unchanged; a merged row lists each
    round's µs per job in ``us_per_job_runs``."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["kind"], r["case"], r["policy"]), []).append(r)
    merged = []
    for runs in groups.values():
        if len(runs) == 1:
            merged.append(runs[0])
            continue
        bad = next((r for r in runs if r["status"] != "ok"), None)
        if bad is not None:
            merged.append({**bad, "rounds": len(runs)})
            continue
        row = dict(runs[0])
        for f in MEDIAN_FIELDS:
            vals = [r[f] for r in runs if r.get(f) is not None]
            row[f] = statistics.median(vals) if vals else None
        rss = [r["max_rss_mib"] for r in runs if r.get("max_rss_mib") is not None]
        row["max_rss_mib"] = max(rss) if rss else None
        row["us_per_job_runs"] = [r["us_per_job"] for r in sorted(runs, key=lambda r: r["round"])]
        row["rounds"] = len(runs)
        row.pop("round", None)
        merged.append(row)
    return merged


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_in(lo: int, hi: int) -> Any:
    def parse(text: str) -> int:
        try:
            v = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {hi}], got {v}")
        return v

    return parse


def _positive(hi: float) -> Any:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not 0 < v <= hi:  # also rejects NaN
            raise argparse.ArgumentTypeError(f"must be in (0, {hi:g}], got {text}")
        return v

    return parse


def _sizes(text: str) -> list[int]:
    try:
        return parse_sizes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _every_policy() -> list[str]:
    return sorted(p for p in POLICIES if p not in REPLAY_SCALE_POLICIES)


def _policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown policy {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(sorted(POLICIES))}"
        )
    return list(dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", type=_policies, help="comma-separated policy names")
    ap.add_argument("--repeats", type=_int_in(1, 100), default=3, help="bundled runs per policy")
    ap.add_argument(
        "--rounds", type=_int_in(1, 20), default=1, help="ladder runs, alternating order; medians"
    )
    ap.add_argument("--scaling", action="store_true", help="run the scaling ladder")
    ap.add_argument("--sizes", type=_sizes, help="ladder sizes in jobs; implies --scaling")
    ap.add_argument("--large", action="store_true", help="also one --jobs/--nodes case")
    ap.add_argument("--large-only", action="store_true", help="only the --jobs/--nodes case")
    ap.add_argument("--jobs", type=_int_in(2, MAX_JOBS), default=1_000_000)
    ap.add_argument("--nodes", type=_int_in(1, MAX_NODES), default=10_000)
    ap.add_argument("--load", type=_positive(MAX_LOAD), default=1.0)
    ap.add_argument("--seed", type=_int_in(0, 2**32 - 1), default=0)
    ap.add_argument(
        "--case-timeout",
        type=_positive(7 * 86_400),
        default=DEFAULT_CASE_TIMEOUT_S,
        help="seconds per child case before it is killed (default 900)",
    )
    ap.add_argument("--json", type=Path, help="also write the rows to this file")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # internal: run one case, print its row
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.child is not None:
        return child_main(args.child)
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"--json: directory {str(args.json.parent)!r} does not exist")
    if args.json is not None and args.json.is_dir():
        ap.error(f"--json: {str(args.json)!r} is a directory")
    if args.json is not None and not os.access(args.json.parent, os.W_OK):
        ap.error(f"--json: directory {str(args.json.parent)!r} is not writable")
    scaling = args.scaling or args.sizes is not None
    if args.rounds > 1 and not scaling:
        ap.error("--rounds: only the ladder runs in rounds (add --scaling or --sizes)")
    rows: list[dict[str, Any]] = []
    if not (args.large_only or scaling):
        rows += bundled(args.policies or _every_policy(), args.repeats, args.seed)
    cases = ladder(args.sizes or list(DEFAULT_SIZES)) if scaling else []
    if scaling:
        policies = args.policies or list(LADDER_POLICIES)
        rows += merge_rounds(
            run_cases(cases, policies, args.load, args.seed, args.case_timeout, args.rounds)
        )
    if args.large or args.large_only:
        large = [Case("large", args.jobs, args.nodes)]
        policies = args.policies or _every_policy()
        rows += run_cases(large, policies, args.load, args.seed, args.case_timeout)
    add_ratios(rows)
    from coda.build_kind import build_kind

    build = build_kind()
    for r in rows:
        r["build"] = build
    print(f"{build} build ({sys.executable}), {os.cpu_count()} CPUs\n", flush=True)
    print(markdown_table(rows), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 1 if any(r["status"] == "error" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
