"""Another user's latency at a root agent's socket while one user attacks it (issue 39).

    sudo .venv/bin/python bench/bench_agent_socket.py                 # defaults below
    sudo .venv/bin/python bench/bench_agent_socket.py --queue 990 --env-bytes 1048576
    sudo .venv/bin/python bench/bench_agent_socket.py --attack cancel --env-bytes 100

The attack as it was found: an unprivileged user queues ~1,000 jobs whose specs each
carry a big environment, then runs several loops of `coda status`; another user's
`coda submit` timed out. Here a real `coda agent` runs as root (on a fake cgroup tree
in a temp directory: the socket, database and control loop are the real ones), and:

1. the hostile user (``--hostile-uid``, default nobody) submits ``--queue`` jobs with
   ``--env-bytes`` of environment each, behind one root job that holds the node, as
   many as the agent takes (it refuses oversize specs and caps a user's bytes);
2. ``--loops`` processes of that user send requests as fast as they can: status
   (``--attack status``), or cancels naming its whole queue, each id as often as one
   request takes (``--attack cancel``: 10,000 such ids once held the socket 52 s);
3. meanwhile another user (``--victim-uid``) submits ``--samples`` jobs and asks for
   status, one at a time; each request's latency is recorded (no load first, as the
   baseline, then under the load).

Prints what the agent accepted and why it stopped, the state directory's size, the
agent's RSS and tick, and the median and p99 of the victim's latencies. Needs root
(the users are real uids, told apart by the kernel's peer credentials).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coda.cli.node_commands import spawn_agent
from coda.runtime.client import socket_path
from coda.runtime.control import ControlError, request
from coda.runtime.faketree import build_v1_tree

NOBODY = 65534


def in_child_as(uid: int, work: Callable[[], dict[str, Any]]) -> tuple[int, int]:
    """Fork a child that drops to ``uid`` (gid the same, no groups) and runs ``work``;
    (pid, read end of a pipe that gets its JSON result)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.write(w, json.dumps(work()).encode())
            code = 0
        except BaseException as e:  # noqa: BLE001 - reported as the child's result
            try:
                os.write(w, json.dumps({"error": repr(e)[:500]}).encode())
            except OSError:
                pass
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def collect(pid: int, fd: int) -> dict[str, Any]:
    with os.fdopen(fd, "rb") as f:
        raw = f.read()
    os.waitpid(pid, 0)
    try:
        got = json.loads(raw)
    except ValueError:
        got = {"error": f"no result: {raw[:200]!r}"}
    return got if isinstance(got, dict) else {"error": "not an object"}


