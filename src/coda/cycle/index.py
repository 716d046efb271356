"""Best-fit node lookup without scanning every node.

Each pool keeps its nodes in buckets keyed by (free GPUs, free cores). For every
free-GPU level an int bitmask marks which free-core buckets are non-empty, so the
tightest bucket that still fits a request is found with a shift and a
lowest-set-bit, whatever the cluster size.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from coda.policy.state import Node


class PoolIndex:
    """``dnn_view``: key nodes by the cores a DNN job may take (free plus those
    CPU jobs hold, which are reclaimed when it starts) instead of free cores."""

    def __init__(self, max_gpus: int, dnn_view: bool = False) -> None:
        self.max_gpus = max_gpus
        self.dnn_view = dnn_view
        # buckets[g][c] = insertion-ordered set of nodes with g free GPUs and c free cores
        self.buckets: list[dict[int, dict[Node, None]]] = [{} for _ in range(max_gpus + 1)]
        self.masks: list[int] = [0] * (max_gpus + 1)
        self.key: dict[int, tuple[int, int]] = {}  # node idx -> its bucket
        self.size = 0

    def _cores(self, node: Node) -> int:
        return node.free_cores + node.cpu_job_cores if self.dnn_view else node.free_cores

    def _key(self, node: Node) -> tuple[int, int]:
        # An over-committed node (a driver's books off, e.g. an adoption) is filed as
        # full, never as the most free.
        return min(max(0, node.free_gpus), self.max_gpus), max(0, self._cores(node))

    def add(self, node: Node) -> None:
        g, c = self._key(node)
        level = self.buckets[g]
        bucket = level.get(c)
        if bucket is None:
            bucket = level[c] = {}
            self.masks[g] |= 1 << c
        bucket[node] = None
        self.key[node.idx] = (g, c)
        self.size += 1

    def remove(self, node: Node) -> None:
        g, c = self.key.pop(node.idx)
        level = self.buckets[g]
        bucket = level[c]
        del bucket[node]
        if not bucket:
            del level[c]
            self.masks[g] &= ~(1 << c)
        self.size -= 1

    def update(self, node: Node) -> None:
        """Re-file a node after its free GPUs or cores changed."""
        # _key, remove and add in one (a start or a finish re-files each of its nodes).
        g = node.free_gpus
        g = 0 if g < 0 else self.max_gpus if g > self.max_gpus else g
        c = node.free_cores + node.cpu_job_cores if self.dnn_view else node.free_cores
        if c < 0:
            c = 0
        old = self.key.get(node.idx)
        if old == (g, c):
            return
        if old is None:
            raise KeyError(node.idx)  # not filed here
        og, oc = old
        level = self.buckets[og]
        bucket = level[oc]
        del bucket[node]
        if not bucket:
            del level[oc]
            self.masks[og] &= ~(1 << oc)
        level = self.buckets[g]
        into = level.get(c)
        if into is None:
            into = level[c] = {}
            self.masks[g] |= 1 << c
        into[node] = None
        self.key[node.idx] = (g, c)

    def best_fit(self, gpus: int, cores: int) -> Iterator[Node]:
        """Nodes with >= gpus free GPUs and >= cores free cores, tightest first.

        Order: fewest free GPUs, then fewest free cores, then insertion order.
        The caller must not change nodes while iterating.
        """
        for g in range(gpus, self.max_gpus + 1):
            m = self.masks[g] >> cores
            level = self.buckets[g]
            while m:
                low = m & -m
                yield from level[cores + low.bit_length() - 1]
                m ^= low

    def fewest_cores(self, gpus: int, cores: int) -> Iterator[Node]:
        """The same nodes, fewest free cores first whatever their free GPUs, then in node
        order (Slurm's select/cons_tres; the ``fewest-cores`` node order).

        The caller must not change nodes while iterating."""
        levels = range(gpus, self.max_gpus + 1)
        m = 0
        for g in levels:
            m |= self.masks[g]
        m >>= cores
        while m:
            low = m & -m
            c = cores + low.bit_length() - 1
            # Popped lazily: the first node often serves.
            same = [(n.idx, n) for g in levels for n in self.buckets[g].get(c, ())]
            heapq.heapify(same)
            while same:
                yield heapq.heappop(same)[1]
            m ^= low

    def most_free(self) -> Iterator[Node]:
        """Nodes with the most free GPUs (then cores) first."""
        for g in range(self.max_gpus, -1, -1):
            m = self.masks[g]
            level = self.buckets[g]
            while m:
                top = m.bit_length() - 1
                yield from level[top]
                m ^= 1 << top
