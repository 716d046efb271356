"""Which pools (GPU nodes, CPU nodes) a job may run in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coda.policy.framework import ClusterAware
from coda.policy.harm_budget import HarmBudget
from coda.policy.plugins.returns_cheaply import gives_back_cheaply
from coda.policy.state import CPU_POOL, GPU_POOL, Job, Node


@dataclass
class ArrayPools(ClusterAware):
    """DNN jobs on GPU nodes; CPU jobs on CPU nodes, then (when co-locating) on
    GPU nodes, unless a CPU node can host them and they were preempted too often
    already or (with a harm budget) do not give cores back cheaply
    (``gives_back_cheaply``, short: within its cap): those go to CPU nodes or wait.
    The driver shows the plugin its nodes through observe_cluster."""

    colocate: bool = True
    max_preemptions: int = 2
    harm: HarmBudget | None = None  # None: GPU nodes' cores go to any CPU job
    # (cores, memory MiB; 0 = unconstrained) of each CPU node; None = not told.
    cpu_nodes: list[tuple[int, int]] | None = None
    generation: int = 0  # bumped when the CPU nodes change (answers may change)

    def observe_cluster(self, nodes: Sequence[Node]) -> None:
        cpu_nodes = [(n.cores, n.mem_mib) for n in nodes if n.pool == CPU_POOL]
        if cpu_nodes != self.cpu_nodes:
            self.cpu_nodes = cpu_nodes
            self.generation += 1

    def _fits_cpu_nodes(self, job: Job) -> bool:
        if self.cpu_nodes is None:
            return True
        room = sum(
            1 for c, m in self.cpu_nodes if c >= job.cores_pn_req and (m == 0 or m >= job.mem_pn)
        )
        return room >= job.nodes

    def pools(self, job: Job) -> tuple[str, ...]:
        if job.is_dnn:
            return (GPU_POOL,)
        if not self.colocate:
            return (CPU_POOL,)
        if job.preemptions >= self.max_preemptions and self._fits_cpu_nodes(job):
            return (CPU_POOL,)  # preempted enough: out of DNN jobs' way from now on
        harm = self.harm
        if (
            harm is not None
            and not gives_back_cheaply(job, harm.config.cap_s)
            and self._fits_cpu_nodes(job)
        ):
            return (CPU_POOL,)  # taking it back would be dear: where nobody wants it back
        return (CPU_POOL, GPU_POOL)
