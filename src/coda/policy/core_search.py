"""The search step rule over core counts: from the windows measured so far, the next
level to measure (probe up, binary-search down, confirm lo - 1) or the one to settle
on, within the cores a job may grow into."""

from __future__ import annotations

import math
from collections.abc import Sequence

from coda.policy.allocator_config import AllocatorConfig
from coda.policy.feedback import ThroughputHistory
from coda.policy.framework import Action, SetCores
from coda.policy.search_track import Track, pooled_noise, pooled_peak
from coda.policy.state import Job, Node
from coda.policy.window_stats import EARLY_WINDOWS, Level, t_scale


def free_room(nodes: Sequence[Node]) -> int:
    """Cores a running DNN job on these nodes may grow by: the fewest free cores on any
    of them, or under fixed grants (Slurm's books) the fewest spare cores, granted but
    outside cpusets (a job never grows past its grant; the Slurm agent keeps the same
    count as its nodes' free cores). Cores CPU jobs hold do not count: they are
    reclaimed for a DNN job's start only, never for a probe or later growth
    (docs/policies.md). Shared by the allocator, the simulator and the node agents so
    the rule is the same everywhere; the driver refuses growth past a job's own grant."""
    return max(
        0, min((n.spare_cores if n.fixed_grants else n.free_cores for n in nodes), default=0)
    )


