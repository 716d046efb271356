"""The device files a job may not open, as the kernel names them (type, major, minor).

GPUs are handed out by index; each index stands for one device file (``/dev/nvidia0``
...). A job's cgroup is denied the files of every GPU it was not granted, as Slurm's
``ConstrainDevices`` does: cgroup v1 through the devices controller, cgroup v2 through
an eBPF device program (``coda.runtime.bpf_devices``). The numbers come from stat(2),
never from the file's name."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_NVIDIA_RE = re.compile(r"^nvidia(0|[1-9][0-9]{0,2})$")  # nvidia00 is no GPU's name
MAJORS, MINORS = 1 << 12, 1 << 20  # Linux's dev_t: a 12-bit major, a 20-bit minor


class DeviceError(ValueError):
    """A path that is not a device file the agent can guard."""


@dataclass(frozen=True, order=True)
class Device:
    """One device node: ``kind`` "c" (character) or "b" (block)."""

    kind: str
    major: int
    minor: int
    path: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("c", "b"):
            raise DeviceError(f"device kind must be c or b, not {self.kind!r}")
        if not (0 <= self.major < MAJORS and 0 <= self.minor < MINORS):
            raise DeviceError(f"device numbers out of range: {self.major}:{self.minor}")

    @property
    def rule(self) -> str:
        """The line cgroup v1's devices.allow/devices.deny take: all access to it."""
        return f"{self.kind} {self.major}:{self.minor} rwm"

    def __str__(self) -> str:
        return f"{self.path or 'device'} ({self.kind} {self.major}:{self.minor})"


def device_of(path: str | os.PathLike[str]) -> Device:
    """The device a path names, followed through symlinks as open(2) would."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise DeviceError(f"{os.fspath(path)}: {e.strerror or e}") from None
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        raise DeviceError(f"{os.fspath(path)}: not a device file")
    return Device(kind, os.major(st.st_rdev), os.minor(st.st_rdev), os.fspath(path))


def nvidia_devices(dev: str | os.PathLike[str] = "/dev") -> list[Device]:
    """The GPUs' device files under ``dev`` (nvidia0, nvidia1, ...), in N's order (a
    gap shifts the GPUs after it); those that are not device files, or name a device
    already found, are left out."""
    found: list[tuple[int, Device]] = []
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    for name in names:
        m = _NVIDIA_RE.match(name)
        if m is None:
            continue
        try:
            found.append((int(m.group(1)), device_of(Path(dev) / name)))
        except DeviceError:
            continue
    out: dict[tuple[str, int, int], Device] = {}
    for _, d in sorted(found):
        out.setdefault((d.kind, d.major, d.minor), d)
    return list(out.values())


def denied(gpu_devices: Sequence[Device], granted: Sequence[int]) -> list[Device]:
    """The devices of the GPUs a job was not granted (every one, for a CPU job)."""
    keep = set(granted)
    return [d for i, d in enumerate(gpu_devices) if i not in keep]