def as_user(uid: int, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return collect(*in_child_as(uid, work))


def fill_queue(sock: Path, n: int, env_bytes: int) -> dict[str, Any]:
    """Submit up to ``n`` jobs with ``env_bytes`` of environment each, straight to the
    socket (no client-side checks, as an attacker would); stop at the first refusal."""
    spec = {"argv": ["/bin/true"], "cwd": "/tmp", "env": {"PAD": "x" * env_bytes}}
    ids: list[int] = []
    refused = ""
    t0 = time.monotonic()
    for _ in range(n):
        try:
            ids.append(int(request(sock, {"op": "submit", "spec": spec})["id"]))
        except ControlError as e:
            refused = str(e)
            break
    return {"ids": ids, "refused": refused, "seconds": time.monotonic() - t0}


def flood(sock: Path, req: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``req`` back to back for ``seconds``: how many were answered, busy, and the
    longest one."""
    end = time.monotonic() + seconds
    answered = busy = other = 0
    longest = 0.0
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            request(sock, req, timeout=120)
            answered += 1
        except ControlError as e:
            if "busy" in str(e):
                busy += 1
            else:
                other += 1
        longest = max(longest, time.monotonic() - t0)
    return {"answered": answered, "busy": busy, "other": other, "longest_s": round(longest, 3)}


def cancel_request(ids: list[int]) -> dict[str, Any]:
    """A cancel naming ``ids`` over and over, as many as one request takes."""
    from coda.runtime.service import MAX_CANCEL_IDS

    many = (ids * (MAX_CANCEL_IDS // max(1, len(ids)) + 1))[:MAX_CANCEL_IDS]
    return {"op": "cancel", "ids": many}


def timed_requests(sock: Path, samples: int, pause: float) -> dict[str, Any]:
    """``samples`` submits and statuses, one at a time: each one's latency (seconds),
    and the errors any got."""
    spec = {"argv": ["/bin/true"], "cwd": "/tmp", "name": "victim"}
    lat: dict[str, list[float]] = {"submit": [], "status": []}
    errors: list[str] = []
    for _ in range(samples):
        for op, req in (("submit", {"op": "submit", "spec": spec}), ("status", {"op": "status"})):
            t0 = time.perf_counter()
            try:
                request(sock, req, timeout=30)
            except ControlError as e:
                errors.append(f"{op}: {e}")
            lat[op].append(time.perf_counter() - t0)
        time.sleep(pause)
    return {"latency": lat, "errors": errors}


def quantiles(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    if not s:
        return {"median_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    p99 = s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]
    return {
        "median_ms": round(statistics.median(s) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "max_ms": round(s[-1] * 1000, 2),
    }


def under_attack(
    sock: Path,
    hostile: int,
    victim: int,
    loops: int,
    samples: int,
    pause: float,
    ids: list[int] | None = None,
) -> dict[str, Any]:
    """The victim's latencies while ``loops`` loops of ``hostile`` run: status loops,
    or cancel loops over ``ids`` when given."""
    seconds = samples * (pause + 0.05) + 5

    req = cancel_request(ids) if ids is not None else {"op": "status", "decisions": 1000}

    def loop() -> dict[str, Any]:
        return flood(sock, req, seconds)

    kids = [in_child_as(hostile, loop) for _ in range(loops)]
    time.sleep(0.5)  # the loops are going
    got = as_user(victim, lambda: timed_requests(sock, samples, pause))
    hostile_said = [collect(*k) for k in kids]
    return {"victim": got, "hostile": hostile_said}


def agent_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def tick_seconds(state: Path) -> float:
    try:
        for line in (state / "metrics.prom").read_text().splitlines():
            if line.startswith("coda_agent_tick_seconds "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return float("nan")


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue", type=int, default=990, help="jobs the hostile user submits")
    ap.add_argument("--env-bytes", type=int, default=60_000, help="environment per spec")
    ap.add_argument("--attack", choices=("status", "cancel"), default="status",
                    help="what the hostile loops send")  # fmt: skip
    ap.add_argument("--loops", type=int, default=4, help="hostile loops")
    ap.add_argument("--samples", type=int, default=100, help="victim submits (and statuses)")
    ap.add_argument("--pause", type=float, default=0.02, help="between victim requests, s")
    ap.add_argument("--hostile-uid", type=int, default=NOBODY)
    ap.add_argument("--victim-uid", type=int, default=4243)
    ap.add_argument("--agent-arg", action="append", default=[], help="extra `coda agent` args")
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root: the hostile and victim users are real uids", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="coda-bench-sock-", dir="/tmp"))
    os.chmod(base, 0o755)
    mounts = build_v1_tree(base / "cg", 2)
    state = base / "state"
    agent = spawn_agent(
        state,
        ["--cgroup-mounts", str(mounts), "--cgroup-prefix", str(base / "cg"), "--gpus", "0",
         "--cpus", "0", "--stop-jobs-on-exit", "--quiet",
         *a.agent_arg],
        base / "agent.log",
    )  # fmt: skip
    sock = socket_path(state)
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(a).items()}}
    try:
        # One root job holds the node's one CPU: everything else waits in the queue.
        request(sock, {"op": "submit", "spec": {"argv": ["sleep", "3600"], "cwd": "/tmp"}})
        results["baseline"] = {
            op: quantiles(xs)
            for op, xs in as_user(a.victim_uid, lambda: timed_requests(sock, 20, a.pause))[
                "latency"
            ].items()
        }
        filled = as_user(a.hostile_uid, lambda: fill_queue(sock, a.queue, a.env_bytes))
        time.sleep(2.5)  # a few ticks with the queue
        results["queue"] = {
            "accepted": len(filled.get("ids", [])),
            "refused": filled.get("refused", filled.get("error", "")),
            "state_dir_mib": round(dir_bytes(state) / 2**20, 1),
            "agent_rss_mib": round(agent_rss_mib(agent.pid), 1),
            "tick_s": tick_seconds(state),
        }
        ids = filled.get("ids", []) if a.attack == "cancel" else None
        got = under_attack(sock, a.hostile_uid, a.victim_uid, a.loops, a.samples, a.pause, ids)
        victim = got["victim"]
        results["under_attack"] = {op: quantiles(xs) for op, xs in victim["latency"].items()}
        results["victim_errors"] = victim.get("errors", [])[:5]
        results["hostile"] = got["hostile"]
        results["tick_s_after"] = tick_seconds(state)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=30)
        except Exception:  # noqa: BLE001
            agent.kill()
            agent.wait()
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(results, indent=2))
    if a.out is not None:
        a.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
