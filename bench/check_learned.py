"""Compare the core counts CODA's allocator learned in a run with the performance model.

    .venv/bin/python bench/check_learned.py out/compare/coda/summary.json [--profiles coda]

For each learned job shape (model / GPUs per node / nodes) it prints the learned count
and the smallest count within 5% of the shape's peak speed in the profile set the
simulation used, and how many agree. docs/results/bundled.md's allocator figures come from this.
"""

from __future__ import annotations

import argparse
import json
import sys

from coda.workload.perf import load_profile_set


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summary", help="a summary.json written by coda simulate/compare")
    ap.add_argument("--profiles", default="coda")
    ap.add_argument("--tolerance", type=float, default=0.05)
    args = ap.parse_args(argv)
    try:
        with open(args.summary) as f:
            learned = json.load(f)["policy_stats"]["allocator"]["learned"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"{args.summary}: no learned profiles in it ({e})", file=sys.stderr)
        return 1
    profiles = load_profile_set(args.profiles)
    agree = 0
    for key, (cores, jobs) in sorted(learned.items()):
        model, g, n = key.split("/")
        perf = profiles.job_perf(model, int(g.rstrip("g")), int(n.rstrip("n")))
        best = next(c for c in range(1, 4097) if perf.core_speed(c) >= 1 - args.tolerance)
        agree += cores == best
        mark = "" if cores == best else "  <- differs"
        print(f"{key:24s} learned {cores:3d}  model {best:3d}  ({jobs} jobs){mark}")
    print(f"{agree} of {len(learned)} shapes learned the smallest count within "
          f"{args.tolerance:.0%} of peak")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
