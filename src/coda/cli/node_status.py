"""How ``coda status`` shows the node's jobs and the agent's decisions: a table and
decision lines for people, or JSON for programs."""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import click

from coda.runtime.cgroups import parse_cpus
from coda.runtime.jobrow import ACTIVE
from coda.runtime.limits import format_span
from coda.runtime.timelimit import format_time_limit


def fmt_decision(d: dict[str, Any]) -> str:
    """One decision as a log line: time, job, component, action, detail [why]."""
    t = time.strftime("%H:%M:%S", time.localtime(d["t"]))
    detail = {k: v for k, v in d["detail"].items() if k != "mono"}
    why = detail.pop("why", None)
    text = " ".join(f"{k}={v}" for k, v in detail.items())
    if isinstance(why, dict) and why.get("levels"):
        lv = ", ".join(f"{c}c: {m[0]:.4g}/s x{m[1]}" for c, m in why["levels"].items())
        text += f" [{why.get('phase')}; measured {lv}]"
    elif why:
        text += f" [{why}]"
    job = f"job {d['job_id']} " if d["job_id"] is not None else ""
    return f"{t} {job}{d['component']}: {d['action']} {text}".rstrip()


def retention(agent_info: dict[str, Any]) -> str:
    """How long the agent keeps finished jobs, as its record says ('' if it does not)."""
    keep, per_user = agent_info.get("keep_finished_s"), agent_info.get("finished_per_user")
    ok = (
        isinstance(keep, int | float)
        and not isinstance(keep, bool)
        and math.isfinite(keep)
        and keep > 0
        and type(per_user) is int
        and per_user >= 0
    )
    if not ok:
        return ""
    span = format_span(float(keep))  # type: ignore[arg-type]  # a number: checked above
    return f"(finished jobs are kept {span} after they end, at most {per_user} per user)"


def show_status(got: dict[str, Any], running: bool, as_json: bool) -> None:
    """Print an agent's status answer (jobs, decisions, the agent's own record);
    ``running``: whether an agent answered (else the database was read directly)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    rows, decs, agent_info = got["jobs"], got["decisions"], got["agent"]
    more = got.get("more", 0)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "agent": {**agent_info, "running": running},
                    "jobs": [r.as_dict() for r in rows],
                    "more": more,
                    "decisions": decs,
                },
                indent=2,
                default=str,
            )
        )
        return
    console = Console(width=None if sys.stdout.isatty() else 160)
    head = "agent running" if running else "NO AGENT RUNNING"
    if agent_info:
        head += (
            f" on {agent_info.get('node')} (CPUs {agent_info.get('cpus')}, "
            f"{agent_info.get('gpus')} GPUs, policy {agent_info.get('policy')})"
        )
    console.print(head, markup=False, highlight=False)
    table = Table(box=None, header_style="bold")
    for col in (
        "id",
        "name",
        "kind",
        "state",
        "time",
        "cores",
        "cpus",
        "quota",
        "throughput",
        "reference",
        "allocator",
        "wait",
        "note",
    ):
        table.add_column(col)
    for r in rows:
        cells = (
            str(r.id),
            r.name,
            r.kind,
            r.state,
            format_time_limit(r.time_limit_s),
            f"{len(parse_cpus(r.cpus))}/{r.cores}" if r.cpus else f"-/{r.cores}",
            r.cpus or "-",
            f"{r.quota:.2f}" if r.state in ACTIVE else "-",
            f"{r.throughput:.4g}/s" if r.throughput is not None else "-",
            f"{r.reference:.4g}/s" if r.reference is not None else "-",
            r.phase or "-",
            (r.wait_reason or "-") if r.state in ("queued", "suspended") else "-",
            r.message or (f"exit {r.exit_code}" if r.exit_code is not None else ""),
        )
        table.add_row(*(Text(c) for c in cells))  # Text: a job's name is never markup
    console.print(table)
    if more:
        console.print(f"... and {more} more job(s) not listed", markup=False, highlight=False)
    kept = retention(agent_info)
    if kept:
        console.print(kept, markup=False, highlight=False)
    if decs:
        console.print("\nrecent decisions:")
        for d in decs:
            console.print(f"  {fmt_decision(d)}", markup=False, highlight=False)
