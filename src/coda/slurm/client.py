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
``coda:passed,why=...`` for jobs handed to Slurm's own scheduler unchanged.

Jobs are read from ``squeue --json`` only: its fields are structured, so a job name
or command line cannot pass itself off as another field.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

HELD = "coda:held"
PLACED = "coda:placed"

Runner = Callable[[Sequence[str]], str]


class SlurmError(RuntimeError):
    """A Slurm command failed or printed something CODA cannot read."""


def run_command(argv: Sequence[str], timeout_s: float = 30.0) -> str:
    """Run one Slurm command (no shell); its stdout, or SlurmError with its stderr."""
    try:
        p = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]}: not found (is Slurm's client installed?)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(argv)}: no answer in {timeout_s:.0f} s") from None
    if p.returncode != 0:
        msg = (p.stderr or p.stdout).strip().splitlines()
        raise SlurmError(f"{' '.join(argv)}: {msg[-1] if msg else f'exit {p.returncode}'}")
    return p.stdout


# ------------------------------------------------------------------ host lists


def expand_hostlist(text: str) -> list[str]:
    """``n[1-3,5],gpu7`` -> ``[n1, n2, n3, n5, gpu7]`` (Slurm's compressed form,
    zero padding kept)."""
    out: list[str] = []
    depth = 0
    for ch in text or "":
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise SlurmError(f"cannot read host list {text!r}: unbalanced brackets")
    if depth:
        raise SlurmError(f"cannot read host list {text!r}: unbalanced brackets")
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", text or ""):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if m is None:
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
                raise SlurmError(f"cannot read host list {text!r}")
            for i in range(int(lo), int(hi or lo) + 1):
                for rest in expand_hostlist(suffix) if "[" in suffix else [suffix]:
                    out.append(f"{prefix}{i:0{len(lo)}d}{rest}")
    return out


# ------------------------------------------------------------------ marks


def parse_mark(comment: str | None) -> dict[str, str] | None:
    """CODA's mark in an AdminComment: ``{"state": "held"|"placed", ...}``; None if the
    comment is not CODA's."""
    if not comment or not comment.startswith("coda:"):
        return None
    head, *pairs = comment.split(",")
    out = {"state": head.removeprefix("coda:")}
    for p in pairs:
        k, sep, v = p.partition("=")
        if sep and k:
            out[k] = v
    return out


def format_mark(state: str, **fields: object) -> str:
    parts = [f"coda:{state}"] + [f"{k}={v}" for k, v in fields.items() if v is not None]
    text = ",".join(parts)
    if re.search(r"\s", text):
        raise ValueError(f"a mark cannot hold spaces: {text!r}")
    return text


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


@dataclass
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
    start_time: int = 0
    end_time: int = 0
    exit_code: int | None = None
    restarts: int = 0
    array_job_id: int = 0
    array_task_id: int | None = None
    het_job_id: int = 0
    partitions: list[str] = field(default_factory=list)
    excluded_nodes: list[str] = field(default_factory=list)

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
        if self.mark is not None and self.mark.get("req", "").isdigit():
            return int(self.mark["req"]) * max(1, self.node_count)
        return self.cpus

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


def _job_from_json(d: dict[str, Any]) -> SlurmJob:
    nodes_n = int(d.get("node_count") or 1)
    gpus_pn = gres_gpus(d.get("tres_per_node"))
    if not gpus_pn:
        per_job = gres_gpus(d.get("tres_per_job"))
        per_task = gres_gpus(d.get("tres_per_task")) * int(d.get("tasks") or 1)
        gpus_pn = -(-(per_job or per_task) // max(1, nodes_n))
    running = d.get("job_state") not in ("PENDING",)
    comment = d.get("admin_comment") or ""
    exit_code = d.get("exit_code")
    return SlurmJob(
        job_id=int(d["job_id"]),
        name=str(d.get("name") or ""),
        user_id=int(d.get("user_id") or 0),
        state=str(d.get("job_state") or ""),
        reason=str(d.get("state_reason") or ""),
        cpus=int(d.get("cpus") or 1),
        node_count=nodes_n,
        gpus_per_node=gpus_pn,
        nodes=expand_hostlist(d.get("nodes") or "") if running else [],
        required_nodes=expand_hostlist(d.get("required_nodes") or ""),
        dependency=str(d.get("dependency") or ""),
        priority=int(d.get("priority") or 0),
        mark=parse_mark(comment),
        admin_comment=comment,
        submit_time=int(d.get("submit_time") or 0),
        start_time=int(d.get("start_time") or 0),
        end_time=int(d.get("end_time") or 0),
        exit_code=int(exit_code) if isinstance(exit_code, int) else None,
        restarts=int(d.get("restart_cnt") or 0),
        array_job_id=int(d.get("array_job_id") or 0),
        array_task_id=d["array_task_id"] if isinstance(d.get("array_task_id"), int) else None,
        het_job_id=int(d.get("het_job_id") or 0),
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

    @property
    def usable(self) -> bool:
        """Up and taking jobs (not down, drained, draining, failing or powered off)."""
        bad = ("DOWN", "DRAIN", "FAIL", "POWER", "NOT_RESPONDING", "RESERVED", "MAINT")
        return not any(b in self.state for b in bad)


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
    return SlurmNode(
        name=f["NodeName"],
        cpus=int(f.get("CPUEfctv") or f.get("CPUTot") or 0),
        cpus_alloc=int(f.get("CPUAlloc") or 0),
        gpus=gres_gpus(f.get("Gres")),
        gpus_used=gres_gpus(used),
        state=f.get("State", ""),
        partitions=[x for x in f.get("Partitions", "").split(",") if x and x != "(null)"],
    )


class SlurmClient:
    """Slurm's commands, parsed. ``runner`` takes an argv and returns stdout."""

    def __init__(self, runner: Runner = run_command) -> None:
        self.run = runner

    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld remembers (squeue --json ignores filters in 22.05)."""
        text = self.run(["squeue", "--json"])
        try:
            data = json.loads(text)
            return [_job_from_json(d) for d in data.get("jobs", [])]
        except (ValueError, KeyError, TypeError) as e:
            raise SlurmError(f"squeue --json: cannot read its output ({e})") from None

    def nodes(self) -> list[SlurmNode]:
        # -d: slurmctld reports GresUsed (GPUs taken) only on a detailed request.
        text = self.run(["scontrol", "show", "-o", "-d", "node"])
        out = []
        for line in text.splitlines():
            if line.strip():
                try:
                    out.append(_node_from_fields(parse_scontrol_line(line)))
                except (KeyError, ValueError) as e:
                    raise SlurmError(
                        f"scontrol show node: cannot read {line[:80]!r} ({e})"
                    ) from None
        return out

    def update(self, job_id: int, **fields: object) -> None:
        args = [f"{k}={v}" for k, v in fields.items()]
        for a in args:
            if re.search(r"\s", a):
                raise ValueError(f"scontrol update: a value with spaces: {a!r}")
        self.run(["scontrol", "update", f"JobId={int(job_id)}", *args])

    def release(self, job_id: int) -> None:
        self.run(["scontrol", "release", str(int(job_id))])

    def hold(self, job_id: int) -> None:
        self.run(["scontrol", "hold", str(int(job_id))])
