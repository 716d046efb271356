"""Command-line value types shared by every `coda` command."""

from __future__ import annotations

import math

import click


class FiniteFloat(click.FloatRange):
    """A float in a range that is also finite: click.FloatRange lets 'nan' through
    (every comparison with NaN is false), and 'inf' wherever a side is open-ended."""

    name = "finite float"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv
