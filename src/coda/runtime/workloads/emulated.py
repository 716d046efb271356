"""Emulated jobs: a training job and a CPU job that progress at the rate CODA's
performance model gives them for what they are really given, and mostly sleep.

Run as ``python -m coda.runtime.workloads.emulated {dnn,cpu} ...``. This is emulation:
it exercises the control stack and the scheduling (Slurm, the controller, the agents),
not the hardware. Dozens run at once on two real cores.

Every tick (``--tick``, default 0.25 s) a job reads what it has and moves on by
``speed x dt`` seconds of work:

- its cores: the grant the node agent left it on the node's board (``job_<id>.grant``,
  trusted only if root owns it; see ``coda.runtime.board``), else Slurm's count for
  the job on this node (``SLURM_CPUS_ON_NODE``), else its CPU affinity; times the CPU
  quota the grant gives;
- its co-runners' memory-bandwidth draw and PCIe class, from their records on the
  board; it publishes its own there;
- its speed from those, by the simulator's formulas (``coda.workload.speed_model``):
  a training job by its model's profile for its GPUs per node (``--profiles``, the
  shipped set by default), a CPU job by its share of the cores it asked for.

A training job reports progress through ``coda.runtime.progress`` (``CODA_PROGRESS_FILE``;
``--rate`` samples per second of work), so its agent sees its throughput as it would
a real job's. With ``--checkpoint PATH`` a job records the work it has done every
``--checkpoint-s`` seconds of its run and starts from there when run again (a CPU job
requeued by CODA loses only the work since, as in the simulator). A gang job is
emulated from its first node's board.

Output: a JSON line at start (``"event": "start"``: the job id, Slurm's restart count,
wall time, work done already), with ``--log-every S`` one every S seconds
(``"event": "progress"``: wall time, work done), and one at the end (``"event": "end"``: work done,
seconds, mean speed, and the signal if stopped). Exit status 0 when its work is done
or on SIGTERM/SIGINT; 2 for bad options or environment.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coda.runtime.board import ENV_DIR, Board, Grant, Use, UseWriter
from coda.runtime.progress import Reporter
from coda.runtime.workloads._common import StopSignals, int_at_least, number_above
from coda.workload import speed_model
from coda.workload.job_perf import JobPerf

MAX_WORK_S = 1e8


class EnvError(ValueError):
    """A bad environment variable or file: one line, exit status 2."""


@dataclass
class Inputs:
    """What a job has this tick."""

    cores: float
    quota: float
    others: list[Use]


def _env_int(name: str, lo: int) -> int | None:
    text = os.environ.get(name)
    if text is None or text == "":
        return None
    if not re.fullmatch(r"[0-9]{1,12}", text):  # ASCII digits only: int() takes more
        raise EnvError(f"{name}={text[:40]!r}: not an integer")
    v = int(text)
    if v < lo:
        raise EnvError(f"{name}={v}: must be >= {lo}")
    return v


def slurm_cores() -> int | None:
    """Slurm's CPU count for this job on this node; None outside Slurm."""
    return _env_int("SLURM_CPUS_ON_NODE", 1)


