"""The ``coda`` command: the ``main`` group and the tree of commands under it.

Each command lives in the module named for it (simulate_commands, trace_commands,
headline_command, paper_command, regimes_command); the options they share are in
run_options and their output in terminal. The runtime (coda.runtime.cli) and Slurm
(coda.slurm.cli) commands register themselves here. ``coda.cli:main`` is the console
script; ``python -m coda.cli`` runs it too (__main__).
"""

from __future__ import annotations

import io
import sys
from typing import Any

import click

from coda.cli.headline_command import headline
from coda.cli.paper_command import paper
from coda.cli.regimes_command import regimes
from coda.cli.simulate_commands import compare, list_policies, simulate
from coda.cli.terminal import console, err_console, one_line
from coda.cli.trace_commands import trace_generate, trace_group, trace_info
from coda.params import FiniteFloat
from coda.text import clip_middle, visible

__all__ = [
    "FiniteFloat",
    "compare",
    "console",
    "err_console",
    "experiment",
    "headline",
    "list_policies",
    "main",
    "one_line",
    "paper",
    "regimes",
    "simulate",
    "trace_generate",
    "trace_group",
    "trace_info",
]


MAX_ERROR_CHARS = 320  # an error line's message; a value quoted in it is cut to fit


class _ShortErrors(click.Group):
    """The top group: an error, click's own (which quote the value given) included,
    stays a short line however long the value on the command line was."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:  # fmt: skip
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as e:
            raise _shortened(e) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as e:
            raise _shortened(e) from None


def _shortened(e: click.ClickException) -> click.ClickException:
    """The same error (its kind, exit status and usage line), its message one short
    line: a value quoted in it may hold line breaks or be thousands of characters."""
    text = e.format_message()
    short = clip_middle(visible(text), MAX_ERROR_CHARS)
    if short == text:
        return e
    if isinstance(e, click.UsageError):
        if type(e).show is not click.UsageError.show:
            return e  # shows itself otherwise (a group run bare prints its help)
        return click.UsageError(short, e.ctx)
    if type(e) is click.ClickException:
        return click.ClickException(short)
    return e  # another kind, with an exit status of its own: left as it is


@click.group(cls=_ShortErrors)
@click.version_option(package_name="coda")
def main() -> None:
    """CODA: slim DNN jobs' CPU allocations and co-locate CPU jobs on the cores freed."""
    for stream in (sys.stdout, sys.stderr):
        # A terminal or pipe whose encoding lacks a character printed (PYTHONIOENCODING=
        # ascii: '·', '≥'): escaped, not a traceback after the work is done.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


@main.group()
def experiment() -> None:
    """Experiments that test the paper's claims: many runs, statistics, a report."""


main.add_command(simulate)
main.add_command(compare)
main.add_command(trace_group)
main.add_command(list_policies)
experiment.add_command(headline)
experiment.add_command(paper)
experiment.add_command(regimes)


def _register_runtime() -> None:
    from coda.replay.cli import replay
    from coda.runtime.cli import register
    from coda.slurm.cli import register as register_slurm

    register(main)
    register_slurm(main)
    main.add_command(replay)


_register_runtime()
