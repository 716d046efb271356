"""Filter and core bound: a reserve of cores for a GPU node's idle GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from coda.policy.framework import CoreBound
from coda.policy.state import DNN, Job, Node


@dataclass
class IdleGpuReserve(CoreBound):
    """A CPU job may take a GPU node's cores only beyond a reserve for the
    node's idle GPUs, so a DNN job arriving there rarely has to reclaim."""

    cores_per_idle_gpu: int = 2  # the median 1-GPU optimum in CODA's table
    static = False  # depends on the node's idle GPUs and free cores
    by_shape = True  # and on the job's kind and core count only

    def filter(self, job: Job, node: Node, cores_pn: int) -> bool:
        if job.is_dnn or node.gpus == 0:
            return True
        if cores_pn > node.cores - node.gpus * self.cores_per_idle_gpu:
            # It could never fit beside a full reserve: the reserve would starve it
            # while the node's GPUs stand idle. It may go; DNN jobs reclaim later.
            return True
        return node.free_cores - cores_pn >= node.free_gpus * self.cores_per_idle_gpu

    def most_cores(self, kind: str, node: Node) -> int:
        if kind == DNN or node.gpus == 0:
            return node.cores  # no reserve for these: no bound
        free = node.free_cores
        if free > node.cores - node.gpus * self.cores_per_idle_gpu:
            return free  # a request this large may go beside no reserve (see filter)
        return free - node.free_gpus * self.cores_per_idle_gpu
