"""Filter and score: CPU jobs and busy memory buses apart."""

from __future__ import annotations

import math
from dataclasses import dataclass

from coda.policy.framework import CoreBound
from coda.policy.harm_budget import HarmBudget
from coda.policy.state import DNN, Job, Node


@dataclass
class BusHeadroom(CoreBound):
    """A CPU job may start on a GPU node only if the node's memory bus, with the job's
    expected draw added, stays below the harm budget's ``bus_share`` of its bandwidth.
    On a fuller bus the training jobs' traffic would slow it at full quota, where no
    harm budget can help it, and the eliminator would throttle it to protect them; it
    goes to a calmer node or waits. What a job will draw is not known before it runs:
    it is expected to draw ``bus_gbps_per_core`` per core (CPU jobs' mean). A job
    expected to draw that share of the node's bandwidth alone may go (an idle bus
    would not let it in either; it must not wait for ever), and so may any job on a
    node without bandwidth counters (``bw_gbps`` 0)."""

    harm: HarmBudget  # its config's knobs, read live (a tune may change them)
    static = False  # depends on the node's traffic now
    by_shape = True  # and on the job only through its kind and cores
    # A driver whose nodes' traffic changes (the simulator) retries queued jobs on a
    # node whose bus calmed (Scheduler.node_eased): a job it refused may fit now.
    reads_bandwidth = True

    def _cap(self, node: Node) -> float | None:
        """The draw the rule lets a node's bus carry (GB/s); None where it says nothing."""
        if node.gpus == 0 or node.bw_gbps <= 0:
            return None
        return self.harm.config.bus_share * node.bw_gbps

    def filter(self, job: Job, node: Node, cores_pn: int) -> bool:
        cap = self._cap(node)
        if job.is_dnn or cap is None:
            return True
        draw = self.harm.config.bus_gbps_per_core * cores_pn
        return draw >= cap or node.bw_used + draw < cap

    def score(self, job: Job, node: Node, cores_pn: int) -> float:
        """A training job prefers, among the nodes it fits best, one whose CPU jobs
        share a calmer bus: its traffic slows them less there."""
        if not job.is_dnn or node.cpu_job_cores == 0 or node.bw_gbps <= 0:
            return 0.0
        return -min(1.0, node.bw_used / node.bw_gbps)

    def most_cores(self, kind: str, node: Node) -> int:
        cap = self._cap(node)
        per_core = self.harm.config.bus_gbps_per_core
        if kind == DNN or cap is None or per_core <= 0:
            return node.cores if kind == DNN or cap is None or node.bw_used < cap else 0
        if per_core * node.cores >= cap:
            return node.cores  # a job this large passes whatever the bus carries
        # The most cores c with bw_used + c x per_core < cap.
        room = cap - node.bw_used
        return 0 if room <= 0 else max(0, min(node.cores, math.ceil(room / per_core) - 1))
