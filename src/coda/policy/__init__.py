"""Pure decision code: no I/O, no wall clock. Drivers (simulator, node runtime) call it."""

from __future__ import annotations

from collections.abc import Callable

from coda.policy.baselines import static_separate, static_shared
from coda.policy.coda import (
    coda,
    coda_no_colocation,
    coda_no_eliminator,
    coda_no_slimming,
    oracle,
)
from coda.policy.framework import Policy

POLICIES: dict[str, Callable[[], Policy]] = {
    "static-separate": static_separate,
    "static-shared": static_shared,
    "coda": coda,
    "coda-no-slimming": coda_no_slimming,
    "coda-no-colocation": coda_no_colocation,
    "coda-no-eliminator": coda_no_eliminator,
    "oracle": oracle,
}


def make_policy(name: str) -> Policy:
    """The policy registered under ``name``; a clear error lists the known names."""
    try:
        factory = POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r}; known policies: {known}") from None
    return factory()


__all__ = ["POLICIES", "Policy", "make_policy"]
