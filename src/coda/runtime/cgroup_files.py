"""Every cgroup file CODA reads or writes, named once, cgroup v1 and v2 side by side
(as Koordinator's node agent keeps its registry): the drivers (``coda.runtime.cgroups``
for the agent's own groups, ``coda.slurm.cgroups`` for Slurm's job groups) take their
file names from here, never from string literals of their own."""

from __future__ import annotations

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

REGISTRY = (CPUS, EFFECTIVE_CPUS, MEMS, PROCS, THREADS, CPU_QUOTA, CPU_PERIOD, CPU_USAGE,
            FREEZE, EVENTS, CONTROLLERS, SUBTREE_CONTROL)  # fmt: skip
