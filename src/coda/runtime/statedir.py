"""Trust in the places a daemon keeps its state: only what the kernel vouches for.

A root agent runs jobs from its state directory, so whoever can write there can run
anything as anyone. The agent therefore takes a directory or file only if its own
user owns it and nobody else can write it, tightens what it takes (directory 0700,
files 0600: job environments and logs are private) and never follows a symlink.
The same checks serve the node agent, the Slurm agent and the Slurm controller.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
PUBLIC_DIR_MODE = 0o755  # the run directory: users reach the socket and their progress files


class StateDirError(RuntimeError):
    """A state directory or file this daemon must not trust; the message says why."""


def _owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def run_dir_of(state_dir: str | os.PathLike[str]) -> Path:
    """``<state-dir>.run``: beside the private state directory, reachable by users (the
    agent's socket and the jobs' progress files)."""
    sd = Path(os.path.abspath(state_dir))
    if not sd.name:
        raise StateDirError(f"state directory {sd}: it has no name (NAME.run goes beside it)")
    return sd.with_name(sd.name + ".run")


def check_owned(st: os.stat_result, path: Path, what: str) -> None:
    """Refuse ``path`` unless this process's user owns it and no one else may write it."""
    me = os.geteuid()
    if st.st_uid != me:
        raise StateDirError(
            f"{what} {path} is owned by {_owner_name(st.st_uid)}, not by this process's "
            f"user {_owner_name(me)}: refusing it (chown it, or pick another directory)"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateDirError(
            f"{what} {path} is writable by its group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): refusing it (chmod go-w it)"
        )


# What a directory CODA made may hold: one with any of these is CODA's to tighten.
CODA_ENTRIES = frozenset(
    {"coda.db", "controller.json", "agent.lock", "controller.lock", "agent.sock", "jobs",
     "progress"}
)  # fmt: skip


def check_ancestors(path: str | os.PathLike[str], what: str = "state directory") -> None:
    """Every directory above ``path`` (as written and as resolved) must belong to root
    or to this user and be writable by no one else, unless sticky (/tmp): otherwise
    another user could rename a directory on the way and swap in their own tree
    between our checks and our writes (the same rule as sshd's StrictModes)."""
    me = os.geteuid()
    p = Path(os.path.abspath(path))
    chains = {p.parent, Path(os.path.realpath(p.parent))}
    for top in chains:
        for d in (top, *top.parents):
            try:
                st = os.lstat(d)
            except FileNotFoundError:
                continue  # not made yet: made by us, below an ancestor that passed
            except OSError as e:
                raise StateDirError(f"{what} {p}: {d}: {e.strerror or e}") from None
            if st.st_uid not in (0, me):
                raise StateDirError(
                    f"{what} {p} is below {d}, which {_owner_name(st.st_uid)} owns: "
                    "another user could swap the path under it (refusing it)"
                )
            writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if stat.S_ISDIR(st.st_mode) and writable and not st.st_mode & stat.S_ISVTX:
                raise StateDirError(
                    f"{what} {p} is below {d}, which others can write (mode "
                    f"{stat.S_IMODE(st.st_mode):04o}, not sticky): refusing it"
                )


def secure_dir(
    path: str | os.PathLike[str], mode: int = DIR_MODE, what: str = "state directory"
) -> Path:
    """Create ``path`` with ``mode``, or take an existing one that passes the owner
    checks and set its mode to ``mode``. A symlink or non-directory is refused, and so
    is a directory with someone else's things in it whose mode would have to change
    (``--state-dir /var/lib`` must not chmod /var/lib)."""
    p = Path(path)
    check_ancestors(p, what)
    made = False
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(p, mode)
        made = True
    except FileExistsError:
        pass
    except OSError as e:
        raise StateDirError(f"{what} {p}: cannot create it: {e.strerror or e}") from None
    try:
        st = os.lstat(p)
    except OSError as e:
        raise StateDirError(f"{what} {p}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise StateDirError(f"{what} {p} is not a directory (a symlink or a file): refusing it")
    check_owned(st, p, what)
    if stat.S_IMODE(st.st_mode) != mode:
        try:
            entries = set(os.listdir(p))
        except OSError as e:
            raise StateDirError(f"{what} {p}: {e.strerror or e}") from None
        if not made and entries and not entries & CODA_ENTRIES:
            raise StateDirError(
                f"{what} {p} already holds other files (mode {stat.S_IMODE(st.st_mode):04o}): "
                "not taking it over; give CODA a directory of its own"
            )
        os.chmod(p, mode)
    return p


def secure_file(path: str | os.PathLike[str], what: str = "state file") -> bool:
    """Check an existing file the daemon will open (owner, not a symlink, a regular file)
    and tighten it to 0600; False if it does not exist yet."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise StateDirError(f"{what} {p}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise StateDirError(f"{what} {p} is not a regular file (a symlink?): refusing it")
    check_owned(st, p, what)
    if stat.S_IMODE(st.st_mode) != FILE_MODE:
        os.chmod(p, FILE_MODE)
    return True


def owned_by_me(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists and this process's user owns it (no other checks)."""
    try:
        return os.lstat(path).st_uid == os.geteuid()
    except OSError:
        return False
