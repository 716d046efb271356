"""What the node agent is configured with and what it keeps per running job."""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from coda.policy.state import Job
from coda.runtime.devices import Device
from coda.runtime.limits import Limits
from coda.runtime.progress import Progress


@dataclass
class AgentConfig:
    period_s: float = 1.0  # control period: eliminator ticks, reaping, admission
    window_s: float = 2.0  # throughput window: one allocator sample per window
    settle_s: float = 1.0  # after a core or quota change, ignore this long (buffers drain)
    stall_s: float = 15.0  # no progress for this long: the job's samples are not trusted
    policy: str = "coda"
    reclaim: str = "shrink"  # how a DNN job's start takes cores back: shrink | requeue | none
    # What a preemption does to the CPU job: "requeue" (stopped, queued again, restarts
    # from its start or checkpoint) or "suspend" (frozen with the cgroup freezer, its
    # cores given away, thawed where it was once the cycle starts it again).
    take_back: str = "requeue"
    gpus: int = 0  # GPUs on this node (fake ones are fine: jobs see CUDA_VISIBLE_DEVICES)
    # GPU i's device file; a job's cgroup is refused those of GPUs it was not granted,
    # and any beyond ``gpus`` (empty: GPUs are handed out through CUDA_VISIBLE_DEVICES
    # alone, not isolated).
    gpu_devices: list[Device] = field(default_factory=list)
    cpus: list[int] | None = None  # CPUs to manage (None: all the cgroup parent may use)
    kill_grace_s: float = 5.0  # cancel, time limit, checkpoint: SIGTERM, SIGKILL this long after
    # The node's memory bandwidth in GB/s, as the operator declares it: with resctrl's
    # MBM counters the bus rules act on the measured traffic (0: they stand aside).
    bus_gbps: float = 0.0
    # Policy knobs for this node, e.g. {"eliminator.step_down": "0.5"} (see tune_policy).
    tune: dict[str, str] = field(default_factory=dict)
    # What users may store and cost: spec and per-user bytes, how long finished jobs stay.
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if self.period_s <= 0 or self.window_s < self.period_s:
            raise ValueError("need period_s > 0 and window_s >= period_s")
        if self.gpus < 0 or self.stall_s <= 0 or self.settle_s < 0:
            raise ValueError("need gpus >= 0, stall_s > 0, settle_s >= 0")
        if self.gpu_devices and len(self.gpu_devices) < self.gpus:
            raise ValueError(f"{self.gpus} GPUs but {len(self.gpu_devices)} GPU device files")
        if self.take_back not in ("requeue", "suspend"):
            raise ValueError(f"take_back must be requeue or suspend, not {self.take_back!r}")
        if not (math.isfinite(self.bus_gbps) and self.bus_gbps >= 0):
            raise ValueError(f"bus_gbps must be a finite number >= 0, not {self.bus_gbps}")


@dataclass
class Managed:
    """A running job as the agent tracks it."""

    row_id: int
    job: Job
    cgroup: str
    job_dir: Path
    cpus: list[int]
    gpu_ids: list[int]
    shim_pid: int | None
    shim_start: int | None
    popen: subprocess.Popen[bytes] | None = None
    last: Progress | None = None  # last progress record seen
    last_change: float = 0.0  # agent time it last advanced
    window: Progress | None = None  # record that opened the current window
    settle_until: float = 0.0
    controlled: bool = False  # the allocator knows it (on_start called)
    stalled: bool = False
    throughput: float | None = None
    kill_at: float | None = None  # cancel in progress: SIGKILL at this time
    # Told (SIGTERM) to write its checkpoint before a preemption: it is requeued once it
    # stops, or kill_grace_s after this time.
    warned_at: float | None = None
    dirty: bool = True  # DB row needs the latest cpus/quota/throughput
    mb: int | None = None  # MBA percent set through resctrl
    uid: int | None = None  # the user the job runs as (owns its progress file)
    started_wall: float | None = None  # its row's start_t: its time limit counts from it
    timed_out: bool = False  # stopped at its time limit
    suspended_wall: float | None = None  # wall time it was frozen (take_back "suspend")
    resume_failed: bool = False  # its last resume failed (said once, tried each tick)
