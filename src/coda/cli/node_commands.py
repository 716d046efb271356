"""Command line of the node runtime: ``coda agent``, ``submit``, ``run``, ``status``, ``cancel``.

Registered on the main ``coda`` group by ``register``; imports stay lazy so the
simulator's commands do not pay for them. This module holds the job commands; the
agent's command, the state directory's option and lock, the daemons' shared options,
the job spec's options and the status view have modules of their own (``cli_*``), and
their names stay importable from here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from coda.cli.node_agent import agent, spawn_agent
from coda.cli.node_daemon import (
    checked_loop,
    checked_policy,
    control_loop_options,
    parse_tunes,
    policy_options,
    timestamped,
)
from coda.cli.node_jobspec import (
    MAX_SPEC_FILE,
    TimeLimit,
    build_spec,
    spec_options,
    validate_spec,
)
from coda.cli.node_state_dir import (
    SYSTEM_STATE_DIR,
    AgentLock,
    default_state_dir,
    locked_state_dir,
    state_dir_option,
)
from coda.cli.node_status import fmt_decision, show_status
from coda.params import AsciiIntRange, FiniteFloat
from coda.runtime.client import AgentClient, ClientError, connect
from coda.runtime.joblogs import MAX_LOG_TAIL
from coda.runtime.jobrow import ACTIVE, FINAL
from coda.runtime.service import MAX_CANCEL_IDS
from coda.runtime.statedir import StateDirError
from coda.runtime.store import MAX_JOB_ID, StoreError
from coda.text import shown, terminal_safe

__all__ = [
    "JOB_ID",
    "MAX_SPEC_FILE",
    "SYSTEM_STATE_DIR",
    "AgentLock",
    "TimeLimit",
    "agent",
    "cancel",
    "checked_loop",
    "checked_policy",
    "control_loop_options",
    "default_state_dir",
    "locked_state_dir",
    "logs",
    "parse_tunes",
    "policy_options",
    "register",
    "run",
    "spawn_agent",
    "status",
    "submit",
    "timestamped",
]

T = TypeVar("T")
JOB_ID = AsciiIntRange(min=1, max=MAX_JOB_ID)


def register(main: click.Group) -> None:
    main.add_command(agent)
    main.add_command(submit)
    main.add_command(run)
    main.add_command(status)
    main.add_command(cancel)
    main.add_command(logs)


def _client(state_dir: str, create: bool = False) -> AgentClient:
    try:
        return connect(state_dir, create=create)
    except (ClientError, StateDirError, StoreError) as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:  # a name too long, a directory that is a file, ...
        why = e.strerror or e
        raise click.ClickException(f"state directory {shown(state_dir, 80)}: {why}") from None


def _ask(state_dir: str, call: Callable[[AgentClient], T]) -> tuple[AgentClient, T]:
    """One request to the node's jobs, its errors as one line; the client is closed."""
    client = _client(state_dir)
    try:
        return client, call(client)
    except ClientError as e:
        raise click.ClickException(str(e)) from None
    finally:
        client.close()


# ------------------------------------------------------------ submit / run
def _submit(state_dir: str, kw: dict[str, Any]) -> tuple[AgentClient, int]:
    spec = build_spec(kw)
    client = _client(state_dir, create=True)
    try:
        node = client.status(None, False, 0)["agent"]
        validate_spec(spec, node, kw.get("spec_file"))
        job_id = client.submit(spec)
    except ClientError as e:
        client.close()
        raise click.ClickException(str(e)) from None
    except click.ClickException:
        client.close()
        raise
    if not client.via_agent:
        click.echo(
            f"warning: no agent is running on {state_dir}; job {job_id} waits until one "
            f"starts (coda agent --state-dir {state_dir})",
            err=True,
        )
    return client, job_id


@click.command(context_settings={"ignore_unknown_options": True})
@state_dir_option
@spec_options
def submit(state_dir: str, **kw: Any) -> None:
    """Queue a job: coda submit --cores 4 --gpus 1 -- python train.py. Prints its id.
    It runs as you (the agent learns who you are from the kernel, not from the spec)."""
    client, job_id = _submit(state_dir, kw)
    client.close()
    click.echo(job_id)


@click.command(context_settings={"ignore_unknown_options": True})
@state_dir_option
@spec_options
@click.option("--poll", type=FiniteFloat(min=0.05, max=60), default=0.5, show_default=True,
              help="Seconds between looks at the job.")  # fmt: skip
