"""The state policies decide on: jobs and nodes as plain objects.

Whoever drives the policies (the simulator now, the node runtime later) owns and
mutates these; policies only read them and return decisions. Nothing here knows
about time sources, files or processes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coda.workload.perf import JobPerf

DNN = "dnn"
CPU = "cpu"

# Node pools: GPU nodes and CPU-only nodes.
GPU_POOL = "gpu"
CPU_POOL = "cpu"


class Job:
    """One job: what it asked for, and (once running) what it holds.

    Per-node quantities end in ``_pn``: a gang job holds the same share on each
    of its nodes.
    """

    __slots__ = (
        "kind", "sample_t", "control_state", "work", "remaining", "speed", "last_update",
        "sample_work", "placement", "nodes", "version", "cores_pn", "quota", "idx", "perf",
        "bw_pn", "core_speed_now", "gpus", "start", "cores_pn_req", "gpus_pn", "queue_key",
        "mem_pn", "end", "estimate", "bw_per_core", "model", "job_id", "submit", "cores",
        "mem_mib", "preemptions", "shrinks", "user", "works_from", "time_limit",
        "preemptible", "pcie_heavy", "wait", "wait_cycle", "checkpoints",
    )  # fmt: skip

    def __init__(
        self,
        idx: int,
        job_id: str,
        submit: float,
        gpus: int,
        cores: int,
        mem_mib: int,
        nodes: int,
        work: float,
        model: str | None = None,
        perf: JobPerf | None = None,
        bw_per_core: float = 0.0,
        time_limit: float = math.inf,
        preemptible: bool = True,
        pcie_heavy: bool | None = None,
        user: str = "",
        checkpoints: bool = True,
    ) -> None:
        # Fields in the order the hot loops read them (a compiled build lays them out
        # so): a sample, tick or speed change of a job touches its first two or three
        # cache lines only, not all six.
        self.kind = DNN if gpus > 0 else CPU
        self.sample_t = 0.0  # driver's throughput meter: start of the current window
        # The job control's own state for this job (its type, which no driver reads):
        # found with the job, not in a table as large as the cluster's live jobs,
        # which a control asks about on every sample of every job (cache misses).
        self.control_state: object = None
        self.work = work  # seconds at full speed
        self.remaining = work
        # Running state (set by the driver).
        self.speed = 0.0  # current progress rate, work-seconds per second
        self.last_update = 0.0
        self.sample_work = 0.0  # ... and the work done by then
        self.placement: list[Node] = []
        self.nodes = nodes
        self.version = 0  # bumped on every speed change (stale finish events)
        self.cores_pn = 0  # granted cores per node
        self.quota = 1.0  # CPU quota fraction of the granted cores (throttling)
        self.idx = idx
        self.perf = perf
        self.bw_pn = 0.0  # memory bandwidth this job draws on each of its nodes, GB/s
        self.core_speed_now = 0.0  # speed from its cores alone (no contention)
        self.gpus = gpus
        self.start = -1.0
        self.cores_pn_req = max(1, -(-cores // nodes))
        self.gpus_pn = -(-gpus // nodes)
        self.queue_key: tuple[Any, ...] = ()  # position in its queue (queue-sort key, trace row)
        self.mem_pn = -(-mem_mib // nodes)
        self.end = -1.0
        self.estimate = 0.0  # runtime estimate used by backfill, seconds
        self.bw_per_core = bw_per_core
        self.model = model
        self.job_id = job_id
        self.submit = submit
        self.cores = cores
        self.mem_mib = mem_mib
        self.preemptions = 0  # times a DNN job's start reclaimed this (CPU) job's cores
        self.shrinks = 0  # times a CPU job was shrunk to give a DNN job cores
        self.user = user  # its owner: the tenant fair-share policies share between
        # When its work begins once placed: its start, or later where the driver
        # models a launch (the simulator's start delay).
        self.works_from = -math.inf
        # What every driver fills, so a plugin behaves alike in each: the user's time
        # limit (seconds, inf = none), whether the job may be taken back (requeued),
        # and its PCIe class (from the profile by model name, or learned).
        self.time_limit = time_limit
        self.preemptible = preemptible
        # Whether a requeue keeps its work up to its last checkpoint (one every policy
        # checkpoint interval) or loses its whole run since it last started.
        self.checkpoints = checkpoints
        self.pcie_heavy = bool(perf.pcie_heavy) if pcie_heavy is None and perf else bool(pcie_heavy)
        self.wait: object = None  # why it waits (a coda.cycle.Reason), set by the cycle
        self.wait_cycle = -1  # the cycle that set it

    @property
    def is_dnn(self) -> bool:
        return self.kind == DNN

    @property
    def running(self) -> bool:
        return bool(self.placement)

    def core_speed(self, cores_pn: float) -> float:
        """Speed from cores alone (no contention): the job's own scaling curve."""
        if self.perf is not None:
            return self.perf.core_speed(cores_pn)
        return min(1.0, cores_pn / self.cores_pn_req)

    def __repr__(self) -> str:
        return f"Job({self.job_id}, {self.kind}, g={self.gpus}, c={self.cores}, n={self.nodes})"


class Node:
    """One node's capacity, what is free, and which jobs run on it."""

    __slots__ = (
        "jobs", "version", "idx", "free_gpus", "free_cores", "bw_used", "bw_gbps",
        "bw_per_job", "cpu_job_cores", "pcie_heavy", "free_mem", "mem_mib", "spare_cores",
        "gpus", "cores", "fixed_grants", "pool", "name",
    )  # fmt: skip

    def __init__(self, idx: int, name: str, gpus: int, cores: int, mem_mib: int, bw_gbps: float):
        # Fields in the order the hot loops read them (as Job's).
        self.jobs: dict[Job, None] = {}  # insertion-ordered set
        self.version = 0  # bumped whenever a job arrives or leaves
        self.idx = idx
        self.free_gpus = gpus
        self.free_cores = cores
        self.bw_used = 0.0  # sum of bw_pn of its jobs
        self.bw_gbps = bw_gbps
        # Whether bw_used is the sum of its jobs' draws (bw_pn, the simulator's model), so
        # one job's share of the bus is known; a node agent measures only the node's
        # total (resctrl MBM), training jobs' own traffic in it, and sets this False.
        self.bw_per_job = True
        self.cpu_job_cores = 0  # cores held by CPU jobs (reclaimable for DNN jobs)
        self.pcie_heavy: list[Job] = []  # running PCIe-heavy DNN jobs
        self.free_mem = mem_mib
        self.mem_mib = mem_mib  # 0 = not constrained
        # Fixed grants (Slurm's books, ``fixed_grants``): cores granted to running jobs
        # but outside their cpusets. Never free for another job; the only room those
        # jobs may grow back into (a job never grows past its grant).
        self.spare_cores = 0
        self.gpus = gpus
        self.cores = cores
        self.fixed_grants = False
        self.pool = GPU_POOL if gpus > 0 else CPU_POOL
        self.name = name

    @property
    def dnn_free_cores(self) -> int:
        """Free cores as a DNN job sees them when CPU jobs' cores can be reclaimed."""
        return self.free_cores + self.cpu_job_cores

    def fits(self, gpus_pn: int, cores_pn: int, mem_pn: int) -> bool:
        return (
            self.free_gpus >= gpus_pn
            and self.free_cores >= cores_pn
            and (self.mem_mib == 0 or self.free_mem >= mem_pn)
        )

    def __repr__(self) -> str:
        return f"Node({self.name}, {self.free_gpus}/{self.gpus}g, {self.free_cores}/{self.cores}c)"
