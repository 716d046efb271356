"""Dominant resource fairness between tenants (Ghodsi et al., NSDI 2011).

A tenant's dominant share is the largest of its shares of the cluster's GPUs
and cores (memory is left out: most traces do not record it). A DNN job's
dominant resource is then almost always GPUs, a CPU job's cores, as the paper's
DRF baseline has it. The queue sort orders jobs inside a tenant; the cycle
picks the tenant with the smallest share first (``Policy.fair_share``).

Usage is what jobs held when they started (``reserve``/``unreserve``): a later
change of a running job's cores does not move its tenant's share. Tenants are
weighted equally.
"""

from __future__ import annotations

from collections.abc import Sequence

from coda.policy.framework import ClusterAware
from coda.policy.state import Job, Node


class DominantShares(ClusterAware):
    """Both the fair-share order (``tenant``, ``share``) and the usage book that
    keeps it current (a ``Reserve`` plugin)."""

    def __init__(self) -> None:
        self.total_gpus = 0
        self.total_cores = 0
        self._gpus: dict[str, int] = {}
        self._cores: dict[str, int] = {}
        self._held: dict[Job, tuple[str, int, int]] = {}  # what each running job was charged

    def observe_cluster(self, nodes: Sequence[Node]) -> None:
        self.total_gpus = sum(n.gpus for n in nodes)
        self.total_cores = sum(n.cores for n in nodes)

    def tenant(self, job: Job) -> str:
        return job.user

    def share(self, tenant: str) -> float:
        g = self._gpus.get(tenant, 0) / self.total_gpus if self.total_gpus else 0.0
        c = self._cores.get(tenant, 0) / self.total_cores if self.total_cores else 0.0
        return max(g, c)

    def reserve(self, job: Job, nodes: Sequence[Node], now: float) -> None:
        if job in self._held:  # booked twice without a release: charge once
            return
        tenant = job.user
        gpus, cores = job.gpus_pn * len(nodes), job.cores_pn * len(nodes)
        self._held[job] = (tenant, gpus, cores)
        self._gpus[tenant] = self._gpus.get(tenant, 0) + gpus
        self._cores[tenant] = self._cores.get(tenant, 0) + cores

    def unreserve(self, job: Job, now: float) -> None:
        held = self._held.pop(job, None)
        if held is None:
            return
        tenant, gpus, cores = held
        self._gpus[tenant] -= gpus
        self._cores[tenant] -= cores

    def usage(self) -> dict[str, tuple[int, int]]:
        """(GPUs, cores) each tenant holds now."""
        return {t: (self._gpus.get(t, 0), self._cores.get(t, 0)) for t in self._gpus}
