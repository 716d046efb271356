"""Thin cgroup drivers for the node agent: CPU sets, CFS quota, freezer, accounting.

Every driver manages child groups ``<parent>/<name>`` under one CODA parent group.
All paths hang off an injectable root (and, for v1, per-controller mount dirs), so
the tests run the same code on a fake tree in a temporary directory (Koordinator
style) and on the real kernel.

Control files are written with one ``write`` of the whole value, as the kernel
parses each write on its own. The file is opened with O_CREAT so that a plain
directory tree (tests) works too; on cgroupfs the files already exist.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from coda.runtime.bpf_devices import BpfDeviceGuard, BpfError
from coda.runtime.cgroup_files import (
    CONTROLLERS,
    CPU_PERIOD,
    CPU_QUOTA,
    CPU_USAGE,
    CPUS,
    DEVICES_DENY,
    EFFECTIVE_CPUS,
    EVENTS,
    FREEZE,
    MEMS,
    PROCS,
    SUBTREE_CONTROL,
    THREADS,
    CpuQuota,
)
from coda.runtime.devices import Device

SetAffinity = Callable[[int, set[int]], None]
WriteFile = Callable[[Path, str], None]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_V1_CONTROLLERS = ("cpuset", "cpu", "cpuacct", "freezer", "devices")
# Hierarchies a v1 driver uses only once asked to: its groups stay out of them otherwise.
_V1_ON_DEMAND = ("devices",)


class CgroupError(RuntimeError):
    """A cgroup operation failed; the message names the file and the value."""


class CgroupBusy(CgroupError):
    """A group still holds processes or child groups."""


# ---------------------------------------------------------------- names and files


def validate_name(name: str) -> str:
    """Return ``name`` if it is a safe single path component, else raise ValueError."""
    if not isinstance(name, str) or name in (".", "..") or not NAME_RE.fullmatch(name):
        raise ValueError(
            f"invalid group name {name!r}: want 1-64 characters of [A-Za-z0-9_.-], "
            "starting with a letter or digit"
        )
    return name


def safe_child(base: Path, name: str) -> Path:
    """``base/name`` after checking that it resolves to a direct child of ``base``.

    The regex already rules out separators; resolving also catches a symlink planted
    in the tree that would lead a job's group outside the cgroup root.
    """
    validate_name(name)
    path = base / name
    if path.resolve().parent != base.resolve():
        raise ValueError(f"group {name!r} resolves outside {base}: {path.resolve()}")
    return path


def write_file(path: Path, value: str, error: type[Exception] = CgroupError) -> None:
    """Write ``value`` with a single write(2); wrap OSError with the file and value."""
    data = value.encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as e:
        raise error(f"write {value!r} to {path}: {os.strerror(e.errno or 0)}") from e


def read_file(path: Path, error: type[Exception] = CgroupError) -> str:
    try:
        return path.read_text().strip()
    except OSError as e:
        raise error(f"read {path}: {os.strerror(e.errno or 0)}") from e


def format_cpus(cpus: Iterable[int]) -> str:
    """Compact cpulist: [0, 1, 2, 3, 6] -> "0-3,6"."""
    ids = sorted(set(cpus))
    if any(c < 0 for c in ids):
        raise ValueError(f"negative CPU id in {ids}")
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


MAX_CPU_ID = 16383  # beyond any kernel's NR_CPUS: a larger id is a typo or an attack


def parse_cpus(text: str) -> list[int]:
    """Parse a cpulist such as "0-2,5" (empty string -> []); ValueError for ids outside
    0..MAX_CPU_ID or a range that runs backwards (so "0-99999999999" costs nothing)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo_s, _, hi_s = part.partition("-")
        lo, hi = int(lo_s), int(hi_s or lo_s)
        if not 0 <= lo <= hi <= MAX_CPU_ID:
            raise ValueError(f"CPU range {part!r} is not within 0-{MAX_CPU_ID} in order")
        out.update(range(lo, hi + 1))
    return sorted(out)


