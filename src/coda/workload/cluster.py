"""Clusters: from a node-list CSV or a compact spec such as ``48x8g96c,16x0g96c``.

Spec grammar, comma-separated groups: ``<count>x<gpus>g<cores>c[<mem>m][<bw>b]``
where ``mem`` is GiB per node (omitted: memory is not a constraint) and ``bw`` is
the node's memory bandwidth in GB/s (omitted: ``bw_per_core`` x cores).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# A two-socket server with ~96 cores streams ~190 GB/s: about 2 GB/s per core.
# The profile set may override this (ProfileSet.node_bw_gbps_per_core).
DEFAULT_BW_PER_CORE = 2.0

_GROUP = re.compile(
    r"^\s*(?P<count>\d+)\s*x\s*(?P<gpus>\d+)g(?P<cores>\d+)c"
    r"(?:(?P<mem>\d+)m)?(?:(?P<bw>\d+(?:\.\d+)?)b)?\s*$",
    re.IGNORECASE,
)


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

    def describe(self) -> dict:
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


def parse_cluster_spec(text: str, bw_per_core: float = DEFAULT_BW_PER_CORE) -> ClusterSpec:
    """Parse ``48x8g96c,16x0g96c`` (see module docstring). Errors name the bad group."""
    nodes: list[NodeSpec] = []
    groups = [g for g in text.split(",") if g.strip()]
    if not groups:
        raise ValueError(f"empty cluster spec {text!r}; expected e.g. '48x8g96c,16x0g96c'")
    for group in groups:
        m = _GROUP.match(group)
        if not m:
            raise ValueError(
                f"bad cluster spec group {group.strip()!r} in {text!r}; expected "
                "<count>x<gpus>g<cores>c[<mem GiB>m][<bandwidth GB/s>b], "
                "e.g. 48x8g96c or 4x8g96c512m200b"
            )
        count, gpus, cores = int(m["count"]), int(m["gpus"]), int(m["cores"])
        if count < 1 or cores < 1:
            raise ValueError(f"cluster spec group {group.strip()!r}: count and cores must be >= 1")
        mem = int(m["mem"]) * 1024 if m["mem"] else 0
        bw = float(m["bw"]) if m["bw"] else bw_per_core * cores
        start = len(nodes)
        nodes.extend(NodeSpec(f"n{start + i:05d}", gpus, cores, mem, bw) for i in range(count))
    return ClusterSpec(label=text.strip(), nodes=tuple(nodes))


def load_node_list(path: str | Path, bw_per_core: float = DEFAULT_BW_PER_CORE) -> ClusterSpec:
    """Read an Alibaba-style node list: ``sn,cpu_milli,memory_mib,gpu,model``."""
    path = Path(path)
    nodes: list[NodeSpec] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        need = {"sn", "cpu_milli", "memory_mib", "gpu"}
        missing = need - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}:1: node list lacks column(s) {sorted(missing)}")
        for line, row in enumerate(reader, start=2):
            try:
                cores = int(row["cpu_milli"]) // 1000
                gpus = int(row["gpu"])
                mem = int(row["memory_mib"])
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{line}: bad node row {row!r}: {e}") from None
            if cores < 1 or gpus < 0:
                raise ValueError(f"{path}:{line}: node needs >= 1 core and >= 0 GPUs, got {row!r}")
            nodes.append(
                NodeSpec(row["sn"], gpus, cores, mem, bw_per_core * cores, row.get("model") or "")
            )
    if not nodes:
        raise ValueError(f"{path}: node list has no nodes")
    return ClusterSpec(label=str(path), nodes=tuple(nodes))


def resample_cluster(base: ClusterSpec, n_nodes: int, seed: int) -> ClusterSpec:
    """A cluster of n_nodes drawn (with replacement) from base's node shapes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(base.nodes), size=n_nodes)
    nodes = tuple(
        NodeSpec(f"r{i:06d}", s.gpus, s.cores, s.mem_mib, s.bw_gbps, s.gpu_model)
        for i, s in enumerate(base.nodes[j] for j in pick.tolist())
    )
    return ClusterSpec(
        label=f"{n_nodes} nodes resampled from {base.label} (seed {seed})", nodes=nodes
    )
