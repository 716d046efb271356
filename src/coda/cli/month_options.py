"""What the experiments that run the paper's month again under a changed setting share
(`coda experiment eliminator`, `coda experiment sensitivity`): their options, and their
runs shown one line each under a progress bar."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.text import Text

from coda.cli.run_options import MAX_SEEDS, MAX_WORKERS
from coda.cli.terminal import console, runs_bar
from coda.params import AsciiIntRange, OutDir
from coda.study.config import MAX_SEED
from coda.workload.limits import MAX_TRACE_JOBS

F = TypeVar("F", bound=Callable[..., Any])
L = TypeVar("L")


def month_options(out: str, seeds: int) -> Callable[[F], F]:
    """--seeds, --first-seed, --jobs, --workers and --out (default `out`)."""
    options = (
        click.option("--seeds", type=AsciiIntRange(1, MAX_SEEDS), default=seeds,
                     show_default=True, help="Seeds (first-seed, first-seed + 1, ...)."),
        click.option("--first-seed", type=AsciiIntRange(0, MAX_SEED), default=0,
                     show_default=True,
                     help="The first seed (the fit ran on seeds 1000 and 1001)."),
        click.option("--jobs", "n_jobs", type=AsciiIntRange(1, MAX_TRACE_JOBS), default=None,
                     help="This many jobs at the paper's rate (default 100,000)."),
        click.option("--workers", type=AsciiIntRange(1, MAX_WORKERS), default=None,
                     help="Parallel processes (default min(2, CPUs)); 1 runs inline."),
        click.option("--out", type=OutDir(), default=out, show_default=True,
                     help="Folder for the report and its data."),
    )  # fmt: skip

    def add(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return add


def month_command(
    name: str, seeds: int, first_seed: int, n_jobs: int | None, out: str, extra: str = ""
) -> str:
    """The command line that reruns it: its own options (`extra`), then the ones
    month_options adds, as given."""
    return (
        f"coda experiment {name}{extra} --seeds {seeds}"
        + (f" --first-seed {first_seed}" if first_seed else "")
        + (f" --jobs {n_jobs}" if n_jobs is not None else "")
        + f" --out {shlex.quote(out)}"
    )


def show_report(out: Path, paths: Sequence[Path], errors: Sequence[Any]) -> None:
    """report.md on the terminal and what was written; failed runs make it exit 1."""
    console.print(Text((out / "report.md").read_text()))
    console.print(f"[dim]wrote {', '.join(str(p) for p in paths)}[/dim]")
    if errors:
        raise click.ClickException(f"{len(errors)} runs failed; see {out / 'results.json'}")


def run_shown(
    label: str,
    items: Sequence[L],
    run: Callable[[Callable[[L, Any, int, int], None]], list[tuple[L, Any]]],
    describe: Callable[[L], str],
) -> list[tuple[L, Any]]:
    """`run(on_done)` under a progress bar: a line per finished run (what `describe`
    says of its label, its seed, done or the error, its time)."""
    with runs_bar(label) as bar:
        task = bar.add_task("runs", total=len(items))

        def on_done(item: L, rec: Any, done: int, n: int) -> None:
            what = "done" if rec.ok else f"FAILED ({rec.error})"
            bar.console.print(
                Text(f"{describe(item)} seed {rec.seed}: {what} in {rec.wall_s:.1f} s"),
                highlight=False,
            )
            bar.update(task, completed=done, total=n)

        return run(on_done)
