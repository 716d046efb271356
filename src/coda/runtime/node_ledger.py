"""The node's ledger: the jobs running on it, and the CPUs and GPUs none holds."""

from __future__ import annotations

from coda.policy.state import CPU
from coda.runtime.managed import Managed


class NodeLedger:
    """Running jobs by id, suspended ones (frozen, holding no CPUs), and the free CPUs
    and GPUs (by id) of the node."""

    def __init__(self) -> None:
        self.running: dict[int, Managed] = {}
        self.suspended: dict[int, Managed] = {}
        self.free_cpus: set[int] = set()
        self.free_gpus: set[int] = set()

    def reset(self, cpus: list[int], gpus: int) -> None:
        """An empty node of these CPUs and ``gpus`` GPUs."""
        self.running.clear()
        self.suspended.clear()
        self.free_cpus.clear()
        self.free_cpus.update(cpus)
        self.free_gpus.clear()
        self.free_gpus.update(range(gpus))

    def take_cpus(self, n: int, kind: str) -> list[int]:
        """``n`` free CPUs, taken: DNN jobs from the low end, CPU jobs from the high
        end, so the two kinds stay apart."""
        ids = sorted(self.free_cpus, reverse=kind == CPU)[:n]
        self.free_cpus.difference_update(ids)
        return sorted(ids)

    def take_gpus(self, n: int) -> list[int]:
        ids = sorted(self.free_gpus)[:n]
        self.free_gpus.difference_update(ids)
        return ids

    def claim(self, cpus: list[int], gpus: list[int]) -> None:
        """These CPUs and GPUs are held (a re-adopted job's, a resize put back)."""
        self.free_cpus.difference_update(cpus)
        self.free_gpus.difference_update(gpus)

    def give_back(self, cpus: list[int], gpus: list[int]) -> None:
        self.free_cpus.update(cpus)
        self.free_gpus.update(gpus)
