"""Score: PCIe-heavy training jobs apart."""

from __future__ import annotations

from coda.policy.state import Job, Node


class SpreadPcieHeavy:
    """Score: keep two PCIe-heavy training jobs off one node where possible
    (two of them lose 5-25% each; other pairs are unaffected)."""

    def score(self, job: Job, node: Node, cores_pn: int) -> float:
        if not job.pcie_heavy:
            return 0.0
        return -1.0 if node.pcie_heavy else 0.0
