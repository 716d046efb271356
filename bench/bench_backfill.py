"""How many placement attempts the scheduling cycle makes, and how they end.

    python bench/bench_backfill.py W.csv [--policy coda] [--cluster paper]

Runs one policy on a trace the way `coda simulate --native-time --estimates time-limits`
does and counts every attempt (``Starter.attempt``) by job kind, search (full or the
changed nodes only) and outcome (started, or the reason noted). A paper-setting trace
comes from `coda trace generate --preset paper --jobs N --out W.csv`. The count is the
cost backfill's walk adds; wall time is printed beside it (measure on a quiet machine).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from coda.cycle.starts import Starter
from coda.study.config import DEFAULT_POLICY, RunConfig
from coda.study.run import prepare, run_policy


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--policy", default="coda")
    ap.add_argument("--cluster", default="paper")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not args.trace.is_file():
        print(f"{args.trace}: no such file", file=sys.stderr)
        return 2
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    attempt = Starter.attempt

    def counted(self: Starter, job: Any, full: bool, *rest: Any) -> bool:
        started = attempt(self, job, full, *rest)
        outcome = "started" if started else str(getattr(job.wait, "code", job.wait))
        counts[(job.kind, "full" if full else "changed nodes", outcome)] += 1
        return started

    Starter.attempt = counted  # type: ignore[method-assign,assignment]
    try:
        config = RunConfig(
            trace=str(args.trace), cluster=args.cluster, load=None, seed=args.seed,
            policy=dataclasses.replace(DEFAULT_POLICY, estimates="time-limits"),
        )  # fmt: skip
        prepared = prepare(config)
        t0 = time.perf_counter()
        run_policy(prepared, args.policy)
        wall = time.perf_counter() - t0
    except (OSError, ValueError) as e:
        print(f"{args.trace}: {e}", file=sys.stderr)
        return 2
    finally:
        Starter.attempt = attempt  # type: ignore[method-assign]
    print(f"{args.policy} on {args.trace.name}, cluster {args.cluster}: {wall:.1f} s")
    print(f"attempts: {sum(counts.values()):,}")
    for (kind, search, outcome), n in counts.most_common():
        print(f"  {kind:4} {search:14} {outcome:12} {n:>12,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
