"""Slurm as CODA sees it: jobs and nodes read through Slurm's own commands.

The dependable interface of Slurm 22.05 is its CLI (pyslurm has no release for it;
slurmrestd needs JWT and refuses root): ``squeue --json`` for every job slurmctld
still remembers, ``scontrol show -o node`` for nodes, ``scontrol update`` /
``scontrol release`` to act. The command runner is injectable, so the parsing is
tested on recorded output and the same code drives the real cluster.

CODA's marks live in a job's AdminComment (users cannot change it):
``coda:held`` (set by job_submit.lua: CODA places the job); while the controller
places it ``coda:placing,req=<cores asked per node>,grant=<cores granted per
node>,nodes=<list>``, and ``coda:placed,...`` once released, to which the node agent
adds ``settled=<cores>`` when the allocator has found the job's optimum;
``coda:passed,why=...`` for jobs handed to Slurm's own scheduler unchanged. A held
job may carry ``wait=<reason>`` (why the last cycle did not start it, e.g.
``wait=reservation:12``), which ``squeue -O JobID,admin_comment`` and ``coda slurm status``
show.

Taking a running job back: ``scontrol requeuehold`` (batch jobs with Requeue=1 only)
kills it and puts it back PENDING with priority 0; once released, ``scontrol update
StartTime=now`` lifts the ~120 s BeginTime Slurm puts on a requeued job.

``jobs()`` reads ``squeue --json``: its fields are structured, so a job name or command
line cannot pass itself off as another field. The controller's cycle reads a narrow
``squeue -O`` listing instead (``coda.slurm.listing``: same jobs, a fraction of the
cost, names asked for apart).
"""

from __future__ import annotations

import json
import operator
import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coda.policy.learned_profiles import MAX_CORES
from coda.slurm.errors import SlurmError as SlurmError  # where callers import it from

HELD = "coda:held"
# The states a CODA mark can be in (its first word), in a job's life order.
MARK_STATES = ("held", "placing", "placed", "passed")
PLACED = "coda:placed"

Runner = Callable[[Sequence[str]], str]


def slurm_env() -> dict[str, str]:
    """The environment Slurm's commands run in: times in UTC and Slurm's standard
    format, and none of the ``SQUEUE_*`` variables (they would filter or reshape
    what squeue lists)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SQUEUE_") and k != "SLURM_TIME_FORMAT"
    }
    env["TZ"] = "UTC"
    return env


def run_command(argv: Sequence[str], timeout_s: float = 30.0) -> str:
    """Run one Slurm command (no shell); its stdout, or SlurmError with its stderr."""
    try:
        # Bytes, decoded leniently: a job name is a user's bytes, and one that is not
        # UTF-8 must not stop the reading of everyone's jobs.
        p = subprocess.run(
            list(argv),
            capture_output=True,
            timeout=timeout_s,
            check=False,
            env=slurm_env(),
        )
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]}: not found (is Slurm's client installed?)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(argv)}: no answer in {timeout_s:.0f} s") from None
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        msg = (p.stderr.decode("utf-8", "replace") or out).strip().splitlines()
        raise SlurmError(f"{' '.join(argv)}: {msg[-1] if msg else f'exit {p.returncode}'}")
    return out


# ------------------------------------------------------------------ host lists


# No cluster has more nodes than this: a host list that names more is not Slurm's.
MAX_HOSTS = 100_000
# A node past these is no node (and its cores would be a bitmask of 10^30 bits, its
# GPUs a list of billions); far above any machine Slurm runs (big SMP: 8,192 threads).
MAX_SLURM_NODE_CPUS = 1 << 20
MAX_SLURM_NODE_GPUS = 1024
MAX_HOST_DIMENSIONS = 8  # [...] groups in one name (Slurm's own names use one to three)


def expand_hostlist(text: str | None) -> list[str]:
    """``n[1-3,5],gpu7`` -> ``[n1, n2, n3, n5, gpu7]`` (Slurm's compressed form,
    zero padding kept). SlurmError for one naming more than ``MAX_HOSTS`` nodes
    (checked before each range is written out, so a hostile list costs nothing)."""
    out: list[str] = []
    if not text:  # None or empty (squeue --json's missing fields): no node
        return out
    depth = 0
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise SlurmError(f"cannot read host list {text!r}: unbalanced brackets")
    if depth:
        raise SlurmError(f"cannot read host list {text!r}: unbalanced brackets")
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", text):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if m is None:
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        if part.count("[") > MAX_HOST_DIMENSIONS:  # each is a level of recursion
            raise SlurmError(f"cannot read host list {text[:60]!r}: too many [...] in a name")
        rests = expand_hostlist(suffix) if "[" in suffix else [suffix]  # once per part
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            hi = hi or lo
            if not (lo + hi).isascii() or not lo.isdigit() or not hi.isdigit():
                raise SlurmError(f"cannot read host list {text!r}")
            if (
                max(len(lo), len(hi)) > 9
                or len(out) + (int(hi) - int(lo) + 1) * len(rests) > MAX_HOSTS
            ):
                raise SlurmError(
                    f"cannot read host list {text[:60]!r}: more than {MAX_HOSTS} nodes"
                )
            if int(hi) < int(lo):
                raise SlurmError(f"cannot read host list {text!r}")
            for i in range(int(lo), int(hi) + 1):
                for rest in rests:
                    out.append(f"{prefix}{i:0{len(lo)}d}{rest}")
    return out


# ------------------------------------------------------------------ marks


# What a mark may hold: a comma separates fields and '=' a key from its value, so
# neither may be in a value; nor may spaces (scontrol update takes one argv word).
_MARK_STATE = re.compile(r"[A-Za-z0-9_-]+")
_MARK_KEY = re.compile(r"[A-Za-z0-9_]+")
_MARK_VALUE = re.compile(r"[A-Za-z0-9_.:+-]*")


def parse_mark(comment: str | None) -> dict[str, str] | None:
    """CODA's mark in an AdminComment: ``{"state": "held"|"placed", ...}``; None if the
    comment is not CODA's."""
    if not comment or not comment.startswith("coda:"):
        return None
    head, *pairs = comment.split(",")
    out = {"state": head.removeprefix("coda:")}
    for p in pairs:
        k, sep, v = p.partition("=")
        # Only what CODA writes: a hand-edited value (``req=²``, ``nodes=n[1-2]``) is
        # dropped, so every number read from a mark is ASCII digits.
        if sep and _MARK_KEY.fullmatch(k) and _MARK_VALUE.fullmatch(v):
            out[k] = v
    return out


