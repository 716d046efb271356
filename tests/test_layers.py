"""The layout shows the architecture: each layer imports without the ones after it
(README, "Architecture"). Every module of a layer is imported in a fresh interpreter,
and no module of a later layer may come with them (imports inside functions, made when
they run, are not seen here)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FORBIDDEN = {
    "workload": ["policy", "cycle", "sim", "runtime", "slurm", "replay"],
    "policy": ["cycle", "sim", "runtime", "slurm", "replay"],
    "cycle": ["sim", "runtime", "slurm", "replay"],
    "sim": ["runtime", "slurm", "replay"],
    "runtime": ["sim", "slurm", "replay"],
    "slurm": ["sim", "replay"],
}

CODE = """
import importlib, json, pkgutil, sys
layer = sys.argv[1]
pkg = importlib.import_module(f"coda.{layer}")
for m in pkgutil.walk_packages(pkg.__path__, f"coda.{layer}."):
    importlib.import_module(m.name)
print(json.dumps(sorted({m.split(".")[1] for m in sys.modules if m.count(".") >= 1
                         and m.startswith("coda.")})))
"""


@pytest.mark.parametrize("layer", list(FORBIDDEN))
def test_a_layer_imports_without_the_ones_after_it(layer: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE, layer], capture_output=True, text=True, check=True
    )
    bad = set(json.loads(out.stdout)) & set(FORBIDDEN[layer])
    assert not bad, f"coda.{layer} imports coda.{', coda.'.join(sorted(bad))}"
