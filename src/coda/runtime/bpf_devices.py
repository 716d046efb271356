"""cgroup v2's device guard: an eBPF program of type BPF_PROG_TYPE_CGROUP_DEVICE that
refuses every access to a list of devices and allows the rest, attached to a job's
cgroup (as Slurm's cgroup/v2 plugin and systemd's DevicePolicy do; v2 has no
devices.deny file). The program is a few instructions assembled here, loaded with the
bpf(2) system call; the kernel's verifier checks it and keeps it while the cgroup lives.

The program, for each denied device (the context is ``struct bpf_cgroup_dev_ctx``:
access_type (device type in its low 16 bits), major, minor)::

    r2 = ctx->access_type & 0xffff; r4 = ctx->major; r5 = ctx->minor
    if r2 == type && r4 == major && r5 == minor: return 0   # refuse
    ...
    return 1                                                # allow
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Sequence
from pathlib import Path

from coda.runtime.devices import Device

# from <linux/bpf.h>
_BPF_PROG_LOAD, _BPF_PROG_ATTACH = 5, 8
_BPF_PROG_TYPE_CGROUP_DEVICE = 15
_BPF_CGROUP_DEVICE = 6  # attach type
_BPF_F_ALLOW_MULTI = 2  # beside the programs of the groups above (systemd's), all must allow
_DEV_TYPE = {"b": 1, "c": 2}  # BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR
_ATTR_SIZE = 128  # larger than the fields used; the kernel wants the rest zero
# 64-bit little-endian machines only (the instructions are packed little-endian)
_SYSCALL_BPF = {"x86_64": 321, "aarch64": 280, "arm64": 280, "riscv64": 280, "ppc64le": 361}
_LICENSE = b"GPL\0"
_NAME = b"coda_devices"

# instruction opcodes
_LDX_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W
_AND_K = 0x57  # BPF_ALU64 | BPF_AND | BPF_K
_JNE_K = 0x55  # BPF_JMP | BPF_JNE | BPF_K
_MOV_K = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K
_EXIT = 0x95  # BPF_JMP | BPF_EXIT


class BpfError(OSError):
    """The kernel refused to load or attach the program."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(denied: Sequence[Device]) -> bytes:
    """The program's instructions: refuse each of ``denied``, allow everything else."""
    out = [
        _insn(_LDX_W, dst=2, src=1, off=0),  # r2 = access_type
        _insn(_AND_K, dst=2, imm=0xFFFF),  # its low half: the device's type
        _insn(_LDX_W, dst=4, src=1, off=4),  # r4 = major
        _insn(_LDX_W, dst=5, src=1, off=8),  # r5 = minor
    ]
    for d in denied:
        out += [
            _insn(_JNE_K, dst=2, off=4, imm=_DEV_TYPE[d.kind]),
            _insn(_JNE_K, dst=4, off=3, imm=d.major),
            _insn(_JNE_K, dst=5, off=2, imm=d.minor),
            _insn(_MOV_K, dst=0, imm=0),
            _insn(_EXIT),
        ]
    out += [_insn(_MOV_K, dst=0, imm=1), _insn(_EXIT)]
    return b"".join(out)


class BpfDeviceGuard:
    """Attaches a device program to a cgroup v2 directory through bpf(2)."""

    def __init__(self, machine: str | None = None) -> None:
        machine = machine or platform.machine()
        # platform.machine() is the kernel's: a 32-bit Python on it has other numbers.
        self.syscall_nr = _SYSCALL_BPF.get(machine) if struct.calcsize("P") == 8 else None
        self._libc = ctypes.CDLL(None, use_errno=True)

    def _bpf(self, cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
        if self.syscall_nr is None:
            raise BpfError(0, f"no bpf(2) system call known for {platform.machine()} here")
        ret = int(self._libc.syscall(self.syscall_nr, cmd, ctypes.byref(attr), _ATTR_SIZE))
        if ret < 0:
            err = ctypes.get_errno()
            raise BpfError(err, os.strerror(err))
        return ret

    def load(self, denied: Sequence[Device]) -> int:
        """A new program's file descriptor (the caller closes it)."""
        code = ctypes.create_string_buffer(program(denied))
        license_ = ctypes.create_string_buffer(_LICENSE)
        attr = ctypes.create_string_buffer(_ATTR_SIZE)
        struct.pack_into(
            "<IIQQ", attr, 0, _BPF_PROG_TYPE_CGROUP_DEVICE, len(code.raw) // 8,
            ctypes.addressof(code), ctypes.addressof(license_),
        )  # fmt: skip
        struct.pack_into("16s", attr, 48, _NAME)
        try:
            return self._bpf(_BPF_PROG_LOAD, attr)
        except BpfError as e:
            raise BpfError(e.errno, f"load the device program: {e.strerror}") from None

    def attach(self, cgroup_dir: Path, denied: Sequence[Device]) -> None:
        """Refuse ``denied`` to every process in ``cgroup_dir`` and its children from
        now on (the kernel keeps the program while the group lives)."""
        prog = self.load(denied)
        try:
            try:
                target = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as e:
                raise BpfError(e.errno or 0, f"{cgroup_dir}: {e.strerror}") from None
            try:
                attr = ctypes.create_string_buffer(_ATTR_SIZE)
                struct.pack_into(
                    "<IIII", attr, 0, target, prog, _BPF_CGROUP_DEVICE, _BPF_F_ALLOW_MULTI
                )
                try:
                    self._bpf(_BPF_PROG_ATTACH, attr)
                except BpfError as e:
                    raise BpfError(e.errno, f"attach to {cgroup_dir}: {e.strerror}") from None
            finally:
                os.close(target)
        finally:
            os.close(prog)
