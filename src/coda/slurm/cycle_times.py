"""How long the controller's cycles take: a histogram with Prometheus' buckets."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from coda.runtime.metrics import float_to_go

CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class CycleTimes:
    """Histogram of cycle durations (seconds): per-bucket counts, their sum, the last."""

    def __init__(self, bounds: Sequence[float] = CYCLE_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0
        self.last = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1  # le: bound >= seconds
        self.sum += seconds
        self.last = seconds

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative (le, count) pairs, ``+Inf`` last, as Prometheus histograms have."""
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append((float_to_go(bound), float(total)))
        return out