def read_ids(path: Path) -> list[int]:
    """PIDs/TIDs listed in a cgroup.procs/tasks file.

    A missing file inside an existing group only happens on a fake tree (mkdir
    there creates no control files), so it reads as empty.
    """
    if not path.exists() and path.parent.is_dir():
        return []
    return [int(x) for x in read_file(path).split()]


def _child_names(path: Path) -> list[str]:
    if not path.is_dir():
        return []
    return sorted(
        c.name
        for c in path.iterdir()
        if c.is_dir() and not c.is_symlink() and NAME_RE.fullmatch(c.name)
    )


def remove_dir(path: Path) -> None:
    """Remove one group directory; missing is fine, processes/children -> CgroupBusy."""
    if not path.is_dir():
        return
    children = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.is_symlink())
    if children:
        raise CgroupBusy(f"{path} still has child groups: {', '.join(children)}")
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno == errno.EBUSY:
            raise CgroupBusy(f"rmdir {path}: {os.strerror(e.errno)} (processes remain)") from e
        if e.errno != errno.ENOTEMPTY:
            raise CgroupError(f"rmdir {path}: {os.strerror(e.errno or 0)}") from e
        # cgroupfs never answers ENOTEMPTY (it drops its control files itself); a
        # plain directory tree (tests) does, so drop the files we wrote there.
        for f in path.iterdir():
            f.unlink()
        os.rmdir(path)


# ---------------------------------------------------------------- ordered cpuset writes


class CpusetWriter:
    """Writes a CPU set down a tree of groups in the order the kernel accepts.

    A child cpuset must stay inside its parent's: growing writes the parents first
    (to the union of old and new, so every child write stays inside), then every
    group settles on the new set children first. The kernel keeps a self-pinned
    task on its own (narrower) mask when its cpuset grows, so a grown set is then
    applied to every thread with ``sched_setaffinity``.
    """

    def __init__(self, setaffinity: SetAffinity, write: WriteFile = write_file) -> None:
        self.setaffinity = setaffinity
        self.write_file = write  # injectable: tests record the order of the writes

    def write(
        self,
        tree: Sequence[Path],
        new: set[int],
        old: set[int],
        threads: Callable[[], list[int]],
    ) -> None:
        """Set ``new`` on every group of ``tree`` (parents first), grown from ``old``;
        ``threads`` lists the tasks to widen, read once the sets are written."""
        text = format_cpus(new)
        grows = bool(new - old)
        if grows and len(tree) > 1:
            union = format_cpus(new | old)
            for d in tree:
                self.write_file(d / CPUS.file, union)
        for d in reversed(tree):
            self.write_file(d / CPUS.file, text)
        if grows:
            self.widen(threads(), new)

    def widen(self, tids: Iterable[int], cpus: set[int]) -> None:
        for tid in tids:
            try:
                self.setaffinity(tid, set(cpus))
            except ProcessLookupError:
                continue  # exited meanwhile
            except OSError as e:
                raise CgroupError(
                    f"sched_setaffinity({tid}, {format_cpus(cpus)}): {os.strerror(e.errno or 0)}"
                ) from e


# ---------------------------------------------------------------- the interface


class JobGroups(Protocol):
    """A node's job groups as the agent acts on them, whoever made them: the agent's
    own (``CgroupDriver``) or Slurm's (``coda.slurm.cgroups.SlurmJobCgroups``)."""

    version: int

    def remove(self, name: str) -> None: ...
    def exists(self, name: str) -> bool: ...
    def set_cpus(self, name: str, cpus: Iterable[int]) -> None: ...
    def cpus(self, name: str) -> list[int]: ...
    def set_quota(self, name: str, cores: float | None) -> None: ...
    def quota(self, name: str) -> float | None: ...
    def pids(self, name: str) -> list[int]: ...
    def threads(self, name: str) -> list[int]: ...


