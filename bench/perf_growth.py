#!/usr/bin/env python3
"""Where the extra time per job goes between two sizes: CPU time per job by compiled
function, from two ``perf record --call-graph dwarf`` profiles of the compiled build.

Each sample is charged to the innermost function of CODA's compiled build on its stack
(mypyc names them ``CPyDef_<module>___<function>``), so the time a dictionary lookup or
a comparison takes is charged to the function that asked for it; samples with no such
frame are charged to ``(outside compiled code)``. Profile each case in one process:

    perf record -F 199 -e cpu-clock --call-graph dwarf,16384 -o perf-100k.data -- \\
        .venv-compiled/bin/python bench/bench_sim.py --child \\
        '{"kind": "large", "case": "100k/1k", "policy": "coda", "jobs": 100000,
          "nodes": 1000, "load": 1.0, "seed": 0}'
    (the same for 1M jobs on 10,000 nodes, into perf-1m.data)
    python3 bench/perf_growth.py perf-100k.data 100000 perf-1m.data 1000000

A ``.data`` file is read through ``perf script``; any other file is taken to be its
output already. Prints the top functions by growth in µs per job, each one's µs per job
at both sizes, and the totals (the preparation of the case included).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NoReturn

OUTSIDE = "(outside compiled code)"
# A sample's header: "comm pid [cpu] time: period event:"; its frames follow, indented.
_HEADER = re.compile(r"^\S.*?\s(\d+)\s+[\w:-]+:\s*$")
_FRAME = re.compile(r"^\s+[0-9a-f]+\s+(\S+)")
_COMPILED = re.compile(r"^CPyDef_(.+?)(?:\+0x[0-9a-f]+)?$")


class BadProfile(ValueError):
    pass


def charge(lines: Iterable[str]) -> Counter[str]:
    """Nanoseconds of samples per innermost compiled function (``perf script`` text)."""
    out: Counter[str] = Counter()
    period = 0
    fn: str | None = None
    in_sample = False
    for line in lines:
        if not line.strip():
            if in_sample:
                out[fn or OUTSIDE] += period
            in_sample, fn = False, None
            continue
        head = _HEADER.match(line)
        if head is not None and not line[0].isspace():
            if in_sample:
                out[fn or OUTSIDE] += period
            period, fn, in_sample = int(head.group(1)), None, True
            continue
        frame = _FRAME.match(line)
        if frame is None or not in_sample:
            raise BadProfile(f"not perf script output: {line.strip()[:80]!r}")
        if fn is None:
            m = _COMPILED.match(frame.group(1))
            if m is not None:
                fn = m.group(1)
    if in_sample:
        out[fn or OUTSIDE] += period
    if not out:
        raise BadProfile("no samples")
    return out


def _script_lines(path: Path) -> Iterator[str]:
    if path.suffix != ".data":
        with path.open(encoding="utf-8", errors="replace") as f:
            yield from f
        return
    proc = subprocess.Popen(
        ["perf", "script", "-i", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        errors="replace",
    )
    assert proc.stdout is not None
    try:
        yield from proc.stdout
    finally:
        proc.stdout.close()
        if proc.wait() != 0:
            raise BadProfile(f"perf script -i {path} failed (exit {proc.returncode})")


def growth_rows(
    small: Counter[str], small_jobs: int, large: Counter[str], large_jobs: int
) -> list[tuple[str, float, float]]:
    """(function, µs per job at the small size, at the large), by growth, largest first."""
    rows = [(f, small[f] / 1e3 / small_jobs, large[f] / 1e3 / large_jobs) for f in small | large]
    rows.sort(key=lambda r: (r[1] - r[2], r[0]))
    return rows


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        self.exit(2, f"perf_growth: {message}\n")


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a job count: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"a job count is at least 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("small", type=Path, help="profile of the smaller case")
    ap.add_argument("small_jobs", type=_jobs)
    ap.add_argument("large", type=Path, help="profile of the larger case")
    ap.add_argument("large_jobs", type=_jobs)
    ap.add_argument("--top", type=_jobs, default=25, help="functions shown (default 25)")
    a = ap.parse_args(argv)
    try:
        small = charge(_script_lines(a.small))
        large = charge(_script_lines(a.large))
    except (OSError, BadProfile) as e:
        print(f"perf_growth: {e}", file=sys.stderr)
        return 2
    ts = sum(small.values()) / 1e3 / a.small_jobs
    tl = sum(large.values()) / 1e3 / a.large_jobs
    print(f"| function | µs per job, {a.small_jobs:,} jobs | {a.large_jobs:,} jobs | growth |")
    print("|---|---:|---:|---:|")
    print(f"| all samples | {ts:.1f} | {tl:.1f} | {tl - ts:+.1f} |")
    for fn, s, g in growth_rows(small, a.small_jobs, large, a.large_jobs)[: a.top]:
        print(f"| `{fn}` | {s:.1f} | {g:.1f} | {g - s:+.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