def mark_count(mark: Mapping[str, str] | None, key: str) -> int | None:
    """A core count a mark holds (``req=``, ``settled=``): 1 to MAX_CORES, in ASCII
    digits; None for anything else (a job's mark is written by others too, and a
    20-digit count must neither crash a cycle nor be learned)."""
    text = (mark or {}).get(key, "")
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_CORES))):
        return None
    n = int(text)
    return n if 1 <= n <= MAX_CORES else None


def mark_fields(mark: dict[str, str] | None, drop: tuple[str, ...] = ("state",)) -> dict[str, str]:
    """A parsed mark's fields that a rewrite may carry: those ``format_mark`` accepts
    (a hand-edited field such as ``nodes=n[1-2]`` is dropped, not a crash)."""
    return {
        k: v
        for k, v in (mark or {}).items()
        if k not in drop and _MARK_KEY.fullmatch(k) and _MARK_VALUE.fullmatch(v)
    }


def format_mark(state: str, **fields: object) -> str:
    """``coda:<state>,k=v,...`` (None fields left out); ValueError for a state, key or
    value that ``parse_mark`` could not read back (values: letters, digits, ``_.:+-``)."""
    if not _MARK_STATE.fullmatch(state):
        raise ValueError(f"a mark's state must be letters, digits, '_' or '-': {state!r}")
    parts = [f"coda:{state}"]
    for k, v in fields.items():
        if v is None:
            continue
        text = str(v)
        if not _MARK_KEY.fullmatch(k):
            raise ValueError(f"a mark's key must be letters, digits or '_': {k!r}")
        if not _MARK_VALUE.fullmatch(text):
            raise ValueError(
                f"a mark's value may hold only letters, digits and _.:+- (no spaces, "
                f"commas or '='): {k}={text!r}"
            )
        parts.append(f"{k}={text}")
    return ",".join(parts)


# ------------------------------------------------------------------ jobs, nodes


def gres_gpus(text: str | None) -> int:
    """GPUs in a TRES/GRES string: ``gres:gpu:2``, ``gres/gpu:a100:2``, ``gpu=4``."""
    n = 0
    for item in re.split(r",(?![^(]*\))", text or ""):  # not the commas in (IDX:0,2)
        item = re.sub(r"\(.*\)$", "", item.strip())  # gpu:2(IDX:0-1)
        m = re.fullmatch(r"(?:gres[:/])?gpu(?::([^:=]+))?(?:[:=](\d+))?", item)
        if m is None:
            continue
        if m.group(2) is not None:
            n += int(m.group(2))
        elif m.group(1) is not None and m.group(1).isdigit():
            n += int(m.group(1))  # gpu:2
        else:
            n += 1  # --gres=gpu or gpu:a100: one GPU, as Slurm reads it
    return n


# Its own __init__ (the dataclass gives equality and repr): the compiled build compiles
# it, where the dataclass's is generated Python (2 µs a job; a restart reads 191,000).
@dataclass(init=False)
class SlurmJob:
    job_id: int
    name: str
    user_id: int
    state: str  # PENDING, RUNNING, COMPLETED, ...
    reason: str
    cpus: int  # NumCPUs: asked for while pending, allocated once running
    node_count: int
    gpus_per_node: int
    nodes: list[str]  # where it runs (running/ended) or [] while pending
    required_nodes: list[str]
    dependency: str
    priority: int
    mark: dict[str, str] | None
    admin_comment: str = ""
    submit_time: int = 0
    # When it started (epoch s); None while pending (Slurm's start_time for a pending
    # job is an expected or a begin time, not a start) or if Slurm gives none.
    start_time: float | None = None
    end_time: int = 0
    exit_code: int | None = None
    restarts: int = 0  # times Slurm requeued it (restart_cnt)
    time_limit_s: float | None = None  # None: no limit (UNLIMITED, or none given)
    # A batch job with Requeue=1: `scontrol requeuehold` may take it back.
    requeueable: bool = False
    array_job_id: int = 0
    array_task_id: int | None = None
    het_job_id: int = 0
    partitions: list[str] = field(default_factory=list)
    excluded_nodes: list[str] = field(default_factory=list)

    def __init__(
        self,
        job_id: int,
        name: str,
        user_id: int,
        state: str,
        reason: str,
        cpus: int,
        node_count: int,
        gpus_per_node: int,
        nodes: list[str],
        required_nodes: list[str],
        dependency: str,
        priority: int,
        mark: dict[str, str] | None,
        admin_comment: str = "",
        submit_time: int = 0,
        start_time: float | None = None,
        end_time: int = 0,
        exit_code: int | None = None,
        restarts: int = 0,
        time_limit_s: float | None = None,
        requeueable: bool = False,
        array_job_id: int = 0,
        array_task_id: int | None = None,
        het_job_id: int = 0,
        partitions: list[str] | None = None,
        excluded_nodes: list[str] | None = None,
    ) -> None:
        self.job_id = job_id
        self.name = name
        self.user_id = user_id
        self.state = state
        self.reason = reason
        self.cpus = cpus
        self.node_count = node_count
        self.gpus_per_node = gpus_per_node
        self.nodes = nodes
        self.required_nodes = required_nodes
        self.dependency = dependency
        self.priority = priority
        self.mark = mark
        self.admin_comment = admin_comment
        self.submit_time = submit_time
        self.start_time = start_time
        self.end_time = end_time
        self.exit_code = exit_code
        self.restarts = restarts
        self.time_limit_s = time_limit_s
        self.requeueable = requeueable
        self.array_job_id = array_job_id
        self.array_task_id = array_task_id
        self.het_job_id = het_job_id
        self.partitions = [] if partitions is None else partitions
        self.excluded_nodes = [] if excluded_nodes is None else excluded_nodes

    @property
    def held_for_coda(self) -> bool:
        """Held for CODA to place (once its dependencies, if any, are met)."""
        return (
            self.state == "PENDING"
            and self.priority == 0
            and self.mark is not None
            and self.mark.get("state") == "held"
        )

    @property
    def placed_by_coda(self) -> bool:
        return self.mark is not None and self.mark.get("state") in ("placed", "placing")

    @property
    def is_array_or_het(self) -> bool:
        """Array tasks and heterogeneous jobs: one record, several jobs; CODA passes
        them to Slurm's own scheduler."""
        return bool(self.array_job_id or self.het_job_id)

    @property
    def requested_cores(self) -> int:
        """Cores the user asked for, over all nodes (the mark keeps the per-node
        request once CODA changed NumCPUs)."""
        req = mark_count(self.mark, "req")
        return req * max(1, self.node_count) if req is not None else self.cpus

    @property
    def requested_cores_pn(self) -> int:
        return -(-self.requested_cores // max(1, self.node_count))

    @property
    def is_dnn(self) -> bool:
        return self.gpus_per_node > 0


def model_key(sj: SlurmJob) -> str:
    """What CODA learns cores for: the job's name, per user (stable names are what
    lets CODA learn; per user, so nobody can teach it wrong values for others)."""
    return f"{sj.user_id}:{sj.name or f'job{sj.job_id}'}"


# Slurm's 32-bit "no value" and "infinite" (NO_VAL, INFINITE): no limit.
_NO_VAL32 = 0xFFFFFFFE
_UNLIMITED_WORDS = ("UNLIMITED", "INFINITE", "NOT_SET")


def _time_limit_s(v: Any) -> float | None:
    """``time_limit`` in seconds: minutes in API v0.0.38 (22.05), null when unlimited;
    ``{"set", "infinite", "number"}`` in later APIs. 0 and the 32-bit sentinels mean
    no limit (``sbatch -t 0`` asks for none)."""
    if isinstance(v, dict) and isinstance(v.get("infinite", False), bool):
        if v.get("infinite") or v.get("set") is False:
            return None
        v = v.get("number")
    if v is None or (isinstance(v, str) and v.upper() in _UNLIMITED_WORDS):
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"time_limit {v!r} is not whole minutes, null or UNLIMITED")
    return None if v == 0 or v >= _NO_VAL32 else float(v * 60)


