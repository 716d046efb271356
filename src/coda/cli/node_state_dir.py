"""The state directory a runtime command works on: where it is by default, the
``--state-dir`` option, and the lock that allows one daemon per directory."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from click.core import ParameterSource

from coda.params import NamedDir
from coda.runtime.client import socket_path
from coda.runtime.statedir import StateDirError, secure_dir

F = TypeVar("F", bound=Callable[..., Any])  # a click command function, decorated in place

SYSTEM_STATE_DIR = "/var/lib/coda"


def default_state_dir() -> str:
    """$CODA_STATE_DIR; else the node's agent (/var/lib/coda) for root, or for anyone
    while a root agent listens there; else the user's own."""
    env = os.environ.get("CODA_STATE_DIR")
    if env:
        return env
    if os.geteuid() == 0 or socket_path(SYSTEM_STATE_DIR).exists():
        return SYSTEM_STATE_DIR
    return str(Path.home() / ".local" / "state" / "coda")


MAX_SOCKET_PATH = 107  # bytes of a Unix socket's path (sun_path: 108, with its NUL)


class StateDirPath(NamedDir):
    """A state directory: absolute from here on (``.`` is this directory by its name),
    never empty or ``/``, which have no name to put the ``.run`` directory beside."""

    def __init__(self) -> None:
        # Not readable=True: a root agent's state directory is closed to its users.
        super().__init__(readable=False)

    def fail(
        self, message: str, param: click.Parameter | None = None, ctx: click.Context | None = None
    ) -> NoReturn:
        """A bad value from $CODA_STATE_DIR is said to come from there: the user gave
        no --state-dir."""
        if (
            ctx is not None
            and param is not None
            and param.name
            and ctx.get_parameter_source(param.name) is ParameterSource.DEFAULT
            and os.environ.get("CODA_STATE_DIR")
        ):
            message = f"{message} (from $CODA_STATE_DIR)"
        super().fail(message, param, ctx)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip() == "":
            return super().convert(value, param, ctx)  # refused as empty
        path = os.path.abspath(os.fspath(value))
        if Path(path).name == "":
            self.fail(f"{path!r} has no name (the socket goes in NAME.run beside it)", param, ctx)
        sock = len(os.fsencode(socket_path(path)))
        if sock > MAX_SOCKET_PATH:
            # The agent could never bind it: a job submitted there would wait for ever.
            self.fail(
                f"{path!r} is too long: the agent's socket in it would have a path of {sock} "
                f"bytes, and a Unix socket's holds at most {MAX_SOCKET_PATH}",
                param,
                ctx,
            )
        return super().convert(path, param, ctx)


def state_dir_option(f: F) -> F:
    """The ``--state-dir`` option every runtime command takes."""
    return click.option(
        "--state-dir",
        type=StateDirPath(),
        default=default_state_dir,
        show_default="$CODA_STATE_DIR, else /var/lib/coda as root or while its agent runs, "
        "else ~/.local/state/coda",
        help="Where the agent keeps its database and job logs (0700; its socket and "
        "progress files are in STATE_DIR.run).",
    )(f)


class AgentLock:
    """One agent per state directory: an exclusive flock held for the agent's life."""

    def __init__(self, state_dir: Path, what: str = "agent") -> None:
        self.path = state_dir / f"{what}.lock"
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise click.ClickException(
                f"another {self.what} is running on {self.path.parent} (lock {self.path} is held)"
            ) from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def held(state_dir: Path) -> bool:
        path = state_dir / "agent.lock"
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)


def locked_state_dir(state_dir: str, what: str = "agent") -> tuple[Path, AgentLock]:
    """The daemon's state directory with its lock held: created 0700, or an existing one
    of this user's that nobody else can write, tightened to 0700 (else one line, exit 1).
    Files it makes are 0600 (umask)."""
    os.umask(0o077)
    try:
        sd = secure_dir(state_dir)
    except StateDirError as e:
        raise click.ClickException(str(e)) from None
    lock = AgentLock(sd, what)
    lock.acquire()
    return sd, lock
