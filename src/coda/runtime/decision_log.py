"""The node's decision log: every decision a component made, with its detail, in the
state database (``coda status --decisions N``), and a count per component and action
(the metrics)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coda.runtime.store import Store


class DecisionLog:
    """Writes decisions to the store, stamped with wall time and the agent's clock."""

    def __init__(self, store: Store, wall: Callable[[], float]) -> None:
        self.store = store
        self.wall = wall
        # "component:action" for decisions; other keys (quota_up, ...) are internal.
        self.counters: dict[str, int] = {}

    def count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    def record(
        self, now: float, job_id: int | None, component: str, action: str, detail: dict[str, Any]
    ) -> None:
        self.count(f"{component}:{action}")
        self.store.log_decision(
            self.wall(), job_id, component, action, {"mono": round(now, 3), **detail}
        )
