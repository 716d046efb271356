"""A job's supervisor: starts the command, waits for it, records its exit status.

The agent starts one shim per job (``python -m coda.runtime.shim``) in the job's
cgroup and its own session, so the job outlives the agent: an agent that crashes
or restarts finds the exit status in the job directory instead of losing it
with the child it could no longer wait for (containerd's shim, Podman's conmon).
The command runs without a shell.

Files in the job directory: ``shim.pid`` (pid and start time, written first),
``exit`` (the exit status, written atomically last; negative = killed by that
signal).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path


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
    return bool(fields) and len(fields) > 19 and fields[19] == str(start) and fields[0] != "Z"


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
    with open(tmp, "w") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m coda.runtime.shim JOB_DIR -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    job_dir, command = Path(args[0]), args[2:]
    me = os.getpid()
    write_atomic(job_dir / "shim.pid", json.dumps({"pid": me, "start": proc_start_time(me)}))
    try:
        child = subprocess.Popen(command, shell=False, stdin=subprocess.DEVNULL)
    except OSError as e:
        print(f"coda: cannot start {command[0]!r}: {e.strerror}", file=sys.stderr)
        write_atomic(job_dir / "exit", "127\n")
        return 127

    def forward(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
    write_atomic(job_dir / "exit", f"{code}\n")
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
