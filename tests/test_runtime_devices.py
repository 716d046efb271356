"""cgroup v2's device guard on the real kernel: an eBPF device program attached to a
group of a cgroup2 hierarchy refuses the denied devices to the processes in it and
allows the rest. Runs as root wherever a cgroup2 hierarchy is mounted (CI's host has
one beside its v1 controllers, at /sys/fs/cgroup/unified; the program needs no
controller); skips elsewhere. The agent using it: test_runtime_kernel.py (in the
cgroup v2 guest); the program's logic without a kernel: test_devices.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import OPEN_PROBE

from coda.runtime.bpf_devices import BpfDeviceGuard, BpfError
from coda.runtime.devices import device_of


def _cgroup2() -> Path | None:
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


CGROUP2 = _cgroup2()
pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0 or CGROUP2 is None,
    reason="needs root and a cgroup2 mount (runs in CI as root)",
)


@pytest.fixture
def group() -> Iterator[Path]:
    assert CGROUP2 is not None
    d = CGROUP2 / f"coda-devtest-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    d.mkdir()
    yield d
    d.rmdir()  # its processes have exited: the kernel lets the program go with it


def opens_in(group: Path, paths: list[str]) -> dict[str, str]:
    """What a process placed in ``group`` before it starts may open."""
    procs = str(group / "cgroup.procs")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "seen.json"
        subprocess.run(
            [sys.executable, "-c", OPEN_PROBE, str(out), *paths],
            preexec_fn=lambda: Path(procs).write_text(str(os.getpid())),
            check=True,
            timeout=60,
        )
        seen = json.loads(out.read_text())
    return {p: seen[p] for p in paths}


def test_the_program_refuses_the_denied_device_and_allows_the_rest(group: Path) -> None:
    files = ["/dev/full", "/dev/zero", "/dev/null"]
    assert opens_in(group, files) == dict.fromkeys(files, "opened")
    BpfDeviceGuard().attach(group, [device_of("/dev/zero"), device_of("/dev/full")])
    assert opens_in(group, files) == {
        "/dev/full": "Operation not permitted",
        "/dev/zero": "Operation not permitted",
        "/dev/null": "opened",
    }
    child = group / "child"  # a job's own children stay under it
    child.mkdir()
    try:
        assert opens_in(child, ["/dev/zero", "/dev/null"])["/dev/zero"] != "opened"
    finally:
        child.rmdir()


def test_a_bad_target_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BpfError, match=f"attach to {tmp_path}"):
        BpfDeviceGuard().attach(tmp_path, [device_of("/dev/zero")])
    with pytest.raises(BpfError, match="missing"):
        BpfDeviceGuard().attach(tmp_path / "missing", [])
