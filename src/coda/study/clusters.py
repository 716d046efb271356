"""``--cluster``'s text to a ClusterSpec: the bundled node list (whole or a fraction
of it), the paper's cluster, a node-list CSV or a compact spec."""

from __future__ import annotations

from pathlib import Path

from coda.study.config import PAPER_CLUSTER
from coda.workload.cluster import (
    ClusterSpec,
    NodeSpec,
    load_node_list,
    parse_cluster_spec,
)
from coda.workload.limits import plain_number
from coda.workload.traces import bundled_nodes_path


def resolve_cluster(text: str, bw_per_core: float) -> ClusterSpec:
    """``openb`` (the bundled node list), ``openb:F`` (a fraction F of it, same
    shape mix), ``paper`` (the paper's cluster, PAPER_CLUSTER), a path to a node-list
    CSV, or a compact spec like ``48x8g96c``."""
    if text == "paper":
        spec = parse_cluster_spec(PAPER_CLUSTER, bw_per_core)
        return ClusterSpec(label="paper", nodes=spec.nodes)
    if text == "openb" or text.startswith("openb:"):
        full = load_node_list(bundled_nodes_path(), bw_per_core)
        if text == "openb":
            return ClusterSpec(label="openb", nodes=full.nodes)
        try:
            given = text.split(":", 1)[1]
            if not plain_number(given):
                raise ValueError(given)
            frac = float(given)
        except ValueError:
            raise ValueError(
                f"bad cluster {text!r}: expected openb:<fraction>, e.g. openb:0.1"
            ) from None
        if not 0 < frac <= 1:
            raise ValueError(f"bad cluster {text!r}: the fraction must be in (0, 1]")
        return scale_node_list(full, frac, label=text)
    try:
        is_file = Path(text).is_file()
    except OSError:  # a name the OS refuses as a path (too long): it is read as a spec
        is_file = False
    if is_file:
        return load_node_list(text, bw_per_core)
    try:
        return parse_cluster_spec(text, bw_per_core)
    except ValueError:
        try:
            elsewise = Path(text).exists()
        except OSError:
            elsewise = False
        if elsewise:  # a directory or FIFO meant as a node list: not its syntax's fault
            raise ValueError(
                f"cluster {text!r}: not a regular file (a directory, FIFO or device)"
            ) from None
        raise


def scale_node_list(full: ClusterSpec, frac: float, label: str) -> ClusterSpec:
    """Keep round(frac x count) nodes of every node shape, in file order."""
    groups: dict[tuple[int, int, int, str], list[NodeSpec]] = {}
    for node in full.nodes:
        groups.setdefault((node.gpus, node.cores, node.mem_mib, node.gpu_model), []).append(node)
    kept = [n for members in groups.values() for n in members[: round(len(members) * frac)]]
    if not kept:
        raise ValueError(f"cluster {label!r} keeps no nodes; use a larger fraction")
    order = {n.name: i for i, n in enumerate(full.nodes)}
    kept.sort(key=lambda n: order[n.name])
    return ClusterSpec(label=label, nodes=tuple(kept))
