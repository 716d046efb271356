"""What the workloads share: argument types (clear errors, no NaN) and a clean stop on
SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import math
import re
import signal
from collections.abc import Callable

_INT = re.compile(r"-?[0-9]{1,15}")  # ASCII digits: int() also takes "1_0", " 7 ", "٣"


def int_at_least(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """A whole number >= lo (and <= hi where given), in ASCII digits."""

    def parse(text: str) -> int:
        if not _INT.fullmatch(text):
            raise argparse.ArgumentTypeError(f"not an integer: {text[:40]!r}")
        value = int(text)
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {value}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi}, got {value}")
        return value

    return parse


def number_above(lo: float, *, strict: bool, hi: float | None = None) -> Callable[[str], float]:
    """A finite float >= lo (> lo when ``strict``), and <= hi where given."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
        if not math.isfinite(value) or value < lo or (strict and value == lo):
            raise argparse.ArgumentTypeError(
                f"must be {'>' if strict else '>='} {lo:g}, got {text}"
            )
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi:g}, got {text}")
        return value

    return parse


class StopSignals:
    """Records SIGTERM/SIGINT instead of dying, so a workload can stop cleanly (workers
    joined, summary printed); ``restore`` puts the previous handlers back."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old = {s: signal.signal(s, self._on) for s in (signal.SIGTERM, signal.SIGINT)}

    def _on(self, signum: int, _frame: object) -> None:
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
