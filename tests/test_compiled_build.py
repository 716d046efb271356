"""The compiled build (setup.py, bench/build-compiled) makes the same decisions as the
pure-Python one: the same simulations, run in each, give the same per-job table (every
job's start, end, cores at start and settled, preemptions, shrinks, queued time and
wait reason), the same time series and the same summary, and does the same work where a
cost is counted (the static-filter calls of the can-it-ever-fit check).

Needs the compiled build's interpreter in CODA_COMPILED_PYTHON (CI builds one and sets
it, with CODA_REQUIRE_COMPILED=1 so that a missing build fails instead of skipping).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from compiled_case import source_digest

CASE = Path(__file__).with_name("compiled_case.py")
SRC = Path(__file__).resolve().parent.parent / "src" / "coda"


def _compiled_python() -> str:
    path = os.environ.get("CODA_COMPILED_PYTHON", "")
    if not path:
        if os.environ.get("CODA_REQUIRE_COMPILED") == "1":
            pytest.fail("CODA_REQUIRE_COMPILED=1 but CODA_COMPILED_PYTHON is not set")
        pytest.skip("no compiled build: set CODA_COMPILED_PYTHON (bench/build-compiled)")
    if not os.access(path, os.X_OK):
        pytest.fail(f"CODA_COMPILED_PYTHON={path!r}: not an executable")
    return path


def _run(python: str, out: Path) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    # The same out directory for both: the generated workload's path is in the summary.
    p = subprocess.run(
        [python, str(CASE), str(out)], capture_output=True, text=True, timeout=900, check=False
    )
    assert p.returncode == 0, f"{python} {CASE.name} failed:\n{p.stderr[-4000:]}"
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    return rows[0]["build"], rows[1], rows[2:]


def test_compiled_build_decides_as_the_pure_one(tmp_path: Path) -> None:
    compiled = _compiled_python()
    # Each interpreter really runs its own build (the source tree here, extension
    # modules there), so the comparison cannot pass by comparing one with itself; and
    # the compiled one was built from this source (a stale build would compare old code).
    compiled_build, compiled_cost, compiled_rows = _run(compiled, tmp_path)
    assert compiled_build["kind"] == "compiled", compiled_build
    assert compiled_build["sources"] == source_digest(SRC), (
        f"{compiled} was built from other sources than {SRC}: rebuild it (bench/build-compiled)"
    )
    pure_build, pure_cost, pure_rows = _run(sys.executable, tmp_path)
    assert pure_build["kind"] == "pure", pure_build
    # The same work, not only the same answers: the can-it-ever-fit check stops at the
    # first node that fits in both builds (one static-filter call per job).
    assert compiled_cost == pure_cost, (compiled_cost, pure_cost)
    assert pure_cost["never"] == 0 and pure_cost["calls"] == pure_cost["jobs"], pure_cost
    assert len(pure_rows) == len(compiled_rows) >= 10
    for a, b in zip(pure_rows, compiled_rows, strict=True):
        where = f"{a['case']} {a['policy']}"
        assert (a["case"], a["policy"]) == (b["case"], b["policy"])
        assert a["jobs"] == b["jobs"], f"{where}: per-job tables or time series differ"
        assert a["summary"] == b["summary"], f"{where}: summaries differ"


def test_the_compiled_options_cross_a_process_pool(tmp_path: Path) -> None:
    # `--workers 2` sends each run's config to a spawned worker by pickle: the compiled
    # PolicyOptions (no __dict__, setattr refused) must come back equal.
    compiled = _compiled_python()
    code = (
        "import pickle, sys\n"
        "from coda.study.config import RunConfig\n"
        "from coda.experiment.paper import POLICY_OPTIONS\n"
        "c = RunConfig(trace=None, cluster='paper', seed=3, policy=POLICY_OPTIONS)\n"
        "back = pickle.loads(pickle.dumps(c))\n"
        "assert back == c and back.policy.estimates == 'time-limits', back\n"
        "print(type(c.policy).__module__, 'ok')\n"
    )
    p = subprocess.run(
        [compiled, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-2000:]
