"""A script of bench/ imported as a module, for the tests that check it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def load_bench(script: str, name: str | None = None) -> ModuleType:
    """``bench/<script>.py`` as module ``name`` (default: the script's), registered in
    sys.modules (its dataclasses look themselves up there); loaded once per name."""
    name = name or script
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{script}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