def run(state_dir: str, poll: float, **kw: Any) -> None:
    """Submit a job and wait for it, showing what CODA decides; exits with its status.
    Ctrl-C cancels the job."""
    client, job_id = _submit(state_dir, kw)
    click.echo(f"job {job_id} submitted")
    seen = 0
    state = ""
    try:
        while True:
            got = client.status(job_id, False, 50)
            row = got["jobs"][0]
            for d in got["decisions"]:
                if d["id"] > seen:
                    seen = d["id"]
                    click.echo(f"  {fmt_decision(d)}")
            if row.state != state:
                state = row.state
                click.echo(f"job {job_id}: {state}" + (f" ({row.message})" if row.message else ""))
            if row.state in FINAL:
                break
            time.sleep(poll)
    except KeyboardInterrupt:
        _quiet_cancel(client, job_id)
        click.echo(f"job {job_id}: cancel requested", err=True)
        sys.exit(130)
    except ClientError as e:
        raise click.ClickException(str(e)) from None
    finally:
        client.close()
    code = row.exit_code if row.exit_code is not None else 1
    if code < 0:  # killed by signal N: exit 128 + N, as a shell reports it
        code = 128 - code
    sys.exit(0 if row.state == "done" else (code if 0 < code < 256 else 1))


def _quiet_cancel(client: AgentClient, job_id: int) -> None:
    try:
        client.cancel([job_id])
    except ClientError as e:
        click.echo(f"job {job_id}: cancel failed: {e}", err=True)


# --------------------------------------------------------- status / cancel
@click.command()
@state_dir_option
@click.argument("job_id", type=JOB_ID, required=False)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Also list finished jobs (last 50; the agent keeps them --keep-finished, "
    "24 h by default).",
)
@click.option(
    "--decisions",
    type=AsciiIntRange(min=0, max=1000),
    default=10,
    show_default=True,
    help="Recent decisions to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(
    state_dir: str, job_id: int | None, show_all: bool, decisions: int, as_json: bool
) -> None:
    """Jobs, the cores and quota each holds, throughput, time limit, why a queued job
    waits, and why the agent acted (recent decisions)."""
    client, got = _ask(state_dir, lambda c: c.status(job_id, show_all, decisions))
    show_status(got, client.via_agent, as_json)


@click.command()
@state_dir_option
@click.argument("job_ids", type=JOB_ID, nargs=-1, required=True)
def cancel(state_dir: str, job_ids: tuple[int, ...]) -> None:
    """Cancel your jobs: queued ones at once, running ones by the agent (SIGTERM, then
    SIGKILL). Root and the agent's own user may cancel anyone's."""
    once = list(dict.fromkeys(job_ids))  # a job named twice is cancelled (and said) once
    results: list[dict[str, Any]] = []
    for at in range(0, len(once), MAX_CANCEL_IDS):  # as many as one request takes
        part = once[at : at + MAX_CANCEL_IDS]

        def ask(c: AgentClient, part: list[int] = part) -> list[dict[str, Any]]:
            return c.cancel(part)

        _, got = _ask(state_dir, ask)
        results.extend(got)
        if any(r.get("busy") for r in got):
            break  # the rest would be refused too: said below
    failed = [r for r in results if "error" in r]
    for r in results:
        if "error" not in r:
            extra = " (cancel requested)" if r["state"] in (*ACTIVE, "suspended") else ""
            click.echo(f"job {r['id']}: {r['state']}{extra}")
    asked = {r["id"] for r in results}
    unasked = [j for j in once if j not in asked]
    if failed or unasked:
        errors = [str(r["error"]) for r in failed[:5]]
        more = len(failed) - len(errors) + len(unasked)
        raise click.ClickException(
            "; ".join(errors) + (f"; and {more} more not cancelled" if more else "")
        )


@click.command()
@state_dir_option
@click.argument("job_id", type=JOB_ID)
@click.option("--stderr", "stream", flag_value="stderr", help="The job's stderr.")
@click.option(
    "--stdout", "stream", flag_value="stdout", default=True, help="The job's stdout [default]."
)
@click.option(
    "--tail",
    type=AsciiIntRange(0, MAX_LOG_TAIL),
    default=65536,
    show_default=True,
    help=f"Bytes from the end (at most {MAX_LOG_TAIL}).",
)
@click.option("--raw", is_flag=True,
              help="Print control characters as they are, even to a terminal.")  # fmt: skip
def logs(state_dir: str, job_id: int, stream: str, tail: int, raw: bool) -> None:
    """Print the end of your job's output (the logs live in the agent's private state).
    To a terminal, control characters other than line breaks and tabs are printed as
    escapes (\\x1b...): a job's output cannot drive the reader's terminal."""
    _, text = _ask(state_dir, lambda c: c.logs(job_id, stream, tail))
    if not raw and sys.stdout.isatty():
        text = terminal_safe(text)
    click.echo(text, nl=False, color=True)  # color: never strip what the job wrote
