"""Pure decision code: no I/O, no wall clock. Drivers (simulator, node runtime) call it."""

from __future__ import annotations

from collections.abc import Callable

from coda.policy.baselines import static_separate, static_shared
from coda.policy.framework import Policy

POLICIES: dict[str, Callable[[], Policy]] = {
    "static-separate": static_separate,
    "static-shared": static_shared,
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
