"""The performance model as one job sees it from its own node: its speed and its
memory-bandwidth draw from the cores it has, its co-runners' bandwidth and PCIe
sharing. These are the formulas the simulator applies to every job of a cluster
(``coda.sim.physics``), written for an emulated job that applies them to itself
(``coda.runtime.workloads.emulated``); tests/test_speed_model.py checks that the
two agree on the same node.

Speeds are relative (1.0: the job's speed with all the cores it needs and the node
to itself); bandwidths are GB/s; ``cores`` and ``quota`` are a job's cores on the
node and its CPU quota (a fraction of them), multiplied in the simulator's order.
"""

from __future__ import annotations

from coda.workload.job_perf import JobPerf


def dnn_bandwidth(perf: JobPerf, cores: float, quota: float = 1.0) -> float:
    """What a training job draws from its node: its bandwidth at full speed, scaled by
    its speed from cores."""
    return perf.bw_gbps * perf.core_speed(cores * quota)


def dnn_speed(
    perf: JobPerf,
    cores: float,
    quota: float,
    others_bw: float,
    node_bw: float,
    pcie_pair: float = 1.0,
) -> float:
    """A training job's speed: from its cores, slowed by its co-runners' bandwidth
    pressure (``others_bw`` of ``node_bw``) and by a PCIe-heavy neighbour
    (``pcie_pair``: the largest pair slowdown with one, 1.0 without)."""
    return perf.core_speed(cores * quota) / (perf.slowdown(others_bw / node_bw) * pcie_pair)


def cpu_bandwidth(bw_per_core: float, cores: float, quota: float = 1.0) -> float:
    return bw_per_core * cores * quota


def cpu_speed(
    cores: float, quota: float, cores_requested: int, node_bw_used: float, node_bw: float
) -> float:
    """A CPU job's speed: its share of the cores it asked for, slowed pro rata when the
    node's memory bus is saturated (``node_bw_used``: every job's draw, its own too)."""
    speed = min(1.0, cores * quota / cores_requested)
    if node_bw_used > node_bw:
        speed /= node_bw_used / node_bw
    return speed
