"""A node's board, for emulated jobs: what each job draws from the node, and the cores
the node agent leaves it.

Emulated jobs (``coda.runtime.workloads.emulated``) stand in for real training and CPU
jobs on a test cluster with no GPUs and few real cores. They must see what a real job
feels: the cores it is given and the memory-bandwidth pressure of its co-runners. The
board is one directory per node, root's (mode 0755), holding per job:

- ``job_<id>.use``: the job's own record (kind, bandwidth drawn, PCIe class, model,
  pid), made by the Prolog as root and owned by the job's user, so no one else can
  make, replace or write it; the job rewrites it in place (one ``pwrite``);
- ``job_<id>.grant``: the CPUs and CPU quota the agent leaves the job, written by the
  agent (root) where it runs with a board (``coda slurm agent --board``). On
  declared-big test nodes (``SlurmdParameters=config_overrides``) a job's cpuset
  holds only the real CPUs, so the grant cannot be read from its affinity.

Readers trust only what the kernel vouches for: regular files (no symlinks, no FIFOs),
a grant owned by the agent's uid, a use record written by a live process. Use records
are not checked for an owner: the board is root's, so only the Prolog names them.
Malformed records are skipped, never fatal.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from coda.runtime.cgroups import format_cpus, parse_cpus
from coda.runtime.progress import fixed_record, read_trusted

ENV_DIR = "CODA_BOARD_DIR"  # the node's board, set by the TaskProlog
USE_MAGIC = "coda-use1"
GRANT_MAGIC = "coda-grant1"
RECORD_SIZE = 128
MAX_RECORDS = 4096  # records read from one board (a node runs far fewer jobs)
MAX_GRANT = 4096  # bytes of a grant (a CPU list)
MAX_BW = 1e6  # GB/s: no node has more
MAX_PID = 4_194_304  # the kernel's largest pid_max
KINDS = ("dnn", "cpu")
_MODEL = re.compile(r"[A-Za-z0-9_.+-]{1,48}")
_USE_FILE = re.compile(r"job_([0-9]{1,12})\.use")


class BoardError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Use:
    """What one job draws from its node."""

    job_id: int
    kind: str  # "dnn" or "cpu"
    bw_gbps: float
    pcie_heavy: bool
    model: str  # "-" for a CPU job
    pid: int


@dataclass(frozen=True, slots=True)
class Grant:
    """The CPUs the agent leaves a job (ids as Slurm numbers the node's declared
    cores) and its CPU quota, a fraction of them (1.0: no cap)."""

    cpus: tuple[int, ...]
    quota: float = 1.0

    @property
    def cores(self) -> int:
        return len(self.cpus)


def encode_use(u: Use) -> bytes:
    if u.kind not in KINDS:
        raise BoardError(f"kind {u.kind!r} is not one of {KINDS}")
    if not _MODEL.fullmatch(u.model):
        raise BoardError(f"model {u.model!r}: letters, digits and _.+- only")
    if not (math.isfinite(u.bw_gbps) and 0 <= u.bw_gbps < MAX_BW) or u.job_id <= 0:
        raise BoardError(f"use record {u}: bandwidth and job id must be positive")
    if not 0 < u.pid <= MAX_PID:
        raise BoardError(f"use record {u}: pid must be in 1..{MAX_PID}")
    line = f"{USE_MAGIC} {u.job_id} {u.kind} {u.bw_gbps:.6f} {int(u.pcie_heavy)} {u.model} {u.pid}"
    try:
        return fixed_record(line, RECORD_SIZE)
    except ValueError:
        raise BoardError("use record too long") from None


def decode_use(raw: bytes) -> Use | None:
    try:
        parts = raw.decode("ascii").split()
        if len(parts) != 7 or parts[0] != USE_MAGIC:
            return None
        job_id, kind, bw, pcie, model, pid = (
            int(parts[1]),
            parts[2],
            float(parts[3]),
            parts[4],
            parts[5],
            int(parts[6]),
        )
    except (UnicodeDecodeError, ValueError):
        return None
    if kind not in KINDS or pcie not in ("0", "1") or not _MODEL.fullmatch(model):
        return None
    if not (math.isfinite(bw) and 0 <= bw < MAX_BW) or not 0 < pid <= MAX_PID or job_id <= 0:
        return None
    return Use(job_id, kind, bw, pcie == "1", model, pid)


def encode_grant(g: Grant) -> str:
    if not g.cpus:
        raise BoardError("a grant needs at least one CPU")
    if not (math.isfinite(g.quota) and 0 < g.quota <= 1):
        raise BoardError(f"grant quota {g.quota}: must be in (0, 1]")
    try:
        text = f"{GRANT_MAGIC} {format_cpus(g.cpus)} {g.quota:.6f}\n"
    except ValueError as e:
        raise BoardError(f"grant CPUs: {e}") from None
    if len(text) > MAX_GRANT:
        raise BoardError("grant too long")
    return text


def decode_grant(raw: bytes) -> Grant | None:
    try:
        parts = raw.decode("ascii").split()
        if len(parts) != 3 or parts[0] != GRANT_MAGIC:
            return None
        cpus, quota = parse_cpus(parts[1]), float(parts[2])
    except (UnicodeDecodeError, ValueError):
        return None
    if not cpus or not (math.isfinite(quota) and 0 < quota <= 1):
        return None
    return Grant(tuple(cpus), quota)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OverflowError:
        return False
    except OSError as e:
        return e.errno == errno.EPERM  # alive, another user's
    return True


class Board:
    """One node's board directory. ``agent_uid``: whose grants to trust (root's on a
    cluster; a test's own uid on a temp tree)."""

    def __init__(self, path: str | os.PathLike[str], agent_uid: int = 0) -> None:
        self.path = Path(path)
        self.agent_uid = agent_uid

    def use_path(self, job_id: int) -> Path:
        return self.path / f"job_{int(job_id)}.use"

    def grant_path(self, job_id: int) -> Path:
        return self.path / f"job_{int(job_id)}.grant"

    # ------------------------------------------------------------ the agent's side
    def write_grant(self, job_id: int, grant: Grant) -> None:
        """Replace the job's grant in one step (a reader sees the old or the new one),
        readable by the job whatever its user (mode 0644, not the umask's)."""
        path = self.grant_path(job_id)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.fchmod(fd, 0o644)
            os.write(fd, encode_grant(grant).encode("ascii"))
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def remove_grant(self, job_id: int) -> None:
        self.grant_path(job_id).unlink(missing_ok=True)

    # ------------------------------------------------------------ a job's side
    def grant(self, job_id: int) -> Grant | None:
        raw = read_trusted(self.grant_path(job_id), owner=self.agent_uid, size=MAX_GRANT)
        return decode_grant(raw) if raw is not None else None

    def uses(self, exclude: int | None = None) -> list[Use]:
        """Every live job's record on this node but ``exclude``'s: its file named after
        it, the record naming the same job, written by a process that still runs."""
        out: list[Use] = []
        try:
            names = os.listdir(self.path)
        except OSError:
            return out
        for name in names[:MAX_RECORDS]:
            m = _USE_FILE.fullmatch(name)
            if m is None or int(m.group(1)) == exclude:
                continue
            raw = read_trusted(self.path / name)
            u = decode_use(raw) if raw is not None else None
            if u is not None and u.job_id == int(m.group(1)) and _alive(u.pid):
                out.append(u)
        return out


class UseWriter:
    """A job's own record, rewritten in place: the file the Prolog made for it (opened
    without O_CREAT where ``create`` is false: on a cluster only the Prolog makes it)."""

    def __init__(self, board: Board, job_id: int, create: bool = False) -> None:
        self.job_id = job_id
        # Non-blocking: a FIFO in its place must not stall the job; and only a regular file.
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_CREAT if create else 0)
        self._fd = os.open(board.use_path(job_id), flags, 0o644)
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            self._fd = -1
            raise OSError(0, "not a regular file")

    def publish(self, use: Use) -> None:
        os.pwrite(self._fd, encode_use(use), 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