@runtime_checkable
class CgroupDriver(JobGroups, Protocol):
    """The agent's own hierarchy (v1 or v2): its parent group, and job groups it makes."""

    def setup(self) -> None: ...
    def teardown(self) -> None: ...
    def parent_path(self) -> Path: ...
    def create(self, name: str) -> None: ...
    def names(self) -> list[str]: ...
    def freeze(self, name: str) -> None: ...
    def thaw(self, name: str) -> None: ...
    def frozen(self, name: str) -> bool: ...
    def add_pid(self, name: str, pid: int) -> None: ...
    def procs_files(self, name: str) -> list[str]: ...
    def cpu_usage_s(self, name: str) -> float: ...
    def available_cpus(self) -> list[int]: ...
    def enable_device_guard(self) -> str | None: ...
    def deny_devices(self, name: str, devices: Sequence[Device]) -> None: ...


class DeviceGuard(Protocol):
    """Refuses devices to a cgroup v2 directory (``BpfDeviceGuard`` on the kernel)."""

    def attach(self, cgroup_dir: Path, denied: Sequence[Device]) -> None: ...
    def load(self, denied: Sequence[Device]) -> int: ...


class _Base:
    """Logic shared by both versions; subclasses say which file lives where."""

    version = 0

    def __init__(self, parent: str, setaffinity: SetAffinity, period_us: int) -> None:
        self.parent = validate_name(parent)
        self.cpuset_writer = CpusetWriter(setaffinity)
        if not 1000 <= period_us <= 1_000_000:
            raise ValueError(f"period_us must be in [1000, 1000000], got {period_us}")
        self.period_us = period_us

    # subclasses provide these
    def _cpuset_dir(self, name: str) -> Path:  # the group's dir holding cpuset.* files
        raise NotImplementedError

    def _threads_file(self, name: str) -> Path:
        raise NotImplementedError

    def threads(self, name: str) -> list[int]:
        return read_ids(self._threads_file(name))

    def exists(self, name: str) -> bool:
        return self._cpuset_dir(name).is_dir()

    def cpus(self, name: str) -> list[int]:
        return parse_cpus(read_file(self._cpuset_dir(name) / CPUS.file))

    def _old_cpus(self, name: str) -> set[int]:
        return set(self.cpus(name))

    def set_cpus(self, name: str, cpus: Iterable[int]) -> None:
        new = set(cpus)
        if not new:
            raise ValueError("set_cpus needs at least one CPU")
        old = self._old_cpus(name)
        self.cpuset_writer.write([self._cpuset_dir(name)], new, old, lambda: self.threads(name))

    @property
    def cpu_quota(self) -> CpuQuota:
        return CpuQuota(self.period_us)


# ---------------------------------------------------------------- cgroup v1


