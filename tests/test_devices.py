"""GPU isolation: device files as the kernel names them, the eBPF device program (run
here by a small interpreter of the instructions it uses), both drivers' device
guards on a fake tree, the agent refusing a job the GPUs it was not granted, and
`coda agent --gpu-device` refusing bad paths. The real kernel: test_runtime_devices.py
(the eBPF guard) and test_runtime_kernel.py (the agent, cgroup v1 and v2)."""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import CG, Affinity, tick_until, v1_tree, v2_tree

from coda.cli import main
from coda.runtime import cgroups
from coda.runtime.agent import AgentConfig
from coda.runtime.bpf_devices import BpfError, program
from coda.runtime.cgroups import CgroupError, CgroupV1, CgroupV2, detect
from coda.runtime.devices import Device, DeviceError, denied, device_of, nvidia_devices
from coda.runtime.faketree import LiveProcs
from coda.runtime.local_queue import local_agent
from coda.runtime.store import JobSpec, Store

GPU = [Device("c", 195, i, f"/dev/nvidia{i}") for i in range(3)]


# ---------------------------------------------------------------- device files
def test_a_device_is_named_by_what_stat_says(tmp_path: Path) -> None:
    assert device_of("/dev/null").rule == "c 1:3 rwm"
    (tmp_path / "nvidia0").symlink_to("/dev/null")  # followed, as open(2) would
    assert device_of(tmp_path / "nvidia0").major == 1
    (tmp_path / "plain").write_text("x")
    with pytest.raises(DeviceError, match="not a device file"):
        device_of(tmp_path / "plain")
    with pytest.raises(DeviceError, match="No such file"):
        device_of(tmp_path / "missing")


def test_device_numbers_are_checked() -> None:
    for kind, major, minor in (("x", 1, 1), ("c", -1, 0), ("c", 4096, 0), ("c", 1, 1 << 20)):
        with pytest.raises(DeviceError):
            Device(kind, major, minor)


def test_nvidia_devices_are_found_in_index_order(tmp_path: Path) -> None:
    for i, target in ((10, "/dev/null"), (2, "/dev/zero"), (0, "/dev/full")):
        (tmp_path / f"nvidia{i}").symlink_to(target)
    (tmp_path / "nvidiactl").symlink_to("/dev/null")  # shared by every GPU: never guarded
    (tmp_path / "nvidia3").write_text("not a device")
    (tmp_path / "nvidia-uvm").symlink_to("/dev/null")
    (tmp_path / "nvidia00").symlink_to("/dev/random")  # no GPU's name
    (tmp_path / "nvidia11").symlink_to("/dev/zero")  # nvidia2's device again
    found = nvidia_devices(tmp_path)
    assert [Path(d.path).name for d in found] == ["nvidia0", "nvidia2", "nvidia10"]
    assert nvidia_devices(tmp_path / "none") == []


def test_a_job_is_denied_every_gpu_it_was_not_granted() -> None:
    assert denied(GPU, [1]) == [GPU[0], GPU[2]]
    assert denied(GPU, []) == GPU  # a CPU job
    assert denied([], [0]) == []  # not isolated


