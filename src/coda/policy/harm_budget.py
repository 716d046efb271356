"""A bound on how much slower co-location makes any one CPU job: each CPU job's harm
budget, one token bucket per job that every taker of its cores asks first.

Harm is progress a CPU job loses, in seconds at full speed: running throttled or
shrunk at a fraction f of its asked capacity (``cores × quota / cores asked``) costs
``1 − f`` per second; a preemption costs the work back to its last checkpoint, and
every second it then waits requeued costs one. The bucket fills at ``share`` per
second of the job's life from its first start (it starts empty) up to ``cap_s``, and
drains by the harm. Whoever would take more (the eliminator's throttles, a reclaim's
shrink or preemption) asks first: a job with nothing left keeps its cores and quota,
and one that ran dry while throttled goes back to full quota. So, up to one decision
period's overshoot and a requeue's wait, a job's harm over any span of T seconds of
its life is at most ``share × T`` (from its start) and ``cap_s + share × T`` (any
window): it executes at most ``1 / (1 − share)`` times its runtime alone.

The drivers tell it what changes (every body through the same shared code: the
cycle's node book and scheduler, the control loop), so the same state gives the same
answers in every body. Pure: the time is passed in, never read.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from coda.policy.state import Job

_EPS = 1e-9
# A bus share over 1 refuses only a bus oversubscribed that many times: a body that
# reads no bandwidth counters sees none busy (coda replay's twin says so with 1000).
MAX_BUS_SHARE = 1000.0
_TOKENS, _SINCE, _RATE = 0, 1, 2


@dataclass(frozen=True)
class HarmBudgetConfig:
    """``share``: harm a CPU job may bear per second of its life (0.1: by what CODA
    takes, it executes at most 1.11x its runtime alone); ``cap_s``: the most it may
    save up, so no quiet hour is spent in one block; ``restart_s``: what a requeue is
    expected to cost beyond the lost work (its relaunch and wait), asked of its bucket
    before one;
    ``initial_s``: what a CPU job's bucket holds at its first start (0: it may be
    slowed only by what its own run has earned; more loosens the bound on short jobs
    by that many seconds). Where CPU jobs may start: ``bus_share``, no GPU node whose
    memory bus would carry this share of its bandwidth or more with the job's expected
    draw, ``bus_gbps_per_core`` a core, added (BusHeadroom); a job that
    does not give cores back cheaply (not checkpointing, a time limit over ``cap_s``
    or none) only on CPU nodes where one can host it (ArrayPools)."""

    share: float = 0.1
    cap_s: float = 900.0
    restart_s: float = 120.0
    initial_s: float = 0.0
    bus_share: float = 0.7
    bus_gbps_per_core: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.share < 1.0:
            raise ValueError(f"share must be in (0, 1), got {self.share}")
        if not 0.0 <= self.bus_gbps_per_core < MAX_BUS_SHARE:
            raise ValueError(
                f"bus_gbps_per_core must be in [0, {MAX_BUS_SHARE:g}), got {self.bus_gbps_per_core}"
            )
        if not 0.0 < self.bus_share <= MAX_BUS_SHARE:
            raise ValueError(f"bus_share must be in (0, {MAX_BUS_SHARE:g}], got {self.bus_share}")
        for name in ("cap_s", "restart_s", "initial_s"):
            v = getattr(self, name)
            if not 0.0 <= v < float("inf"):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {v}")


class HarmBudget:
    """Each CPU job's bucket: [tokens at ``since``, since, harm rate since then]."""

    def __init__(self, config: HarmBudgetConfig | None = None, checkpoint_s: float = 600.0) -> None:
        self.config = config or HarmBudgetConfig()
        self.checkpoint_s = checkpoint_s  # a requeue loses at most this much work
        self.now = 0.0  # the latest time a driver said (decisions are taken at it)
        # When a job's bucket next allows what it did not (a shrink, a preemption): the
        # cores it may give grow without any event on its nodes, so the scheduler is
        # told to look at them again (take_flipped). (time, sequence, job)
        self._flips: list[tuple[float, int, Job]] = []
        self._seq = 0
        self._latest: dict[Job, int] = {}  # each job's live entry (older ones are stale)
        self._jobs: dict[Job, list[float]] = {}
        self._off: list[Job] = []  # off their nodes: finished unless requeued by now
        # CPU jobs on fewer cores than they asked: given cores back as they free up.
        self.shrunk: dict[Job, None] = {}
        # Jobs given their quota back dry (the eliminator) and cores back (the cycle).
        self.counts = dict.fromkeys(("ran_dry", "regrown"), 0)

    # ------------------------------------------------------------ what changed
    def advance(self, now: float) -> None:
        """The driver's time moved on; jobs that left their nodes without a requeue
        since have finished."""
        if now > self.now:
            self.now = now
        if self._off:
            for job in self._off:
                acct = self._jobs.get(job)
                if acct is not None and acct[_RATE] == 0.0 and not job.running:
                    self.forget(job)
            self._off = []

    def started(self, job: Job, now: float) -> None:
        """A CPU job was placed (first start, or again after a requeue), or found running
        (a restarted body): its life counts from its start."""
        if job.is_dnn:
            return
        self.advance(now)
        if job not in self._jobs:
            lived = max(0.0, self.now - job.start) if job.start >= 0 else 0.0
            earned = min(self.config.cap_s, self.config.share * lived)
            self._jobs[job] = [self.config.initial_s + earned, self.now, 0.0]
        self.changed(job)

    def changed(self, job: Job) -> None:
        """A CPU job's cores or quota changed (or may have): harm from now on at its
        new rate."""
        acct = self._jobs.get(job)
        if acct is None:
            return
        self._settle(acct)
        acct[_RATE] = self._rate(job)
        if job.running and job.cores_pn < job.cores_pn_req:
            self.shrunk[job] = None
        else:
            self.shrunk.pop(job, None)
        self._schedule(job, acct)

    def stopped(self, job: Job, now: float) -> None:
        """A CPU job left its nodes: finished, unless a requeue follows."""
        acct = self._jobs.get(job)
        if acct is None:
            return
        self.advance(now)
        self._settle(acct)
        acct[_RATE] = 0.0
        self.shrunk.pop(job, None)
        self._off.append(job)

    def requeued(self, job: Job) -> None:
        """A CPU job was preempted and queued again (before its start is cleared): its
        lost work is harm, and so is every second it waits."""
        acct = self._jobs.get(job)
        if acct is None:
            return
        self._settle(acct)
        acct[_TOKENS] -= self.lost(job)
        acct[_RATE] = 1.0

    def due(self) -> bool:
        """Some job's bucket may allow more by now (take_flipped says whose)."""
        return self.next_due() <= self.now

    def next_due(self) -> float:
        """When some job's bucket next allows more (inf: none will)."""
        flips = self._flips
        while flips and self._latest.get(flips[0][2]) != flips[0][1]:
            heapq.heappop(flips)  # stale
        return flips[0][0] if flips else math.inf

    def take_flipped(self) -> list[Job]:
        """Running CPU jobs whose bucket may allow a shrink or preemption it did not
        before (their nodes are worth another look); each is scheduled again."""
        out: list[Job] = []
        while self._flips and self._flips[0][0] <= self.now:
            _, seq, job = heapq.heappop(self._flips)
            if self._latest.get(job) != seq:
                continue  # stale: the job changed since it was pushed
            acct = self._jobs.get(job)
            if acct is not None and job.running:
                out.append(job)
                self._schedule(job, acct)
            else:
                self._latest.pop(job, None)
        return out

    # ------------------------------------------------------------ what it allows
    def left(self, job: Job) -> float:
        """Harm-seconds the job may still bear now (0 for a job never seen started)."""
        acct = self._jobs.get(job)
        if acct is None:
            return 0.0
        return self._tokens_at(acct, self.now)

    def may_slow(self, job: Job, for_s: float = 0.0) -> bool:
        """Whether a throttle or shrink may be asked of the job now (and, with ``for_s``,
        kept up that long at the most harm: one second a second)."""
        return job.is_dnn or self.left(job) > max(_EPS, for_s)

    def lost(self, job: Job) -> float:
        """The work a requeue now would lose: its run since its start, at most one
        checkpoint interval where the job checkpoints."""
        if job.start < 0:
            return 0.0
        return min(self._every(job), max(0.0, self.now - job.start))

    def _every(self, job: Job) -> float:
        """How far back a requeue of the job may throw its work."""
        return self.checkpoint_s if job.checkpoints else math.inf

    def may_preempt(self, job: Job) -> bool:
        """Whether the job's bucket covers a requeue now: the work it loses and its
        restart."""
        return self.left(job) >= self.lost(job) + self.config.restart_s

    def dry(self, job: Job) -> bool:
        """Ran dry while still being slowed: it must get its quota back."""
        acct = self._jobs.get(job)
        return acct is not None and acct[_RATE] > 0.0 and self.left(job) <= _EPS

    def forget(self, job: Job) -> None:
        self._jobs.pop(job, None)
        self.shrunk.pop(job, None)
        self._latest.pop(job, None)

    def stats(self) -> dict[str, int]:
        return {**self.counts, "tracked": len(self._jobs), "shrunk_now": len(self.shrunk)}

    # ------------------------------------------------------------ the bucket
    def _tokens_at(self, acct: list[float], t: float) -> float:
        dt = max(0.0, t - acct[_SINCE])
        net = self.config.share - acct[_RATE]
        tokens = acct[_TOKENS] + net * dt
        if net > 0.0:
            tokens = min(max(acct[_TOKENS], self.config.cap_s), tokens)
        return tokens

    def _schedule(self, job: Job, acct: list[float]) -> None:
        """Push when the job's bucket next allows a shrink or a preemption it does not
        allow just before (nothing if that never comes at its present rate); an entry
        pushed earlier for the job is stale from now on."""
        self._seq += 1
        self._latest[job] = self._seq
        t = self._flip_time(job, acct)
        if t < math.inf:
            heapq.heappush(self._flips, (max(t, self.now + 1e-6), self._seq, job))

    def _flip_time(self, job: Job, acct: list[float]) -> float:
        """The first time after now at which a shrink (a bucket above 0) or a preemption
        (a bucket covering the work lost and the restart) goes from refused to allowed.
        Both sides are piecewise linear in time: the bucket fills at ``share − rate`` up
        to its cap, the work lost grows at 1 up to one checkpoint interval; so is their
        gap, walked segment by segment. A draining bucket allows less and less."""
        cfg = self.config
        net = cfg.share - acct[_RATE]
        if not job.running or net <= 0.0:
            return math.inf
        t0, tokens0 = acct[_SINCE], acct[_TOKENS]
        cap = max(tokens0, cfg.cap_s)
        t_cap = t0 + (cap - tokens0) / net
        start = job.start if job.start >= 0 else self.now
        every = self._every(job)
        t_ckpt = start + every

        def tokens(t: float) -> float:
            return min(cap, tokens0 + net * (t - t0))

        def gap(t: float) -> float:  # >= 0: a preemption is allowed at t
            return tokens(t) - min(every, max(0.0, t - start)) - cfg.restart_s

        best = math.inf
        if tokens(self.now) <= _EPS:  # a shrink: once the bucket is above 0
            best = t0 + (_EPS - tokens0) / net
        points = sorted({self.now, *(b for b in (t_cap, t_ckpt) if self.now < b < math.inf)})
        points.append(math.inf)
        refused = gap(self.now) < 0.0
        for a, b in zip(points, points[1:], strict=False):
            slope = (net if a < t_cap else 0.0) - (1.0 if start <= a < t_ckpt else 0.0)
            g = gap(a)
            if refused and g >= 0.0 and a > self.now:
                return min(best, a)
            if g < 0.0:
                refused = True
                if slope > 0.0 and a - g / slope <= b:
                    return min(best, a - g / slope)
            elif slope < 0.0 and a + g / -slope < b:
                refused = True  # allowed now, refused from then: the rise comes after
        return best

    def _settle(self, acct: list[float]) -> None:
        acct[_TOKENS] = self._tokens_at(acct, self.now)
        acct[_SINCE] = self.now

    @staticmethod
    def _rate(job: Job) -> float:
        if not job.running:
            return 0.0
        return max(0.0, 1.0 - min(1.0, job.cores_pn * job.quota / max(1, job.cores_pn_req)))
