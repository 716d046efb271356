#!/usr/bin/env python3
"""The host's memory floor under the simulator's scaling ladder: the same fixed work per
operation over a live set of jobs as large as the ladder's rungs hold, in ns per
operation, and its growth from the first rung.

The simulator's time per job is not flat from 100k/1k to 1M/10k (docs/results/benchmarks.md),
although the work per job does not grow (``bench/perf_growth.py``: the same calls per
job; the backfill merge looks at the same buckets per job). What does grow is the live
state each job's work reaches into: about 7 jobs per node are queued or running at
load 1.0 (2.7-2.9 queued, 4.0-4.1 running, averaged over the 100k/1k and 250k/2.5k runs),
so 7,000 live jobs at 1k nodes and 70,000 at 10k. This measures what the same number of
touches costs as that set grows, with nothing else changing: each operation reads two
fields of ``--touches`` live jobs picked at random and looks each up in a table keyed by
job (as the cycle's bucket table is). The jobs are CODA's own ``Job`` objects (the
compiled build's when run by its interpreter), allocated one after another; the picks,
drawn before the clock starts, land anywhere in the set, as the touches of a long run's
jobs, scattered over the heap, do. Random picks are the worst case: the simulator's
touches are not all random, so its growth is a fraction of this one. One untimed pass
over the first rung comes first, so no rung pays the interpreter's warm-up.

    .venv-compiled/bin/python bench/memory_floor.py                  # the ladder's rungs
    python bench/memory_floor.py --nodes 1000,10000 --live-per-node 7 --rounds 5
    .venv-compiled/bin/python bench/memory_floor.py --measure-live 100000,1000

``--measure-live JOBS,NODES`` runs that ladder case under ``coda`` (as ``bench_sim.py``
builds it) and prints how many jobs per node are queued and running, averaged over 180
instants spread evenly over its arrivals after the first tenth.

Rounds run the rungs largest first, as ``bench_sim.py --scaling`` does; the table gives
each rung's median over the rounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import re
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from coda.policy.state import Job
from coda.workload.limits import MAX_NODES
from coda.workload.limits import MAX_TRACE_JOBS as MAX_JOBS

LADDER_NODES = (1000, 2500, 5000, 10000)
# Upper bounds, so that a mistyped count gets one line instead of a MemoryError or a run
# of days: a live Job is some 700 bytes, a pick 8.
MAX_LIVE_JOBS = 2_000_000
MAX_PICKS = 20_000_000  # ops x touches per rung
MAX_ROUNDS = 100
WARMUP_OPS = 20_000


def live_jobs(n: int) -> list[Job]:
    """n queued-looking jobs, allocated one after another. Each has its own work (its
    ``remaining``): in the pure build a float field is an object, and a run's jobs do
    not share one (the compiled build keeps it in the job)."""
    return [Job(i, f"j{i}", float(i), 1, 4, 1024, 1, 3600.0 + i) for i in range(n)]


def ns_per_op(jobs: list[Job], touches: int, ops: int, seed: int) -> float:
    """Nanoseconds per operation of ``touches`` random touches of ``jobs``."""
    index = dict.fromkeys(jobs)
    rng = random.Random(seed)
    n = len(jobs)
    picks = [rng.randrange(n) for _ in range(ops * touches)]
    acc = 0.0
    t0 = time.perf_counter()
    for i in picks:
        job = jobs[i]
        acc += job.start + job.remaining
        if job in index:
            acc += 1.0
    elapsed = time.perf_counter() - t0
    if acc < 0:  # keeps the reads from being optimised away by a compiled build
        print(acc)
    return elapsed / ops * 1e9


def measure(
    nodes: list[int], per_node: int, touches: int, ops: int, rounds: int, seed: int
) -> list[tuple[int, int, float, float]]:
    """(nodes, live jobs, median ns per operation, ratio to the first rung) per rung."""
    times: dict[int, list[float]] = {n: [] for n in nodes}
    ns_per_op(live_jobs(nodes[0] * per_node), touches, min(ops, WARMUP_OPS), seed)  # warm-up
    for r in range(rounds):
        for n in sorted(nodes, reverse=True):
            jobs = live_jobs(n * per_node)
            times[n].append(ns_per_op(jobs, touches, ops, seed + r))
            del jobs
    first = statistics.median(times[nodes[0]])
    return [
        (n, n * per_node, statistics.median(times[n]), statistics.median(times[n]) / first)
        for n in nodes
    ]


def _bench_sim() -> ModuleType:
    """bench_sim.py beside this script, which builds the ladder's cases."""
    name = "bench_sim"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("bench_sim.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look themselves up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def live_per_node(jobs: int, nodes: int) -> tuple[float, float]:
    """(queued, running) jobs per node in the ``coda`` run of a ladder case, averaged
    over 180 instants spread evenly over its arrivals after the first tenth."""
    import numpy as np

    from coda.study.run import run_policy

    spec = {"kind": "large", "case": "live", "policy": "coda", "jobs": jobs, "nodes": nodes}
    prepared = _bench_sim().prepare_case({**spec, "load": 1.0, "seed": 0})
    result = run_policy(prepared, "coda")
    submit, start, end = result.jobs["submit"], result.jobs["start"], result.jobs["end"]
    queued = running = 0
    instants = np.linspace(submit[0], submit[-1], 200)[20:]
    for t in instants:
        started = start <= t  # NaN (never started) compares false
        queued += int(((submit <= t) & ~started).sum())
        running += int((started & ~(end <= t)).sum())
    return queued / len(instants) / nodes, running / len(instants) / nodes


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        self.exit(2, f"memory_floor: {message}\n")


def _positive(text: str, most: int = 10**12, least: int = 1) -> int:
    """A whole number in [least, most], written in ASCII digits (int() would also take
    "1_000" and other scripts' digits)."""
    if re.fullmatch(r"[0-9]{1,13}", text) is None:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    n = int(text)
    if not least <= n <= most:
        raise argparse.ArgumentTypeError(f"must be in [{least}, {most:,}], got {n:,}")
    return n


def _seed(text: str) -> int:
    return _positive(text, least=0)


def _rounds(text: str) -> int:
    return _positive(text, MAX_ROUNDS)


def _node_list(text: str) -> list[int]:
    nodes = [_positive(part.strip()) for part in text.split(",")]
    if nodes != sorted(set(nodes)):
        raise argparse.ArgumentTypeError(f"node counts must rise, without repeats: {text!r}")
    return nodes


def _case(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"want JOBS,NODES: {text!r}")
    jobs, nodes = _positive(parts[0].strip(), MAX_JOBS), _positive(parts[1].strip(), MAX_NODES)
    if jobs < 2:
        raise argparse.ArgumentTypeError(f"a case needs at least 2 jobs: {text!r}")
    return jobs, nodes


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(description=__doc__.split("\n\n")[0] if __doc__ else None, allow_abbrev=False)
    ap.add_argument("--nodes", type=_node_list, default=list(LADDER_NODES), help="rungs")
    ap.add_argument("--live-per-node", type=_positive, default=7, help="live jobs per node")
    ap.add_argument("--touches", type=_positive, default=3, help="jobs touched per operation")
    ap.add_argument("--ops", type=_positive, default=500_000, help="operations per rung")
    ap.add_argument("--rounds", type=_rounds, default=3)
    ap.add_argument("--seed", type=_seed, default=1)
    ap.add_argument("--measure-live", type=_case, metavar="JOBS,NODES", help="see above (alone)")
    a = ap.parse_args(argv)
    given = [x for x in (argv if argv is not None else sys.argv[1:]) if x.startswith("--")]
    if a.measure_live is not None and any(not x.startswith("--measure-live") for x in given):
        ap.error("--measure-live takes no other option")
    if a.measure_live is not None:
        jobs, nodes = a.measure_live
        try:
            queued, running = live_per_node(jobs, nodes)
        except ValueError as e:  # e.g. a load the case cannot reach
            print(f"memory_floor: --measure-live {jobs},{nodes}: {e}", file=sys.stderr)
            return 2
        print(f"{jobs:,} jobs on {nodes:,} nodes under coda, load 1.0, seed 0, per node:")
        print(f"queued {queued:.2f}, running {running:.2f}, live {queued + running:.2f}")
        return 0
    if a.nodes[-1] * a.live_per_node > MAX_LIVE_JOBS:
        ap.error(f"{a.nodes[-1] * a.live_per_node:,} live jobs: at most {MAX_LIVE_JOBS:,}")
    if a.ops * a.touches > MAX_PICKS:
        ap.error(f"--ops x --touches is {a.ops * a.touches:,}: at most {MAX_PICKS:,}")
    rows = measure(a.nodes, a.live_per_node, a.touches, a.ops, a.rounds, a.seed)
    print(
        f"{a.touches} random touches per operation, {a.ops:,} operations per rung, "
        f"median of {a.rounds} rounds"
    )
    print("| nodes | live jobs | ns per operation | vs first |")
    print("|---:|---:|---:|---:|")
    for n, live, ns, ratio in rows:
        print(f"| {n:,} | {live:,} | {ns:.0f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
