"""The agent's control socket: how users reach a (root) agent, and how it knows who they are.

A Unix stream socket in the agent's run directory, mode 0666: anyone on the node may
connect, and the kernel tells the agent who did (``SO_PEERCRED``: the peer's uid, gid
and pid at connect time). Nothing a client writes can change that, so the agent runs
a submitted job as the connecting user, lets users cancel only their own jobs and
shows them only their own commands and environments.

One JSON request per connection, one JSON answer back, both a single line. A
request is at most ``MAX_REQUEST`` bytes and must arrive within ``TIMEOUT_S``; a
client that sends more, or stalls, is cut off without holding up the agent (each
connection has its own thread; the agent's control loop never waits for one).
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOCKET_NAME = "agent.sock"
MAX_REQUEST = 4 << 20  # a job spec is at most 1 MiB of command and environment
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Peer:
    """A connected client as the kernel reports it."""

    pid: int
    uid: int
    gid: int


class ControlError(RuntimeError):
    """The agent could not be reached, or answered with an error (its message)."""


Handler = Callable[[dict[str, Any], Peer], dict[str, Any]]


def peer_of(sock: socket.socket) -> Peer:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid)


def _read_line(sock: socket.socket, limit: int) -> bytes:
    buf = bytearray()
    while b"\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise ValueError(f"request longer than {limit} bytes")
    return bytes(buf.split(b"\n", 1)[0])


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = False


class ControlServer:
    """Serves ``handler(request, peer)`` on ``path`` from background threads."""

    def __init__(self, path: str | os.PathLike[str], handler: Handler) -> None:
        self.path = Path(path)
        handle = handler

        class Request(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.settimeout(TIMEOUT_S)
                try:
                    peer = peer_of(sock)
                    raw = _read_line(sock, MAX_REQUEST)
                    try:
                        req = json.loads(raw)
                    except (ValueError, UnicodeDecodeError):
                        req = None
                    if not isinstance(req, dict):
                        answer: dict[str, Any] = {"ok": False, "error": "not a JSON object"}
                    else:
                        answer = handle(req, peer)
                except (OSError, ValueError) as e:  # timeout, reset, too long
                    answer = {"ok": False, "error": str(e)}
                try:
                    sock.sendall(json.dumps(answer, default=str).encode() + b"\n")
                except OSError:
                    pass  # the client went away: nothing to tell

        # A stale socket of an earlier agent (this one holds the state-dir lock, and the
        # run directory is its own): replace it.
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        self._server = _Server(str(self.path), Request)
        os.chmod(self.path, 0o666)  # who may do what is decided per request, by peer uid
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def request(path: str | os.PathLike[str], req: dict[str, Any], timeout: float = 30.0) -> dict:
    """Send one request to the agent at ``path``; its answer, or ControlError."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(str(path))
        except OSError as e:
            raise ControlError(f"cannot reach the agent at {path}: {e.strerror or e}") from None
        try:
            sock.sendall(json.dumps(req).encode() + b"\n")
            raw = _read_line(sock, 64 << 20)
        except (OSError, ValueError) as e:
            raise ControlError(f"agent at {path}: {e}") from None
    finally:
        sock.close()
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ControlError(f"agent at {path} gave no answer (did it stop?)")
    if not answer.get("ok"):
        raise ControlError(str(answer.get("error", "refused")))
    return answer


def answers(path: str | os.PathLike[str]) -> bool:
    """Whether an agent listens at ``path`` (connect only)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(2.0)
    try:
        sock.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        sock.close()
