"""The node's memory-bus traffic, measured: resctrl's MBM counters between two reads.

The bus rule (``BusHeadroom``) and the eliminator's bandwidth gates read a node's
``bw_used`` against its ``bw_gbps``. The simulator computes both from its performance
model; a node agent has them only where the hardware counts memory traffic (Intel RDT's
MBM, through resctrl) and the operator declares what the bus carries (``--bus-gbps``).
Elsewhere ``bw_gbps`` stays 0 and every bandwidth rule stands aside, as the policies
say for a node without counters."""

from __future__ import annotations

import math

from coda.policy.state import Node
from coda.runtime.resctrl import ResctrlControl, ResctrlError

GB = 1e9


class BusMeter:
    """Memory traffic (GB/s) over the span between two reads of every resctrl group's
    cumulative counter. A group new since the last read counts from zero (its counter
    started with it); one whose count went down was made anew under the same name and
    counts likewise; one removed in between takes its last bytes with it (the span
    reads a little low)."""

    def __init__(self, resctrl: ResctrlControl, min_span_s: float = 0.5) -> None:
        self.resctrl = resctrl
        self.min_span_s = min_span_s
        self.last: dict[str, int] | None = None
        self.last_t = 0.0
        self.gbps: float | None = None  # the latest rate; None before two reads

    @property
    def counting(self) -> bool:
        return self.resctrl.mon_available

    def read(self, now: float) -> float | None:
        """The node's traffic in GB/s over the span that ends ``now`` (the previous
        rate while that span is shorter than ``min_span_s``); None before two reads
        or when the counters cannot be read."""
        try:
            counts = self.resctrl.mbm_by_group()
        except ResctrlError:
            counts = None
        if counts is None:
            self.last, self.gbps = None, None
            return None
        if self.last is None:
            self.last, self.last_t = counts, now
            return None
        span = now - self.last_t
        if span < self.min_span_s:
            return self.gbps
        moved = 0
        for group, count in counts.items():
            before = self.last.get(group)
            moved += count - before if before is not None and count >= before else count
        self.last, self.last_t = counts, now
        rate = moved / span / GB
        self.gbps = rate if math.isfinite(rate) else None
        return self.gbps

    def update(self, node: Node, bus_gbps: float, now: float) -> bool:
        """Put the measured traffic on ``node`` (``bw_used``) with its declared
        bandwidth (``bw_gbps``; 0 while nothing is measured, so no rule acts on a
        guess). True if the bus calmed: jobs a bus rule kept waiting may fit now."""
        gbps = self.read(now) if bus_gbps > 0 else None
        if gbps is None:
            was_on = node.bw_gbps > 0
            node.bw_gbps, node.bw_used = 0.0, 0.0
            return was_on  # the rules stand aside: what they refused may go
        before = node.bw_used if node.bw_gbps > 0 else math.inf
        node.bw_gbps, node.bw_used = float(bus_gbps), float(gbps)
        return gbps < before
