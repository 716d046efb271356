"""Each array's queued jobs in the order heads are taken: a heap per tenant, and,
where the policy shares fairly (DRF), a heap of tenants by their share.

A tenant's share moves only when one of its jobs starts or ends (``touch``), so
finding the next head costs O(log n) per change, not a pass over every tenant
at every cycle (``rank``: a job's place, reservations bind the jobs ranked after
their owner). Entries are dropped lazily: a job's entry is dead once it has
started, left, or been queued again under a new key; a tenant's entry once a
newer one was filed for it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

from coda.policy.framework import FairShare, Policy
from coda.policy.state import Job

Key = tuple[Any, ...]


def rank(policy: Policy, job: Job) -> Key:
    """A job's place in the queue now: its queue key, after its tenant's dominant share
    where the policy shares fairly (shares move as jobs start and end)."""
    fair = policy.fair_share
    if fair is None:
        return job.queue_key
    return (policy.queue_sort.band(job), fair.share(fair.tenant(job)), job.queue_key)


class TenantQueues:
    def __init__(
        self,
        arrays: Iterable[str],
        fair: FairShare | None,
        live: Callable[[Key, Job], bool],
        band: Callable[[Job], int],
    ) -> None:
        self._fair = fair
        self._live = live  # whether a (key, job) entry is still queued under that key
        self._band = band  # the queue sort's band: before the tenant's share
        self._jobs: dict[str, dict[str, list[tuple[Key, Job]]]] = {a: {} for a in arrays}
        # Per array: (its first job's band, tenant's share, its first job's key, filing
        # stamp, tenant).
        self._tenants: dict[str, list[tuple[int, float, Key, int, str]]] = {
            a: [] for a in self._jobs
        }
        self._stamp: dict[tuple[str, str], int] = {}
        self._touched: set[str] = set()

    def push(self, arr: str, job: Job) -> None:
        """Queue a job's entry (under its current queue key)."""
        fair = self._fair
        tenant = fair.tenant(job) if fair is not None else ""
        heap = self._jobs[arr].setdefault(tenant, [])
        heapq.heappush(heap, (job.queue_key, job))  # keys are unique: jobs never compared
        if fair is not None and heap[0][1] is job:
            self._file(arr, tenant)

    def touch(self, tenant: str) -> None:
        """The tenant's share changed, or its first job left: file it again."""
        if self._fair is not None:
            self._touched.add(tenant)

    def first(self, arr: str) -> Job | None:
        """The array's next job: the first of the tenant of smallest share among those
        whose first job is of the lowest band (ties: the earlier key); without fair
        share, the first in queue order (the key starts with the band)."""
        if self._fair is None:
            top = self._top(arr, "")
            return top[1] if top is not None else None
        if self._touched:
            for tenant in self._touched:
                for a, queues in self._jobs.items():
                    if tenant in queues:
                        self._file(a, tenant)
            self._touched.clear()
        heap = self._tenants[arr]
        while heap:
            _, _, key, stamp, tenant = heap[0]
            if self._stamp.get((arr, tenant)) != stamp:
                heapq.heappop(heap)  # a newer entry was filed for this tenant
                continue
            top = self._top(arr, tenant)
            if top is None:
                heapq.heappop(heap)
                continue
            if top[0] != key:  # its first job left without a touch: file it anew
                heapq.heappop(heap)
                self._file(arr, tenant)
                continue
            return top[1]
        return None

    def _top(self, arr: str, tenant: str) -> tuple[Key, Job] | None:
        queues = self._jobs[arr]
        heap = queues.get(tenant)
        if heap is None:
            return None
        while heap and not self._live(*heap[0]):
            heapq.heappop(heap)
        if not heap:
            del queues[tenant]
            return None
        return heap[0]

    def _file(self, arr: str, tenant: str) -> None:
        assert self._fair is not None
        stamp = self._stamp.get((arr, tenant), 0) + 1
        self._stamp[(arr, tenant)] = stamp
        top = self._top(arr, tenant)
        if top is None:
            return
        heap = self._tenants[arr]
        heapq.heappush(heap, (self._band(top[1]), self._fair.share(tenant), top[0], stamp, tenant))
        if len(heap) > 64 and len(heap) > 4 * len(self._jobs[arr]):
            # Mostly superseded entries: keep the current ones only.
            heap[:] = [e for e in heap if self._stamp.get((arr, e[4])) == e[3]]
            heapq.heapify(heap)
