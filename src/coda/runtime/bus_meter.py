"""The node's memory-bus traffic, measured: resctrl's MBM counters between two reads.

The bus rule (``BusHeadroom``) reads a node's ``bw_used`` against its ``bw_gbps``. The
simulator computes both from its performance model; a node agent has them only where the
hardware counts memory traffic (Intel RDT's MBM, through resctrl) and the operator
declares what the bus carries (``--bus-gbps``). Elsewhere ``bw_gbps`` stays 0 and the
rule stands aside, as the policies say for a node without counters. The node's total is
all a node agent measures (``bw_per_job`` False): the eliminator, which would need each
job's share, keeps to the training jobs' throughput and its victim budget there."""

from __future__ import annotations

import math

from coda.policy.state import Node
from coda.runtime.resctrl import ResctrlControl, ResctrlError

GB = 1e9
# A first rate may come from a span this short (the agent's first tick follows its
# start closely); later ones need half a period, so one slow tick does not judge.
FIRST_SPAN_S = 0.05
# The bus must calm by this share of its bandwidth before the cycle retries on it.
EASED_SHARE = 0.02


class BusMeter:
    """Memory traffic (GB/s) over the span between two reads of every resctrl counter,
    one per (group, L3 domain). A group never seen before counts from zero (its counters
    started with it). A counter that fell (its group made anew, a monitor group of
    another tool removed under it) or that could not be read at one end of the span adds
    nothing for that span; a group removed in between takes its last bytes with it. So a
    span may read low, never high."""

    def __init__(self, resctrl: ResctrlControl, min_span_s: float = 0.5) -> None:
        self.resctrl = resctrl
        self.min_span_s = min_span_s
        self.last: dict[tuple[str, str], int] | None = None
        self.seen: set[str] = set()  # groups ever read
        self.last_t = 0.0
        self.gbps: float | None = None  # the latest rate; None before two reads

    @property
    def counting(self) -> bool:
        return self.resctrl.mon_available

    def read(self, now: float) -> float | None:
        """The node's traffic in GB/s over the span that ends ``now`` (the previous
        rate while that span is too short to judge); None before two reads or when the
        counters cannot be listed."""
        try:
            counts = self.resctrl.mbm_counts()
        except (ResctrlError, OSError, ValueError):
            counts = None
        if counts is None:
            self.last, self.gbps = None, None
            return None
        if self.last is None:
            self.last, self.last_t = counts, now
            self.seen |= {g for g, _ in counts}
            return None
        span = now - self.last_t
        if span < (self.min_span_s if self.gbps is not None else FIRST_SPAN_S):
            return self.gbps
        moved = 0
        for key, count in counts.items():
            before = self.last.get(key)
            if before is not None:
                moved += max(0, count - before)
            elif key[0] not in self.seen:
                moved += count
        self.seen |= {g for g, _ in counts}
        self.last, self.last_t = counts, now
        rate = moved / span / GB
        self.gbps = rate if math.isfinite(rate) else None
        return self.gbps

    def update(self, node: Node, bus_gbps: float, now: float) -> bool:
        """Put the measured traffic on ``node`` (``bw_used``) with its declared
        bandwidth (``bw_gbps``; 0 while nothing is measured, so no rule acts on a
        guess). True if the bus calmed: jobs the bus rule kept waiting may fit now."""
        node.bw_per_job = False
        gbps = self.read(now) if bus_gbps > 0 else None
        if gbps is None:
            was_on = node.bw_gbps > 0
            node.bw_gbps, node.bw_used = 0.0, 0.0
            return was_on  # the rule stands aside: what it refused may go
        before = node.bw_used if node.bw_gbps > 0 else math.inf
        node.bw_gbps, node.bw_used = float(bus_gbps), float(gbps)
        return gbps < before - EASED_SHARE * bus_gbps
