"""A job that reports a set rate of progress with almost no CPU.

Run as ``python -m coda.runtime.workloads.spin``. Ten times a second it adds
``rate * dt`` samples to its progress (``CODA_PROGRESS_FILE``) and sleeps. With
``--rate-file PATH`` it re-reads the rate from that file (one number, samples/s)
every tick, so a benchmark can change the job's throughput from outside; a
missing or malformed file keeps the current rate. For the agent's cost benchmark:
many cheap managed jobs.

Output: a JSON start line (not with ``--quiet``) and always a JSON summary as the
last line. Exit status 0 after ``--seconds`` or on SIGTERM/SIGINT; 2 for bad options.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence

from coda.runtime.progress import Reporter
from coda.runtime.workloads._common import StopSignals, number_above

TICK_S = 0.1
RATE_FILE_EVERY_S = 0.1  # a benchmark times the drop it causes: keep the lag small


def read_rate(path: str) -> float | None:
    """The rate in ``path``: a finite number >= 0; None if missing or malformed."""
    try:
        with open(path) as f:
            value = float(f.read().strip())
    except (OSError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m coda.runtime.workloads.spin",
        description="Report a set rate of progress to CODA_PROGRESS_FILE with almost no CPU.",
    )
    p.add_argument(
        "--rate", type=number_above(0, strict=False), default=100.0, help="samples/s (default 100)"
    )
    p.add_argument(
        "--seconds", type=number_above(0, strict=True), help="stop after this many seconds"
    )
    p.add_argument(
        "--rate-file",
        metavar="PATH",
        help="re-read the rate from this file every 0.1 s (a missing file keeps the rate)",
    )
    p.add_argument("--quiet", action="store_true", help="no start line (the summary is printed)")
    return p


def run(args: argparse.Namespace) -> int:
    stop = StopSignals()
    rate = args.rate
    if args.rate_file:
        rate = r if (r := read_rate(args.rate_file)) is not None else rate
    reporter = Reporter()
    if not args.quiet:
        print(json.dumps({"event": "start", "pid": os.getpid(), "rate": rate}), flush=True)
    t_start = last = next_read = time.monotonic()
    deadline = t_start + args.seconds if args.seconds else math.inf
    credit = 0.0
    stopped_by = "?"
    try:
        while True:
            now = time.monotonic()
            credit += rate * (min(now, deadline) - last)
            last = now
            n = int(credit)
            credit -= n
            reporter.step(n)
            if stop.signum is not None:
                stopped_by = stop.name
                break
            if now >= deadline:
                stopped_by = "seconds"
                break
            if args.rate_file and now >= next_read:
                rate = r if (r := read_rate(args.rate_file)) is not None else rate
                next_read = now + RATE_FILE_EVERY_S
            time.sleep(max(min(TICK_S, deadline - now), 0.0))
    finally:
        t_end = time.monotonic()
        reporter.close()
        stop.restore()
    seconds = t_end - t_start
    summary = {
        "event": "summary",
        "samples": reporter.samples,
        "seconds": round(seconds, 3),
        "samples_per_s": round(reporter.samples / seconds, 2) if seconds > 0 else 0.0,
        "rate": rate,
        "stopped_by": stopped_by,
        "pid": os.getpid(),
    }
    print(json.dumps(summary), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
