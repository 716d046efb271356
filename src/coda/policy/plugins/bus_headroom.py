"""Filter and score: CPU jobs and busy memory buses apart."""

from __future__ import annotations

from dataclasses import dataclass

from coda.policy.framework import CoreBound
from coda.policy.harm_budget import HarmBudget
from coda.policy.state import DNN, Job, Node


@dataclass
class BusHeadroom(CoreBound):
    """A CPU job may start on a GPU node only while the node's memory bus carries
    less than the harm budget's ``bus_share`` of its bandwidth. On a busier bus the
    training jobs' traffic would slow it at full quota, where no harm budget can help
    it, and the eliminator would throttle it to protect them; it goes to a calmer node
    or waits. What the job itself will draw is not known before it runs, so only the
    node's traffic counts. Nodes without bandwidth counters (``bw_gbps`` 0) pass."""

    harm: HarmBudget  # its config's bus_share, read live (a tune may change it)
    static = False  # depends on the node's traffic now
    by_shape = True  # and on the job only through its kind

    def _busy(self, node: Node) -> bool:
        share = self.harm.config.bus_share
        return node.gpus > 0 and node.bw_gbps > 0 and node.bw_used >= share * node.bw_gbps

    def filter(self, job: Job, node: Node, cores_pn: int) -> bool:
        return job.is_dnn or not self._busy(node)

    def score(self, job: Job, node: Node, cores_pn: int) -> float:
        """A training job prefers, among the nodes it fits best, one whose CPU jobs
        share a calmer bus: its traffic slows them less there."""
        if not job.is_dnn or node.cpu_job_cores == 0 or node.bw_gbps <= 0:
            return 0.0
        return -min(1.0, node.bw_used / node.bw_gbps)

    def most_cores(self, kind: str, node: Node) -> int:
        return 0 if kind != DNN and self._busy(node) else node.cores
