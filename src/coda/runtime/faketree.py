"""A cgroup tree in an ordinary directory, for tests, benchmarks and dry runs.

The driver code is the same as on the real kernel; only what the kernel does by
itself is emulated here: a group's process list holds the processes put there
and their live descendants, and forgets those that exited. Without that, an
agent on a fake tree would signal pids of processes long gone (and perhaps
reused).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coda.runtime.shim import stat_fields

CG = "/sys/fs/cgroup"


def build_v1_tree(
    root: str | Path,
    cpus: int,
    controllers: tuple[str, ...] = ("cpuset", "cpu", "cpuacct", "freezer"),
) -> Path:
    """Make a cgroup v1 layout with ``cpus`` CPUs under ``root``; returns its mounts file
    (use with ``detect(mounts, prefix=root)`` or ``coda agent --cgroup-mounts/--cgroup-prefix``)."""
    root = Path(root)
    lines = []
    for ctl in controllers:
        (root / CG.lstrip("/") / ctl).mkdir(parents=True, exist_ok=True)
        lines.append(f"cgroup {CG}/{ctl} cgroup rw,{ctl} 0 0")
    (root / CG.lstrip("/") / "cpuset" / "cpuset.cpus").write_text(f"0-{cpus - 1}\n")
    (root / CG.lstrip("/") / "cpuset" / "cpuset.mems").write_text("0\n")
    mounts = root / "mounts"
    mounts.write_text("\n".join(lines) + "\n")
    return mounts


def _live(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and len(fields) > 0 and fields[0] != "Z"


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = [int(t.name) for t in Path(f"/proc/{p}/task").iterdir() if t.name.isdigit()]
        except OSError:
            continue
        for t in tids:
            try:
                kids = [int(k) for k in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


class LiveProcs:
    """Wraps a driver on a fake tree so its process lists behave like the kernel's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def pids(self, name: str) -> list[int]:
        seen: dict[int, None] = {}
        for p in self._inner.pids(name):
            if _live(p):
                seen[p] = None
                for d in _descendants(p):
                    if _live(d):
                        seen[d] = None
        out = list(seen)
        for path in self._inner.procs_files(name):
            Path(path).write_text("".join(f"{p}\n" for p in out))
        return out
