"""A memory-bandwidth-hungry CPU job: large array copies, forever or for a while.

Run as ``python -m coda.runtime.workloads.membw``. Each of ``--threads`` processes
(the main one and T-1 forked children) owns two ``--mib`` MiB buffers and copies one
into the other with ``np.copyto``, back and forth; ``--reduce`` adds a read-only sum
over the copy each time. Buffers much larger than the last-level cache make every
copy stream from and to DRAM, so the job slows whatever shares the memory bus or
the cache with it.

Progress (``CODA_PROGRESS_FILE``): samples = MiB copied, all processes together.
Output: a JSON start line (not with ``--quiet``), the copy rate in GB/s (bytes
copied per second; each byte is read once and written once) about every 5 s (not
with ``--quiet``), and always a JSON summary as the last line. Exit status 0 after
``--seconds`` or on SIGTERM/SIGINT (children stopped and joined first); 1 if a
child dies; 2 for bad options. Children are forked: they inherit the cgroup and
cpuset; they ignore SIGINT and SIGTERM (the main process stops them) and exit by
themselves if the main process is gone.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Sequence
from multiprocessing.context import ForkProcess

import numpy as np

from coda.runtime.progress import Reporter
from coda.runtime.workloads._common import StopSignals, int_at_least, number_above

STATUS_INTERVAL_S = 5.0
MIB = 2**20


class Copier:
    """Two buffers of ``mib`` MiB; :meth:`step` copies one into the other (and back the
    next time), optionally followed by a read-reduce pass."""

    def __init__(self, mib: int, reduce: bool = False):
        n = mib * MIB // 8
        self.src = np.ones(n, dtype=np.float64)
        self.dst = np.zeros(n, dtype=np.float64)  # np.zeros maps lazily: touch it
        self.dst.fill(2.0)
        self.reduce = reduce
        self.checksum = 0.0

    def step(self) -> None:
        np.copyto(self.dst, self.src)
        if self.reduce:
            self.checksum += float(self.dst.sum())
        self.src, self.dst = self.dst, self.src


def _child(
    index: int,
    mib: int,
    reduce: bool,
    counts: ctypes.Array[ctypes.c_longlong],
    stop_flag: ctypes.c_byte,
    parent_pid: int,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    copier = Copier(mib, reduce)
    n = 0
    while not stop_flag.value:
        copier.step()
        n += 1
        counts[index] = n
        if n % 16 == 0 and os.getppid() != parent_pid:
            return


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m coda.runtime.workloads.membw",
        description="A memory-bandwidth-hungry CPU job: numpy copies between large buffers. "
        "Reports MiB copied to CODA_PROGRESS_FILE.",
    )
    p.add_argument(
        "--mib", type=int_at_least(1), default=256, help="size of each buffer in MiB (default 256)"
    )
    p.add_argument(
        "--seconds", type=number_above(0, strict=True), help="stop after this many seconds"
    )
    p.add_argument(
        "--threads",
        type=int_at_least(1),
        default=1,
        help="copying processes, each with its own buffers (default 1)",
    )
    p.add_argument("--reduce", action="store_true", help="add a read-only sum pass after each copy")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no start and rate lines (the summary is still printed)",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 0
    need = 2 * args.mib * MIB * args.threads
    if total and need > total:
        parser.error(
            f"{args.threads} x 2 buffers of {args.mib} MiB need {need / 2**30:.1f} GiB, "
            f"more than the machine's {total / 2**30:.1f} GiB"
        )
    return args


def run(args: argparse.Namespace) -> int:
    stop = StopSignals()
    ctx = mp.get_context("fork")
    counts = ctx.RawArray("q", args.threads)
    stop_flag = ctx.RawValue("b", 0)
    procs: list[ForkProcess] = []
    reporter: Reporter | None = None
    error: str | None = None
    stopped_by = "?"
    reported = 0
    t_start = t_end = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        for k in range(1, args.threads):
            p = ctx.Process(
                target=_child,
                args=(k, args.mib, args.reduce, counts, stop_flag, os.getpid()),
                name=f"coda-membw-{k}",
                daemon=True,
            )
            p.start()
            procs.append(p)
        copier = Copier(args.mib, args.reduce)
        reporter = Reporter()
        if not args.quiet:
            start = {
                "event": "start",
                "pid": os.getpid(),
                "child_pids": [p.pid for p in procs],
                "mib": args.mib,
                "threads": args.threads,
            }
            print(json.dumps(start), flush=True)
        t_start = time.monotonic()
        deadline = t_start + args.seconds if args.seconds else math.inf
        last_t, last_mib = t_start, 0
        n = 0
        while True:
            if stop.signum is not None:
                stopped_by = stop.name
                break
            now = time.monotonic()
            if now >= deadline:
                stopped_by = "seconds"
                break
            for k, p in enumerate(procs, start=1):
                if p.exitcode is not None:
                    error = f"copy process {k} (pid {p.pid}) ended with status {p.exitcode}"
                    break
            if error:
                stopped_by = "error"
                break
            copier.step()
            n += 1
            counts[0] = n
            total = sum(counts) * args.mib
            reporter.step(total - reported)
            reported = total
            now = time.monotonic()
            if not args.quiet and now - last_t >= STATUS_INTERVAL_S:
                rate = (total - last_mib) * MIB / (now - last_t) / 1e9
                print(f"membw: {rate:.2f} GB/s copied", flush=True)
                last_t, last_mib = now, total
    finally:
        t_end = time.monotonic()
        final = sum(counts) * args.mib  # copies finished by t_end
        stop_flag.value = 1
        for p in procs:
            p.join(5.0)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(2.0)
        if reporter is not None:
            reporter.step(max(final - reported, 0))
            reporter.close()
        reported = max(final, reported)
        stop.restore()

    seconds = t_end - t_start
    summary = {
        "event": "summary",
        "mib_copied": reported,
        "seconds": round(seconds, 3),
        "gb_per_s": round(reported * MIB / seconds / 1e9, 3) if seconds > 0 else 0.0,
        "mib": args.mib,
        "threads": args.threads,
        "reduce": args.reduce,
        "stopped_by": stopped_by,
        "pid": os.getpid(),
        "child_pids": [p.pid for p in procs],
    }
    if error:
        summary["error"] = error
    print(json.dumps(summary), flush=True)
    if error:
        print(f"membw: error: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
