"""The ``coda`` command: the ``main`` group and the tree of commands under it, every
command of every body here, listed by body in ``coda --help`` (SECTIONS).

- Simulator: simulate_commands, trace_commands, headline_command, paper_command,
  regimes_command; their shared options in run_options, their output in terminal.
- Node runtime: node_commands (agent, submit, run, status, cancel, logs), with
  node_agent, node_daemon, node_jobspec, node_state_dir and node_status.
- Slurm: slurm_commands (controller, agent, status, handback), replay_command.

``coda.cli:main`` is the console script; ``python -m coda.cli`` runs it too (__main__).
"""

from __future__ import annotations

import io
import sys
from typing import Any

import click

from coda.cli.cpu_harm_command import cpu_harm
from coda.cli.eliminator_command import eliminator
from coda.cli.headline_command import headline
from coda.cli.paper_command import paper
from coda.cli.regimes_command import regimes
from coda.cli.sensitivity_command import sensitivity
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


# `coda --help` lists the commands by the body they drive.
SECTIONS = (
    ("Simulator", ("simulate", "compare", "policies", "trace", "experiment")),
    ("Node runtime (one machine)", ("agent", "submit", "run", "status", "cancel", "logs")),
    ("Slurm", ("slurm", "replay")),
)


class _Sections(_ShortErrors):
    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        listed: set[str] = set()
        for title, names in SECTIONS:
            rows = []
            for name in names:
                cmd = self.get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(formatter.width - 20)))
                    listed.add(name)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [n for n in self.list_commands(ctx) if n not in listed]
        if rest:  # a command no section names still shows
            with formatter.section("Other"):
                formatter.write_dl(
                    [(n, c.get_short_help_str()) for n in rest if (c := self.get_command(ctx, n))]
                )


@click.group(cls=_Sections)
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
experiment.add_command(cpu_harm)
experiment.add_command(headline)
experiment.add_command(eliminator)
experiment.add_command(paper)
experiment.add_command(regimes)
experiment.add_command(sensitivity)


def _register_runtime() -> None:
    from coda.cli.node_commands import register
    from coda.cli.replay_command import replay
    from coda.cli.slurm_commands import register as register_slurm

    register(main)
    register_slurm(main)
    main.add_command(replay)


_register_runtime()