# ---------------------------------------------------------------- the eBPF program
def run(prog: bytes, access_type: int, major: int, minor: int) -> int:
    """Run the program on one access as the kernel would (the opcodes it uses only)."""
    ctx = struct.pack("<III", access_type, major, minor)
    regs, pc, mask = [0] * 11, 0, (1 << 64) - 1
    for _ in range(len(prog) // 8 + 1):
        code, r, off, imm = struct.unpack_from("<BBhi", prog, pc * 8)
        dst, src = r & 0xF, r >> 4
        if code == 0x61:  # r_dst = *(u32 *)(r1 + off): the context
            assert src == 1 and off in (0, 4, 8)
            regs[dst] = struct.unpack_from("<I", ctx, off)[0]
        elif code == 0x57:
            regs[dst] &= imm & mask
        elif code == 0x55:
            pc += off if regs[dst] != imm & mask else 0
        elif code == 0xB7:
            regs[dst] = imm & mask
        elif code == 0x95:
            return regs[0]
        else:
            raise AssertionError(f"opcode {code:#x}")
        pc += 1
        assert pc < len(prog) // 8, "ran off the end"
    raise AssertionError("no exit")


@pytest.mark.parametrize("deny", [[], GPU[:1], GPU, [GPU[1], Device("b", 8, 0)]])
def test_the_program_refuses_exactly_the_denied_devices(deny: Sequence[Device]) -> None:
    prog = program(deny)
    assert len(prog) == 8 * (4 + 5 * len(deny) + 2)
    refused = {(d.kind, d.major, d.minor) for d in deny}
    for kind, dev_type in (("b", 1), ("c", 2)):
        for access in (1, 2, 4, 7):  # mknod, read, write, all
            for major in (1, 8, 195, 4095):
                for minor in (0, 1, 2, 3):
                    got = run(prog, access << 16 | dev_type, major, minor)
                    assert got == (0 if (kind, major, minor) in refused else 1)


# ---------------------------------------------------------------- drivers, fake tree
def test_v1_writes_one_deny_rule_per_device(tmp_path: Path, monkeypatch) -> None:
    drv = detect(str(v1_tree(tmp_path, devices=True)), prefix=tmp_path, setaffinity=Affinity())
    assert isinstance(drv, CgroupV1)
    devices = tmp_path / CG.lstrip("/") / "devices" / "coda"
    drv.setup()
    drv.create("job-1")
    assert not devices.exists()  # a driver not asked to guard stays out of the hierarchy
    with pytest.raises(CgroupError, match="not enabled"):
        drv.deny_devices("job-1", GPU)
    assert drv.enable_device_guard() is None
    drv.setup()
    drv.create("job-2")
    assert (devices / "job-2").is_dir()
    (tmp_path / CG.lstrip("/") / "cpuset" / "coda" / "job-2" / "cgroup.procs").write_text("7\n")
    written: list[tuple[Path, str]] = []
    monkeypatch.setattr(cgroups, "write_file", lambda p, v, *a: written.append((p, v)))
    drv.deny_devices("job-2", GPU[1:])
    deny = devices / "job-2" / "devices.deny"
    # The rules, then the group's processes into its devices group (a job found after
    # a restart may have started outside it).
    assert written == [(deny, "c 195:1 rwm"), (deny, "c 195:2 rwm"),
                       (devices / "job-2" / "cgroup.procs", "7")]  # fmt: skip
    drv.deny_devices("job-2", [])
    assert len(written) == 3


def test_v1_without_the_devices_controller_says_so(tmp_path: Path) -> None:
    drv = detect(str(v1_tree(tmp_path)), prefix=tmp_path, setaffinity=Affinity())
    assert isinstance(drv, CgroupV1)
    assert "devices controller is not mounted" in (drv.enable_device_guard() or "")
    drv.setup()
    drv.create("job-1")
    drv.deny_devices("job-1", [])  # nothing to refuse: nothing needed
    with pytest.raises(CgroupError, match="cannot isolate devices"):
        drv.deny_devices("job-1", GPU)


class Guard:
    """Records what a cgroup v2 driver asks of its device guard."""

    def __init__(self, fail: bool = False) -> None:
        self.attached: list[tuple[Path, list[Device]]] = []
        self.fail = fail

    def load(self, denied: Sequence[Device]) -> int:
        if self.fail:
            raise BpfError(1, "load the device program: Operation not permitted")
        return os.open("/dev/null", os.O_RDONLY)

    def attach(self, cgroup_dir: Path, denied: Sequence[Device]) -> None:
        if self.fail:
            raise BpfError(1, f"attach to {cgroup_dir}: Operation not permitted")
        self.attached.append((cgroup_dir, list(denied)))


def test_v2_attaches_a_device_program_to_the_group(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    guard = Guard()
    root = tmp_path / CG.lstrip("/")
    drv = CgroupV2(root, setaffinity=Affinity(), device_guard=guard)
    drv.setup()
    drv.create("job-1")
    with pytest.raises(CgroupError, match="not enabled"):
        drv.deny_devices("job-1", GPU)
    # Enabling tries an attach on a group of its own, and removes it.
    assert drv.enable_device_guard() is None
    assert guard.attached == [(root / f"coda-device-probe-{os.getpid()}", [])]
    assert not guard.attached[0][0].exists()
    drv.deny_devices("job-1", GPU[:2])
    assert guard.attached[1:] == [(root / "coda" / "job-1", GPU[:2])]
    bad = CgroupV2(root, setaffinity=Affinity(), device_guard=Guard(True))
    assert "Operation not permitted" in (bad.enable_device_guard() or "")
    with pytest.raises(CgroupError, match="not enabled"):
        bad.deny_devices("job-1", GPU)
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["coda"]


# ---------------------------------------------------------------- the agent, fake tree
@pytest.fixture
def v2_node(tmp_path: Path):
    """A cgroup v2 fake tree whose device guard records, its store, and the agents a test
    starts on it (their jobs killed at the end)."""
    v2_tree(tmp_path)
    guard = Guard()
    drv = LiveProcs(CgroupV2(tmp_path / CG.lstrip("/"), setaffinity=Affinity(),
                             device_guard=guard))  # fmt: skip
    store = Store(tmp_path / "state" / "coda.db")
    agents: list = []

    def new_agent(cfg: AgentConfig):
        a = local_agent(store, drv, tmp_path / "state", cfg)
        agents.append(a)
        a.start()
        return a

    yield drv, guard, store, new_agent
    for a in agents:
        for m in list(a.jobs.running.values()):
            a.processes.signal(m, 9)
    store.close()


SLEEP = [sys.executable, "-c", "import time; time.sleep(30)"]


def test_the_agent_refuses_each_job_the_gpus_it_was_not_granted(v2_node) -> None:
    drv, guard, store, new_agent = v2_node
    assert drv.enable_device_guard() is None
    # Two GPUs handed out; a third device file the operator keeps from every job.
    agent = new_agent(AgentConfig(period_s=0.1, window_s=0.3, gpus=2, gpu_devices=GPU))
    dnn = store.submit(JobSpec(argv=SLEEP, cores=1, gpus=1, name="dnn"))
    cpu = store.submit(JobSpec(argv=SLEEP, cores=1, name="cpu"))
    tick_until(agent, lambda: len(guard.attached) == 3, timeout=10)
    rules = {p.name: d for p, d in guard.attached[1:]}
    granted = int(store.job(dnn).gpu_ids)
    assert rules[f"job-{dnn}"] == [g for i, g in enumerate(GPU) if i != granted]
    assert rules[f"job-{cpu}"] == GPU


def test_a_job_found_running_after_a_restart_keeps_the_gpus_it_started_with(v2_node) -> None:
    """Started by an agent that did not isolate GPUs, found by one that does: guarding
    it late would renumber its GPUs under it (CUDA counts what it can open from 0), so
    it runs on as it started; the jobs after it are guarded."""
    drv, guard, store, new_agent = v2_node
    first = new_agent(AgentConfig(gpus=2))
    jid = store.submit(JobSpec(argv=SLEEP, cores=1, gpus=1))
    first.tick()
    assert store.job(jid).state == "running" and guard.attached == []
    first.source.parent.release()  # it died; the kernel dropped its lock
    assert drv.enable_device_guard() is None
    second = new_agent(AgentConfig(gpus=2, gpu_devices=GPU))
    assert jid in second.jobs.running and len(guard.attached) == 1  # the probe only
    later = store.submit(JobSpec(argv=SLEEP, cores=1, gpus=1))
    tick_until(second, lambda: store.job(later).state == "running", timeout=10)
    assert [p.name for p, _ in guard.attached[1:]] == [f"job-{later}"]


def test_the_agent_config_needs_a_device_per_gpu() -> None:
    with pytest.raises(ValueError, match="3 GPUs but 2 GPU device files"):
        AgentConfig(gpus=3, gpu_devices=GPU[:2])


def test_v1_groups_an_earlier_run_left_in_the_devices_hierarchy_are_found(
    tmp_path: Path,
) -> None:
    drv = detect(str(v1_tree(tmp_path, devices=True)), prefix=tmp_path, setaffinity=Affinity())
    assert isinstance(drv, CgroupV1)
    drv.setup()  # not guarding: no group of its own goes into devices
    left = tmp_path / CG.lstrip("/") / "devices" / "coda" / "job-9"
    left.mkdir(parents=True)
    assert drv.names() == ["job-9"] and drv.pids("job-9") == []
    drv.remove("job-9")
    assert not left.exists()
    drv.teardown()
    assert not left.parent.exists()


# ---------------------------------------------------------------- the command line
def test_gpus_that_cannot_be_isolated_stop_the_agent_before_it_starts(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path / "tree")  # no devices controller
    r = CliRunner().invoke(main, ["agent", "--state-dir", str(tmp_path / "s"),
                                  "--cgroup-mounts", str(mounts),
                                  "--cgroup-prefix", str(tmp_path / "tree"),
                                  "--gpu-device", "/dev/null"])  # fmt: skip
    assert r.exit_code == 1, r.output
    assert "GPUs cannot be isolated: cgroup v1's devices controller is not mounted" in r.output
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (["--gpu-device", "/nonexistent/nvidia0"], "/nonexistent/nvidia0: No such file"),
        (["--gpu-device", "/etc/hostname"], "not a device file"),
        (["--gpu-device", "/dev/null", "--gpu-device", "/dev/null"], "same device"),
        (["--gpus", "3", "--gpu-device", "/dev/null"], "3 GPUs but 1 device files"),
    ],
)
def test_bad_gpu_devices_get_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    # No cgroups to be had: a case wrongly let through fails there (exit 1), never runs.
    nothing = ["--cgroup-mounts", str(tmp_path / "no-mounts")]
    r = CliRunner().invoke(main, ["agent", "--state-dir", str(tmp_path / "s"), *nothing, *args])
    assert r.exit_code == 2, r.output
    assert says in r.output and "Traceback" not in r.output
    assert not (tmp_path / "s").exists()  # refused before anything was made
