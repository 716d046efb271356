"""What every daemon command that drives a policy shares (``coda agent``, ``coda slurm
agent``): its policy and control-loop options, their checks, and its log lines."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from coda.params import FiniteFloat

F = TypeVar("F", bound=Callable[..., Any])  # a click command function, decorated in place


def parse_tunes(items: tuple[str, ...]) -> dict[str, str]:
    """``--tune PART.FIELD=VALUE`` options as a dict (values checked by tune_policy)."""
    tune: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise click.BadParameter(f"{item!r}: expected PART.FIELD=VALUE", param_hint="--tune")
        tune[key.strip()] = value.strip()
    return tune


def policy_options(f: F) -> F:
    """--policy, --tune and --quiet: shared by every daemon that drives a policy."""
    opts = [
        click.option("--policy", default="coda", show_default=True,
                     help="Policy (`coda policies` lists them)."),
        click.option("--tune", "tunes", multiple=True, metavar="PART.FIELD=VALUE",
                     help="Override a policy knob, e.g. eliminator.step_down=0.5 "
                     "(see docs/runtime.md)."),
        click.option("--quiet", is_flag=True, help="Log errors only."),
    ]  # fmt: skip
    for o in reversed(opts):
        f = o(f)
    return f


def control_loop_options(f: F) -> F:
    """--period, --window, --stall (and policy_options): the node agent's control loop,
    the same for `coda agent` and `coda slurm agent`."""
    opts = [
        click.option("--period", type=FiniteFloat(min=0.05, max=3600), default=1.0,
                     show_default=True, help="Control period, seconds (0.05-3600)."),
        click.option("--window", type=FiniteFloat(min=0.05, max=3600), default=2.0,
                     show_default=True,
                     help="Throughput window, seconds (0.05-3600): one allocator sample "
                     "per window."),
        click.option("--stall", type=FiniteFloat(min=0.1, max=86400), default=15.0,
                     show_default=True,
                     help="Seconds (0.1-86400) without progress after which a job's samples "
                     "are not trusted."),
    ]  # fmt: skip
    for o in reversed(opts):
        f = o(f)
    return policy_options(f)


def checked_policy(policy: str, tunes: tuple[str, ...]) -> dict[str, str]:
    """The policy name checked and the --tune options parsed, or a usage error."""
    from coda.policy import POLICIES

    if policy not in POLICIES:
        raise click.BadParameter(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    return parse_tunes(tunes)


def checked_loop(
    policy: str, tunes: tuple[str, ...], period: float, window: float
) -> dict[str, str]:
    """checked_policy, plus the control loop's own rule: a window spans whole periods."""
    tune = checked_policy(policy, tunes)
    if window < period:
        raise click.BadParameter("--window must be at least --period")
    return tune


def timestamped(quiet: bool) -> Callable[[str], None]:
    """A daemon's log line writer: ``HH:MM:SS message`` on stdout, or nothing."""
    if quiet:
        return lambda m: None
    return lambda m: click.echo(f"{time.strftime('%H:%M:%S')} {m}")