def read_checkpoint(path: str) -> float:
    """Work done by an earlier run of this job; 0.0 where there is none. Only a regular
    file of this user's, not a symlink; a malformed one is an error (not a fresh start
    that would silently redo work)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return 0.0
    except OSError as e:
        raise EnvError(f"checkpoint {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise EnvError(f"checkpoint {path}: not a regular file of this user's")
        raw = os.read(fd, 65)
    finally:
        os.close(fd)
    text = raw.decode("ascii", "replace").strip()
    if len(raw) > 64 or not re.fullmatch(r"[0-9]{1,9}(\.[0-9]{1,9})?", text):
        raise EnvError(f"checkpoint {path}: not a number of seconds")
    done = float(text)
    if not (math.isfinite(done) and 0 <= done <= MAX_WORK_S):
        raise EnvError(f"checkpoint {path}: {done} is not a work count")
    return done


def write_checkpoint(path: str, done: float) -> None:
    """Replace the checkpoint in one step; an error is an EnvError (one line)."""
    tmp = f"{path}.tmp"
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(tmp, flags, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise EnvError(f"checkpoint {tmp}: not a regular file")
            os.write(fd, f"{done:.6f}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        raise EnvError(f"checkpoint {path}: {e.strerror or e}") from None


class EmulatedJob:
    """One job's emulation; ``step(dt)`` is one tick. ``speed_of`` turns what it has
    into its speed, ``use_of`` into its record; ``clock`` and ``sleep`` are injectable
    so that tests run it in virtual time."""

    def __init__(
        self,
        kind: str,
        job_id: int,
        work_s: float,
        speed_of: Callable[[Inputs], float],
        bandwidth_of: Callable[[float, float], float],
        board: Board | None,
        model: str = "-",
        pcie_heavy: bool = False,
        done: float = 0.0,
        fallback_cores: Callable[[], float] | None = None,
    ) -> None:
        self.kind = kind
        self.job_id = job_id
        self.work_s = work_s
        self.speed_of = speed_of
        self.bandwidth_of = bandwidth_of
        self.board = board
        self.model = model
        self.pcie_heavy = pcie_heavy
        self.done = done
        self.fallback_cores = fallback_cores or _affinity_cores
        self.speed = 0.0
        self.writer: UseWriter | None = None
        self.publish_error = ""

    def inputs(self) -> Inputs:
        grant: Grant | None = self.board.grant(self.job_id) if self.board else None
        if grant is not None:
            cores, quota = float(grant.cores), grant.quota
        else:
            cores, quota = float(self.fallback_cores()), 1.0
        others = self.board.uses(exclude=self.job_id) if self.board else []
        return Inputs(cores, quota, others)

    def update(self) -> float:
        """Read what the job has, publish what it draws; its speed from now on."""
        got = self.inputs()
        self.speed = self.speed_of(got)
        self._publish(self.bandwidth_of(got.cores, got.quota))
        return self.speed

    def _publish(self, bw: float) -> None:
        if self.board is None or self.publish_error:
            return
        try:
            if self.writer is None:
                self.writer = UseWriter(self.board, self.job_id)
            self.writer.publish(
                Use(self.job_id, self.kind, bw, self.pcie_heavy, self.model, os.getpid())
            )
        except (OSError, ValueError) as e:
            # No record (no Prolog made one): co-runners do not see this job's draw.
            self.publish_error = (
                f"{self.board.use_path(self.job_id)}: {getattr(e, 'strerror', None) or e}"
            )
            print(f"emulated: bandwidth not published ({self.publish_error})", file=sys.stderr)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _affinity_cores() -> float:
    return float(slurm_cores() or len(os.sched_getaffinity(0)))


def dnn_speed_of(
    perf: JobPerf, node_bw: float, pcie_pair: Callable[[str, str], float], model: str
) -> Callable[[Inputs], float]:
    def speed(got: Inputs) -> float:
        others_bw = sum(u.bw_gbps for u in got.others)
        pair = 1.0
        if perf.pcie_heavy:
            for u in got.others:
                if u.kind == "dnn" and u.pcie_heavy:
                    pair = max(pair, pcie_pair(model, u.model))
        return speed_model.dnn_speed(perf, got.cores, got.quota, others_bw, node_bw, pair)

    return speed


def cpu_speed_of(
    cores_requested: int, bw_per_core: float, node_bw: float
) -> Callable[[Inputs], float]:
    def speed(got: Inputs) -> float:
        used = speed_model.cpu_bandwidth(bw_per_core, got.cores, got.quota) + sum(
            u.bw_gbps for u in got.others
        )
        return speed_model.cpu_speed(got.cores, got.quota, cores_requested, used, node_bw)

    return speed


def run(
    job: EmulatedJob,
    tick_s: float,
    reporter: Reporter | None = None,
    rate: float = 100.0,
    checkpoint: str | None = None,
    checkpoint_s: float = 600.0,
    stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    log_every_s: float = 0.0,
    log: Callable[[float], None] = lambda done: None,
) -> float:
    """Run the job until its work is done or ``stop()``; the seconds it ran. The speed
    read at a tick holds until the next (or, the last one, until the work is done).
    With ``log_every_s``, ``log(done)`` about that often (and at the end)."""
    t0 = last = clock()
    next_ckpt = t0 + checkpoint_s
    next_log = t0 + log_every_s
    reported = int(job.done * rate)  # a resumed job reports only what it does now
    while job.done < job.work_s and not stop():
        speed = job.update()
        left = job.work_s - job.done
        dt = tick_s if speed <= 0 or left / speed > tick_s else left / speed
        sleep(dt)
        now = clock()  # the whole tick, reading the board included, ran at that speed,
        # but not a stop (SIGSTOP, Slurm's suspend): no more than a second over the tick
        job.done = min(job.work_s, job.done + speed * min(now - last, dt + 1.0))
        last = now
        if reporter is not None:
            samples = int(job.done * rate)
            if samples > reported:
                reporter.step(samples - reported)
                reported = samples
        if checkpoint is not None and clock() >= next_ckpt:
            write_checkpoint(checkpoint, job.done)
            next_ckpt += checkpoint_s
        if log_every_s and now >= next_log:
            log(job.done)
            next_log = now + log_every_s
    if log_every_s:
        log(job.done)
    return clock() - t0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m coda.runtime.workloads.emulated",
        description="An emulated training or CPU job (CODA's performance model, mostly asleep).",
    )
    sub = p.add_subparsers(dest="kind", required=True)
    for kind in ("dnn", "cpu"):
        s = sub.add_parser(kind, help=f"an emulated {'training' if kind == 'dnn' else 'CPU'} job")
        s.add_argument(
            "--work", type=number_above(0, strict=True), required=True,
            help="seconds of work at full speed",
        )  # fmt: skip
        s.add_argument(
            "--node-bw", type=number_above(1e-3, strict=False, hi=1e5), required=True,
            help="the node's memory bandwidth, GB/s",
        )  # fmt: skip
        s.add_argument("--board", metavar="DIR", help=f"the node's board (default ${ENV_DIR})")
        s.add_argument(
            "--job-id", type=int_at_least(1, hi=10**12 - 1), help="default $SLURM_JOB_ID"
        )
        s.add_argument("--tick", type=number_above(0.01, strict=False, hi=5.0), default=0.25)
        s.add_argument("--checkpoint", metavar="PATH", help="record work done here")
        s.add_argument("--checkpoint-s", type=number_above(0, strict=True), default=600.0)
        s.add_argument(
            "--log-every", type=number_above(0, strict=False), default=0.0,
            help="print a progress line (wall time, work done) this often, seconds",
        )  # fmt: skip
        if kind == "dnn":
            s.add_argument("--model", required=True, help="a model of the profile set")
            s.add_argument(
                "--gpus", type=int_at_least(1, hi=64), required=True, help="GPUs per node"
            )
            s.add_argument("--nodes", type=int_at_least(1, hi=4096), default=1)
            s.add_argument("--profiles", default="coda", help="profile set (name or JSON path)")
            s.add_argument(
                "--rate", type=number_above(1e-6, strict=False, hi=1e6), default=100.0,
                help="samples per second of work (what the agent sees)",
            )  # fmt: skip
        else:
            s.add_argument(
                "--cores", type=int_at_least(1, hi=4096), required=True, help="cores asked for"
            )
            s.add_argument(
                "--bw-per-core",
                type=number_above(0, strict=False, hi=1000),
                default=0.0,
                help="GB/s",
            )
    return p


def _job_id(opt: int | None) -> int:
    if opt is not None:
        return opt
    jid = _env_int("SLURM_JOB_ID", 1)
    if jid is None:
        raise EnvError("no job id: pass --job-id or run under Slurm (SLURM_JOB_ID)")
    return jid


def make_job(args: argparse.Namespace) -> tuple[EmulatedJob, float]:
    """The job the options describe, and the rate its reporter counts at."""
    if args.work > MAX_WORK_S:
        raise EnvError(f"--work {args.work}: at most {MAX_WORK_S:g} s")
    job_id = _job_id(args.job_id)
    slurm_cores()  # a bad SLURM_CPUS_ON_NODE is refused now, not at the first tick
    board_dir = args.board or os.environ.get(ENV_DIR)
    board = Board(board_dir) if board_dir else None
    done = read_checkpoint(args.checkpoint) if args.checkpoint else 0.0
    if args.kind == "dnn":
        from coda.workload.perf import load_profile_set

        try:
            profiles = load_profile_set(args.profiles)
        except (OSError, ValueError) as e:
            raise EnvError(f"--profiles {args.profiles}: {e}") from None
        if args.model not in profiles.models:
            raise EnvError(f"--model {args.model!r}: not one of {', '.join(profiles.models)}")
        perf = profiles.job_perf(args.model, args.gpus, args.nodes)
        job = EmulatedJob(
            "dnn", job_id, args.work,
            dnn_speed_of(perf, args.node_bw, profiles.pcie_pair_slowdown, args.model),
            lambda cores, quota: speed_model.dnn_bandwidth(perf, cores, quota),
            board, model=args.model, pcie_heavy=perf.pcie_heavy, done=min(done, args.work),
        )  # fmt: skip
        return job, args.rate
    bw_per_core = args.bw_per_core
    job = EmulatedJob(
        "cpu", job_id, args.work,
        cpu_speed_of(args.cores, bw_per_core, args.node_bw),
        lambda cores, quota: speed_model.cpu_bandwidth(bw_per_core, cores, quota),
        board, done=min(done, args.work),
    )  # fmt: skip
    return job, 0.0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        job, rate = make_job(args)
    except EnvError as e:
        print(f"emulated: {e}", file=sys.stderr)
        return 2
    signals = StopSignals()
    start = {
        "event": "start", "kind": job.kind, "job": job.job_id,
        "restarts": os.environ.get("SLURM_RESTART_COUNT", "0")[:12], "wall": time.time(),
        "done": round(job.done, 6), "work": args.work,
    }  # fmt: skip
    print(json.dumps(start), flush=True)
    reporter = Reporter() if job.kind == "dnn" else None
    done0 = job.done
    try:
        seconds = run(
            job, args.tick, reporter, rate, args.checkpoint, args.checkpoint_s,
            stop=lambda: signals.signum is not None, log_every_s=args.log_every,
            log=lambda done: print(json.dumps(
                {"event": "progress", "job": job.job_id, "wall": time.time(), "done": done}
            ), flush=True),
        )  # fmt: skip
    except EnvError as e:
        print(f"emulated: {e}", file=sys.stderr)
        return 2
    finally:
        job.close()
        if reporter is not None:
            reporter.close()
        signals.restore()
    end = {
        "event": "end", "job": job.job_id, "done": round(job.done, 6), "seconds": round(seconds, 3),
        "mean_speed": round((job.done - done0) / seconds, 6) if seconds > 0 else None,
        "stopped": signals.name, "wall": time.time(),
    }  # fmt: skip
    print(json.dumps(end), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
