"""Intel RDT through resctrl: memory-bandwidth caps (MBA) and MBM counters per group.

Optional: most machines have no resctrl, so nothing here fails at import or
construction; ``available``/``mba_available``/``mon_available`` say what exists.
A group is a directory under the resctrl root; the root may be a fake tree (tests).
MB values are percentages (Intel); AMD's absolute values are not handled.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, runtime_checkable

from coda.runtime.cgroups import read_file, safe_child, write_file


class ResctrlError(RuntimeError):
    """A resctrl operation failed; the message names the file and the value."""


@runtime_checkable
class ResctrlControl(Protocol):
    """What the node agent uses of resctrl; the real one (``Resctrl``) and the absent
    one (``NoResctrl``) both implement it, so callers ask the flags, never ``getattr``."""

    @property
    def available(self) -> bool: ...
    @property
    def mba_available(self) -> bool: ...
    @property
    def mon_available(self) -> bool: ...
    def create(self, name: str) -> None: ...
    def remove(self, name: str) -> None: ...
    def assign(self, name: str, pids: Iterable[int]) -> None: ...
    def set_mb(self, name: str, percent: int) -> None: ...
    def mbm_bytes(self, name: str) -> int: ...
    def mbm_counts(self) -> dict[tuple[str, str], int] | None: ...


class NoResctrl:
    """resctrl on a machine without it: every flag is False, nothing is counted, and
    a change asked for anyway fails (a caller that checked the flags asks none)."""

    @property
    def available(self) -> bool:
        return False

    @property
    def mba_available(self) -> bool:
        return False

    @property
    def mon_available(self) -> bool:
        return False

    def create(self, name: str) -> None:
        raise ResctrlError(f"no resctrl: cannot create group {name!r}")

    def remove(self, name: str) -> None:
        return  # no group can exist

    def assign(self, name: str, pids: Iterable[int]) -> None:
        raise ResctrlError(f"no resctrl: cannot move tasks into {name!r}")

    def set_mb(self, name: str, percent: int) -> None:
        raise ResctrlError(f"no resctrl: cannot cap {name!r} at {percent}%")

    def mbm_bytes(self, name: str) -> int:
        return 0

    def mbm_counts(self) -> dict[tuple[str, str], int] | None:
        return None


class Resctrl:
    """The kernel's resctrl filesystem (or a fake tree of it) under ``root``."""

    def __init__(self, root: str | Path = "/sys/fs/resctrl") -> None:
        self.root = Path(root)

    @property
    def available(self) -> bool:
        return (self.root / "info").is_dir()

    @property
    def mba_available(self) -> bool:
        return (self.root / "info" / "MB").is_dir()

    @property
    def mon_available(self) -> bool:
        return (self.root / "info" / "L3_MON").is_dir()

    def _group(self, name: str) -> Path:
        if not self.available:
            raise ResctrlError(f"resctrl not mounted at {self.root}")
        return safe_child(self.root, name)

    def create(self, name: str) -> None:
        path = self._group(name)
        try:
            path.mkdir(exist_ok=True)
        except OSError as e:  # e.g. ENOSPC: out of hardware CLOSIDs
            raise ResctrlError(f"mkdir {path}: {os.strerror(e.errno or 0)}") from e

    def remove(self, name: str) -> None:
        """Remove the group; the kernel moves its tasks back to the default group."""
        path = self._group(name)
        try:
            os.rmdir(path)
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.ENOTEMPTY:
                raise ResctrlError(f"rmdir {path}: {os.strerror(e.errno or 0)}") from e
            # resctrl drops a group with its files; only a plain tree (tests) says
            # ENOTEMPTY, and there the files are ours.
            shutil.rmtree(path)

    def assign(self, name: str, pids: Iterable[int]) -> None:
        """Move tasks into the group: the kernel takes one pid per write."""
        path = self._group(name) / "tasks"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError as e:
            raise ResctrlError(f"open {path}: {os.strerror(e.errno or 0)}") from e
        try:
            for pid in pids:
                try:
                    os.write(fd, f"{int(pid)}\n".encode())
                except ProcessLookupError:
                    continue  # exited meanwhile
                except OSError as e:
                    raise ResctrlError(f"write {pid} to {path}: {os.strerror(e.errno or 0)}") from e
        finally:
            os.close(fd)

    def _mb_info(self, leaf: str) -> int:
        return int(read_file(self.root / "info" / "MB" / leaf, ResctrlError))

    def mb_value(self, percent: int) -> int:
        """The value the hardware takes: rounded up to the granularity, within [min, 100]."""
        gran = self._mb_info("bandwidth_gran")
        value = math.ceil(percent / gran) * gran
        return min(100, max(self._mb_info("min_bandwidth"), value))

    def mb(self, name: str) -> dict[int, int]:
        """The group's MB line as {domain: percent}."""
        path = self._group(name) / "schemata"
        for line in read_file(path, ResctrlError).splitlines():
            res, _, doms = line.strip().partition(":")
            if res.strip() == "MB":
                out: dict[int, int] = {}
                for item in doms.split(";"):
                    dom, _, val = item.partition("=")
                    out[int(dom)] = int(val)
                return out
        raise ResctrlError(f"{path} has no MB line")

    def set_mb(self, name: str, percent: int) -> None:
        """Cap the group's memory bandwidth on every domain it lists."""
        if not self.mba_available:
            raise ResctrlError(f"no MBA support under {self.root / 'info'}")
        value = self.mb_value(percent)
        doms = sorted(self.mb(name))
        line = "MB:" + ";".join(f"{d}={value}" for d in doms) + "\n"
        write_file(self._group(name) / "schemata", line, ResctrlError)

    def mbm_bytes(self, name: str) -> int:
        """Cumulative memory traffic of the group, summed over L3 domains (0 if unmonitored)."""
        if not self.mon_available:
            return 0
        return _mbm_total(self._group(name))

    def mbm_counts(self) -> dict[tuple[str, str], int] | None:
        """Cumulative memory traffic (bytes) by (group, L3 domain), for the default group
        ("") and every control group; None without monitoring. A control group counts
        its monitor groups too, so these add up to the node's traffic. A counter that
        cannot be read, or reads anything but a count ("Unavailable" while it is not
        ready), is left out, as is a group that went away meanwhile."""
        if not self.mon_available:
            return None
        out: dict[tuple[str, str], int] = {}
        for domain, count in _domain_counts(self.root):
            out[("", domain)] = count
        try:
            with os.scandir(self.root) as it:
                groups = sorted(e.name for e in it if _plain_dir(e))
        except OSError as e:
            raise ResctrlError(f"list {self.root}: {os.strerror(e.errno or 0)}") from e
        for name in groups:
            if name not in ("info", "mon_data", "mon_groups"):
                for domain, count in _domain_counts(self.root / name):
                    out[(name, domain)] = count
        return out


def _mbm_total(group: Path) -> int:
    """A group's ``mbm_total_bytes`` summed over the L3 domains that give a count."""
    return sum(count for _, count in _domain_counts(group))


def _plain_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _domain_counts(group: Path) -> list[tuple[str, int]]:
    """(domain, bytes) of each ``mon_data/mon_L3_*/mbm_total_bytes`` of a group that
    reads as a count; none if the group or its counters went away."""
    try:
        with os.scandir(group / "mon_data") as it:
            domains = sorted(e.name for e in it if e.name.startswith("mon_L3_") and _plain_dir(e))
    except OSError:
        return []
    out = []
    for d in domains:
        count = _read_count(group / "mon_data" / d / "mbm_total_bytes")
        if count is not None:
            out.append((d, count))
    return out


def _read_count(path: Path) -> int | None:
    """A counter file's value: ASCII digits only, at most 20 of them; None for anything
    else. Never follows a symlink nor waits on a pipe (the tree may be a fake one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, 32)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = data.strip()
    if not (0 < len(text) <= 20 and text.isdigit()):  # bytes.isdigit: ASCII digits only
        return None
    return int(text)
