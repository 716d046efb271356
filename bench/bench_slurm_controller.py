"""What one cycle of `coda slurm controller` costs on a big, backed-up cluster.

    .venv/bin/python bench/bench_slurm_controller.py \
        [--nodes 1000] [--queued 1000,10000] [--changes 0,10,100] [--cycles 10]

A fake Slurm (``FakeSlurm``) answers the controller's commands from memory, in
Slurm 22.05's formats (the controller's ``squeue -O`` listing and names query,
``scontrol show -o -d node``), and plays
Slurm's part between cycles: a job CODA released starts on the node it was placed
on. Half the nodes have 8 GPUs, all have 64 cores; running jobs fill most of them
and ``--queued`` jobs are held for CODA. Before each measured cycle K things
change (K from ``--changes``): K running jobs end (COMPLETED) and K new held jobs
arrive (at most as many end as run); jobs that ended a cycle ago are forgotten
(Slurm's MinJobAge). Slurm's clock moves on by ``--period`` seconds a cycle (the
controller's own period, 1 s, by default).

Per case, in one controller's life:
- first cycle: the one that builds the mirror (``SlurmView``) from nothing;
- warm-up (``--warmup W``, none by default): W cycles run, not measured, before each
  K's measured ones. A start leaves a backlog that the next cycles work through (the
  first cycle's thousands of placements start, backfill's depth owes searches to the
  jobs it did not get to): cycles measured right after it show that transient, cycles
  measured after a warm-up the steady state;
- restart cycle: after the steady cycles, a new controller's first (a restart of
  ``coda slurm controller`` on a busy cluster: everything read and built afresh);
- decide: ``Controller.decide()`` alone (sync the mirror, run the scheduling
  cycle): no Slurm command and no parsing;
- parse: turning Slurm's output into ``SlurmJob``/``SlurmNode``
  (the controller's ``JobListing.read()`` and ``SlurmClient.nodes()``, the fake's
  own time taken out);
- cycle: the whole ``Controller.cycle()`` less the time the fake Slurm took to
  answer (Slurm's own commands excluded; our parsing and writing included).

Issue 12's target: with 10,000 held jobs on 1,000 nodes, the cycle under 100 ms
median, Slurm's own commands excluded, growing with what changed (K), not with
nodes x jobs. Reported here, never asserted. A Markdown table goes to stdout,
progress to stderr.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from coda.collector import LongLivedHeap
from coda.slurm import fake_squeue
from coda.slurm.client import SlurmClient, SlurmError
from coda.slurm.controller import Controller
from coda.slurm.listing import LISTING

T = TypeVar("T")

GPUS = 8  # on a GPU node (half the nodes)
CORES = 64  # on every node
# Fake time between cycles: the controller's own period (``coda slurm controller
# --period``, 1 s by default). The fake never ends a job at its time limit (Slurm
# does): a longer step ages the running jobs past their limits faster than any real
# cluster lets them run (at 10 s a step, nearly half of them by the 200th cycle).
PERIOD_S = 1.0
T0 = 1_700_000_000.0
MAX_NODES = 20_000
MAX_QUEUED = 200_000
MAX_CHANGES = 10_000
MAX_CYCLES = 1_000
MAX_ARRIVALS = 200_000  # held jobs the changes may add over a run (memory stays bounded)


@dataclass
class FakeNode:
    name: str
    gpus: int
    cores: int = CORES
    cpu_alloc: int = 0
    gpu_used: int = 0

    def line(self) -> str:
        """This node as ``scontrol show -o -d node`` prints it (22.05)."""
        state = (
            "IDLE" if self.cpu_alloc == 0 else "ALLOCATED" if self.cpu_alloc >= self.cores
            else "MIXED"
        )  # fmt: skip
        gres = f"gpu:{self.gpus}" if self.gpus else "(null)"
        used = f"gpu:{self.gpu_used}(IDX:N/A)" if self.gpus else "gpu:0"
        return (
            f"NodeName={self.name} Arch=x86_64 CoresPerSocket=32 CPUAlloc={self.cpu_alloc} "
            f"CPUEfctv={self.cores} CPUTot={self.cores} CPULoad=0.00 AvailableFeatures=(null) "
            f"Gres={gres} GresDrain=N/A GresUsed={used} NodeAddr={self.name} "
            f"RealMemory=512000 AllocMem=0 State={state} Partitions=main"
        )


@dataclass
class FakeSlurm:
    """Slurm's state and the commands the controller runs on it, from memory.

    Call it as a ``SlurmClient`` runner. ``tick(k)`` is Slurm's part between two
    controller cycles. ``answer_s`` adds up the time spent answering (Slurm's side:
    not the controller's cost)."""

    rng: random.Random
    now: float = T0
    nodes: dict[str, FakeNode] = field(default_factory=dict)
    jobs: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_id: int = 1
    answer_s: float = 0.0
    period_s: float = PERIOD_S  # fake time a tick moves on
    ended: list[int] = field(default_factory=list)  # ended at the last tick
    # Each job's line of the listing, dropped when the job changes: a cycle's
    # answers cost what changed, so the benchmark's own run stays short.
    _text: dict[int, str] = field(default_factory=dict)

    def change(self, j: dict[str, Any], **fields: Any) -> None:
        """Change a job's record (the only way the fake changes one)."""
        j.update(fields)
        self._text.pop(j["job_id"], None)

    # ------------------------------------------------------------ the cluster
    @classmethod
    def backed_up(
        cls, n_nodes: int, queued: int, seed: int = 0, period_s: float = PERIOD_S
    ) -> FakeSlurm:
        """A busy cluster: most GPUs and cores taken by running jobs (DNN jobs, and
        CPU jobs beside them, which Slurm may requeue), ``queued`` jobs held."""
        s = cls(random.Random(seed), period_s=period_s)
        for i in range(n_nodes):
            node = FakeNode(f"node{i:05d}", GPUS if i < n_nodes // 2 else 0)
            s.nodes[node.name] = node
            if node.gpus:
                want_gpus = s.rng.randint(6, GPUS)
                while node.gpu_used < want_gpus:
                    g = s.rng.choice([x for x in (1, 2, 4) if x <= want_gpus - node.gpu_used])
                    s._run(s._job(g * s.rng.choice((3, 4, 5)), g), node)
            want_cores = s.rng.randint(48, CORES)
            while node.cpu_alloc < want_cores:
                c = s.rng.choice((1, 2, 4, 8, 16))
                if node.cpu_alloc + c > node.cores:
                    break
                s._run(s._job(c, 0), node)
        for _ in range(queued):
            s._held()
        return s

    def _job(self, cores: int, gpus: int) -> dict[str, Any]:
        """A new job record, pending, in ``squeue --json``'s shape (API v0.0.38): the
        fake prints it as the listing (``coda.slurm.fake_squeue``)."""
        jid = self.next_id
        self.next_id += 1
        j = {
            "job_id": jid,
            "name": f"m{jid % 20}" if gpus else "cpu",
            "user_id": 1000,
            "job_state": "PENDING",
            "state_reason": "JobHeldUser",
            "cpus": cores,
            "node_count": 1,
            "tres_per_node": f"gres:gpu:{gpus}" if gpus else "",
            "tres_per_job": "",
            "tres_per_task": "",
            "tasks": 1,
            "nodes": "",
            "required_nodes": "",
            "excluded_nodes": "",
            "partition": "main",
            "dependency": "",
            "priority": 0,
            "admin_comment": f"coda:held,req={cores}",
            "submit_time": int(self.now),
            "start_time": 0,
            "end_time": 0,
            "exit_code": 0,
            "restart_cnt": 0,
            "time_limit": self.rng.choice((10, 30, 60, 120, 240, 1440)),  # minutes
            "requeue": not gpus,  # batch CPU jobs may be requeued, DNN jobs not
            "array_job_id": 0,
            "array_task_id": None,
            "het_job_id": 0,
        }
        self.jobs[jid] = j
        return j

    def _held(self) -> dict[str, Any]:
        dnn = self.rng.random() < 0.4
        gpus = self.rng.choice((1, 2, 4, 8)) if dnn else 0
        cores = gpus * self.rng.choice((4, 6, 8)) if dnn else self.rng.choice((1, 2, 4, 8, 16))
        return self._job(cores, gpus)

    @staticmethod
    def gpus_of(j: dict[str, Any]) -> int:
        t = j["tres_per_node"]
        return int(t.rsplit(":", 1)[1]) if t else 0

    def _run(self, j: dict[str, Any], node: FakeNode) -> None:
        """Start ``j`` on ``node`` (a job already running for a while when new)."""
        g = self.gpus_of(j)
        self.change(
            j, job_state="RUNNING", state_reason="None", nodes=node.name, priority=1000,
            admin_comment=f"coda:placed,req={j['cpus']},grant={j['cpus']}",
            start_time=int(self.now) - self.rng.randint(0, 50 * int(j["time_limit"])),
        )  # fmt: skip
        node.cpu_alloc += j["cpus"]
        node.gpu_used += g

    def _free(self, j: dict[str, Any]) -> None:
        names = j["nodes"].split(",")
        g = self.gpus_of(j)
        for name in names:
            node = self.nodes[name]
            node.cpu_alloc -= j["cpus"] // len(names)
            node.gpu_used -= g

    def _start(self, j: dict[str, Any]) -> None:
        """A released job starts on the nodes it must use if they have room (Slurm
        never oversubscribes cores or GPUs); otherwise it waits (Resources)."""
        names = j["required_nodes"].split(",")
        cpus, gpus = j["cpus"] // len(names), self.gpus_of(j)
        nodes = [self.nodes[name] for name in names]
        if any(n.cpu_alloc + cpus > n.cores or n.gpu_used + gpus > n.gpus for n in nodes):
            if j["state_reason"] != "Resources":
                self.change(j, state_reason="Resources")
            return
        self.change(j, job_state="RUNNING", state_reason="None", nodes=j["required_nodes"],
                    start_time=int(self.now))  # fmt: skip
        for n in nodes:
            n.cpu_alloc += cpus
            n.gpu_used += gpus

    def running(self) -> list[int]:
        return [jid for jid, j in self.jobs.items() if j["job_state"] == "RUNNING"]

    def blocked(self) -> list[int]:
        """Jobs CODA placed and released that wait for room on their nodes: CODA
        placed more than those nodes hold."""
        return [
            jid
            for jid, j in self.jobs.items()
            if j["job_state"] == "PENDING"
            and j["priority"] > 0
            and j["state_reason"] == "Resources"
        ]

    def tick(self, changes: int) -> None:
        """Slurm between two cycles: released jobs start where CODA placed them (if
        there is room), the jobs that ended a tick ago are forgotten, ``changes``
        running jobs end and as many new held jobs arrive."""
        self.now += self.period_s
        for jid in self.ended:
            self.jobs.pop(jid, None)
            self._text.pop(jid, None)
        for j in self.jobs.values():
            if j["job_state"] == "PENDING" and j["priority"] > 0 and j["required_nodes"]:
                self._start(j)
        running = self.running()
        self.ended = self.rng.sample(running, min(changes, len(running)))
        for jid in self.ended:
            j = self.jobs[jid]
            self._free(j)
            self.change(j, job_state="COMPLETED", state_reason="None", end_time=int(self.now))
        for _ in range(changes):
            self._held()

    # ------------------------------------------------------------ commands
    def __call__(self, argv: Sequence[str]) -> str:
        t0 = time.perf_counter()
        try:
            return self._answer(list(argv))
        finally:
            self.answer_s += time.perf_counter() - t0

    def _answer(self, argv: list[str]) -> str:
        if argv == list(LISTING):  # each job's line made once per change of its record
            text = self._text
            for jid, j in self.jobs.items():
                if jid not in text:
                    text[jid] = fake_squeue.line_of(j)
            return "".join(text[jid] + "\n" for jid in sorted(self.jobs))
        if argv[0] == "squeue":  # some jobs: their lines, or names and excluded nodes
            jobs = next(a for a in argv if a.startswith("--jobs="))
            ids = {int(x) for x in jobs.removeprefix("--jobs=").split(",")}
            listed = fake_squeue.answer(argv, [self.jobs[i] for i in ids if i in self.jobs])
            if listed is not None:
                return listed
        if argv == ["scontrol", "show", "-o", "-d", "node"]:
            return "\n".join(n.line() for n in self.nodes.values()) + "\n"
        if argv[:2] == ["scontrol", "update"] and argv[2].startswith("JobId="):
            j = self._get(argv[2].removeprefix("JobId="))
            for a in argv[3:]:
                k, _, v = a.partition("=")
                if k == "ReqNodeList":
                    self.change(j, required_nodes=v)
                elif k == "NumCPUs":
                    self.change(j, cpus=int(v))
                elif k == "AdminComment":
                    self.change(j, admin_comment=v)
                elif k not in ("MinCPUsNode", "StartTime"):
                    raise ValueError(f"fake Slurm: scontrol update {k}= is not modelled")
            return ""
        if argv[:2] == ["scontrol", "release"]:
            j = self._get(argv[2])
            if j["job_state"] == "PENDING":
                self.change(j, priority=1000, state_reason="None")
            return ""
        if argv[:2] == ["scontrol", "hold"]:
            self.change(self._get(argv[2]), priority=0, state_reason="JobHeldUser")
            return ""
        if argv[:2] == ["scontrol", "requeuehold"]:
            j = self._get(argv[2])
            if j["job_state"] != "RUNNING" or not j["requeue"]:
                raise SlurmError(f"scontrol requeuehold {argv[2]}: Requested operation is "
                                 "presently disabled")  # fmt: skip
            self._free(j)
            self.change(j, job_state="PENDING", state_reason="JobHeldUser", priority=0,
                        nodes="", start_time=0, restart_cnt=j["restart_cnt"] + 1)  # fmt: skip
            return ""
        raise ValueError(f"fake Slurm: {' '.join(argv)!r} is not modelled")

    def _get(self, jid: str) -> dict[str, Any]:
        j = self.jobs.get(int(jid))
        if j is None:
            raise SlurmError(f"Invalid job id specified: {jid}")
        return j


# ---------------------------------------------------------------- measuring
class TimedReads:
    """A controller's listing or client with one reading method timed (``read()``,
    ``nodes()``): the compiled build's classes take no attribute of their own, so the
    object is wrapped instead."""

    def __init__(
        self, inner: Any, method: str, parsing: Callable[[Callable[[], T]], Callable[[], T]]
    ) -> None:
        self._inner = inner
        setattr(self, method, parsing(getattr(inner, method)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def timed(fn: Callable[..., T], out: list[float]) -> Callable[..., T]:
    """``fn``, appending each call's seconds to ``out``."""

    def wrapper(*a: Any, **k: Any) -> T:
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            out.append(time.perf_counter() - t0)

    return wrapper


@dataclass
class Cycle:
    """One controller cycle, in seconds (the fake Slurm's answering taken out)."""

    whole: float  # cycle() less Slurm's answers
    decide: float
    parse: float
    slurm: float  # the fake Slurm answering
    placed: int
    requeued: int


class Bench:
    """One controller on one fake cluster, its cycles measured one at a time."""

    def __init__(
        self, n_nodes: int, queued: int, seed: int, state_dir: str, period_s: float = PERIOD_S
    ) -> None:
        self.slurm = FakeSlurm.backed_up(n_nodes, queued, seed, period_s)
        self.state_dir = state_dir
        self._decide_s: list[float] = []
        self._parse_s = 0.0  # read()/nodes(), less the fake's answers inside them
        self.client, self.ctl = self._start()

    def restart(self) -> None:
        """A new controller (and client) on the same Slurm and state directory, as
        after ``systemctl restart``: its first cycle reads everything afresh. The old
        one's objects are collected first (a new process has none to collect)."""
        if self.ctl.heap is not None:
            self.ctl.heap.release()  # as the daemon does when it stops
        del self.client, self.ctl
        gc.collect()
        self.client, self.ctl = self._start()

    def _start(self) -> tuple[SlurmClient, Controller]:
        client = SlurmClient(self.slurm)
        ctl = Controller(
            client, self.state_dir, wall=lambda: self.slurm.now, heap=LongLivedHeap()
        )  # as the daemon's
        # Its reads timed where the controller calls them.
        ctl.slurm = TimedReads(client, "nodes", self._parsing)  # type: ignore[assignment]
        ctl.listing = TimedReads(ctl.listing, "read", self._parsing)  # type: ignore[assignment]
        ctl.decide = timed(ctl.decide, self._decide_s)  # type: ignore[method-assign]
        return client, ctl

    def _parsing(self, fn: Callable[[], T]) -> Callable[[], T]:
        def wrapper() -> T:
            answer0, t0 = self.slurm.answer_s, time.perf_counter()
            try:
                return fn()
            finally:
                took = time.perf_counter() - t0
                self._parse_s += took - (self.slurm.answer_s - answer0)

        return wrapper

    def cycle(self, changes: int | None) -> Cycle:
        """Slurm's part (``changes`` jobs end and arrive; None: the first cycle, no
        tick), then one measured ``Controller.cycle()``."""
        if changes is not None:
            self.slurm.tick(changes)
        self._decide_s.clear()
        self._parse_s = 0.0
        answer0, requeues0 = self.slurm.answer_s, self.ctl.stats.requeues
        t0 = time.perf_counter()
        placed = len(self.ctl.cycle())
        whole = time.perf_counter() - t0
        answered = self.slurm.answer_s - answer0
        return Cycle(
            whole=whole - answered,
            decide=sum(self._decide_s),
            parse=self._parse_s,
            slurm=answered,
            placed=placed,
            requeued=self.ctl.stats.requeues - requeues0,
        )


def run_queue(
    n_nodes: int,
    queued: int,
    changes: Sequence[int],
    cycles: int,
    seed: int = 0,
    log: Callable[[str], None] = lambda msg: None,
    warmup: int = 0,
    period_s: float = PERIOD_S,
) -> tuple[Cycle, dict[int, list[Cycle]], Cycle]:
    """The first cycle of one controller, then ``cycles`` steady-state cycles for each
    K in ``changes`` (the same controller goes on), each K's after ``warmup`` cycles
    not kept, then the first cycle of a new controller on the same cluster (a
    restart). The second cycle, where the first cycle's placements start all at once,
    is run but not kept."""
    with tempfile.TemporaryDirectory() as d:
        b = Bench(n_nodes, queued, seed, d, period_s)
        first = b.cycle(None)
        log(
            f"  first cycle {first.whole * 1e3:.0f} ms, decide {first.decide * 1e3:.0f} ms, "
            f"parse {first.parse * 1e3:.0f} ms ({first.placed} placed)"
        )
        settle = b.cycle(0)
        log(f"  settling cycle {settle.whole * 1e3:.0f} ms ({settle.placed} placed)")
        steady: dict[int, list[Cycle]] = {}
        for k in changes:
            warm: list[float] = []
            for i in range(warmup):
                warm.append(b.cycle(k).whole)
                if (i + 1) % 25 == 0 or i + 1 == warmup:  # the transient, as it fades
                    log(f"  changes={k}, warm-up cycles {max(1, i - 23)}-{i + 1}: cycle "
                        f"median {statistics.median(warm[-25:]) * 1e3:.0f} ms")  # fmt: skip
            steady[k] = []
            for i in range(cycles):
                steady[k].append(b.cycle(k))
                if cycles > 10 and (i + 1) % 10 == 0:  # a long run: does the cycle grow?
                    last = steady[k][-10:]
                    log(
                        f"  changes={k}, cycles {i - 8}-{i + 1}: cycle median "
                        f"{statistics.median(c.whole for c in last) * 1e3:.0f} ms, decide "
                        f"{statistics.median(c.decide for c in last) * 1e3:.0f} ms, "
                        f"{len(b.ctl.sched.book.dirty)} nodes carried to the next as dirty"
                    )
        refused = {k: v for k, v in b.ctl.stats.refusals.items() if v}
        if refused:
            log(f"  note: Slurm refused: {refused}")
        b.slurm.tick(0)
        b.restart()
        restart = b.cycle(None)
        log(
            f"  restart cycle {restart.whole * 1e3:.0f} ms, decide {restart.decide * 1e3:.0f} "
            f"ms, parse {restart.parse * 1e3:.0f} ms ({restart.placed} placed)"
        )
        b.slurm.tick(0)  # what Slurm makes of the last cycle's placements
        if blocked := b.slurm.blocked():
            log(f"  note: {len(blocked)} placed job(s) wait for room on their node, e.g. "
                f"{', '.join(map(str, blocked[:5]))}")  # fmt: skip
    return first, steady, restart


def p90(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[int(0.9 * (len(s) - 1))]


def summary(
    n_nodes: int,
    queued: int,
    changes: int,
    first: Cycle,
    steady: list[Cycle],
    restart: Cycle,
    warmup: int = 0,
) -> dict[str, Any]:
    ms = 1e3
    return {
        "nodes": n_nodes,
        "queued": queued,
        "changes": changes,
        "warmup": warmup,
        "first_ms": first.whole * ms,
        "restart_ms": restart.whole * ms,
        "first_decide_ms": first.decide * ms,
        "decide_median_ms": statistics.median(c.decide for c in steady) * ms,
        "decide_p90_ms": p90([c.decide for c in steady]) * ms,
        "parse_median_ms": statistics.median(c.parse for c in steady) * ms,
        "cycle_median_ms": statistics.median(c.whole for c in steady) * ms,
        "cycle_p90_ms": p90([c.whole for c in steady]) * ms,
        "slurm_median_ms": statistics.median(c.slurm for c in steady) * ms,
        "placed_per_cycle": statistics.mean(c.placed for c in steady),
        "requeued_per_cycle": statistics.mean(c.requeued for c in steady),
        "first_placed": first.placed,
    }


COLUMNS = (
    ("nodes", "nodes", "{:d}"),
    ("queued", "queued", "{:d}"),
    ("changes/cycle", "changes", "{:d}"),
    ("warm-up cycles", "warmup", "{:d}"),
    ("first cycle ms", "first_ms", "{:.1f}"),
    ("restart cycle ms", "restart_ms", "{:.1f}"),
    ("decide median ms", "decide_median_ms", "{:.2f}"),
    ("decide p90 ms", "decide_p90_ms", "{:.2f}"),
    ("parse median ms", "parse_median_ms", "{:.1f}"),
    ("cycle median ms", "cycle_median_ms", "{:.1f}"),
    ("cycle p90 ms", "cycle_p90_ms", "{:.1f}"),
    ("placements/cycle", "placed_per_cycle", "{:.1f}"),
    ("requeues/cycle", "requeued_per_cycle", "{:.1f}"),
)


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = "| " + " | ".join(c[0] for c in COLUMNS) + " |"
    rule = "|" + "|".join("---:" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(f.format(r[k]) for _, k, f in COLUMNS) + " |" for r in rows]
    return "\n".join([head, rule, *body])


# ---------------------------------------------------------------- command line
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text.strip().replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {hi}], got {v}")
        return v

    return parse


def _float_in(lo: float, hi: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not lo <= v <= hi:  # NaN is in no range
            raise argparse.ArgumentTypeError(f"must be in [{lo:g}, {hi:g}], got {text!r}")
        return v

    return parse


def _int_list(lo: int, hi: int) -> Callable[[str], list[int]]:
    one = _int_in(lo, hi)

    def parse(text: str) -> list[int]:
        parts = text.split(",")
        if not text.strip() or any(not p.strip() for p in parts):
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
        return sorted({one(p) for p in parts})

    return parse


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=_int_in(2, MAX_NODES), default=1000)
    ap.add_argument(
        "--queued", type=_int_list(0, MAX_QUEUED), default=[1000, 10000],
        help="held jobs at the start, comma-separated",
    )  # fmt: skip
    ap.add_argument(
        "--changes", type=_int_list(0, MAX_CHANGES), default=[0, 10, 100],
        help="jobs that end (and as many that arrive) before each cycle, comma-separated",
    )  # fmt: skip
    ap.add_argument(
        "--cycles", type=_int_in(1, MAX_CYCLES), default=10,
        help="steady-state cycles measured per row",
    )  # fmt: skip
    ap.add_argument(
        "--warmup", type=_int_in(0, MAX_CYCLES), default=0,
        help="cycles run, not measured, before each row's measured ones",
    )  # fmt: skip
    ap.add_argument(
        "--period", type=_float_in(0.01, 3600.0), default=PERIOD_S,
        help="fake seconds between two cycles (the controller's period)",
    )  # fmt: skip
    ap.add_argument("--seed", type=_int_in(0, 2**32 - 1), default=0)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    arrivals = sum(args.changes) * (args.cycles + args.warmup)
    if arrivals > MAX_ARRIVALS:
        ap.error(
            f"--changes x (--cycles + --warmup): {arrivals} new jobs over a run, at most "
            f"{MAX_ARRIVALS}"
        )

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    rows = []
    for queued in args.queued:
        t0 = time.monotonic()
        log(f"nodes={args.nodes} queued={queued}: building the cluster")
        first, steady, restart = run_queue(
            args.nodes, queued, args.changes, args.cycles, args.seed, log, args.warmup,
            args.period,
        )  # fmt: skip
        for k, cs in steady.items():
            r = summary(args.nodes, queued, k, first, cs, restart, args.warmup)
            rows.append(r)
            log(
                f"  changes={k}: decide median {r['decide_median_ms']:.2f} ms, cycle median "
                f"{r['cycle_median_ms']:.1f} ms, fake Slurm {r['slurm_median_ms']:.0f} ms/cycle"
            )
        log(f"  ({time.monotonic() - t0:.0f} s)")
    print(
        f"{args.nodes} nodes (half with {GPUS} GPUs, {CORES} cores each); {args.cycles} "
        f"steady-state cycles per row, after {args.warmup} not measured, {args.period:g} s "
        "of Slurm's time between two. One controller "
        "per queue length: its first cycle (building the mirror from a cluster CODA never "
        "saw) is the same in each of its rows, and so is the restart cycle (a new "
        "controller's first, after the steady ones). Times exclude the fake Slurm's "
        "answers; decide: Controller.decide() alone; parse: Slurm's output to objects; "
        "cycle: all of Controller.cycle() (parse and decide included)."
    )
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
