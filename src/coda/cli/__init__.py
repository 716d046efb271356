"""The ``coda`` command: the ``main`` group and the tree of commands under it.

Each command lives in the module named for it (simulate_commands, trace_commands,
headline_command, paper_command, regimes_command); the options they share are in
run_options and their output in terminal. The runtime (coda.runtime.cli) and Slurm
(coda.slurm.cli) commands register themselves here. ``coda.cli:main`` is the console
script; ``python -m coda.cli`` runs it too (__main__).
"""

from __future__ import annotations

import click

from coda.cli.headline_command import headline
from coda.cli.paper_command import paper
from coda.cli.regimes_command import regimes
from coda.cli.simulate_commands import compare, list_policies, simulate
from coda.cli.terminal import console, err_console, one_line
from coda.cli.trace_commands import trace_generate, trace_group, trace_info
from coda.params import FiniteFloat

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


@click.group()
@click.version_option(package_name="coda")
def main() -> None:
    """CODA: slim DNN jobs' CPU allocations and co-locate CPU jobs on the cores freed."""


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
