"""The books' checks (``check_invariants`` runs): every node's GPUs, cores and memory
add up to what its jobs hold."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from coda.cycle import InvariantError
from coda.policy.state import Job, Node


def check_nodes(nodes: Iterable[Node], grant_pn: Callable[[Job], int], fixed_grants: bool) -> None:
    """``grant_pn``: the cores per node a job was granted (the scheduler's books)."""
    for node in nodes:
        used_g = sum(j.gpus_pn for j in node.jobs)
        used_c = sum(j.cores_pn for j in node.jobs)
        if node.free_gpus < 0 or node.free_cores < 0:
            raise InvariantError(f"{node} over-committed")
        spare = node.spare_cores
        if spare != sum(grant_pn(j) - j.cores_pn for j in node.jobs) or (
            spare and not fixed_grants
        ):
            raise InvariantError(f"{node}: {spare} spare cores, not its jobs' unused grants")
        if used_g + node.free_gpus != node.gpus or used_c + spare + node.free_cores != node.cores:
            raise InvariantError(f"{node} books do not balance: {used_g}g {used_c}c in use")
        cpu_c = sum(j.cores_pn for j in node.jobs if not j.is_dnn)
        if cpu_c != node.cpu_job_cores:
            raise InvariantError(
                f"{node}: CPU jobs hold {cpu_c} cores, books say {node.cpu_job_cores}"
            )
        if node.mem_mib and node.free_mem < 0:
            raise InvariantError(f"{node} memory over-committed")
