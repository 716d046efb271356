"""The cycle's instant and count: what every part of the cycle reads as "now".

``Scheduler.cycle`` sets both at the start of a cycle; the queue, the node search,
the reservations and backfill hold the same clock and only read it.
"""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.now = 0.0  # the running (or the last) cycle's instant
        self.cycles = 0  # cycles run so far (a job's reason is stamped with it)