class CoreSearch:
    """The search half of AdaptiveAllocator (a base class, so no extra call layer):
    starts a search and steps it on each window until it converges."""

    book: ThroughputHistory
    config: AllocatorConfig
    _n: dict[str, float]

    def _begin(
        self,
        job: Job,
        t: Track,
        kind: str,
        target: int | None = None,
        seed: list[float] | None = None,
    ) -> list[Action]:
        """Start a search (or a reference measurement) from the cores the job holds."""
        t.noise_ss, t.noise_dof = pooled_noise(t)  # keep what this job's windows say about noise
        # An old reference would mislead the eliminator while the search moves cores.
        self.book.clear_reference(job)
        cur = job.cores_pn
        t.kind, t.phase, t.level, t.start, t.asked = kind, "measuring", cur, cur, None
        t.obs, t.below, t.cap, t.capped, t.limited = {cur: Level()}, set(), None, False, False
        t.contended = set()
        for x in seed or ():
            t.obs[cur].add(x)
        t.lo = t.hi = t.top = t.retries = 0
        t.counted = {}
        # Seeded windows (a re-tune) were measured at this level already: nothing to settle.
        t.stay, t.settle = len(seed or ()), 0 if seed else self.config.settle_windows
        t.probes = t.windows = t.probe_windows = 0
        self._n["searches"] += 1
        self._n["verifications"] += kind == "verify"
        self._n["reference_only"] += kind == "reference"
        if kind == "reference":
            t.hi = target or cur
            return self._converge(job, t, t.hi)
        return self._step(job, t) if seed else []

    def _step(self, job: Job, t: Track) -> list[Action]:
        cfg = self.config
        if t.phase == "reference":
            if t.stay >= cfg.reference_windows:
                self._finish(job, t)
            return []
        cur = t.obs[t.level]
        if t.phase == "measuring":
            if t.stay < cfg.peak_windows:
                return []
            t.top = t.level
            if t.kind == "verify":
                t.hi = t.level
                return self._down(job, t, first=t.level - 1) if t.level > 1 else self._up(job, t, 1)
            if t.kind == "shift-rise":  # faster than before: fewer cores may do
                t.hi = t.level
                return self._down(job, t)
            return self._up(job, t)  # unknown shape, drop or new GPUs: maybe more cores pay
        if cur.n < cfg.min_windows:
            return []
        if t.phase in ("probing-up", "verifying-up"):
            if t.level == t.top:  # firm up the new best level before comparing against it
                return self._up(job, t) if cur.n >= cfg.peak_windows else []
            verdict, gap = self._compare(t, t.obs[t.top], cur, cur.n)
            if verdict == 0 and cur.n < cfg.max_windows:
                return []
            if verdict < 0:  # clearly better: the old best is below tolerance, go on up
                t.below.add(t.top)
                t.lo, t.top, t.phase = t.top, t.level, "probing-up"
                return self._up(job, t) if cur.n >= cfg.peak_windows else []
            # Not clearly better: the old best is at peak, unless undecided with the
            # mean against it; then the probe is, and lo stays (never set lo on a guess).
            t.hi = t.top if verdict > 0 or gap >= 0 else t.level
            return self._down(job, t)
        verdict, gap = self._compare(t, cur, pooled_peak(t, but=t.level), cur.n)
        if verdict == 0 and cur.n < cfg.max_windows:
            return []
        if verdict > 0 or (verdict == 0 and gap >= 0):
            # At peak. Below a level judged short (a confirmation probe): that verdict
            # was wrong, and so were all at or above this level (throughput is monotone).
            t.hi = t.level
            t.below = {c for c in t.below if c < t.level}
            t.lo = max(t.below, default=0)
        else:
            t.below.add(t.level)
            t.lo = max(t.lo, t.level)
            if t.phase == "verifying-down":  # c-1 is short: does c+1 beat c?
                return self._up(job, t, 1)
        return self._down(job, t)

    def _compare(self, t: Track, low: Level, high: Level, k: int) -> tuple[int, float]:
        """Is ``low`` at peak relative to ``high``? (+1 yes, -1 no, 0 undecided; gap).

        ``k``: windows at the level being measured (the one this look adds to).
        """
        cfg = self.config
        q = 1.0 - cfg.tolerance
        if high.n == 0:  # nothing to judge against (cannot happen in a search): keep it
            return 1, 0.0
        m_low, m_high = low.mean, high.mean
        gap = m_low - q * m_high
        s, dof = self._rel_std(t)
        # Both means are uncertain: the level's and the peak estimate's.
        se = s * math.sqrt(m_low**2 / low.n + (q * m_high) ** 2 / high.n)
        margin = cfg.z * t_scale(dof) * math.sqrt(max(1.0, EARLY_WINDOWS / k)) * se
        return (1 if gap > margin else -1 if gap < -margin else 0), gap

    def _rel_std(self, t: Track) -> tuple[float, int]:
        """Relative std pooled over all the job's search windows, and its dof."""
        ss, dof = pooled_noise(t)
        return max(self.config.noise_floor, math.sqrt(ss / dof) if dof else 0.0), dof

    def _up(self, job: Job, t: Track, step: int = 0) -> list[Action]:
        want = t.top + (step or max(1, t.top // 2))
        u = min(want, self._max_level(job, t))
        if u < min(want, self._max_level(job, t, room=False)):
            t.limited = True  # short of cores, not of need: what it finds is not the shape's
        if u <= t.top:  # cannot grow: the best level so far is the top
            t.hi = t.top
            return self._down(job, t)
        t.phase = "verifying-up" if step else "probing-up"
        return self._move(job, t, u)

    def _down(self, job: Job, t: Track, first: int = 0) -> list[Action]:
        t.phase = "verifying-down" if first else "probing-down"
        if first:
            return self._move(job, t, first)
        if t.hi - t.lo > 1:
            mid = (t.lo + t.hi) // 2
            if mid > self._max_level(job, t):  # the cores it gave up went to others
                t.capped = t.limited = True
                return self._converge(job, t, t.level)
            return self._move(job, t, mid)
        # Before settling on hi, make sure lo - 1 is short too. A single wrong "short"
        # verdict at lo (an at-peak level is only tolerance away from the threshold)
        # would otherwise leave the answer anywhere below; with it, one error costs
        # at most one core. A verification trusts the learned value for this.
        if (
            t.lo >= 2
            and t.lo - 1 not in t.below
            and not (t.kind == "verify" and t.lo == t.start - 1)
        ):
            return self._move(job, t, t.lo - 1)
        return self._converge(job, t, t.hi)

    def _converge(self, job: Job, t: Track, target: int) -> list[Action]:
        if target > job.cores_pn:
            reach = self._max_level(job, t)
            t.capped = t.capped or reach < target
            t.limited = t.limited or t.capped
            target = min(target, reach)
        t.phase = "reference"
        if target != t.level:
            return self._move(job, t, target)
        return self._step(job, t)

    def _move(self, job: Job, t: Track, level: int) -> list[Action]:
        t.asked = level
        self.book.clear_samples(job)  # old samples no longer describe the job
        return [SetCores(job, level)]

    def _max_level(self, job: Job, t: Track, room: bool = True) -> int:
        """The most cores per node the job may grow to now (never below what it holds);
        ``room=False``: ignoring free cores and refusals (node size, max_cores only)."""
        nodes = job.placement
        limit = min((n.cores for n in nodes), default=job.cores_pn)
        if self.config.max_cores is not None:
            limit = min(limit, self.config.max_cores)
        if room:
            # Free cores only: cores CPU jobs hold are never room for a probe.
            limit = min(limit, job.cores_pn + free_room(nodes))
            limit = limit if t.cap is None else min(limit, t.cap)
        return max(job.cores_pn, limit)

    def _finish(self, job: Job, t: Track) -> None:
        """Converged: take the reference and learn (the allocator's part)."""
        raise NotImplementedError
