"""Build hook: with CODA_COMPILE=1 the decision code and the simulator are compiled
with mypyc (the compiler that ships with mypy), for long simulations; without it the
package is pure Python (the default, and what the tests and editable installs use).

    python3 -m venv .venv-compiled
    .venv-compiled/bin/pip install 'mypy>=1.10' 'setuptools>=64'
    CODA_COMPILE=1 .venv-compiled/bin/pip install --no-build-isolation .

Both builds make the same decisions: tests/test_compiled_build.py runs the same
simulations in each and compares every job's start, end and cores (CI builds both).
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
# Which modules are compiled is said once, in the package (it imports nothing of CODA's).
BUILD = runpy.run_path(str(ROOT / "src" / "coda" / "build_kind.py"))
# No fused multiply-add: the compiled arithmetic rounds as CPython's does on every host.
CFLAGS = ["-ffp-contract=off"]


ext_modules = []
flag = os.environ.get("CODA_COMPILE", "")
if flag not in ("", "0", "1"):
    sys.exit(f"CODA_COMPILE={flag!r}: expected 1 (compile with mypyc) or 0 / unset (pure)")
if flag == "1" and any(cmd in sys.argv for cmd in ("editable_wheel", "develop")):
    # An editable build compiles in place: the .so files would land in src/ and every
    # "pure" run of the source tree would load them.
    sys.exit("CODA_COMPILE=1: not for editable installs; use bench/build-compiled")
if flag == "1":
    try:
        from mypyc.build import mypycify
    except ImportError:
        sys.exit(
            "CODA_COMPILE=1: mypyc not found; install mypy into this environment and "
            "build with pip install --no-build-isolation"
        )
    sources = [str(f) for f in BUILD["compiled_files"](ROOT / "src" / "coda")]
    ext_modules = mypycify(sources, opt_level="3")
    for ext in ext_modules:
        ext.extra_compile_args = [*ext.extra_compile_args, *CFLAGS]

setup(ext_modules=ext_modules)
