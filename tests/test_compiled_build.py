"""The compiled build (setup.py, bench/build-compiled) makes the same decisions as the
pure-Python one: the same simulations, run in each, give every job the same start,
end, cores, preemptions, shrinks and wait reason, and the same summary.

Needs the compiled build's interpreter in CODA_COMPILED_PYTHON (CI builds one and sets
it, with CODA_REQUIRE_COMPILED=1 so that a missing build fails instead of skipping).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).with_name("compiled_case.py")


def _compiled_python() -> str:
    path = os.environ.get("CODA_COMPILED_PYTHON", "")
    if not path:
        if os.environ.get("CODA_REQUIRE_COMPILED") == "1":
            pytest.fail("CODA_REQUIRE_COMPILED=1 but CODA_COMPILED_PYTHON is not set")
        pytest.skip("no compiled build: set CODA_COMPILED_PYTHON (bench/build-compiled)")
    if not os.access(path, os.X_OK):
        pytest.fail(f"CODA_COMPILED_PYTHON={path!r}: not an executable")
    return path


def _rows(python: str, out: Path) -> list[dict[str, object]]:
    # The same out directory for both: the generated workload's path is in the summary.
    p = subprocess.run(
        [python, str(CASE), str(out)], capture_output=True, text=True, timeout=900, check=False
    )
    assert p.returncode == 0, f"{python} {CASE.name} failed:\n{p.stderr[-4000:]}"
    return [json.loads(line) for line in p.stdout.splitlines()]


def test_compiled_build_decides_as_the_pure_one(tmp_path: Path) -> None:
    compiled = _compiled_python()
    pure_rows = _rows(sys.executable, tmp_path)
    compiled_rows = _rows(compiled, tmp_path)
    pure_build, compiled_build = pure_rows.pop(0)["build"], compiled_rows.pop(0)["build"]
    assert isinstance(pure_build, dict) and isinstance(compiled_build, dict)
    # Each interpreter really runs its own build (an editable install of the source here,
    # extension modules there), so the comparison cannot pass by comparing one with itself.
    assert set(pure_build.values()) == {".py"}, pure_build
    assert set(compiled_build.values()) == {".so"}, compiled_build
    assert len(pure_rows) == len(compiled_rows) >= 10
    for a, b in zip(pure_rows, compiled_rows, strict=True):
        assert (a["case"], a["policy"]) == (b["case"], b["policy"])
        assert a["jobs"] == b["jobs"], f"{a['case']} {a['policy']}: jobs' outcomes differ"
        assert a["summary"] == b["summary"], f"{a['case']} {a['policy']}: summaries differ"