class CgroupV1(_Base):
    """cgroup v1: one mount per controller (cpu and cpuacct may share one)."""

    version = 1

    def __init__(
        self,
        root: str | Path = "/sys/fs/cgroup",
        parent: str = "coda",
        setaffinity: SetAffinity = os.sched_setaffinity,
        period_us: int = 100_000,
        mounts: dict[str, Path] | None = None,
    ) -> None:
        super().__init__(parent, setaffinity, period_us)
        self.root = Path(root)
        if mounts is None:
            # Conventional layout: <root>/<controller> (a co-mounted cpu,cpuacct
            # usually also has cpu and cpuacct symlinks there).
            mounts = {c: self.root / c for c in _V1_CONTROLLERS if (self.root / c).is_dir()}
        self.mounts = {c: Path(p) for c, p in mounts.items() if c in _V1_CONTROLLERS}
        self.guards_devices = False  # enable_device_guard: job groups in devices too
        missing = [c for c in ("cpuset", "cpu") if c not in self.mounts]
        if missing:
            raise CgroupError(f"cgroup v1 needs controllers {', '.join(missing)} mounted")

    # paths
    def _mount(self, controller: str) -> Path:
        if controller not in self.mounts:
            raise CgroupError(f"{controller} not mounted")
        return self.mounts[controller]

    def _parent_dir(self, controller: str) -> Path:
        return self._mount(controller) / self.parent

    def _dir(self, controller: str, name: str) -> Path:
        return safe_child(self._parent_dir(controller), name)

    def _mount_dirs(self, in_use: bool = False) -> list[Path]:
        """Distinct mount dirs, cpuset first (co-mounted controllers count once); with
        ``in_use``, only those groups are made in (an on-demand hierarchy once enabled).
        Listing and removal look at every one: an earlier run may have used it."""
        out: list[Path] = []
        seen: set[Path] = set()
        for c in _V1_CONTROLLERS:
            if in_use and c in _V1_ON_DEMAND and not self.guards_devices:
                continue
            if c in self.mounts and self.mounts[c].resolve() not in seen:
                seen.add(self.mounts[c].resolve())
                out.append(self.mounts[c])
        return out

    def _group_dirs(self, name: str, in_use: bool = False) -> list[Path]:
        return [safe_child(m / self.parent, name) for m in self._mount_dirs(in_use)]

    def _cpuset_dir(self, name: str) -> Path:
        return self._dir("cpuset", name)

    def _threads_file(self, name: str) -> Path:
        return self._cpuset_dir(name) / THREADS.v1

    # lifecycle
    def parent_path(self) -> Path:
        """The parent group's directory that stands for it (the cpuset hierarchy's)."""
        return self._parent_dir("cpuset")

    def setup(self) -> None:
        for m in self._mount_dirs(in_use=True):
            (m / self.parent).mkdir(exist_ok=True)
        # A new v1 cpuset is empty and refuses tasks (ENOSPC) until cpus/mems are set.
        self._inherit_cpuset(self._mount("cpuset"), self._parent_dir("cpuset"))

    @staticmethod
    def _inherit_cpuset(src: Path, dst: Path) -> None:
        for f in (CPUS.file, MEMS.file):  # cpus first, as the kernel wants
            cur = dst / f
            if not cur.exists() or not read_file(cur):
                write_file(cur, read_file(src / f))

    def teardown(self) -> None:
        left = self.names()
        if left:
            raise CgroupBusy(f"parent {self.parent!r} still has groups: {', '.join(left)}")
        for m in self._mount_dirs():
            remove_dir(m / self.parent)

    def create(self, name: str) -> None:
        dirs = self._group_dirs(name, in_use=True)
        if not self._parent_dir("cpuset").is_dir():
            raise CgroupError(f"parent {self._parent_dir('cpuset')} missing; call setup()")
        for d in dirs:
            d.mkdir(exist_ok=True)
            if d == dirs[0]:  # cpuset: fill it before any other step can add tasks
                self._inherit_cpuset(self._parent_dir("cpuset"), d)

    def remove(self, name: str) -> None:
        dirs = self._group_dirs(name)
        busy = sorted({p for d in dirs if d.is_dir() for p in read_ids(d / PROCS.file)})
        if busy:
            raise CgroupBusy(f"group {name!r} still has processes: {busy}")
        for d in dirs:
            remove_dir(d)

    def names(self) -> list[str]:
        found: set[str] = set()
        for m in self._mount_dirs():
            found.update(_child_names(m / self.parent))
        return sorted(found)

    # quota
    def set_quota(self, name: str, cores: float | None) -> None:
        d = self._dir("cpu", name)
        quota = self.cpu_quota.v1_quota(cores)  # checked before anything is written
        if cores is not None:
            period = d / CPU_PERIOD.v1
            if not period.exists() or read_file(period) != str(self.period_us):
                write_file(period, str(self.period_us))
        write_file(d / CPU_QUOTA.v1, quota)

    def quota(self, name: str) -> float | None:
        d = self._dir("cpu", name)
        quota = read_file(d / CPU_QUOTA.v1)
        return None if int(quota) < 0 else CpuQuota.read_v1(quota, read_file(d / CPU_PERIOD.v1))

    # freezer
    def freeze(self, name: str) -> None:
        write_file(self._dir("freezer", name) / FREEZE.v1, "FROZEN")

    def thaw(self, name: str) -> None:
        write_file(self._dir("freezer", name) / FREEZE.v1, "THAWED")

    def frozen(self, name: str) -> bool:
        # FREEZING (still in progress) counts as not frozen yet.
        return read_file(self._dir("freezer", name) / FREEZE.v1) == "FROZEN"

    # processes
    def procs_files(self, name: str) -> list[str]:
        return [str(d / PROCS.file) for d in self._group_dirs(name, in_use=True)]

    def add_pid(self, name: str, pid: int) -> None:
        for f in self.procs_files(name):  # cpuset first: its cpus/mems are set
            write_file(Path(f), str(int(pid)))

    def pids(self, name: str) -> list[int]:
        d = self._cpuset_dir(name)
        try:
            return read_ids(d / PROCS.file)
        except CgroupError:
            if d.is_dir():
                raise
        # Not in cpuset: a group an earlier run left in another hierarchy (devices).
        return sorted({p for g in self._group_dirs(name) if g.is_dir()
                       for p in read_ids(g / PROCS.file)})  # fmt: skip

    # accounting
    def cpu_usage_s(self, name: str) -> float:
        return int(read_file(self._dir("cpuacct", name) / CPU_USAGE.v1)) / 1e9

    # devices
    def enable_device_guard(self) -> str | None:
        """From now on make job groups in the devices hierarchy too, so that
        ``deny_devices`` can act; call it before ``setup``. Returns why it cannot (None:
        on)."""
        if "devices" not in self.mounts:
            return "cgroup v1's devices controller is not mounted"
        self.guards_devices = True
        return None

    def deny_devices(self, name: str, devices: Sequence[Device]) -> None:
        """Refuse every access to ``devices`` to the group's processes, those there now
        (moved into its devices group, as a job found after a restart may not be) and
        those to come: one rule per write, as the kernel parses them."""
        if not devices:
            return
        if not self.guards_devices:
            raise CgroupError("cannot isolate devices: the device guard is not enabled")
        d = self._dir("devices", name)
        d.mkdir(exist_ok=True)
        for dev in devices:
            write_file(d / DEVICES_DENY.v1, dev.rule)
        for pid in self.pids(name):
            try:
                write_file(d / PROCS.file, str(pid))
            except CgroupError as e:
                if not (isinstance(e.__cause__, OSError) and e.__cause__.errno == errno.ESRCH):
                    raise  # ESRCH: it exited meanwhile

    def available_cpus(self) -> list[int]:
        own = self._parent_dir("cpuset") / CPUS.file
        cpus = parse_cpus(read_file(own)) if own.exists() else []
        return cpus or parse_cpus(read_file(self._mount("cpuset") / CPUS.file))


