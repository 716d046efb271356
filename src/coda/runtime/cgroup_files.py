"""Every cgroup file CODA reads or writes, named once, cgroup v1 and v2 side by side
(as Koordinator's node agent keeps its registry): the drivers (``coda.runtime.cgroups``
for the agent's own groups, ``coda.slurm.cgroups`` for Slurm's job groups) take their
file names from here, never from string literals of their own."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CgroupFile:
    """One knob: its v1 controller and file, its v2 file (None: that version has none)."""

    knob: str
    controller: str | None  # v1's hierarchy holding it (None: every hierarchy has it)
    v1_file: str | None
    v2_file: str | None

    @property
    def v1(self) -> str:
        if self.v1_file is None:
            raise LookupError(f"cgroup v1 has no file for {self.knob}")
        return self.v1_file

    @property
    def v2(self) -> str:
        if self.v2_file is None:
            raise LookupError(f"cgroup v2 has no file for {self.knob}")
        return self.v2_file

    @property
    def file(self) -> str:
        """The file's name where both versions name it alike."""
        if self.v1_file != self.v2_file or self.v1_file is None:
            raise LookupError(f"{self.knob}: v1 {self.v1_file}, v2 {self.v2_file}")
        return self.v1_file


CPUS = CgroupFile("cpus", "cpuset", "cpuset.cpus", "cpuset.cpus")
EFFECTIVE_CPUS = CgroupFile(
    "effective cpus", "cpuset", "cpuset.effective_cpus", "cpuset.cpus.effective"
)
MEMS = CgroupFile("memory nodes", "cpuset", "cpuset.mems", "cpuset.mems")
PROCS = CgroupFile("processes", None, "cgroup.procs", "cgroup.procs")
THREADS = CgroupFile("threads", None, "tasks", "cgroup.threads")
CPU_QUOTA = CgroupFile("cpu quota", "cpu", "cpu.cfs_quota_us", "cpu.max")
CPU_PERIOD = CgroupFile("cpu period", "cpu", "cpu.cfs_period_us", "cpu.max")
CPU_USAGE = CgroupFile("cpu usage", "cpuacct", "cpuacct.usage", "cpu.stat")
FREEZE = CgroupFile("freeze", "freezer", "freezer.state", "cgroup.freeze")
EVENTS = CgroupFile("events", None, None, "cgroup.events")
CONTROLLERS = CgroupFile("controllers", None, None, "cgroup.controllers")
SUBTREE_CONTROL = CgroupFile("subtree control", None, None, "cgroup.subtree_control")
# v2 has no file: its device guard is an eBPF program (coda.runtime.bpf_devices)
DEVICES_DENY = CgroupFile("devices deny", "devices", "devices.deny", None)

REGISTRY = (CPUS, EFFECTIVE_CPUS, MEMS, PROCS, THREADS, CPU_QUOTA, CPU_PERIOD, CPU_USAGE,
            FREEZE, EVENTS, CONTROLLERS, SUBTREE_CONTROL, DEVICES_DENY)  # fmt: skip


# ------------------------------------------------------------------ the CPU quota
MIN_QUOTA_US = 1000  # the kernel refuses a CFS quota below 1 ms


@dataclass(frozen=True)
class CpuQuota:
    """A CPU cap as both versions write it, encoded and read in one place: v1's
    ``cpu.cfs_quota_us`` (-1: none) beside ``cpu.cfs_period_us``, v2's ``cpu.max``
    (``max P`` or ``Q P``). ``cores``: CPUs' worth of time per period (None: no cap)."""

    period_us: int

    def quota_us(self, cores: float) -> int:
        """ValueError for anything but a finite, non-negative number of cores (inf or
        NaN must never reach round())."""
        if isinstance(cores, bool) or not math.isfinite(cores) or cores < 0:
            raise ValueError(f"quota must be a non-negative number of cores, got {cores}")
        return max(MIN_QUOTA_US, round(cores * self.period_us))

    def v1_quota(self, cores: float | None) -> str:
        return "-1" if cores is None else str(self.quota_us(cores))

    def v2_max(self, cores: float | None) -> str:
        return f"{'max' if cores is None else self.quota_us(cores)} {self.period_us}"

    @staticmethod
    def read_v1(quota: str, period: str) -> float | None:
        q = int(quota)
        return None if q < 0 else q / int(period)

    def read_v2(self, text: str) -> float | None:
        quota, _, period = text.strip().partition(" ")
        return None if quota == "max" else int(quota) / int(period or self.period_us)
