"""Clusters: from a node-list CSV or a compact spec such as ``48x8g96c,16x0g96c``.

Spec grammar, comma-separated groups: ``<count>x<gpus>g<cores>c[<mem>m][<bw>b]``
where ``mem`` is GiB per node (omitted: memory is not a constraint) and ``bw`` is
the node's memory bandwidth in GB/s (omitted: ``bw_per_core`` x cores).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from coda.workload import limits
from coda.workload.jobs import TraceFormatError
from coda.workload.traces._common import FieldParser, clip, iter_rows

# A two-socket server with ~96 cores streams ~190 GB/s: about 2 GB/s per core.
# The profile set may override this (ProfileSet.node_bw_gbps_per_core).
DEFAULT_BW_PER_CORE = 2.0

_GROUP = re.compile(
    r"^\s*(?P<count>\d+)\s*x\s*(?P<gpus>\d+)g(?P<cores>\d+)c"
    r"(?:(?P<mem>\d+)m)?(?:(?P<bw>\d+(?:\.\d+)?)b)?\s*$",
    re.IGNORECASE | re.ASCII,  # \d: ASCII digits only (not ٣ or full-width ones)
)
_SPEC = limits.FIELDS["cluster spec"]
_NODE_LIST = limits.FIELDS["node list"]
NODE_LIST_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu")


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    gpus: int
    cores: int
    mem_mib: int  # 0 = memory not constrained
    bw_gbps: float
    gpu_model: str = ""


@dataclass(frozen=True)
class ClusterSpec:
    label: str  # the spec text, or the node-list file it came from
    nodes: tuple[NodeSpec, ...]

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def cores(self) -> int:
        return sum(n.cores for n in self.nodes)

    @property
    def gpu_nodes(self) -> int:
        return sum(1 for n in self.nodes if n.gpus > 0)

    def describe(self) -> dict[str, str | int]:
        shapes = Counter((n.gpus, n.cores) for n in self.nodes)
        compact = ",".join(
            f"{k}x{g}g{c}c" for (g, c), k in sorted(shapes.items(), key=lambda kv: -kv[1])
        )
        return {
            "spec": self.label,
            "shape": compact,
            "nodes": len(self.nodes),
            "gpu_nodes": self.gpu_nodes,
            "cpu_nodes": len(self.nodes) - self.gpu_nodes,
            "gpus": self.gpus,
            "cores": self.cores,
        }


def _spec_value(text: str, group: str, part: str, digits: str) -> float:
    """One number of a spec group, range-checked (limits.FIELDS['cluster spec'])."""
    lim = _SPEC[part]
    # Many digits are out of range anyway; checking the length first keeps int() cheap.
    v = float(digits) if len(digits) <= 20 else float("inf")
    if not lim.holds(v):
        raise ValueError(
            f"cluster spec {clip(text)}: group {clip(group.strip())}: {part} must be in "
            f"[{lim.lo:g}, {lim.hi:g}] ({lim.unit}), got {clip(digits)}"
        )
    return v


def parse_cluster_spec(text: str, bw_per_core: float = DEFAULT_BW_PER_CORE) -> ClusterSpec:
    """Parse ``48x8g96c,16x0g96c`` (see module docstring). Errors name the bad group."""
    groups = [g for g in text.split(",") if g.strip()]
    if not groups:
        raise ValueError(f"empty cluster spec {clip(text)}; expected e.g. '48x8g96c,16x0g96c'")
    shapes: list[tuple[int, int, int, int, float]] = []
    total = 0
    for group in groups:
        m = _GROUP.match(group)
        if not m:
            raise ValueError(
                f"bad cluster spec group {clip(group.strip())} in {clip(text)}; expected "
                "<count>x<gpus>g<cores>c[<mem GiB>m][<bandwidth GB/s>b], "
                "e.g. 48x8g96c or 4x8g96c512m200b"
            )
        count = int(_spec_value(text, group, "count", m["count"]))
        gpus = int(_spec_value(text, group, "gpus", m["gpus"]))
        cores = int(_spec_value(text, group, "cores", m["cores"]))
        mem = int(_spec_value(text, group, "mem", m["mem"])) * 1024 if m["mem"] else 0
        if m["bw"]:
            bw = _spec_value(text, group, "bw", m["bw"])
        else:
            bw = bw_per_core * cores
            if not _SPEC["bw"].holds(bw):
                raise ValueError(
                    f"cluster spec group {clip(group.strip())}: bandwidth per core "
                    f"{bw_per_core!r} x {cores} cores is outside {_SPEC['bw'].lo:g}.."
                    f"{_SPEC['bw'].hi:g} GB/s"
                )
        total += count
        if total > limits.MAX_NODES:  # checked before any node is made
            raise ValueError(f"cluster spec {clip(text)} has more than {limits.MAX_NODES} nodes")
        shapes.append((count, gpus, cores, mem, bw))
    nodes: list[NodeSpec] = []
    for count, gpus, cores, mem, bw in shapes:
        start = len(nodes)
        nodes.extend(NodeSpec(f"n{start + i:05d}", gpus, cores, mem, bw) for i in range(count))
    return ClusterSpec(label=text.strip(), nodes=tuple(nodes))


def load_node_list(path: str | Path, bw_per_core: float = DEFAULT_BW_PER_CORE) -> ClusterSpec:
    """Read an Alibaba-style node list: ``sn,cpu_milli,memory_mib,gpu[,model]``.

    Every bad row is a ValueError (TraceFormatError) naming file, line and column;
    ranges are limits.FIELDS['node list'], and names must be unique.
    """
    path = Path(path)
    if not 0 < bw_per_core < float("inf"):
        raise ValueError(f"bandwidth per core must be > 0 and finite, got {bw_per_core!r}")
    f = FieldParser(path, _NODE_LIST)
    nodes: list[NodeSpec] = []
    names: set[str] = set()
    for line, row in iter_rows(path, NODE_LIST_COLUMNS, ("model",)):
        f.line = line
        if not isinstance(row, dict):
            raise row
        name = f.ident(row, "sn")
        if name in names:
            raise f.error("sn", f"node name {clip(name)} appears twice")
        cores = f.integer(row, "cpu_milli") // 1000
        gpus = f.integer(row, "gpu")
        mem = f.integer(row, "memory_mib")
        bw = bw_per_core * cores
        if not _SPEC["bw"].holds(bw):
            raise f.error("cpu_milli", f"node bandwidth {bw:g} GB/s is outside the range")
        if len(nodes) >= limits.MAX_NODES:
            raise f.error(None, f"node list has more than {limits.MAX_NODES} nodes")
        names.add(name)
        nodes.append(NodeSpec(name, gpus, cores, mem, bw, f.text(row, "model")))
    if not nodes:
        raise TraceFormatError(str(path), 1, None, "node list has no nodes")
    return ClusterSpec(label=str(path), nodes=tuple(nodes))


def resample_cluster(base: ClusterSpec, n_nodes: int, seed: int) -> ClusterSpec:
    """A cluster of n_nodes drawn (with replacement) from base's node shapes."""
    import numpy as np

    if not 1 <= n_nodes <= limits.MAX_NODES or not base.nodes:
        raise ValueError(
            f"a resampled cluster needs 1..{limits.MAX_NODES} nodes from a nonempty base, "
            f"got {n_nodes!r}"
        )

    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(base.nodes), size=n_nodes)
    nodes = tuple(
        NodeSpec(f"r{i:06d}", s.gpus, s.cores, s.mem_mib, s.bw_gbps, s.gpu_model)
        for i, s in enumerate(base.nodes[j] for j in pick.tolist())
    )
    return ClusterSpec(
        label=f"{n_nodes} nodes resampled from {base.label} (seed {seed})", nodes=nodes
    )
