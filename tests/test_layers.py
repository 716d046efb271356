"""The layout shows the architecture: each layer imports without the ones after it
(docs/architecture.md). Every module of a layer is imported in a fresh interpreter,
and no module of a later layer may come with them (imports inside functions, made when
they run, are not seen here)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

# Every layer above ``experiment`` (and ``experiment`` itself) never imports the reports,
# the experiments or the commands: they sit on top (``report`` reads ``experiment``).
TOP = ["report", "experiment", "cli"]
FORBIDDEN = {
    "workload": ["policy", "cycle", "sim", "study", "runtime", "slurm", "replay", *TOP],
    "policy": ["control", "cycle", "sim", "study", "runtime", "slurm", "replay", *TOP],
    "control": ["cycle", "sim", "study", "runtime", "slurm", "replay", *TOP],
    "cycle": ["sim", "study", "runtime", "slurm", "replay", *TOP],
    "sim": ["study", "runtime", "slurm", "replay", *TOP],
    "study": ["runtime", "slurm", "replay", *TOP],
    "experiment": ["report", "runtime", "slurm", "replay", "cli"],
    "runtime": ["sim", "study", "slurm", "replay", *TOP],
    "slurm": ["sim", "study", "replay", *TOP],
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


@pytest.mark.slow
@pytest.mark.parametrize("layer", list(FORBIDDEN))
def test_a_layer_imports_without_the_ones_after_it(layer: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE, layer], capture_output=True, text=True, check=True
    )
    bad = set(json.loads(out.stdout)) & set(FORBIDDEN[layer])
    assert not bad, f"coda.{layer} imports coda.{', coda.'.join(sorted(bad))}"


# ------------------------------------------------------------ the import graph
SRC = Path(__file__).resolve().parents[1] / "src"


class ImportGraph:
    """Every import of every module under src/coda (at module level, inside functions
    and under TYPE_CHECKING alike: each is a dependency a reader must follow)."""

    def __init__(self, root: Path) -> None:
        self.modules: dict[str, Path] = {}
        for path in sorted((root / "coda").rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.modules[name] = path
        self.edges: dict[str, set[str]] = {m: set() for m in self.modules}
        self.private: set[str] = set()
        for name, path in self.modules.items():
            self._read(name, path)

    def _read(self, name: str, path: Path) -> None:
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._edge(name, alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in self.modules:
                        self._edge(name, sub)
                        continue
                    self._edge(name, base)
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and base in self.modules and base != name:
                        self.private.add(f"{name} <- {base}.{alias.name}")

    def _edge(self, src: str, dst: str) -> None:
        if dst in self.modules and dst != src:
            self.edges[src].add(dst)

    def circles(self) -> set[frozenset[str]]:
        """The strongly connected groups of more than one module (Tarjan's)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on: set[str] = set()
        out: set[frozenset[str]] = set()

        def visit(v: str) -> None:
            index[v] = low[v] = len(index)
            stack.append(v)
            on.add(v)
            for w in sorted(self.edges[v]):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                group = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.add(w)
                    if w == v:
                        break
                if len(group) > 1:
                    out.add(frozenset(group))

        for v in sorted(self.modules):
            if v not in index:
                visit(v)
        return out


def test_the_graph_reader_finds_circles_and_private_names(tmp_path: Path) -> None:
    pkg = tmp_path / "coda"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from coda.a.y import _hidden, shown\n")
    (pkg / "a" / "y.py").write_text(
        "def f():\n    from . import x\n    return x\n_hidden = shown = 1\n"
    )
    (pkg / "a" / "z.py").write_text("import coda.a.x\nfrom coda.a.y import __doc__\n")
    graph = ImportGraph(tmp_path)
    assert graph.circles() == {frozenset({"coda.a.x", "coda.a.y"})}
    assert graph.private == {"coda.a.x <- coda.a.y._hidden"}


def test_no_import_circle_and_no_private_name_crosses_modules() -> None:
    graph = ImportGraph(SRC)
    assert not graph.circles(), f"import circles: {graph.circles()}"
    assert not graph.private, f"private names imported from another module: {sorted(graph.private)}"
