"""What a new user meets first: every command and option says what it does, and
the ``coda`` command starts without loading the plotting library."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from coda.cli import main


def _undocumented(cmd: click.Command, path: str) -> list[str]:
    out = [] if (cmd.help or cmd.short_help) else [path]
    out += [
        f"{path} {p.opts[0]}"
        for p in cmd.params
        if isinstance(p, click.Option) and not p.hidden and not p.help
    ]
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            out += _undocumented(sub, f"{path} {name}")
    return out


def test_every_command_and_option_has_help() -> None:
    assert _undocumented(main, "coda") == []


def test_the_walk_sees_a_missing_help() -> None:
    @click.command(help="x")
    @click.option("--bare")
    def cmd(bare: str) -> None: ...

    assert _undocumented(cmd, "cmd") == ["cmd --bare"]


def test_help_names_only_commands_that_exist() -> None:
    # `coda policies list` was named in an option's help while only `coda policies` runs.
    assert main.get_command(click.Context(main), "policies") is not None
    code = (
        "import sys\nfrom coda.cli import main\n"
        "try:\n    main(['policies'], standalone_mode=False)\nexcept SystemExit as e:\n"
        "    sys.exit(e.code)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and "coda:" in out.stdout


def test_the_command_starts_without_matplotlib() -> None:
    # Plots import it where they are drawn: `coda status` must not pay for it (nor warn
    # a user without a writable home about its cache).
    code = (
        "import sys\nfrom coda.cli import main\n"
        "for argv in (['--help'], ['status', '--help'], ['slurm', 'status', '--help']):\n"
        "    try:\n        main(argv, standalone_mode=False)\n    except SystemExit:\n"
        "        pass\n"
        "print('matplotlib' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_help_groups_every_command_by_the_body_it_drives() -> None:
    from click.testing import CliRunner

    from coda.cli import SECTIONS

    out = CliRunner().invoke(main, ["--help"]).output
    assert [t for t, _ in SECTIONS] == ["Simulator", "Node runtime (one machine)", "Slurm"]
    assert all(f"{t}:" in out for t, _ in SECTIONS) and "Other:" not in out
    named = {n for _, names in SECTIONS for n in names}
    assert named == set(main.list_commands(click.Context(main)))


def test_each_policy_knob_offers_what_the_run_and_the_policy_accept() -> None:
    # One tuple per knob is the truth: click's choices are it, and the options that
    # hold the knob (the policy's, or the simulator's for grants) accept each of them and
    # nothing else; a run config takes them.
    from coda.policy.options import PolicyOptions
    from coda.study.config import RunConfig, SimulationOptions

    simulate = main.get_command(click.Context(main), "simulate")
    assert simulate is not None
    choices = {p.name: p.type.choices for p in simulate.params if isinstance(p.type, click.Choice)}
    knobs = {"estimates", "order", "allocator_start", "reclaim", "grants"}
    assert knobs <= set(choices)
    for knob in knobs:
        # The simulator's books, not the policy's.
        holder = SimulationOptions if knob == "grants" else PolicyOptions
        requeue = PolicyOptions(reclaim="requeue")
        for value in choices[knob]:
            options = holder(**{knob: value})
            if isinstance(options, SimulationOptions):
                RunConfig(policy=requeue, simulation=options)
            else:
                RunConfig(policy=options)
        with pytest.raises(ValueError):
            holder(**{knob: "no-such-choice"})
