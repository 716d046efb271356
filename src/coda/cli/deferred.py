"""Option types whose values live in modules that load numpy (the trace loaders'
formats and options, the generator's presets and bounds), read from there when an
option is first checked or shown: ``import coda.cli`` and ``coda --help`` load
neither numpy nor matplotlib (tests/test_cli_imports.py), and every choice still comes
from its one tuple."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

import click

from coda.params import FiniteFloat

# Where each lives: the loaders' formats and options, the generator's presets and bounds.
FORMATS = "coda.workload.traces:FORMATS"
FRACTIONAL = "coda.workload.traces._common:FRACTIONAL_CHOICES"
CENSORED = "coda.workload.traces._common:CENSORED_CHOICES"
PRESETS = "coda.workload.generate:PRESETS"
MAX_GENERATED_DAYS = "coda.workload.generate.paper:MAX_DAYS"
MAX_ARRIVAL_SCALE = "coda.workload.generate.paper:MAX_ARRIVAL_SCALE"
SPEECH_READINGS = "coda.workload.generate.paper:SPEECH_READINGS"


def _value(ref: str) -> Any:
    """``"package.module:NAME"``'s value."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


class DeferredChoice(click.Choice):  # type: ignore[type-arg]
    """click.Choice over the tuple named ``"module:NAME"``, read when first asked for."""

    def __init__(self, ref: str, *, sort: bool = False, case_sensitive: bool = True) -> None:
        self.ref = ref
        self.sort = sort
        self._choices: tuple[str, ...] | None = None
        self.case_sensitive = case_sensitive

    @property
    def choices(self) -> tuple[str, ...]:
        if self._choices is None:
            values: Iterable[str] = _value(self.ref)
            self._choices = tuple(sorted(values) if self.sort else values)
        return self._choices

    @choices.setter
    def choices(self, value: Iterable[str]) -> None:
        self._choices = tuple(value)


class DeferredMaxFloat(FiniteFloat):
    """FiniteFloat whose upper bound is the number named ``"module:NAME"``, read when
    first asked for."""

    def __init__(self, low: float, high_ref: str, **kw: Any) -> None:
        self.high_ref = high_ref
        self._high: float | None = None
        super().__init__(low, None, **kw)

    @property
    def max(self) -> float | None:
        if self._high is None and getattr(self, "high_ref", None):
            self._high = float(_value(self.high_ref))
        return self._high

    @max.setter
    def max(self, value: float | None) -> None:
        self._high = value
