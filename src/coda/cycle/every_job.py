"""Backfill that plans a start for every queued job, as Slurm's sched/backfill does.

Slurm walks its queue in priority order. A job that can start now without touching
a plan already made starts; one that cannot is planned at its earliest start, from
the running jobs' expected ends (their time limits) and the plans before it, and
its nodes are held whole from then for its own time limit (``bf_min_prio_reserve``
unset: every pending job reserves; ``bf_max_job_test``: how deep it looks). A later
job may start now on a node only if it ends before every plan there.

Where a plan begins (``Policy.plan_times``): at the job's exact earliest start, or, as
Slurm 22.05's will-run test finds it (``slurm-windows``), at the end of the batch of
running jobs after which it fits: select/cons_tres takes running jobs off by their
expected ends in batches, the first up to one 30 s window past the 30 s barrier after
the first end, each later one a window twice as long, and reports the last end of
the batch that made room. Seen on the test cluster (``scontrol setdebugflags
+Backfill``, the full replay's plain run): a job that fits once two jobs end at +138
and +139 s was planned at +158, the last end of its batch, so 1-minute jobs were
backfilled on its node before it; the exact rule forbade them.

The default (``Policy.reservations == "heads"``) plans for each array's first
blocked job only (EASY backfill) and costs what changed; this pass costs the first
``backfill_depth`` queued jobs times the nodes at every cycle. It is the model of
plain Slurm for ``coda replay``'s twin, not for million-job simulations.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Iterable
from typing import Any

from coda.cycle import reasons as R
from coda.cycle.clock import Clock
from coda.cycle.nodes import NodeBook
from coda.cycle.queue import Queue
from coda.cycle.reasons import Reasons
from coda.cycle.reservations import Hold, Reservations
from coda.cycle.starts import Starter
from coda.cycle.tenants import rank
from coda.policy.framework import Policy
from coda.policy.state import Job, Node

# A plan on a node: (its start, its end, its owner)
Window = tuple[float, float, Job]


class EveryJobReservations:
    """The every-job round: each queued job starts or is planned, in queue order."""

    def __init__(
        self,
        policy: Policy,
        book: NodeBook,
        queue: Queue,
        reservations: Reservations,
        starter: Starter,
        reasons: Reasons,
        clock: Clock,
    ) -> None:
        self.policy = policy
        self.book = book
        self.queue = queue
        self.reservations = reservations
        self.starter = starter
        self.reasons = reasons
        self.clock = clock
        self._slurm_windows = policy.plan_times == "slurm-windows"  # where plans begin

    def rounds(self) -> None:
        """Every-job rounds until one starts nothing or no job is left past the depth
        (Slurm's next pass, a second later, looks at the jobs behind those that started)."""
        while self._every_job_round():
            pass

    def _every_job_round(self) -> bool:
        """Each queued job in queue order starts if it fits without delaying an earlier
        job's plan; else it is planned, and its plan binds the jobs after it. True if it
        started a job while jobs past the depth were left unseen."""
        policy = self.policy
        active: dict[int, list[Hold]] = {}
        windows: dict[int, list[Window]] = {}
        heads: dict[str, Job | None] = dict.fromkeys(policy.arrays.names)
        array_of = policy.arrays.array_of
        # Within the round nodes only lose room (starts) and gain plans, so a job alike
        # one that could not start (same needs, no shorter) cannot start either: it is
        # not tried. Per-job filters, reclaim (which frees room) and fair share (ranks
        # move as jobs start, so a plan may bind one job and not the next) turn that off.
        memo = not policy.filters and policy.reclaim is None and policy.fair_share is None
        failed: dict[tuple[Any, ...], tuple[float, object]] = {}
        ready: dict[tuple[Any, ...], _Ready] = {}
        started: list[Node] = []  # nodes that lost room to a start, in order
        jobs, left_out = self._in_queue_order()
        for job in jobs:
            cores_pn = self.book.cores(job)
            key = (job.kind, job.gpus_pn, cores_pn, job.mem_pn, job.nodes,
                   policy.pools.pools(job))  # fmt: skip
            seen = failed.get(key) if memo else None
            estimate = policy.estimates.runtime(job, cores_pn) if seen is not None else 0.0
            if seen is not None and estimate >= seen[0]:
                job.estimate = estimate
                self.queue.note_job(job, seen[1])
            elif self.starter.attempt(job, True, [], active, cores_pn):
                started += job.placement  # they have less room now
                continue
            elif memo:
                failed[key] = (job.estimate, job.wait)
            arr = array_of(job)
            if heads[arr] is None:
                heads[arr] = job
            plan = self._plan(job, cores_pn, windows, ready if memo else {}, started)
            if plan is None:  # no node will ever be known to have room: not planned
                continue
            start, nodes = plan
            end = start + job.estimate
            place = rank(policy, job)
            for node in nodes:
                insort(windows.setdefault(node.idx, []), (start, end, job), key=_start_of)
                active.setdefault(node.idx, []).append((start, place, job))
        self.queue.heads = heads
        self.reservations.every_job_holds = active
        return left_out and bool(started)

    def _in_queue_order(self) -> tuple[list[Job], bool]:
        """The first ``backfill_depth`` queued jobs of each array, merged by rank, and
        whether any were left out."""
        policy, queue = self.policy, self.queue
        depth = policy.backfill_depth
        jobs: list[Job] = []
        left_out = False
        for arr in policy.arrays.names:
            buckets = queue.buckets[arr]
            live: list[Job] = []
            for shape in list(buckets):
                bucket = buckets[shape]
                if bucket.front() is None:  # every job of it started or left
                    queue.drop(arr, shape)
                    continue
                live += bucket.live()
            live.sort(key=lambda j: rank(policy, j))
            jobs += live[:depth]
            if len(live) > depth:
                left_out = True
                beyond = self.reasons.why(R.DEPTH)
                for job in live[depth:]:
                    queue.note(job, beyond)
        jobs.sort(key=lambda j: rank(policy, j))
        return jobs, left_out

    def _plan(
        self,
        job: Job,
        cores_pn: int,
        windows: dict[int, list[Window]],
        ready_of: dict[tuple[Any, ...], _Ready],
        started: list[Node],
    ) -> tuple[float, list[Node]] | None:
        """The earliest start at which ``job.nodes`` nodes have its room (as running jobs
        end when estimated) and no earlier plan binding it overlaps its run there, and
        those nodes (the first to have the room, then by index); None if never known.
        ``ready_of``: when each node has the room, by needs, for this round (``started``:
        the nodes whose room a start changed meanwhile, refreshed on use)."""
        policy = self.policy
        pools = policy.pools.pools(job)
        key = (job.kind, job.gpus_pn, cores_pn, job.mem_pn, pools)
        memo = ready_of.get(key)
        if memo is None:
            memo = _Ready(self._ready_times(job, cores_pn, self.book.nodes.values()), len(started))
            ready_of[key] = memo
        elif memo.seen < len(started) and self._slurm_windows:
            # A start moved the batches every node's time falls in: all anew.
            memo.times = self._ready_times(job, cores_pn, self.book.nodes.values())
            memo.seen = len(started)
        elif memo.seen < len(started):
            changed = {n.idx: n for n in started[memo.seen :]}
            kept = [r for r in memo.times if r[1] not in changed]
            memo.times = kept + self._ready_times(job, cores_pn, changed.values())
            memo.times.sort(key=_start_of_ready)
            memo.seen = len(started)
        ready = memo.times
        if len(ready) < job.nodes:
            return None
        length = job.estimate
        if job.nodes == 1:
            best: tuple[float, int, Node] | None = None
            for t, idx, node in ready:
                if best is not None and (t, idx) >= (best[0], best[1]):
                    break  # it starts no earlier than t: it cannot do better
                at = self._after_plans(t, length, windows.get(node.idx), job)
                if best is None or (at, idx) < (best[0], best[1]):
                    best = (at, idx, node)
            assert best is not None
            return (best[0], [best[2]]) if best[0] < math.inf else None
        binds = self.reservations.binds
        binding = {
            idx: [(s, e) for s, e, owner in held if binds(owner, job)]
            for idx, held in windows.items()
        }
        # A plan can only begin when a node gets its room or an earlier plan ends.
        times = {t for t, _, _ in ready}
        times.update(e for held in binding.values() for _, e in held if e < math.inf)
        for at in sorted(t for t in times if t >= self.clock.now):
            free = [
                node
                for t, _, node in ready
                if t <= at
                and not any(s < at + length and at < e for s, e in binding.get(node.idx, ()))
            ]
            if len(free) >= job.nodes:
                return at, free[: job.nodes]
        return None

    def _ready_times(
        self, job: Job, cores_pn: int, nodes: Iterable[Node]
    ) -> list[tuple[float, int, Node]]:
        """(when it has the job's room, index, node) for each of ``nodes`` that may host
        the job and will be known to have the room, by time then index."""
        policy = self.policy
        pools = policy.pools.pools(job)
        out = []
        for node in nodes:
            if node.pool not in pools:
                continue
            if policy.filters and not policy.allows(job, node, cores_pn):
                continue
            t = self.reservations.available_at(node, job, cores_pn)
            if t is not None and t < math.inf:
                out.append((t, node.idx, node))
        if self._slurm_windows and out:
            out = self._in_batches(out, pools)
        out.sort(key=_start_of_ready)
        return out

    def _in_batches(
        self, ready: list[tuple[float, int, Node]], pools: tuple[str, ...]
    ) -> list[tuple[float, int, Node]]:
        """Each later ready time moved to the end of its batch of running-job ends
        (``batch_ends``), over the running jobs on the nodes the job may use."""
        end_of = self.policy.estimates.end_of
        now = self.clock.now
        ends = sorted(
            e
            for node in self.book.nodes.values()
            if node.pool in pools
            for j in node.jobs
            if (e := end_of(j, now)) < math.inf
        )
        bounds = batch_ends(ends)
        out = []
        for t, idx, node in ready:
            if t > now:
                k = bisect_left(bounds, t)
                t = bounds[k] if k < len(bounds) else t
            out.append((t, idx, node))
        return out

    def _after_plans(self, t: float, length: float, held: list[Window] | None, job: Job) -> float:
        """The first start from t at which a run of ``length`` overlaps no plan on the
        node that binds job (plans on one node never overlap: each holds it whole)."""
        if not held:
            return t
        every = self.book.dnn_index is None  # no reclaim: every plan binds every job
        for s, e, owner in held:  # by start
            if s >= t + length:
                break
            if t < e and (every or self.reservations.binds(owner, job)):
                t = e
        return t


class _Ready:
    """One round's ready times for one kind of need, and how many starts they saw."""

    __slots__ = ("times", "seen")

    def __init__(self, times: list[tuple[float, int, Node]], seen: int) -> None:
        self.times = times
        self.seen = seen


def batch_ends(ends: list[float], window: float = 30.0) -> list[float]:
    """The last end of each batch Slurm's will-run test takes running jobs off in
    (select/cons_tres, 22.05), from their sorted expected ends: the first batch runs
    to one window past the ``window`` barrier above the first end, and after each
    batch the window doubles until the next end is inside it."""
    if not ends:
        return []
    out: list[float] = []
    barrier = ends[0] + (window - ends[0] % window)
    k, n = 0, len(ends)
    while k < n:
        while k < n:
            k += 1
            if k >= n or ends[k] > barrier + window:
                break
        out.append(ends[k - 1])
        while k < n and ends[k] > barrier + window:
            window *= 2
    return out


def _start_of(w: Window) -> float:
    return w[0]


def _start_of_ready(r: tuple[float, int, Node]) -> tuple[float, int]:
    return r[0], r[1]