def _unwrap(v: Any) -> Any:
    """Slurm 23.02+ (API v0.0.39 on) gives numbers as ``{"set", "infinite", "number"}``
    (24.11's squeue --json: node_count, cpus, start_time, ...): the number, or None when
    not set or infinite. Anything else as it is (22.05 gives plain numbers)."""
    if isinstance(v, dict) and "number" in v and isinstance(v.get("set", True), bool):
        if v.get("set") is False or v.get("infinite") is True:
            return None
        return v.get("number")
    return v


def _int(v: Any) -> int:
    """A plain or wrapped number (0 when absent, not set or infinite)."""
    return int(_unwrap(v) or 0)


def _epoch(v: Any, what: str) -> float | None:
    """A time stamp in epoch seconds; None for 0 or none."""
    v = _unwrap(v)
    if v is None or v == 0:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{what} {v!r} is not epoch seconds")
    return float(v)


def _positive(v: Any, what: str, default: int) -> int:
    """A whole number >= 1 (not a bool); ``default`` when absent."""
    v = _unwrap(v)
    if v is None or v == 0:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{what} {v!r} is not a whole number >= 1")
    return v


def _no_id() -> int:
    raise ValueError("no job_id")


def _count(v: Any, what: str) -> int:
    v = _unwrap(v)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{what} {v!r} is not a count")
    return v


# A job's final states (coda.slurm.index.ENDED, which imports this module).
ENDED_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
          "PREEMPTED", "BOOT_FAIL", "DEADLINE")  # fmt: skip

# Every job, ended ones too: 22.05's squeue --json ignores filters and lists them all;
# 24.11's applies its default ones (pending and running jobs only) unless told.
JOBS_JSON = ("squeue", "--json", "--all", "--states=all")


def _job_from_json(d: dict[str, Any]) -> SlurmJob:
    try:
        return _read_job(d)
    except ValueError as e:
        raise ValueError(f"job {d.get('job_id')!r}: {e}") from None


