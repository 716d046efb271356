"""Slurm's job cgroups on one node, behind the interface the node agent drives.

Slurm's task/cgroup plugin makes the groups; CODA only narrows or widens their
CPU sets and caps their CPU time:

- cgroup v1: ``<root>/cpuset/slurm_<node>/uid_<uid>/job_<id>/step_<step>/``. Slurm
  makes no cpu-controller group there, so a throttled job's processes are moved
  into ``<root>/cpu/coda_slurm_<node>/job_<id>`` (other hierarchies untouched).
- cgroup v2 (Slurm 24.11 with IgnoreSystemd, as met on a real hierarchy):
  ``<root>/system.slice/<node>_slurmstepd.scope/`` (``slurmstepd.scope`` where slurmd
  is built for one node a host) holding ``slurmd/``, ``system/`` and
  ``job_<id>/step_<step>/{slurm,user/task_<n>}``; Slurm sets ``cpuset.cpus`` at the
  job level only (lower levels inherit), and ``cpu.max`` is written there too.

A child cpuset must stay inside its parent's, so narrowing writes the steps first
and the job last; widening writes the job first, then the steps, then calls
``sched_setaffinity`` on every thread (slurmstepd pins its tasks, and a pinned
task does not widen with its cpuset). Group names are ``uid_<uid>/job_<id>``
(v1) or ``job_<id>`` (v2), always built from numbers. The root is injectable: the
tests run this on a fake tree in a temporary directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from coda.runtime.cgroup_files import (
    CONTROLLERS,
    CPU_PERIOD,
    CPU_QUOTA,
    CPUS,
    EFFECTIVE_CPUS,
    PROCS,
    THREADS,
    CpuQuota,
)
from coda.runtime.cgroups import (
    CgroupError,
    CpusetWriter,
    SetAffinity,
    format_cpus,
    parse_cpus,
    read_file,
    read_ids,
    remove_dir,
    write_file,
)

_JOB_RE = re.compile(r"^job_([0-9]+)\Z")  # ASCII digits, no trailing newline
_UID_RE = re.compile(r"^uid_([0-9]+)\Z")


class SlurmJobCgroups:
    """The job groups slurmd made for one node; names are relative to its base."""

    def __init__(
        self,
        node: str,
        root: str | Path = "/sys/fs/cgroup",
        version: int = 1,
        setaffinity: SetAffinity = os.sched_setaffinity,
        period_us: int = 100_000,
        v2_scope: str | None = None,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", node):
            raise ValueError(f"not a node name: {node!r}")
        if version not in (1, 2):
            raise ValueError(f"cgroup version must be 1 or 2, got {version}")
        self.node = node
        self.root = Path(root)
        self.version = version
        self.cpuset_writer = CpusetWriter(setaffinity, write_file)
        self.period_us = period_us
        self._v2_scope = v2_scope
        self._base: Path | None = None
        self.quota_base = (
            self.root / "cpu" / f"coda_slurm_{node}" if version == 1 else self._v2_scopes()[0]
        )

    def _v2_scopes(self) -> list[Path]:
        """Where slurmd (v2) may put this node's jobs, the likeliest first: a scope
        named after the node (slurmd built for several nodes a host, as Debian's), else
        the plain one; ``v2_scope`` given, only that."""
        if self._v2_scope is not None:
            return [self.root / self._v2_scope]
        sl = self.root / "system.slice"
        return [sl / f"{self.node}_slurmstepd.scope", sl / "slurmstepd.scope"]

    @property
    def base(self) -> Path:
        """Where slurmd puts this node's job groups: ``slurm_<node>`` when several
        slurmd share a host (``slurmd -N``), else ``slurm`` (v1); the scope (v2).
        Looked up until slurmd has made it (it does so at the first job)."""
        if self._base is not None:
            return self._base
        if self.version == 2:
            scopes = self._v2_scopes()
            for d in scopes:
                if d.is_dir():
                    self._base = d
                    return d
            return scopes[0]  # not there yet: no jobs
        cpuset = self.root / "cpuset"
        for name in (f"slurm_{self.node}", "slurm"):
            if (cpuset / name).is_dir():
                self._base = cpuset / name
                return self._base
        return cpuset / f"slurm_{self.node}"  # not there yet: no jobs

    # ------------------------------------------------------------ discovery
    def jobs(self) -> dict[int, str]:
        """Slurm job id -> group name, for every job group on this node now."""
        out: dict[int, str] = {}
        if self.version == 1:
            parents = [d for d in _subdirs(self.base) if _UID_RE.match(d.name)]
        else:
            parents = [self.base]
        for parent in parents:
            for d in _subdirs(parent):
                m = _JOB_RE.match(d.name)
                if m:
                    rel = d.relative_to(self.base).as_posix()
                    out[int(m.group(1))] = rel
        return out

    @staticmethod
    def name_for(job_id: int, uid: int | None = None, version: int = 1) -> str:
        return f"uid_{int(uid or 0)}/job_{int(job_id)}" if version == 1 else f"job_{int(job_id)}"

    def _dir(self, name: str) -> Path:
        parts = name.split("/")
        ok = (
            len(parts) == 2 and bool(_UID_RE.match(parts[0])) and bool(_JOB_RE.match(parts[1]))
            if self.version == 1
            else len(parts) == 1 and bool(_JOB_RE.match(parts[0]))
        )
        if not ok:
            raise CgroupError(f"not a Slurm job group name: {name!r}")
        return self.base.joinpath(*parts)

    def _tree(self, name: str) -> list[Path]:
        """The job's directory and every directory below it, parents first."""
        top = self._dir(name)
        out = [top]
        i = 0
        while i < len(out):
            out.extend(_subdirs(out[i]))
            i += 1
        return out

    def _cpuset_tree(self, name: str) -> list[Path]:
        tree = [d for d in self._tree(name) if (d / CPUS.file).exists()]
        if self.version == 2:
            # An empty cpuset.cpus inherits its parent's: only the job's own and any a
            # step set itself are written (writing the rest would pin them).
            tree = [d for i, d in enumerate(tree) if i == 0 or read_file(d / CPUS.file)]
        return tree

    def exists(self, name: str) -> bool:
        return self._dir(name).is_dir()

    def node_cpus(self) -> list[int]:
        """The CPUs this node's jobs may use (the node group's cpuset)."""
        for d in (self.base, self.root / "cpuset", self.root):
            f = d / (EFFECTIVE_CPUS.v2 if self.version == 2 else CPUS.file)
            if f.exists():
                cpus = parse_cpus(read_file(f))
                if cpus:
                    return cpus
        return sorted(os.sched_getaffinity(0))

    # ------------------------------------------------------------ CPU sets
    def granted(self, name: str, slurm_cpus: int) -> list[int]:
        """The CPUs the job has when the agent first sees it: its cpuset here
        (``BoardCgroups``: Slurm's count, on an emulated node)."""
        return self.cpus(name)

    def cpus(self, name: str) -> list[int]:
        d = self._dir(name)
        cpus = parse_cpus(read_file(d / CPUS.file))
        if not cpus and self.version == 2:  # none of its own: its parent's
            cpus = parse_cpus(read_file(d / EFFECTIVE_CPUS.v2))
        return cpus

    def set_cpus(self, name: str, cpus: Iterable[int]) -> None:
        new = set(cpus)
        if not new:
            raise ValueError("set_cpus needs at least one CPU")
        tree = self._cpuset_tree(name)
        if not tree:
            raise CgroupError(f"job group {name!r} has no cpuset")
        old = set(self.cpus(name))
        self.cpuset_writer.write(tree, new, old, lambda: self.threads(name))

    # ------------------------------------------------------------ processes
    def pids(self, name: str) -> list[int]:
        return sorted({p for d in self._tree(name) for p in read_ids(d / PROCS.file)})

    def threads(self, name: str) -> list[int]:
        f = THREADS.v1 if self.version == 1 else THREADS.v2
        return sorted({t for d in self._tree(name) for t in read_ids(d / f)})

    # ------------------------------------------------------------ CPU quota
    def _quota_dir(self, name: str) -> Path:
        if self.version == 2:
            return self._dir(name)
        return self.quota_base / self._dir(name).name  # job_<id>

    def set_quota(self, name: str, cores: float | None) -> None:
        """Cap the job at ``cores`` CPUs' worth of time per period (None: no cap)."""
        d = self._quota_dir(name)
        codec = CpuQuota(self.period_us)
        if self.version == 2:
            write_file(d / CPU_QUOTA.v2, codec.v2_max(cores))
            return
        quota = codec.v1_quota(cores)  # checked before anything is made or written
        if cores is None and not d.is_dir():
            return  # never throttled: nothing to undo
        self.quota_base.mkdir(exist_ok=True)
        d.mkdir(exist_ok=True)
        write_file(d / CPU_PERIOD.v1, str(self.period_us))
        write_file(d / CPU_QUOTA.v1, quota)
        if cores is not None:
            self.sync_quota_members(name)

    def sync_quota_members(self, name: str) -> None:
        """v1: move the job's processes that are not in its quota group yet (a new
        step's tasks) into it. Moving one process does not touch its cpuset."""
        if self.version == 2:
            return
        d = self._quota_dir(name)
        if not d.is_dir():
            return
        have = set(read_ids(d / PROCS.file))
        for pid in self.pids(name):
            if pid not in have:
                try:
                    write_file(d / PROCS.file, str(pid))
                except CgroupError:
                    if _alive(pid):
                        raise

    def quota(self, name: str) -> float | None:
        d = self._quota_dir(name)
        if self.version == 2:
            return CpuQuota(self.period_us).read_v2(read_file(d / CPU_QUOTA.v2))
        if not d.is_dir():
            return None
        return CpuQuota.read_v1(read_file(d / CPU_QUOTA.v1), read_file(d / CPU_PERIOD.v1))

    def remove(self, name: str) -> None:
        """Remove CODA's quota group of an ended job (Slurm removes its own groups)."""
        if self.version == 2:
            return
        d = self._quota_dir(name)
        if d.is_dir():
            left = read_ids(d / PROCS.file)
            if left and any(_alive(p) for p in left):
                raise CgroupError(f"quota group {d} still has processes: {left}")
            remove_dir(d)

    def cleanup(self, keep: Iterable[str] = ()) -> list[str]:
        """Remove quota groups of jobs that are gone (left by an agent that died
        before their job ended) and the quota parent once empty; ``keep``: names of
        running jobs. Returns what is left and why (busy groups stay)."""
        if self.version == 2 or not self.quota_base.is_dir():
            return []
        mine = {self._quota_dir(n).name for n in keep}
        left: list[str] = []
        for d in _subdirs(self.quota_base):
            if d.name in mine:
                continue
            busy = [p for p in read_ids(d / PROCS.file) if _alive(p)]
            if busy:
                left.append(f"{d} still has processes {busy}")
                continue
            try:
                remove_dir(d)
            except CgroupError as e:
                left.append(str(e))
        if not _subdirs(self.quota_base):
            remove_dir(self.quota_base)
        return left

    def teardown(self) -> None:
        self.cleanup()

    def describe(self) -> str:
        return f"cgroup v{self.version} {self.base}"


def cgroup_version_of(root: str | Path = "/sys/fs/cgroup") -> int:
    """2 where ``root`` is a cgroup2 mount (a unified hierarchy's root has
    ``cgroup.controllers``), else 1 (v1 or hybrid: one directory per controller)."""
    return 2 if (Path(root) / CONTROLLERS.v2).is_file() else 1


def _subdirs(d: Path) -> list[Path]:
    try:
        return sorted(p for p in d.iterdir() if p.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


__all__ = ["SlurmJobCgroups", "CgroupError", "cgroup_version_of", "format_cpus"]
