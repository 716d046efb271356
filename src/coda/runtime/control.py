"""The agent's control socket: how users reach a (root) agent, and how it knows who they are.

A Unix stream socket in the agent's run directory, mode 0666: anyone on the node may
connect, and the kernel tells the agent who did (``SO_PEERCRED``: the peer's uid, gid
and pid at connect time). Nothing a client writes can change that, so the agent runs
a submitted job as the connecting user, lets users cancel only their own jobs and
shows them only their own commands and environments.

One JSON request per connection, one JSON answer back, both a single line. One
thread serves every connection from a selector, without blocking on any: a request
is at most ``MAX_REQUEST`` bytes and must arrive whole within ``TIMEOUT_S`` of the
connect (not per read: a client trickling a byte at a time is cut off too); at most
``MAX_CONNECTIONS`` are open at once and ``MAX_PER_USER`` per uid, the rest are
closed at once. A flood costs the agent a bounded number of sockets and buffers, and
its control loop, which runs in another thread, never waits for a client.

The client checks the other end as well: the socket and its directory must belong
to root or to the caller, and the process serving it (its peer credentials) must run
as root or as the caller, so a socket some other user planted never sees a spec.
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SOCKET_NAME = "agent.sock"
MAX_REQUEST = 4 << 20  # a job spec is at most 1 MiB of command and environment
MAX_ANSWER = 64 << 20
TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64
MAX_PER_USER = 8
BACKLOG = 256


@dataclass(frozen=True)
class Peer:
    """A connected client as the kernel reports it."""

    pid: int
    uid: int
    gid: int


class ControlError(RuntimeError):
    """The agent could not be reached, or answered with an error (its message)."""


class Unreachable(ControlError):
    """No agent listens there (no socket, or nobody accepts on it)."""


Handler = Callable[[dict[str, Any], Peer], dict[str, Any]]


def peer_of(sock: socket.socket) -> Peer:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid)


def _answer(handler: Handler, raw: bytes, peer: Peer) -> dict[str, Any]:
    try:
        req = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past the stack
        return {"ok": False, "error": "not a JSON request"}
    if not isinstance(req, dict):
        return {"ok": False, "error": "not a JSON object"}
    try:
        return handler(req, peer)
    except RecursionError:
        return {"ok": False, "error": "request nested too deeply"}


@dataclass
class _Conn:
    sock: socket.socket
    peer: Peer
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    out: bytes = b""


class ControlServer:
    """Serves ``handler(request, peer)`` on ``path`` from one background thread;
    ``on_exit`` runs in that thread when it stops (to close what the handler opened
    there)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        handler: Handler,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.handler = handler
        self.on_exit = on_exit
        # A stale socket of an earlier agent (this one holds the state-dir lock, and the
        # run directory is its own): replace it.
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(str(self.path))
            os.chmod(self.path, 0o666)  # who may do what is decided per request, by peer uid
            self._listener.listen(BACKLOG)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._conns: dict[int, _Conn] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="coda-control", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- loop
    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, events in self._sel.select(timeout=0.2):
                if key.data is None:
                    self._accept()
                else:
                    self._service(key.data, events)
            now = time.monotonic()
            for conn in [c for c in self._conns.values() if c.deadline < now]:
                self._drop(conn)  # too slow: cut off, no answer owed
        for conn in list(self._conns.values()):
            self._drop(conn)
        if self.on_exit is not None:
            self.on_exit()

    def _accept(self) -> None:
        for _ in range(64):  # drain the backlog a batch at a time
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. out of file descriptors: try again next round
                return
            sock.setblocking(False)
            try:
                peer = peer_of(sock)
            except OSError:
                sock.close()
                continue
            mine = sum(1 for c in self._conns.values() if c.peer.uid == peer.uid)
            if len(self._conns) >= MAX_CONNECTIONS or mine >= MAX_PER_USER:
                sock.close()  # the client sees a closed connection: "busy, try again"
                continue
            conn = _Conn(sock, peer, time.monotonic() + TIMEOUT_S)
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _service(self, conn: _Conn, events: int) -> None:
        if events & selectors.EVENT_READ and not conn.out:
            try:
                chunk = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._drop(conn)
                return
            if chunk:
                conn.buf += chunk
            if len(conn.buf) > MAX_REQUEST:
                self._reply(conn, {"ok": False, "error": f"request over {MAX_REQUEST} bytes"})
                return
            if b"\n" in conn.buf or (not chunk and conn.buf):
                line = bytes(conn.buf.split(b"\n", 1)[0])
                self._reply(conn, _answer(self.handler, line, conn.peer))
                return
            if not chunk:
                self._drop(conn)
                return
        if events & selectors.EVENT_WRITE and conn.out:
            self._flush(conn)

    def _reply(self, conn: _Conn, answer: dict[str, Any]) -> None:
        conn.out = json.dumps(answer, default=str).encode() + b"\n"
        # The answer may be long (a status): it gets its own time to go out.
        conn.deadline = time.monotonic() + TIMEOUT_S
        self._sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        conn.out = conn.out[sent:]
        if not conn.out:
            self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        self._conns.pop(conn.sock.fileno(), None)
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sel.close()
        self._listener.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


