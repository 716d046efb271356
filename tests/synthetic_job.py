"""A job whose throughput is a known function of what the agent gives it, for tests.

It reads its cores from its cgroup's cpuset file and a co-runner's CPU quota from
that co-runner's cgroup, and reports progress at

    rate = base * min(cores, optimum) / optimum * (1 - contention * share)

where ``share`` is the co-runner's quota fraction (1 while unthrottled, 0 when it
has no cgroup). So the right answers are known: the allocator must settle on
``optimum`` cores and the eliminator must throttle the co-runner. Uses no CPU
to speak of, so it behaves the same on a fake tree and on the real kernel.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from coda.runtime.cgroups import parse_cpus
from coda.runtime.progress import Reporter


def _cores(path: Path) -> int:
    try:
        return max(1, len(parse_cpus(path.read_text())))
    except (OSError, ValueError):
        return 1


def _share(quota: Path | None, cpuset: Path | None) -> float:
    if quota is not None and not quota.exists() and (quota.parent / "cpu.max").exists():
        quota = quota.parent / "cpu.max"  # cgroup v2: "max 100000" or "50000 100000"
    if quota is None or not quota.exists():
        return 0.0
    try:
        first = quota.read_text().split()[0]
        q = -1 if first == "max" else int(first)
    except (OSError, ValueError, IndexError):
        return 0.0
    if q < 0:
        return 1.0
    cores = _cores(cpuset) if cpuset is not None else 1
    return min(1.0, q / 100_000 / cores)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpuset-file", type=Path, required=True)
    ap.add_argument("--optimum", type=int, default=2)
    ap.add_argument("--base", type=float, default=1000.0)
    ap.add_argument("--corunner", type=Path, default=None, help="co-runner's cgroup dir (cpu)")
    ap.add_argument("--corunner-cpuset", type=Path, default=None)
    ap.add_argument("--contention", type=float, default=0.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--silent-after", type=float, default=None, help="stop reporting after")
    ap.add_argument("--contention-after", type=float, default=0.0,
                    help="seconds of honest reports before --contention applies")  # fmt: skip
    args = ap.parse_args()
    rep = Reporter(min_interval_s=0.0)
    quota = args.corunner / "cpu.cfs_quota_us" if args.corunner else None
    start = last = time.monotonic()
    owed = 0.0
    while (now := time.monotonic()) - start < args.seconds:
        rate = args.base * min(_cores(args.cpuset_file), args.optimum) / args.optimum
        if now - start >= args.contention_after:
            rate *= 1.0 - args.contention * _share(quota, args.corunner_cpuset)
        owed += rate * (now - last)
        last = now
        if args.silent_after is None or now - start < args.silent_after:
            n = int(owed)
            owed -= n
            rep.step(n)
        time.sleep(0.01)
    rep.close()
    print(f"done pid={os.getpid()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
