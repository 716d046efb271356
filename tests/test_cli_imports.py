"""The ``coda`` command starts light: importing it, and its help and the node runtime's
commands' help, load neither numpy nor matplotlib (each checked in a fresh interpreter);
the options whose values live with numpy's users read them when first checked."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

HEAVY = ("numpy", "matplotlib")

CODE = """
import json, sys
import coda.cli
args = json.loads(sys.argv[1])
if args is not None:
    try:
        coda.cli.main(args, prog_name="coda", standalone_mode=False)
    except SystemExit:
        pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


@pytest.mark.parametrize(
    "args",
    [None, ["--help"], ["status", "--help"], ["experiment", "--help"], ["trace", "--help"]],
)
def test_the_command_and_its_help_load_no_numpy_nor_matplotlib(args: list[str] | None) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE, json.dumps(args)], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert "coda" in loaded
    assert not loaded & set(HEAVY), f"coda {args or ''} loads {sorted(loaded & set(HEAVY))}"


def test_deferred_options_read_the_tuples_and_bounds_they_name() -> None:
    from coda.cli import main
    from coda.workload.generate import PRESETS
    from coda.workload.generate.paper import MAX_ARRIVAL_SCALE, MAX_DAYS
    from coda.workload.traces import FORMATS
    from coda.workload.traces._common import CENSORED_CHOICES, FRACTIONAL_CHOICES

    ctx = click.Context(main)
    simulate = main.get_command(ctx, "simulate")
    trace = main.get_command(ctx, "trace")
    assert simulate is not None and isinstance(trace, click.Group)
    generate = trace.get_command(ctx, "generate")
    assert generate is not None
    types = {p.name: p.type for p in (*simulate.params, *generate.params)}
    assert types["fmt"].choices is FORMATS  # type: ignore[attr-defined]
    assert types["fractional"].choices is FRACTIONAL_CHOICES  # type: ignore[attr-defined]
    assert types["censored"].choices is CENSORED_CHOICES  # type: ignore[attr-defined]
    assert types["preset"].choices == tuple(sorted(PRESETS))  # type: ignore[attr-defined]
    assert types["days"].max == MAX_DAYS  # type: ignore[attr-defined]
    assert types["arrival_scale"].max == MAX_ARRIVAL_SCALE  # type: ignore[attr-defined]
