"""A job's supervisor: starts the command, waits for it, records its exit status.

The agent starts one shim per job (``python -I shim.py JOB_DIR``, standard library
only) in its own session; the shim joins the job's cgroup, then starts the job as
its submitter, so the job outlives the agent: an agent that crashes
or restarts finds the exit status in the job directory instead of losing it
with the child it could no longer wait for (containerd's shim, Podman's conmon).
The command runs without a shell.

Files in the job directory: ``launch.json`` (written by the agent: command,
environment, working directory, user and groups, cgroup), ``shim.pid`` (pid and
start time, written once the shim is in the job's cgroup), ``exit`` (the exit
status, written atomically last; negative = killed by that signal), ``stdout`` and
``stderr``. With ``log_bytes`` in the launch description the job writes into pipes
and the shim copies at most that many bytes of each into its log, then one line
saying how much more it dropped: a job cannot fill the agent's state directory.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def stat_fields(pid: int, proc: str = "/proc") -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; None if the process is gone. The
    command name (field 2) may hold spaces and parentheses: split after its last ')'."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def proc_start_time(pid: int, proc: str = "/proc") -> int | None:
    """The process's start time in clock ticks since boot (field 22 of stat):
    with the pid it names one process for good, even after pid reuse."""
    fields = stat_fields(pid, proc)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def alive(pid: int | None, start: int | None, proc: str = "/proc") -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs (not a zombie)."""
    if not pid or start is None:
        return False
    fields = stat_fields(pid, proc)
    return fields is not None and len(fields) > 19 and fields[19] == str(start) and fields[0] != "Z"


def read_regular(path: str | os.PathLike[str], limit: int = 4096) -> str:
    """A small regular file's text. Job directories are writable by jobs: a FIFO or a
    device planted there must not block or mislead the agent (OSError otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return os.read(fd, limit).decode("ascii", "replace")
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str, durable: bool = True) -> None:
    """Replace ``path`` in one step (readers see the old or the new text, never half).
    ``durable=False`` skips the fsync: for files rewritten every second that nobody
    needs after a power cut (a status snapshot)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


SHIM_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}
LAUNCH_FILE = "launch.json"
EXIT_CANNOT_JOIN = 125  # the shim could not put itself into the job's cgroup
EXIT_CANNOT_START = 127


def read_launch(job_dir: Path) -> dict[str, Any]:
    """The launch description the agent wrote: only a regular file of this process's
    own user, not a symlink (the job never can write it: it runs as its submitter)."""
    fd = os.open(job_dir / LAUNCH_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(f"{job_dir / LAUNCH_FILE}: not a regular file of this user")
        with os.fdopen(os.dup(fd), "rb") as f:
            spec = json.loads(f.read(4 << 20))
    finally:
        os.close(fd)
    if not isinstance(spec, dict) or not isinstance(spec.get("argv"), list):
        raise ValueError(f"{job_dir / LAUNCH_FILE}: not a launch description")
    return spec


def _privileges(spec: dict[str, Any]) -> dict[str, Any]:
    """Popen's user/group arguments: drop to the submitter unless it is us already."""
    uid, gid = spec.get("uid"), spec.get("gid")
    if uid is None or gid is None or (uid == os.geteuid() and gid == os.getegid()):
        return {}
    return {"user": int(uid), "group": int(gid), "extra_groups": [int(g) for g in spec["groups"]]}


def main(argv: list[str] | None = None) -> int:
    """``shim.py JOB_DIR``: run the job ``JOB_DIR/launch.json`` describes.

    The agent starts the shim with a fixed environment and ``python -I`` (no
    PYTHON* variables, no user site, no current directory on sys.path) and the shim
    uses the standard library only, so nothing of the job's can load into the
    process the agent trusts. The job's environment, working directory and user
    apply only to the job's own exec."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -I shim.py JOB_DIR", file=sys.stderr)
        return 2
    job_dir = Path(args[0])
    me = os.getpid()
    try:
        spec = read_launch(job_dir)
        # Into the job's cgroup before anything runs: the job starts inside, and a pid
        # found in the group is the shim's (adoption relies on it).
        for procs in spec.get("cgroup_procs", []):
            with open(procs, "w") as f:
                f.write(str(me))
    except (OSError, ValueError) as e:
        print(f"coda: cannot set the job up: {e}", file=sys.stderr)
        write_atomic(job_dir / "exit", f"{EXIT_CANNOT_JOIN}\n")
        return EXIT_CANNOT_JOIN
    write_atomic(job_dir / "shim.pid", json.dumps({"pid": me, "start": proc_start_time(me)}))
    command, cwd = [str(a) for a in spec["argv"]], str(spec.get("cwd") or "/")
    raw_cap = spec.get("log_bytes")
    cap = raw_cap if type(raw_cap) is int and raw_cap > 0 else 0
    pipe = subprocess.PIPE if cap else None
    try:
        child = subprocess.Popen(
            command,
            shell=False,
            stdin=subprocess.DEVNULL,
            stdout=pipe,
            stderr=pipe,
            env={str(k): str(v) for k, v in (spec.get("env") or {}).items()},
            # chdir as the job's user (after the drop), so it cannot enter what it may not.
            preexec_fn=lambda: os.chdir(cwd),
            umask=0o022,
            close_fds=True,
            **_privileges(spec),
        )
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        # SubprocessError: the chdir (as the job's user) failed in preexec_fn.
        if isinstance(e, subprocess.SubprocessError):
            why = "cannot enter that directory as the job's user"
        else:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        print(f"coda: cannot start {command[0]!r} in {cwd!r}: {why}", file=sys.stderr)
        write_atomic(job_dir / "exit", f"{EXIT_CANNOT_START}\n")
        return EXIT_CANNOT_START

    def forward(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    if cap:
        relay(child, cap)
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
    write_atomic(job_dir / "exit", f"{code}\n")
    return code if code >= 0 else 128 - code


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to ``fd``; False if the file refuses (a full disk)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError:
            return False
        view = view[n:]
    return True


def relay(child: subprocess.Popen[bytes], cap: int) -> None:
    """Copy the job's stdout and stderr pipes into this process's own (the logs), at
    most ``cap`` bytes each; what comes after is read and dropped, and counted in a
    last line. Returns once both pipes are closed, or a second after the job exited
    (a process it left behind may hold them open for ever)."""
    assert child.stdout is not None and child.stderr is not None
    streams = {child.stdout.fileno(): 1, child.stderr.fileno(): 2}
    written = dict.fromkeys(streams, 0)
    dropped = dict.fromkeys(streams, 0)
    sel = selectors.DefaultSelector()
    for fd in streams:
        sel.register(fd, selectors.EVENT_READ)
    ended_at: float | None = None
    while sel.get_map():
        for key, _ in sel.select(0.5):
            fd = int(key.fd)
            data = os.read(fd, 1 << 16)
            if not data:
                sel.unregister(fd)
                continue
            room = max(0, cap - written[fd])
            keep = data[:room]
            if keep and not _write_all(streams[fd], keep):
                room = 0  # the log refuses: count the rest as dropped
                keep = b""
            written[fd] += len(keep)
            dropped[fd] += len(data) - len(keep)
        if child.poll() is not None:
            ended_at = ended_at if ended_at is not None else time.monotonic()
            if time.monotonic() - ended_at > 1.0:
                break
    sel.close()
    child.stdout.close()
    child.stderr.close()
    for fd, n in dropped.items():
        if n:
            note = f"\ncoda: this log holds the first {cap} bytes; {n} more were dropped\n"
            _write_all(streams[fd], note.encode())


if __name__ == "__main__":
    sys.exit(main())
