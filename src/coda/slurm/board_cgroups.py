"""Slurm's job groups as an emulated node shows them: jobs found in the real cgroup
tree, their CPUs and CPU quota kept on the node's board (``coda.runtime.board``).

On a declared-big test node (``SlurmdParameters=config_overrides``: say 28 cores on
a 2-CPU machine) Slurm grants CPUs the machine does not have, and a job's cpuset can
hold only the real ones. So the agent (``coda slurm agent --board``) cannot narrow
cpusets there: it keeps each job's CPUs (numbered 0..k-1 within the job: the agent
only counts them, and never moves CPUs between jobs on Slurm), writes them with the
CPU quota to the job's grant on the board, and the emulated job
(``coda.runtime.workloads.emulated``) runs at the speed those give it. Finding jobs,
their processes and their end is left to the real groups.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from coda.runtime.board import Board, Grant
from coda.runtime.cgroups import MAX_CPU_ID, CgroupError
from coda.slurm.cgroups import SlurmJobCgroups

_JOB = re.compile(r"(?:^|/)job_([0-9]{1,12})\Z")
MIN_QUOTA = 0.01  # of the job's CPUs: the board's grant cannot say "none at all"


class BoardCgroups(SlurmJobCgroups):
    """``SlurmJobCgroups`` whose CPU sets and quotas live on ``board``; ``node_cores``:
    the node's declared cores (Slurm's count)."""

    def __init__(self, real: SlurmJobCgroups, board: Board, node_cores: int) -> None:
        super().__init__(
            real.node, real.root, real.version, real.cpuset_writer.setaffinity, real.period_us
        )
        if not 1 <= node_cores <= MAX_CPU_ID + 1:
            raise ValueError(f"a node's cores must be 1..{MAX_CPU_ID + 1}, got {node_cores}")
        self.board = board
        self.node_cores = node_cores
        self._cpus: dict[str, list[int]] = {}
        self._quota: dict[str, float | None] = {}

    @staticmethod
    def _job_id(name: str) -> int:
        m = _JOB.search(name)
        if m is None:
            raise CgroupError(f"not a Slurm job group name: {name!r}")
        return int(m.group(1))

    def node_cpus(self) -> list[int]:
        return list(range(self.node_cores))

    def granted(self, name: str, slurm_cpus: int) -> list[int]:
        """The job's CPUs: what the board says (an agent before this one narrowed
        them), else the first ``slurm_cpus`` of the node's numbering."""
        self._dir(name)  # a real job group's name, or CgroupError
        if name not in self._cpus:
            got = self.board.grant(self._job_id(name))
            if got is not None:
                self._cpus[name] = list(got.cpus)
                self._quota[name] = None if got.quota >= 1.0 else got.quota * got.cores
            else:
                self._cpus[name] = list(range(max(1, min(slurm_cpus, self.node_cores))))
                self._write(name)
        return list(self._cpus[name])

    def cpus(self, name: str) -> list[int]:
        if name not in self._cpus:
            raise CgroupError(f"job group {name!r}: no CPUs on the board yet")
        return list(self._cpus[name])

    def set_cpus(self, name: str, cpus: Iterable[int]) -> None:
        new = sorted(set(cpus))
        if not new:
            raise ValueError("set_cpus needs at least one CPU")
        if not self.exists(name):
            raise CgroupError(f"job group {name!r} is gone")
        self._cpus[name] = new
        self._write(name)

    def set_quota(self, name: str, cores: float | None) -> None:
        if cores is not None and not (cores >= 0):
            raise ValueError(f"quota must be a non-negative number of cores, got {cores}")
        self._quota[name] = cores
        if name in self._cpus:
            self._write(name)

    def quota(self, name: str) -> float | None:
        return self._quota.get(name)

    def sync_quota_members(self, name: str) -> None:
        return None  # the quota is on the board, not in a group that processes join

    def remove(self, name: str) -> None:
        self._cpus.pop(name, None)
        self._quota.pop(name, None)
        try:
            self.board.remove_grant(self._job_id(name))
        except OSError as e:
            raise CgroupError(f"board {self.board.path}: {e.strerror}") from None

    def cleanup(self, keep: Iterable[str] = ()) -> list[str]:
        """Forget jobs no longer running (their grants go with them)."""
        kept = set(keep)
        for name in [n for n in self._cpus if n not in kept]:
            self.remove(name)
        return []

    def describe(self) -> str:
        return (
            f"board {self.board.path} ({self.node_cores} declared cores) over {super().describe()}"
        )

    def _write(self, name: str) -> None:
        cpus = self._cpus[name]
        cap = self._quota.get(name)
        quota = 1.0 if cap is None else min(1.0, max(MIN_QUOTA, cap / len(cpus)))
        try:
            self.board.write_grant(self._job_id(name), Grant(tuple(cpus), quota))
        except (OSError, ValueError) as e:  # BoardError is a ValueError
            raise CgroupError(
                f"board {self.board.path}: {getattr(e, 'strerror', None) or e}"
            ) from None