# ---------------------------------------------------------------- cgroup v2


class CgroupV2(_Base):
    """cgroup v2: one unified hierarchy; controllers enabled via subtree_control."""

    version = 2
    _controllers = ("cpuset", "cpu")

    def __init__(
        self,
        root: str | Path = "/sys/fs/cgroup",
        parent: str = "coda",
        setaffinity: SetAffinity = os.sched_setaffinity,
        period_us: int = 100_000,
        device_guard: DeviceGuard | None = None,
    ) -> None:
        super().__init__(parent, setaffinity, period_us)
        self.root = Path(root)
        self.device_guard: DeviceGuard = device_guard or BpfDeviceGuard()
        self.guards_devices = False  # enable_device_guard found the kernel willing

    @property
    def parent_dir(self) -> Path:
        return self.root / self.parent

    def _group(self, name: str) -> Path:
        return safe_child(self.parent_dir, name)

    def _cpuset_dir(self, name: str) -> Path:
        return self._group(name)

    def _threads_file(self, name: str) -> Path:
        return self._group(name) / THREADS.v2

    def _enable(self, d: Path) -> None:
        """Enable our controllers for the children of ``d`` where not yet enabled."""
        ctl = d / SUBTREE_CONTROL.v2
        # The kernel lists bare names; a fake tree keeps the "+name" we wrote.
        enabled = [c.lstrip("+") for c in read_file(ctl).split()] if ctl.exists() else []
        want = [c for c in self._controllers if c not in enabled]
        if want:
            write_file(ctl, " ".join("+" + c for c in want))

    def parent_path(self) -> Path:
        return self.parent_dir

    def setup(self) -> None:
        available = read_file(self.root / CONTROLLERS.v2).split()
        missing = [c for c in self._controllers if c not in available]
        if missing:
            raise CgroupError(f"{self.root / 'cgroup.controllers'} lacks {', '.join(missing)}")
        self._enable(self.root)
        self.parent_dir.mkdir(exist_ok=True)
        self._enable(self.parent_dir)

    def teardown(self) -> None:
        left = self.names()
        if left:
            raise CgroupBusy(f"parent {self.parent!r} still has groups: {', '.join(left)}")
        remove_dir(self.parent_dir)

    def create(self, name: str) -> None:
        d = self._group(name)
        if not self.parent_dir.is_dir():
            raise CgroupError(f"parent {self.parent_dir} missing; call setup()")
        d.mkdir(exist_ok=True)

    def remove(self, name: str) -> None:
        d = self._group(name)
        busy = read_ids(d / PROCS.file) if d.is_dir() else []
        if busy:
            raise CgroupBusy(f"group {name!r} still has processes: {busy}")
        remove_dir(d)

    def names(self) -> list[str]:
        return _child_names(self.parent_dir)

    def _old_cpus(self, name: str) -> set[int]:
        # An empty v2 cpuset.cpus means "all of the parent's".
        f = self._group(name) / CPUS.file
        old = parse_cpus(read_file(f)) if f.exists() else []
        return set(old) if old else set(self.available_cpus())

    def set_quota(self, name: str, cores: float | None) -> None:
        write_file(self._group(name) / CPU_QUOTA.v2, self.cpu_quota.v2_max(cores))

    def quota(self, name: str) -> float | None:
        return self.cpu_quota.read_v2(read_file(self._group(name) / CPU_QUOTA.v2))

    def freeze(self, name: str) -> None:
        write_file(self._group(name) / FREEZE.v2, "1")

    def thaw(self, name: str) -> None:
        write_file(self._group(name) / FREEZE.v2, "0")

    def frozen(self, name: str) -> bool:
        d = self._group(name)
        events = d / EVENTS.v2
        if events.exists():  # the state reached, not just the one asked for
            return "frozen 1" in read_file(events).splitlines()
        return read_file(d / FREEZE.v2) == "1"

    def procs_files(self, name: str) -> list[str]:
        return [str(self._group(name) / PROCS.file)]

    def add_pid(self, name: str, pid: int) -> None:
        write_file(self._group(name) / PROCS.file, str(int(pid)))

    def pids(self, name: str) -> list[int]:
        return read_ids(self._group(name) / PROCS.file)

    def cpu_usage_s(self, name: str) -> float:
        f = self._group(name) / CPU_USAGE.v2
        for line in read_file(f).splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise CgroupError(f"{f} has no usage_usec")

    def enable_device_guard(self) -> str | None:
        """Check that the kernel lets this agent attach a device program beside whatever
        sits above its groups (tried on a group of its own, removed again), so that
        ``deny_devices`` can act. Returns why it cannot (None: on)."""
        probe = self.root / f"{self.parent}-device-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError as e:
            return f"cgroup v2's eBPF device programs: cannot make {probe}: {e.strerror or e}"
        problem = None
        try:
            self.device_guard.attach(probe, [])
        except OSError as e:
            problem = f"cgroup v2's eBPF device programs: {e.strerror or e}"
        try:
            remove_dir(probe)
        except CgroupError as e:
            problem = problem or f"cannot remove {probe}: {e}"
        self.guards_devices = problem is None
        return problem

    def deny_devices(self, name: str, devices: Sequence[Device]) -> None:
        """Refuse every access to ``devices`` to the group's processes (an eBPF device
        program on the group). Call it before the group has processes."""
        if not devices:
            return
        if not self.guards_devices:
            raise CgroupError("cannot isolate devices: the device guard is not enabled")
        try:
            self.device_guard.attach(self._group(name), devices)
        except BpfError as e:
            raise CgroupError(f"cannot isolate devices: {e.strerror}") from None

    def available_cpus(self) -> list[int]:
        for d in (self.parent_dir, self.root):
            f = d / EFFECTIVE_CPUS.v2
            if f.exists():
                cpus = parse_cpus(read_file(f))
                if cpus:
                    return cpus
        raise CgroupError(f"no cpuset.cpus.effective under {self.root}")


