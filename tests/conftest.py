"""Fixtures every test file may use, and a check that the tests run pure Python."""

from pathlib import Path

import pytest
from click.testing import CliRunner
from slurm_cluster import cluster

__all__ = ["cluster", "runner"]


@pytest.fixture
def runner() -> CliRunner:
    """A click test runner for the `coda` command line."""
    return CliRunner()


SRC = Path(__file__).resolve().parent.parent / "src" / "coda"


def pytest_sessionstart(session: pytest.Session) -> None:
    # Compiled modules in the source tree (an in-place mypyc build) would be loaded
    # instead of the .py files: the tests would check code other than the source.
    stray = sorted(str(p.relative_to(SRC.parent)) for p in SRC.rglob("*.so"))
    if stray:
        pytest.exit(
            f"compiled modules in the source tree ({', '.join(stray[:3])}"
            f"{', ...' if len(stray) > 3 else ''}): remove them; the compiled build "
            "belongs in its own environment (bench/build-compiled)",
            returncode=4,
        )