def _read_job(d: dict[str, Any]) -> SlurmJob:
    nodes_n = _positive(d.get("node_count"), "node_count", 1)
    gpus_pn = gres_gpus(d.get("tres_per_node"))
    if not gpus_pn:
        per_job = gres_gpus(d.get("tres_per_job"))
        per_task = gres_gpus(d.get("tres_per_task")) * (_int(d.get("tasks")) or 1)
        gpus_pn = -(-(per_job or per_task) // max(1, nodes_n))
    state = d.get("job_state")
    if isinstance(state, list):  # 24.11: the state, then its flags (["PENDING"])
        state = state[0] if state else ""
    running = state not in ("PENDING",)
    comment = d.get("admin_comment") or ""
    exit_code = d.get("exit_code")
    if isinstance(exit_code, dict):  # 24.11: {"status", "return_code", "signal"}
        # 0 for a job that has not ended (22.05: none, as squeue -O prints it).
        exit_code = _unwrap(exit_code.get("return_code")) if state in ENDED_STATES else None
    requeue = d.get("requeue", False)
    if not isinstance(requeue, bool):
        raise ValueError(f"requeue {requeue!r} is not true or false")
    batch = d.get("batch_flag", True)  # squeue --json gives it; records without it: sbatch's
    if not isinstance(batch, bool):
        raise ValueError(f"batch_flag {batch!r} is not true or false")
    return SlurmJob(
        job_id=_positive(d.get("job_id"), "job_id", 0) or _no_id(),
        name=str(d.get("name") or ""),
        user_id=_int(d.get("user_id")),
        state=str(state or ""),
        reason=str(d.get("state_reason") or ""),
        cpus=_positive(d.get("cpus"), "cpus", 1),
        node_count=nodes_n,
        gpus_per_node=gpus_pn,
        nodes=expand_hostlist(d.get("nodes") or "") if running else [],
        required_nodes=expand_hostlist(d.get("required_nodes") or ""),
        dependency=str(d.get("dependency") or ""),
        priority=_int(d.get("priority")),
        mark=parse_mark(comment),
        admin_comment=comment,
        submit_time=_int(d.get("submit_time")),
        start_time=_epoch(d.get("start_time"), "start_time") if running else None,
        end_time=_int(d.get("end_time")),
        exit_code=int(exit_code) if isinstance(exit_code, int) else None,
        restarts=_count(d.get("restart_cnt"), "restart_cnt"),
        time_limit_s=_time_limit_s(d.get("time_limit")),
        # Slurm requeues batch jobs only (an srun or salloc job shows requeue too).
        requeueable=requeue and batch,
        array_job_id=_int(d.get("array_job_id")),
        array_task_id=task if isinstance(task := _unwrap(d.get("array_task_id")), int) else None,
        het_job_id=_int(d.get("het_job_id")),
        partitions=[x for x in str(d.get("partition") or "").split(",") if x],
        excluded_nodes=expand_hostlist(d.get("excluded_nodes") or ""),
    )


@dataclass
class SlurmNode:
    name: str
    cpus: int
    cpus_alloc: int
    gpus: int
    gpus_used: int
    state: str  # IDLE, MIXED, ALLOCATED, DOWN+DRAIN, ...
    partitions: list[str] = field(default_factory=list)
    # Up and taking jobs (not down, drained, draining, failing or powered off): read
    # once, as the cycle asks it of every node.
    usable: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.usable = not any(b in self.state for b in _UNUSABLE)


_UNUSABLE = ("DOWN", "DRAIN", "FAIL", "POWER", "NOT_RESPONDING", "RESERVED", "MAINT")


def same_nodes(a: Sequence[SlurmNode], b: Sequence[SlurmNode]) -> bool:
    """Whether two reads gave the very same node objects (``SlurmClient.nodes`` gives
    back the same object for a line that did not change): nothing to look at again."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def moved_nodes(
    now: Sequence[SlurmNode], last: Sequence[SlurmNode]
) -> list[tuple[SlurmNode, SlurmNode]] | None:
    """The nodes whose record changed between two reads, each with its last record,
    where both list the same nodes in the same order (as ``scontrol`` does while no
    node comes or goes; ``SlurmClient.nodes`` lists each name once); None where they
    do not: the caller looks at every node."""
    if len(now) != len(last):
        return None
    moved = [(n, was) for n, was in zip(now, last, strict=True) if n is not was]
    if any(n.name != was.name for n, was in moved):
        return None
    return moved


_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")


def parse_scontrol_line(line: str) -> dict[str, str]:
    """One ``scontrol show -o`` record: ``Key=Value`` pairs split on spaces; a value
    may contain spaces as long as what follows a space is not ``Word=``."""
    out: dict[str, str] = {}
    keys = list(_KEY.finditer(line))
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out.setdefault(m.group(1), line[m.end() : end].strip())
    return out


def _node_from_fields(f: dict[str, str]) -> SlurmNode:
    used = f.get("GresUsed", "")
    name = f["NodeName"]
    if not name or not _MARK_VALUE.fullmatch(name):  # it goes into marks and argv
        raise ValueError(f"node name {name[:40]!r}: only letters, digits and _.:+- are read")
    cpus = int(f.get("CPUEfctv") or f.get("CPUTot") or 0)
    gpus = gres_gpus(f.get("Gres"))
    if not (0 <= cpus <= MAX_SLURM_NODE_CPUS and 0 <= gpus <= MAX_SLURM_NODE_GPUS):
        raise ValueError(
            f"{cpus} CPUs and {gpus} GPUs: at most {MAX_SLURM_NODE_CPUS} and "
            f"{MAX_SLURM_NODE_GPUS} are read"
        )
    return SlurmNode(
        name=name,
        cpus=cpus,
        cpus_alloc=int(f.get("CPUAlloc") or 0),
        gpus=gpus,
        gpus_used=gres_gpus(used),
        state=f.get("State", ""),
        partitions=[x for x in f.get("Partitions", "").split(",") if x and x != "(null)"],
    )


# Any shape but Slurm's (a list, a string where a record goes, nesting too deep, a
# number no float holds): one line, not a traceback.
_UNREADABLE_JSON = (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError)


class SlurmClient:
    """Slurm's commands, parsed. ``runner`` takes an argv and returns stdout."""

    def __init__(self, runner: Runner = run_command) -> None:
        self.run = runner
        self._node_lines: dict[str, SlurmNode] = {}  # the last read: each line's node
        self.unreadable_nodes: list[str] = []  # the last read's lines left out: why
        self._nodes_text: str | None = None  # the last read's text, and its nodes
        self._nodes: list[SlurmNode] = []

    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld remembers (squeue --json ignores filters in 22.05)."""
        text = self.run(list(JOBS_JSON))
        try:
            data = json.loads(text)
            return [_job_from_json(d) for d in data.get("jobs", [])]
        except _UNREADABLE_JSON as e:
            raise SlurmError(f"squeue --json: cannot read its output ({str(e)[:120]})") from None

    def nodes(self) -> list[SlurmNode]:
        # -d: slurmctld reports GresUsed (GPUs taken) only on a detailed request.
        text = self.run(["scontrol", "show", "-o", "-d", "node"])
        if text == self._nodes_text:  # as last read: the same nodes, not parsed again
            return list(self._nodes)
        out = []
        last, now = self._node_lines, {}
        names: set[str] = set()
        twice: set[str] = set()
        self.unreadable_nodes = []
        for line in text.splitlines():
            if line.strip():
                node = last.get(line)  # a node whose line did not change: read before
                if node is None:
                    try:
                        node = _node_from_fields(parse_scontrol_line(line))
                    except (KeyError, ValueError) as e:
                        # Left out (CODA places nothing there, as on a node it does not
                        # know), not every node: one odd node must not stop the cluster.
                        why = f"scontrol show node: cannot read {line[:80]!r} ({e})"
                        self.unreadable_nodes.append(why)
                        continue
                if node.name in names:
                    twice.add(node.name)
                names.add(node.name)
                now[line] = node
                out.append(node)
        if twice:  # which record is the node's is not known: none is taken
            out = [n for n in out if n.name not in twice]
            for name in sorted(twice):
                why = f"scontrol show node: node {name[:40]!r} listed more than once"
                self.unreadable_nodes.append(why)
        self._node_lines = now
        self._nodes_text, self._nodes = text, out
        return list(out)

    def update(self, job_id: object, **fields: object) -> None:
        args = [f"{k}={v}" for k, v in fields.items()]
        for a in args:
            if re.search(r"\s", a):
                raise ValueError(f"scontrol update: a value with spaces: {a!r}")
        self.run(["scontrol", "update", f"JobId={_job_id(job_id)}", *args])

    def release(self, job_id: object) -> None:
        self.run(["scontrol", "release", _job_id(job_id)])

    def hold(self, job_id: object) -> None:
        self.run(["scontrol", "hold", _job_id(job_id)])

    def requeue_hold(self, job_id: object) -> None:
        """Kill a running batch job that Slurm may requeue (Requeue=1) and put it back
        PENDING with priority 0 (held), its AdminComment and ReqNodeList kept; Slurm
        refuses it for other jobs (SlurmError)."""
        self.run(["scontrol", "requeuehold", _job_id(job_id)])

    def start_now(self, job_id: object) -> None:
        """Lift the begin time (~120 s) Slurm puts on a requeued job once released."""
        self.update(job_id, StartTime="now")


def _job_id(job_id: object) -> str:
    """A job id as one argv word; ValueError for anything but a positive int (a bool or
    a float would name some other job)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"not a Slurm job id: {job_id!r}")
    return str(job_id)