# ---------------------------------------------------------------- detection


def _unescape(field: str) -> str:
    """/proc/self/mounts escapes space, tab, newline and backslash as octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _parse_mounts(text: str, prefix: str) -> tuple[dict[str, Path], list[Path]]:
    v1: dict[str, Path] = {}
    v2: list[Path] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        path = Path(prefix + _unescape(fields[1])) if prefix else Path(_unescape(fields[1]))
        if fields[2] == "cgroup":
            for opt in fields[3].split(","):
                if opt in _V1_CONTROLLERS:
                    v1.setdefault(opt, path)  # first mount of a hierarchy wins
        elif fields[2] == "cgroup2":
            v2.append(path)
    return v1, v2


def detect(
    mounts_file: str = "/proc/self/mounts",
    parent: str = "coda",
    prefix: str | os.PathLike[str] = "",
    setaffinity: SetAffinity = os.sched_setaffinity,
    prefer: str | None = None,
) -> CgroupDriver:
    """Pick the driver the mounts allow: v1 if cpuset and cpu are mounted as v1,
    else v2 if a cgroup2 mount offers cpuset and cpu. ``prefix`` is prepended to
    every mount path (tests point it at a fake tree); ``prefer`` forces "v1"/"v2"."""
    if prefer not in (None, "v1", "v2"):
        raise ValueError(f"prefer must be 'v1', 'v2' or None, got {prefer!r}")
    try:
        text = Path(mounts_file).read_text()
    except OSError as e:
        raise CgroupError(f"read {mounts_file}: {os.strerror(e.errno or 0)}") from e
    v1, v2 = _parse_mounts(text, os.fspath(prefix))

    problems: list[str] = []
    if prefer in (None, "v1"):
        missing = [c for c in ("cpuset", "cpu") if c not in v1]
        if not missing:
            return CgroupV1(v1["cpuset"].parent, parent, setaffinity, mounts=v1)
        problems.append(f"cgroup v1 lacks {', '.join(missing)} mounts")
    if prefer in (None, "v2"):
        if not v2:
            problems.append("no cgroup2 mount")
        for path in v2:
            ctl = path / CONTROLLERS.v2
            have = ctl.read_text().split() if ctl.exists() else []
            missing = [c for c in ("cpuset", "cpu") if c not in have]
            if not missing:
                return CgroupV2(path, parent, setaffinity)
            problems.append(f"cgroup2 at {path} lacks controllers {', '.join(missing)}")
    raise CgroupError(f"no usable cgroup hierarchy in {mounts_file}: {'; '.join(problems)}")
