"""Which build of CODA runs: the modules the compiled build compiles with mypyc (setup.py
reads this file, so it imports nothing of CODA's), and whether they were.

Compiled together: the scheduling cycle, the policies, the simulator and the job speed
model they call, and the Slurm controller's read path (its listing of jobs and the diff
it reads, its mirror of Slurm, the held jobs it places and their wait marks): at 10,000
nodes a restart reads 191,000 lines. The controller itself and the Slurm client stay
Python (a benchmark wraps their methods to time them). Left as Python: invariant.py
(mypyc cannot compile a subclass of AssertionError; compiled modules raise it as it
is), and result.py and paper_metrics.py, which hold and measure a run's results (not
hot) and so take what their validation accepts (numpy integers, paths) where mypyc
would enforce the annotations. A run's setup
(``coda.study``) is not compiled either.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

# Relative to the ``coda`` package directory: a folder (its .py files) or one file.
COMPILED = (
    "control", "cycle", "policy", "policy/plugins", "sim", "workload/job_perf.py",
    "slurm/listing.py", "slurm/listing_diff.py", "slurm/view.py", "slurm/wait_marks.py",
    "slurm/index.py", "slurm/ready.py", "slurm/client.py",
)  # fmt: skip
NOT_COMPILED = frozenset({"cycle/invariant.py", "sim/result.py", "sim/paper_metrics.py"})


def compiled_files(package: Path) -> list[Path]:
    """The .py files under a ``coda`` package directory that the compiled build compiles,
    in a fixed order."""
    files: list[Path] = []
    for item in COMPILED:
        p = package / item
        files += [p] if item.endswith(".py") else sorted(p.glob("*.py"))
    return [f for f in files if f.relative_to(package).as_posix() not in NOT_COMPILED]


def module_name(package: Path, file: Path) -> str:
    """The module a file under the ``coda`` package directory is (a package for its
    __init__.py)."""
    parts = file.relative_to(package).with_suffix("").parts
    return ".".join(("coda", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def build_kind() -> str:
    """The build that runs: "compiled" where every module the compiled build compiles
    loads as an extension module, "pure" where none does, else "mixed" (a broken
    install)."""
    package = Path(__file__).resolve().parent
    names = [module_name(package, f) for f in compiled_files(package)]
    spec_of = importlib.util.find_spec
    native = {not (getattr(spec_of(n), "origin", "") or "").endswith(".py") for n in names}
    return "mixed" if len(native) > 1 else "compiled" if native == {True} else "pure"
