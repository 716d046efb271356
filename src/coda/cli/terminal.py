"""Where the ``coda`` command's output goes and how its work shows on a terminal: the
stdout and stderr consoles, bad input as one line and exit 1, and loading a workload and
running policies with progress on stderr."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coda.text import clip_middle

if TYPE_CHECKING:  # each loads numpy: imported where a run is prepared
    from coda.sim.result import SimResult
    from coda.study.config import RunConfig
    from coda.study.run import Prepared

# Piped or captured output has no terminal width; rich would then assume 80
# columns and squeeze the label column of a many-policy table to nothing.
console = Console() if Console().is_terminal else Console(width=160)
err_console = Console(stderr=True)


def one_line(e: BaseException) -> str:
    """An exception as one line: its message with line breaks folded, never empty."""
    text = " ".join(str(e).split())
    return text or type(e).__name__


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad input ends with one clear line and exit 1, not a traceback: loaders raise
    TraceFormatError/ValueError (a TraceFormatError is a ValueError, and so are
    UnicodeDecodeError and json errors), unreadable or unwritable paths OSError, and
    numbers beyond what numpy or a float holds OverflowError."""
    try:
        yield
    except (ValueError, OSError, OverflowError) as e:
        raise click.ClickException(one_line(e)) from None


def prepare_run(config: RunConfig) -> Prepared:
    from coda.report.tables import SPEC_SHOWN
    from coda.study.run import prepare

    with err_console.status("loading trace and building workload"):
        prepared = prepare(config)
    rep = prepared.trace_report
    excluded = ", ".join(f"{k} {v}" for k, v in rep.excluded.items()) or "none"
    dups = rep.duplicate_ids
    renamed = f"; duplicate ids (kept, renamed): {dups}" if dups else ""
    cluster = clip_middle(prepared.cluster.label, SPEC_SHOWN)
    err_console.print(
        f"[dim]{rep.path}: {rep.rows_read} rows, {rep.jobs_loaded} jobs; excluded: {excluded}; "
        f"bad rows skipped: {rep.skipped_bad_rows}{renamed}; cluster {cluster}: "
        f"{len(prepared.cluster.nodes)} nodes, {prepared.cluster.gpus} GPUs, "
        f"{prepared.cluster.cores} cores[/dim]"
    )
    return prepared


def run_one_policy(prepared: Prepared, policy: str) -> SimResult:
    from coda.study.run import run_policy

    with Progress(
        TextColumn(f"[bold]{policy}[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs arrived"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    ) as bar:
        task = bar.add_task(policy, total=len(prepared.workload.jobs))
        return run_policy(
            prepared, policy, progress=lambda done, total: bar.update(task, completed=done)
        )


def runs_bar(label: str) -> Progress:
    """An experiment's progress bar over its runs (stderr, shown on a terminal only)."""
    return Progress(
        TextColumn(f"[bold]{label}[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("runs"),
        TimeElapsedColumn(),
        console=err_console,
        disable=not err_console.is_terminal,
    )
