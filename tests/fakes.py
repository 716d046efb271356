"""A fake cgroup tree in a temp directory (Koordinator style): the same driver code
runs on it in tests and on the real kernel in production."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CG = "/sys/fs/cgroup"


class Affinity:
    """Records setaffinity calls; tids in ``gone`` behave like exited threads."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, set[int]]] = []
        self.gone: set[int] = set()

    def __call__(self, tid: int, cpus: set[int]) -> None:
        if tid in self.gone:
            raise ProcessLookupError(tid)
        self.calls.append((tid, set(cpus)))


def v1_tree(
    tmp_path: Path, comount: bool = False, freezer: bool = True, devices: bool = False
) -> Path:
    """Build a v1 tree under tmp_path and return the mounts file describing it."""
    cpu = ["cpu,cpuacct"] if comount else ["cpu", "cpuacct"]
    dirs = ["cpuset", *cpu, "memory"] + (["freezer"] if freezer else [])
    dirs += ["devices"] if devices else []
    lines = [f"tmpfs {CG} tmpfs rw,nosuid 0 0"]
    for d in dirs:
        (tmp_path / CG.lstrip("/") / d).mkdir(parents=True)
        lines.append(f"cgroup {CG}/{d} cgroup rw,nosuid,relatime,{d} 0 0")
    (tmp_path / CG.lstrip("/") / "cpuset" / "cpuset.cpus").write_text("0-3\n")
    (tmp_path / CG.lstrip("/") / "cpuset" / "cpuset.mems").write_text("0\n")
    lines.append(f"cgroup2 {CG}/unified cgroup2 rw,nosuid 0 0")
    (tmp_path / CG.lstrip("/") / "unified").mkdir()
    (tmp_path / CG.lstrip("/") / "unified" / "cgroup.controllers").write_text("")
    mounts = tmp_path / "mounts"
    mounts.write_text("\n".join(lines) + "\n")
    return mounts


def v2_tree(tmp_path: Path, controllers: str = "cpuset cpu io memory pids") -> Path:
    root = tmp_path / CG.lstrip("/")
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("memory\n")
    (root / "cpuset.cpus.effective").write_text("0-3\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"sysfs /sys sysfs rw 0 0\ncgroup2 {CG} cgroup2 rw,nsdelegate 0 0\n")
    return mounts


def fake_v1_driver(tmp_path: Path) -> Any:
    """A cgroup v1 driver on a fake tree under tmp_path that sees real processes."""
    from coda.runtime.cgroups import CgroupV1, detect
    from coda.runtime.faketree import LiveProcs

    mounts = v1_tree(tmp_path)
    drv = detect(str(mounts), prefix=str(tmp_path), setaffinity=Affinity())
    assert isinstance(drv, CgroupV1)
    return LiveProcs(drv)


def tick_until(agent: Any, cond: Callable[[], bool], timeout: float = 20.0) -> None:
    """Tick a node agent every period until ``cond()`` holds (AssertionError after
    ``timeout`` seconds)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        agent.tick()
        if cond():
            return
        time.sleep(agent.config.period_s)
    raise AssertionError("condition not reached in time")


# A harm budget that takes nothing from what the policy does without one (shrinks to its
# own floor, any requeue, CPU jobs on any bus): for tests of
# reclaim and throttling themselves, whose jobs
# are seconds or minutes old (the default budget takes nothing from so young a job:
# tests/test_harm_budget.py).
LOOSE_HARM = {
    "harm.share": "0.99",
    "harm.initial_s": "1e9",
    "harm.cap_s": "1e9",
    "harm.bus_share": "1000",
}


# A job that tries to open each path in argv[2:] and writes what happened, with the GPU
# variables it was given, as JSON to argv[1] (the GPU-isolation tests on the kernel).
OPEN_PROBE = """import json, os, sys
seen = {}
for path in sys.argv[2:]:
    try:
        os.close(os.open(path, os.O_RDONLY))
        seen[path] = "opened"
    except OSError as e:
        seen[path] = e.strerror
for name in ("CUDA_VISIBLE_DEVICES", "CODA_GPU_IDS"):
    seen[name] = os.environ.get(name)
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump(seen, f)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
"""
