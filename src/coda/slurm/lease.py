"""One active controller per cluster: a lease in a file, kept by a heartbeat.

The lease file holds one line, ``coda-lease epoch=E holder=H beat=T ttl=S``: the
controller that may write to Slurm (``holder``: host, pid namespace, pid and start
time), since when it holds it (``epoch``, raised at every change of holder), and when
it last said it was alive (``beat``, wall-clock seconds). It is replaced whole (readers
see one line or the other), and changed only under an flock on ``<lease>.lock``, so
two controllers that find it free at once cannot both take it.

Who reads it:
- a controller at start: it takes a free lease; beside a live holder (one whose beat
  moves) it refuses to run unless it is a standby, which takes over once the beat has
  not moved for ``ttl`` seconds on its own clock (clocks of two hosts never compared),
  or at once when the holder was a process of its own host that is gone;
- the active controller's heartbeat (``Heartbeat``), every ``ttl / 4``, while its
  cycles complete: a controller whose cycles all fail gives the lease up;
- the active controller before every Slurm write (``FencedRunner``): the write gets
  only the time left until ``ttl / 2`` after its last renewal, and none after, so a
  controller that was paused or cut off stops before a standby may take over;
- job_submit.lua: no beat within its fail-open time (wall clock, minutes), and new
  jobs are not held;
- node agents given the lease: held jobs are handed back to Slurm after that time.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import re
import socket
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from coda.slurm.client import SlurmError, run_command

MAGIC = "coda-lease"
LEASE_MODE = 0o644  # job_submit.lua reads it inside slurmctld (SlurmUser, maybe not root)
MAX_LEASE_BYTES = 512
MAX_EPOCH = 10**17  # epochs are read back up to 18 digits
_HOLDER = re.compile(r"[A-Za-z0-9_.-]{1,64}:[0-9]{1,20}:[0-9]{1,10}:[0-9]{1,20}")
_LINE = re.compile(
    rf"{MAGIC} epoch=([0-9]{{1,18}}) holder=(-|{_HOLDER.pattern}) "
    r"beat=([0-9]{1,12}(?:\.[0-9]{1,6})?) ttl=([0-9]{1,6}(?:\.[0-9]{1,6})?)\n?"
)
# scontrol subcommands that change Slurm's state: refused once the lease may be gone.
WRITES = frozenset({"update", "release", "hold", "requeuehold", "requeue", "uhold"})
TimedRunner = Callable[[Sequence[str], float], str]  # argv, timeout in seconds


class LeaseError(SlurmError):
    """This controller may not write to Slurm (the lease is another's, or expired)."""


@dataclass(frozen=True)
class LeaseRecord:
    epoch: int
    holder: str  # "-": nobody (released)
    beat: float  # wall-clock seconds
    ttl: float

    def line(self) -> str:
        return (
            f"{MAGIC} epoch={self.epoch} holder={self.holder} beat={self.beat:.3f} "
            f"ttl={self.ttl:g}\n"
        )

    def age(self, now: float) -> float:
        return now - self.beat

    @classmethod
    def parse(cls, text: str, where: str) -> LeaseRecord:
        m = _LINE.fullmatch(text)
        if m is None:
            raise ValueError(f"{where}: not a CODA lease ({text[:60]!r})")
        ttl = float(m.group(4))
        if not 0 < ttl <= 3600:
            raise ValueError(f"{where}: ttl {ttl:g} outside (0, 3600]")
        return cls(int(m.group(1)), m.group(2), float(m.group(3)), ttl)


def process_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (/proc/PID/stat field 22),
    which tells a process from a later one given the same pid; None if it cannot be
    read (gone, or hidden from this process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(text[text.rindex(")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def this_holder() -> str:
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"
    pid = os.getpid()
    return f"{host}:{_pid_namespace()}:{pid}:{process_start(pid) or 0}"


def holder_gone(holder: str) -> bool:
    """Whether ``holder`` is a process of this host and pid namespace that no longer
    runs: the kernel says there is no such pid, or the pid is another process's now.
    A process this one cannot see or signal counts as running."""
    if not _HOLDER.fullmatch(holder):
        return False
    host, ns, pid, start = holder.rsplit(":", 3)
    mine = this_holder().rsplit(":", 3)
    if (host, ns) != (mine[0], mine[1]):
        return False  # another host's, or another pid namespace's: only its beat tells
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError as e:
        return e.errno == errno.ESRCH  # EPERM: it runs, as another user
    seen = process_start(int(pid))
    return seen is not None and seen != int(start)


def read_lease(path: Path) -> LeaseRecord | None:
    """The lease as it is on disk; None if there is none yet. ValueError for a file
    that is not a lease, or cannot be read (named, with why)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"lease {path}: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"lease {path}: not a regular file")
        data = os.read(fd, MAX_LEASE_BYTES + 1)
    except OSError as e:  # EIO, ESTALE on a shared mount
        raise ValueError(f"lease {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_LEASE_BYTES:
        raise ValueError(f"lease {path}: longer than {MAX_LEASE_BYTES} bytes")
    return LeaseRecord.parse(data.decode("ascii", "replace"), f"lease {path}")


class ControllerLease:
    """This controller's side of the lease: take it, renew it, give it up, and say
    how long a write to Slurm may still take (``check``). Thread-safe: the heartbeat
    renews it while the cycle writes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        ttl_s: float = 10.0,
        holder: str | None = None,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(ttl_s) and 1.0 <= ttl_s <= 3600):
            raise ValueError(f"lease ttl {ttl_s!r}: not within 1..3600 s")
        self.path = Path(path)
        self.ttl = ttl_s
        self.holder = holder or this_holder()
        self.wall = wall
        self.mono = mono
        self.epoch: int | None = None  # the epoch this controller holds; None: not held
        self._renewed_at = -math.inf  # monotonic time of the last renewal
        self.last_seen: LeaseRecord | None = None  # what the last look found
        # Another holder's lease as first seen unchanged, and when (this clock): it is
        # stale once it has not moved for its ttl.
        self._watch: tuple[LeaseRecord, float] | None = None
        self._mutex = threading.Lock()

    # ------------------------------------------------------------ under the lock
    def _locked(
        self, change: Callable[[LeaseRecord | None], LeaseRecord | None]
    ) -> LeaseRecord | None:
        """Read the lease, let ``change`` decide the new one (None: leave it), write it;
        all under the flock. Returns the lease as it stands after. ValueError for any
        trouble with the file (it is then left as it was)."""
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise ValueError(f"lease lock {lock}: {e.strerror or e}") from None
        try:
            self._flock(fd, lock)
            now = read_lease(self.path)
            new = change(now)
            if new is not None:
                self._write(new)
                now = new
            self.last_seen = now
            return now
        finally:
            os.close(fd)  # releases the flock

    def _flock(self, fd: int, lock: Path) -> None:
        """The lock, waited for a quarter of the ttl at most: whoever holds it that
        long is stuck (a hung mount), and this controller must not hang with it."""
        end = self.mono() + self.ttl / 4
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if self.mono() >= end:
                    raise ValueError(
                        f"lease lock {lock}: held by another process for {self.ttl / 4:g} s"
                    ) from None
                time.sleep(0.01)
            except OSError as e:  # ENOLCK on a mount without locks
                raise ValueError(f"lease lock {lock}: {e.strerror or e}") from None

    def _write(self, rec: LeaseRecord) -> None:
        if rec.epoch >= MAX_EPOCH:
            raise ValueError(f"lease {self.path}: epoch {rec.epoch} too large; remove the file")
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            # Made afresh (whatever was there, a FIFO included, is not opened).
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, LEASE_MODE)
            try:
                os.fchmod(fd, LEASE_MODE)
                os.write(fd, rec.line().encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as e:
            raise ValueError(f"lease {self.path}: {e.strerror or e}") from None

    # ------------------------------------------------------------ the holder's steps
    def _ours(self, rec: LeaseRecord | None, epoch: int) -> bool:
        """Whether ``rec`` is this controller's lease at ``epoch`` (untouched since)."""
        return rec is not None and rec.holder == self.holder and rec.epoch == epoch

    def free(self, rec: LeaseRecord | None) -> bool:
        """Whether this controller may take ``rec``: nobody's, its own, held by a
        process of this host that is gone, or unmoved for its ttl on this clock."""
        if rec is None or rec.holder in ("-", self.holder) or holder_gone(rec.holder):
            return True
        now = self.mono()
        if self._watch is None or self._watch[0] != rec:
            self._watch = (rec, now)  # moved (or first seen): its ttl starts now
            return False
        return now - self._watch[1] > rec.ttl

    def acquire(self) -> bool:
        """Take the lease if it is free (raising its epoch); whether this controller
        holds it now."""
        started = self.mono()

        def take(rec: LeaseRecord | None) -> LeaseRecord | None:
            if not self.free(rec):
                return None
            now = self.wall()
            if rec is not None and rec.holder == self.holder and rec.epoch == self.epoch:
                return LeaseRecord(rec.epoch, self.holder, now, self.ttl)
            return LeaseRecord((rec.epoch if rec else 0) + 1, self.holder, now, self.ttl)

        with self._mutex:
            rec = self._locked(take)
            if rec is not None and rec.holder == self.holder:
                self.epoch = rec.epoch
                self._renewed_at = started
                self._watch = None
                return True
            self.epoch = None
            return False

    def renew(self) -> bool:
        """Beat; False (and no longer held) if another controller has taken it."""
        with self._mutex:
            if self.epoch is None:
                return False
            started = self.mono()
            mine = self.epoch

            def beat(rec: LeaseRecord | None) -> LeaseRecord | None:
                if not self._ours(rec, mine):
                    return None
                return LeaseRecord(mine, self.holder, self.wall(), self.ttl)

            rec = self._locked(beat)
            if not self._ours(rec, mine):
                self.epoch = None
                return False
            self._renewed_at = started
            return True

    def release(self) -> None:
        """Give the lease up: a standby may take it at once."""
        with self._mutex:
            if self.epoch is None:
                return
            mine = self.epoch
            self.epoch = None

            def give(rec: LeaseRecord | None) -> LeaseRecord | None:
                if rec is None or not self._ours(rec, mine):
                    return None
                return LeaseRecord(mine, "-", rec.beat, rec.ttl)

            self._locked(give)

    def check(self) -> float:
        """Seconds a write to Slurm may still take: until half a ttl after the last
        renewal, on this controller's own clock. LeaseError when none are left, or the
        lease is not held."""
        epoch, renewed = self.epoch, self._renewed_at
        if epoch is None:
            raise LeaseError("not the active controller (no lease)")
        left = renewed + self.ttl / 2 - self.mono()
        if left <= 0:
            raise LeaseError(
                f"lease epoch {epoch} not renewed for {self.ttl / 2:g} s: writing nothing"
            )
        return left

    @property
    def held(self) -> bool:
        return self.epoch is not None


class FencedRunner:
    """A Slurm command runner that lets a write through only while ``lease.check()``
    passes, and gives it no more time than the fence has left (a write that could land
    after a standby took over is cut short instead); reads always go."""

    def __init__(self, lease: ControllerLease, runner: TimedRunner = run_command) -> None:
        self.lease = lease
        self.runner = runner

    def __call__(self, argv: Sequence[str]) -> str:
        if len(argv) > 1 and argv[0] == "scontrol" and argv[1] in WRITES:
            return self.runner(argv, min(30.0, self.lease.check()))
        return self.runner(argv, 30.0)


class Heartbeat:
    """The lease's keeper, in a thread of its own: every ``ttl / 4`` it renews the
    lease this controller holds (a long cycle never lets it lapse), or tries to take
    it (a standby); it gives the lease up once no cycle has completed for ``stall_s``
    (a controller that cannot reach Slurm must let another try). Each change is said
    once; ``active()`` is what the cycle loop asks."""

    def __init__(
        self,
        lease: ControllerLease,
        log: Callable[[str], None],
        stall_s: float = 120.0,
    ) -> None:
        self.lease = lease
        self.log = log
        self.stall_s = stall_s
        self.error = ""  # why the lease could not be read, at the last look ("" if it could)
        self._said = ""
        self._progress = lease.mono()  # the last cycle's end, or when the lease was taken
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _say(self, msg: str) -> None:
        if msg != self._said:
            self.log(msg)
            self._said = msg

    def holder_seen(self) -> str:
        """Who held the lease at the last look ("?" if it could not be read)."""
        rec = self.lease.last_seen
        return rec.holder if rec is not None else "?"

    def cycled(self) -> None:
        """A cycle completed: the controller is doing its work."""
        self._progress = self.lease.mono()

    def beat(self) -> bool:
        """One look: renew, give up, or try to take; whether this controller holds the
        lease after it."""
        lease = self.lease
        self.error = ""
        try:
            if lease.held:
                stalled = lease.mono() - self._progress
                if stalled > self.stall_s:
                    lease.release()
                    self._say(f"no cycle completed for {stalled:.0f} s: lease {lease.path} "
                              "given up for another controller to try")  # fmt: skip
                    self._progress = lease.mono()  # it may take it again after a while
                    return False
                if lease.renew():
                    return True
                self._say(f"lease {lease.path} lost to {self.holder_seen()} (epoch "
                          f"{getattr(lease.last_seen, 'epoch', '?')}): standing by, "
                          "writing nothing")  # fmt: skip
                return False
            before = lease.last_seen
            if lease.acquire():
                self._progress = lease.mono()
                was = f" from {before.holder}" if before and before.holder != "-" else ""
                self._say(f"active: lease {lease.path} epoch {lease.epoch} taken{was}")
                return True
        except ValueError as e:  # the lease's file or its directory: nothing is written
            lease.epoch = None
            self.error = str(e)
            self._say(f"{e}: writing nothing until the lease can be read")
            return False
        rec = lease.last_seen
        if rec is not None:
            self._say(
                f"standby: {rec.holder} holds lease {lease.path} (epoch {rec.epoch}); "
                f"taking over once its beat stops for {rec.ttl:g} s"
            )
        return False

    def active(self) -> bool:
        """Whether the cycle may run now (the lease held, and renewed recently)."""
        try:
            self.lease.check()
        except LeaseError:
            return False
        return True

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.lease.ttl / 4):
                self.beat()

        self._thread = threading.Thread(target=loop, name="coda-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lease.ttl)


def wait_until_active(
    path: str | os.PathLike[str],
    pid: int,
    timeout_s: float,
    running: Callable[[], bool] = lambda: True,
) -> None:
    """Wait until the controller process ``pid`` holds the lease at ``path`` (jobs are
    held for CODA only from then on: job_submit.lua fails open). TimeoutError if it
    does not within ``timeout_s``, or stops ``running``."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            rec = read_lease(Path(path))
        except ValueError:
            rec = None
        if rec is not None and rec.holder.split(":")[2:3] == [str(pid)]:
            return
        if not running():
            raise TimeoutError(f"controller {pid} stopped before it held the lease {path}")
        time.sleep(0.1)
    raise TimeoutError(f"controller {pid} did not hold the lease {path} within {timeout_s:g} s")