# -------------------------------------------------------------------- client
def check_socket(path: str | os.PathLike[str]) -> None:
    """Refuse a socket (or its directory) that neither root nor the caller owns, or that
    another user could have replaced: the agent we would talk to could be anyone's."""
    me = os.geteuid()
    p = Path(path)
    for where, want_sock in ((p.parent, False), (p, True)):
        try:
            st = os.lstat(where)
        except FileNotFoundError:
            raise Unreachable(f"no agent socket at {p}") from None
        except OSError as e:
            raise Unreachable(f"cannot reach the agent at {p}: {e.strerror or e}") from None
        kind_ok = stat.S_ISSOCK(st.st_mode) if want_sock else stat.S_ISDIR(st.st_mode)
        if not kind_ok or st.st_uid not in (0, me):
            raise ControlError(
                f"{where} is not an agent's (owner uid {st.st_uid}, not root or you): "
                "not talking to it"
            )
        if not want_sock and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ControlError(f"{where} is writable by others: not talking to a socket in it")


def _connect(path: Path, timeout: float) -> socket.socket:
    """Connect, retrying while the agent's backlog is full (EAGAIN) until ``timeout``."""
    end = time.monotonic() + timeout
    delay = 0.01
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(max(0.1, end - time.monotonic()))
        try:
            sock.connect(str(path))
            return sock
        except OSError as e:
            sock.close()
            if e.errno in (errno.ENOENT, errno.ECONNREFUSED):
                raise Unreachable(f"no agent answers at {path}") from None
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK) or time.monotonic() > end:
                raise ControlError(f"cannot reach the agent at {path}: {e.strerror or e}") from None
        time.sleep(delay)
        delay = min(0.2, delay * 2)


def _read_line(sock: socket.socket, limit: int) -> bytes:
    buf = bytearray()
    while b"\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise ValueError(f"the agent's answer is longer than {limit} bytes")
    return bytes(buf.split(b"\n", 1)[0])


def request(
    path: str | os.PathLike[str], req: dict[str, Any], timeout: float = 30.0
) -> dict[str, Any]:
    """Send one request to the agent at ``path``; its answer, or ControlError
    (Unreachable when no agent listens there)."""
    p = Path(path)
    check_socket(p)
    sock = _connect(p, timeout)
    try:
        server = peer_of(sock)
        if server.uid not in (0, os.geteuid()):
            raise ControlError(
                f"the process serving {p} runs as uid {server.uid}, not root or you: "
                "not talking to it"
            )
        try:
            sock.sendall(json.dumps(req).encode() + b"\n")
            raw = _read_line(sock, MAX_ANSWER)
        except (ConnectionResetError, BrokenPipeError):
            raw = b""  # refused at accept (too many connections), or stopping
        except (OSError, ValueError) as e:
            raise ControlError(f"agent at {p}: {e}") from None
    finally:
        sock.close()
    if not raw:
        raise ControlError(f"the agent at {p} closed the connection (busy, or stopping)")
    try:
        answer = json.loads(raw)
    except (ValueError, RecursionError):
        answer = None
    if not isinstance(answer, dict):
        raise ControlError(f"the agent at {p} answered something that is not an answer")
    if not answer.get("ok"):
        raise ControlError(str(answer.get("error", "refused"))[:500])
    return answer


def answers(path: str | os.PathLike[str]) -> bool:
    """Whether an agent listens at ``path``: False only if nothing is there or nobody
    accepts (a full backlog is a busy agent, not none)."""
    try:
        _connect(Path(path), 2.0).close()
        return True
    except Unreachable:
        return False
    except ControlError:  # still busy after the retries: an agent, just a loaded one
        return True
