"""The adaptive CPU allocator ("slimming"): an online search per DNN training job
for the smallest core count per node whose throughput is within a tolerance of
the job's peak.

It sees only throughput samples (one per measurement window, noisy, in the job's
own units), never the job's performance model. A search measures the level the
job started at, probes upward while throughput still rises by more than the
tolerance, then binary-searches downward between the largest level known to be
below tolerance (``lo``) and the smallest known to be at peak (``hi``). Each
comparison is a sequential test: it decides once the gap to the threshold
exceeds ``z`` standard errors, or by the means after ``max_windows`` windows.
What converged jobs settle on is learned per (model, GPUs per node, nodes)
shape, so later jobs of a shape start there and, once the shape is trusted, only
measure their reference. Converged jobs keep their cores until GPUs change or
throughput shifts persistently (not explained by co-located CPU jobs).

Against noise: the noise is estimated from the job's own windows (Student-t
margins while that rests on few windows, wider margins on early looks); the peak
is the pool of every level not judged short, not the best-looking one; and before
settling, lo - 1 must be short too, so one wrong "short" verdict costs at most one
core. Sizing: an at-peak level sits ``tolerance / noise`` window-stds above the
threshold, so the defaults suit per-window noise of a few %; at 10% use about
``max_windows=48, peak_windows=24`` (see tests/test_allocator.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coda.policy.feedback import ThroughputBook
from coda.policy.framework import Action, SetCores
from coda.policy.state import CPU, Job, Node

SCHEMA = "coda-learned-profiles/1"
START_POINTS = ("learned", "paper")
Shape = tuple[str, int, int]  # (model, GPUs per node, nodes)

# Two-sided 97.5% Student-t quantiles by degrees of freedom (index = dof). The
# noise is estimated from the windows themselves, so with few windows the margin
# widens: an estimate that is small by chance must not decide early.
_T975 = (math.inf, 12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def _t_scale(dof: int) -> float:
    if dof < len(_T975):
        return _T975[max(dof, 0)] / 1.96
    return 1.0 + 1.21 / dof  # Cornish-Fisher: t ~ z + (z^3 + z) / (4 dof)


# Early looks need more than z standard errors (O'Brien-Fleming-like): checking after
# every window would otherwise call an at-peak level short far more often than z says.
_EARLY_WINDOWS = 8


@dataclass(slots=True)
class _Level:
    """Running sums of the windows measured at one core count."""

    n: int = 0
    s1: float = 0.0
    s2: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        self.s1 += x
        self.s2 += x * x

    @property
    def mean(self) -> float:
        return self.s1 / self.n

    def ss_rel(self) -> float:
        """Sum of squared relative deviations from the mean: sum((x / m - 1)^2)."""
        if self.n < 2 or self.s1 <= 0:
            return 0.0
        m = self.mean
        return max(0.0, self.s2 / (m * m) - self.n)


@dataclass
class AllocatorConfig:
    tolerance: float = 0.05  # "at peak" = throughput >= (1 - tolerance) * peak
    min_windows: int = 2  # windows per probed level before a decision
    max_windows: int = 8  # decide by the mean after this many
    reference_windows: int = 3  # windows to measure the reference at the chosen level
    z: float = 2.0  # decision margin in standard errors
    noise_floor: float = 0.02  # lower bound on the relative std used in decisions
    max_cores: int | None = None  # cap on cores per node when growing (None: node size)
    shift_tolerance: float = 0.15  # persistent change vs reference that triggers a re-tune
    shift_windows: int = 3  # consecutive windows beyond shift_tolerance
    shift_z: float = 3.0  # ... and beyond this many relative stds of the job's noise
    confident_after: int = 3  # converged jobs of a shape before its learned value is trusted
    verify_every: int = 10  # every n-th job of a confident shape still verifies (c-1 / c+1)
    search: bool = True  # False: keep the request, only measure the reference (ablation)
    peak_windows: int = 4  # windows at the best level so far before others are judged by it
    settle_windows: int = 0  # windows discarded after a core change (0: driver cuts at windows)
    cooldown_windows: int = 20  # converged windows before a throughput shift may re-tune
    # Where a job's search starts. "learned": its shape's learned count, capped at its
    # request (ours). "paper": the largest count the same owner's earlier jobs of the
    # model's category settled on, else paper_start[category] (the paper: 3 CV, 5 NLP,
    # 5 speech), else the request; `categories` maps model names to categories.
    start: str = "learned"
    paper_start: dict[str, int] = field(default_factory=lambda: {"cv": 3, "nlp": 5, "speech": 5})
    categories: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.tolerance < 1.0:
            raise ValueError(f"tolerance must be in (0, 1), got {self.tolerance}")
        if not 1 <= self.min_windows <= self.max_windows:
            raise ValueError("need 1 <= min_windows <= max_windows")
        if not 1 <= self.peak_windows <= self.max_windows:
            raise ValueError("need 1 <= peak_windows <= max_windows")
        if self.reference_windows < 1 or self.shift_windows < 1 or self.verify_every < 1:
            raise ValueError("reference_windows, shift_windows and verify_every must be >= 1")
        if self.max_cores is not None and self.max_cores < 1:
            raise ValueError(f"max_cores must be >= 1, got {self.max_cores}")
        if self.z <= 0 or self.noise_floor < 0 or self.shift_tolerance <= 0 or self.shift_z < 0:
            raise ValueError("z and shift_tolerance must be > 0, noise_floor and shift_z >= 0")
        if self.start not in START_POINTS:
            raise ValueError(f"start must be one of {', '.join(START_POINTS)}, got {self.start!r}")
        if any(not _is_int(c) or c < 1 for c in self.paper_start.values()):
            raise ValueError("paper_start core counts must be whole numbers >= 1")


class LearnedProfiles:
    """(model, gpus_per_node, nodes) -> core counts converged jobs settled on."""

    def __init__(self, confident_after: int = 3) -> None:
        self.confident_after = confident_after
        self._seen: dict[Shape, dict[int, int]] = {}  # shape -> {cores: jobs}
        self._median: dict[Shape, int] = {}  # cache: asked for at every placement attempt

    def record(self, key: Shape, cores: int) -> None:
        if int(cores) < 1:
            raise ValueError(f"cores must be >= 1, got {cores}")
        key = _shape(key)
        seen = self._seen.setdefault(key, {})
        seen[int(cores)] = seen.get(int(cores), 0) + 1
        self._median.pop(key, None)

    def count(self, key: Shape) -> int:
        return sum(self._seen.get(_shape(key), {}).values())

    def cores(self, key: Shape) -> int | None:
        """The upper median of the recorded values; None if the shape is unknown."""
        key = _shape(key)
        hit = self._median.get(key)
        if hit is not None:
            return hit
        seen = self._seen.get(key)
        if not seen:
            return None
        i = sum(seen.values()) // 2
        for c in sorted(seen):
            if i < seen[c]:
                self._median[key] = c
                return c
            i -= seen[c]
        raise AssertionError("unreachable")

    def confident(self, key: Shape) -> bool:
        return self.count(key) >= self.confident_after

    def shapes(self) -> dict[Shape, tuple[int, int]]:
        """shape -> (cores, converged jobs)."""
        return {k: (self.cores(k), self.count(k)) for k in self._seen}  # type: ignore[misc]

    def to_dict(self) -> dict[str, Any]:
        profiles = [
            {"model": m, "gpus_per_node": g, "nodes": n, "cores": sorted(seen.items())}
            for (m, g, n), seen in sorted(self._seen.items())
        ]
        return {"schema": SCHEMA, "confident_after": self.confident_after, "profiles": profiles}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LearnedProfiles:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"learned profiles: expected schema {SCHEMA!r}, got {got!r}")
        after = d.get("confident_after", 3)
        profiles = d.get("profiles")
        if not _is_int(after) or after < 1 or not isinstance(profiles, list):
            raise ValueError("learned profiles: need an int confident_after >= 1 and a list")
        out = cls(after)
        for i, p in enumerate(profiles):
            try:
                model, g, n, cores = p["model"], p["gpus_per_node"], p["nodes"], p["cores"]
                ok = isinstance(model, str) and _is_int(g) and _is_int(n) and g >= 0 and n >= 1
                pairs = [(c, k) for c, k in cores]
                ok = ok and all(_is_int(c) and _is_int(k) and c >= 1 and k >= 1 for c, k in pairs)
            except (KeyError, TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"learned profiles: malformed entry {i}: {p!r}")
            out._seen[(model, g, n)] = dict(pairs)
        return out


def free_room(nodes: Sequence[Node]) -> int:
    """Cores a running DNN job on these nodes may grow by: the fewest free cores on
    any of them. Cores CPU jobs hold do not count: they are reclaimed for a DNN job's
    start only, never for a probe or later growth (docs/policies.md). Shared by the
    allocator, the simulator and the node agent so the rule is the same everywhere."""
    return max(0, min((n.free_cores for n in nodes), default=0))


def _noise(t: _Track) -> tuple[float, int]:
    """Relative squared deviations from each level's mean over the job's windows, and dof."""
    ss, dof = t.noise_ss, t.noise_dof
    for lv in t.obs.values():
        if lv.n > 1:
            ss += lv.ss_rel()
            dof += lv.n - 1
    return ss, dof


def _peak(t: _Track, but: int = 0) -> _Level:
    """The peak estimate: all windows at levels not judged short (except level ``but``).

    Pooling every level at peak, rather than taking the best-looking one, keeps the
    estimate from being biased up by selection (which would call at-peak levels short).
    """
    out = _Level()
    for c, lv in t.obs.items():
        if c not in t.below and c != but:
            out.n, out.s1, out.s2 = out.n + lv.n, out.s1 + lv.s1, out.s2 + lv.s2
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(slots=True)
class _Track:
    """One job's search (or converged watch); reset by each new search."""

    key: Shape
    kind: str = "full"  # full | verify | reference | resize | shift-drop | shift-rise
    phase: str = "measuring"
    level: int = 0  # cores the current windows are measured at
    asked: int | None = None  # SetCores awaiting confirmation at the next sample
    settle: int = 0  # windows still to discard
    stay: int = 0  # valid windows since the level last changed
    start: int = 0
    obs: dict[int, _Level] = field(default_factory=dict)
    below: set[int] = field(default_factory=set)  # levels judged below tolerance
    lo: int = 0  # largest level known below tolerance
    hi: int = 0  # smallest level known at peak (0: not yet)
    top: int = 0  # upward probing: the best level so far
    cap: int | None = None  # growth refused above this
    capped: bool = False  # converged below hi for want of free cores
    limited: bool = False  # free cores (or a refusal) bounded the search: learn nothing
    retries: int = 0  # climbs back to hi tried since (backoff)
    counted: dict[str, float] = field(default_factory=dict)  # costs already in stats
    probes: int = 0
    windows: int = 0
    probe_windows: int = 0
    noise_ss: float = 0.0  # relative squared deviations from finished searches ...
    noise_dof: int = 0  # ... and their degrees of freedom
    reference: float = 0.0
    base_sum: float = 0.0  # converged: the baseline shifts are judged against, as a
    base_n: float = 0.0  # running mean refined by unshifted windows (the reference is few)
    since: int = 0  # windows since converging
    run: int = 0  # consecutive shifted windows, signed by direction
    recent: deque[float] = field(default_factory=deque)


class AdaptiveAllocator:
    """CoreCount and JobControl plugin: slims each DNN job to its measured optimum."""

    def __init__(
        self,
        book: ThroughputBook,
        config: AllocatorConfig | None = None,
        learned: LearnedProfiles | None = None,
    ) -> None:
        self.book = book
        # Bumped whenever a learned core count changes, so a driver knows that queued
        # jobs may now need fewer (or more) cores than when they last failed to fit.
        self.generation = 0
        self.config = config or AllocatorConfig()
        self.learned = (
            learned if learned is not None else LearnedProfiles(self.config.confident_after)
        )
        self._tracks: dict[Job, _Track] = {}
        # The paper's start point: (owner, category) -> largest count settled on.
        self._owner_max: dict[tuple[str, str], int] = {}
        self._now = 0.0  # the last sample's time (for the time a search takes)
        self._began: dict[Job, float] = {}
        self._settle_s: list[float] = []
        self._starts: dict[Shape, int] = {}  # confident starts per shape (verify_every)
        self._n: dict[str, float] = dict.fromkeys(
            ("searches", "converged", "verifications", "reference_only", "retunes", "resizes",
             "probes", "probe_windows", "windows", "below_windows", "lost_windows",
             "refused", "external", "shifts_ignored", "abandoned"), 0
        )  # fmt: skip

    # ------------------------------------------------------------ CoreCount
    def cores_per_node(self, job: Job) -> int:
        if job.kind == CPU or not self.config.search:
            return job.cores_pn_req
        if self.config.start == "paper":
            return self._paper_start(job)
        learned = self.learned.cores(self._key(job))
        # Never more than asked: a job is slimmed to its shape's optimum, not grown past
        # its own request at start (probes may grow it later, from free cores only).
        return job.cores_pn_req if learned is None else min(learned, job.cores_pn_req)

    def group_key(self, job: Job) -> tuple[Any, ...]:
        # cores_per_node depends on the shape (model, gpus_pn, nodes) and the request;
        # jobs whose answer is the same share a key, so fewer queue buckets.
        if job.kind == CPU or not self.config.search:
            return (job.cores_pn_req,)
        return (job.model, self.cores_per_node(job))

    def _category(self, job: Job) -> str:
        return self.config.categories.get(job.model or "", "")

    def _paper_start(self, job: Job) -> int:
        cat = self._category(job)
        earlier = self._owner_max.get((job.user, cat))
        if earlier is not None:
            return earlier
        first = self.config.paper_start.get(cat)
        cores = job.cores_pn_req if first is None else first
        return cores if self.config.max_cores is None else min(cores, self.config.max_cores)

    # ----------------------------------------------------------- JobControl
    def on_start(self, job: Job, now: float) -> list[Action]:
        if job.kind == CPU:
            return []
        self._began[job] = now
        key = self._key(job)
        t = self._tracks[job] = _Track(key, recent=deque(maxlen=self.config.shift_windows))
        if not self.config.search:
            return self._begin(job, t, "reference")
        if self.config.start == "paper":
            return self._begin(job, t, "full")  # the paper searches from its start point
        n = self.learned.count(key)
        if n >= self.config.confident_after:
            self._starts[key] = self._starts.get(key, 0) + 1
            if self._starts[key] % self.config.verify_every:
                return self._begin(job, t, "reference", target=self.learned.cores(key))
        return self._begin(job, t, "verify" if n else "full")

    def on_sample(self, job: Job, now: float, throughput: float) -> list[Action]:
        if job.kind == CPU:
            return []
        throughput = float(throughput)  # plain floats keep stats() JSON-able
        self._now = now
        t = self._tracks.get(job)
        if t is None:  # a driver that skipped on_start
            self.on_start(job, now)
            t = self._tracks[job]
        refused = False
        if t.asked is not None:
            asked, t.asked = t.asked, None
            if job.cores_pn == asked:
                t.level, t.stay, t.settle = asked, 0, self.config.settle_windows
                if asked not in t.obs:
                    t.obs[asked] = _Level()
                    t.probes += asked != t.start
            else:  # the driver refused: the asked level is out of reach for this search
                refused = True
                self._n["refused"] += 1
                if asked > job.cores_pn:
                    t.cap = job.cores_pn
        if job.cores_pn != t.level:  # changed behind our back: start over from there
            self._n["external"] += 1
            return self._begin(job, t, "full")
        if t.settle > 0:  # straddles a change: describes neither level
            t.settle -= 1
            return []
        self.book.add(job, now, throughput)
        if t.phase == "converged":
            return self._watch(job, t, throughput)
        t.obs[t.level].add(throughput)
        t.stay += 1
        t.windows += 1
        t.probe_windows += t.level != t.start
        if refused:
            if t.phase in ("probing-up", "verifying-up"):  # cannot grow: best is what it holds
                t.hi = t.top
                return self._down(job, t)
            t.capped = t.limited = True
            return self._converge(job, t, t.level)
        return self._step(job, t)

    def on_finish(self, job: Job, now: float) -> None:
        self._began.pop(job, None)
        t = self._tracks.pop(job, None)
        if t is not None and t.phase != "converged":
            self._n["abandoned"] += 1
        self.book.forget(job)

    def wants_samples(self, job: Job) -> bool:
        """While searching or measuring a reference; and while held below its answer
        for want of cores (it counts windows to its next climb)."""
        t = self._tracks.get(job)
        return t is not None and (t.phase != "converged" or (t.capped and t.hi > t.level))

    def waiting_for_room(self, job: Job) -> bool:
        """Converged below its answer for want of cores and no free core on its nodes
        to climb into: its windows only count down to a climb that cannot happen yet.
        A driver whose free cores change only with its jobs (the simulator) may stop
        sampling it until they do."""
        t = self._tracks.get(job)
        if t is None or t.phase != "converged" or not (t.capped and t.hi > t.level):
            return False
        return free_room(job.placement) == 0

    def on_resize(self, job: Job, now: float) -> list[Action]:
        if job.kind == CPU:
            return []
        t = self._tracks.get(job)
        if t is None:
            return self.on_start(job, now)
        t.key = self._key(job)
        self._n["retunes"] += 1
        self._n["resizes"] += 1
        return self._begin(job, t, "resize")

    def state(self, job: Job) -> str:
        t = self._tracks.get(job)
        return "idle" if t is None else t.phase

    def explain(self, job: Job) -> dict[str, Any]:
        """Why the job holds its cores: the search's phase and bounds, and the mean
        throughput and windows measured at each core count (JSON-able, for humans)."""
        t = self._tracks.get(job)
        if t is None:
            return {"phase": "idle"}
        return {
            "phase": t.phase,
            "search": t.kind,
            "level": t.level,
            "lo": t.lo,
            "hi": t.hi,
            "short": sorted(t.below),
            "levels": {c: [round(lv.mean, 4), lv.n] for c, lv in sorted(t.obs.items()) if lv.n},
            "reference": round(t.reference, 4) if t.phase == "converged" else None,
        }

    def stats(self) -> dict[str, Any]:
        """JSON-able counters. searches: all started (incl. reference-only, re-tunes);
        converged; probes: levels measured other than a search's start level, and
        probe_windows at them; windows: all windows of searches; below_windows: at
        levels judged short; lost_windows: throughput lost while searching, in windows
        of full throughput; refused: growth the driver refused; shifts_ignored:
        shifted windows blamed on co-located CPU jobs; learned: shape -> [cores, jobs]."""
        out: dict[str, Any] = {k: round(v, 3) for k, v in self._n.items()}
        done = self._n["converged"]
        out["mean_probes_per_search"] = round(self._n["probes"] / done, 3) if done else 0.0
        out["mean_windows_per_search"] = round(self._n["windows"] / done, 3) if done else 0.0
        settle = sorted(self._settle_s)
        # From a job's start to its first search's end (the paper: 3-4 steps of 90 s).
        out["settle_s_mean"] = round(sum(settle) / len(settle), 1) if settle else None
        out["settle_s_p50"] = settle[len(settle) // 2] if settle else None
        out["start"] = self.config.start
        out["learned"] = {
            f"{m}/{g}g/{n}n": [c, k] for (m, g, n), (c, k) in sorted(self.learned.shapes().items())
        }
        return out

    # ------------------------------------------------------------- search
    def _key(self, job: Job) -> Shape:
        return (job.model or "", job.gpus_pn, job.nodes)

    def _begin(
        self,
        job: Job,
        t: _Track,
        kind: str,
        target: int | None = None,
        seed: list[float] | None = None,
    ) -> list[Action]:
        """Start a search (or a reference measurement) from the cores the job holds."""
        t.noise_ss, t.noise_dof = _noise(t)  # keep what this job's windows say about noise
        # An old reference would mislead the eliminator while the search moves cores.
        self.book.clear_reference(job)
        cur = job.cores_pn
        t.kind, t.phase, t.level, t.start, t.asked = kind, "measuring", cur, cur, None
        t.obs, t.below, t.cap, t.capped, t.limited = {cur: _Level()}, set(), None, False, False
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

    def _step(self, job: Job, t: _Track) -> list[Action]:
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
        verdict, gap = self._compare(t, cur, _peak(t, but=t.level), cur.n)
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

    def _compare(self, t: _Track, low: _Level, high: _Level, k: int) -> tuple[int, float]:
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
        margin = cfg.z * _t_scale(dof) * math.sqrt(max(1.0, _EARLY_WINDOWS / k)) * se
        return (1 if gap > margin else -1 if gap < -margin else 0), gap

    def _rel_std(self, t: _Track) -> tuple[float, int]:
        """Relative std pooled over all the job's search windows, and its dof."""
        ss, dof = _noise(t)
        return max(self.config.noise_floor, math.sqrt(ss / dof) if dof else 0.0), dof

    def _up(self, job: Job, t: _Track, step: int = 0) -> list[Action]:
        want = t.top + (step or max(1, t.top // 2))
        u = min(want, self._max_level(job, t))
        if u < min(want, self._max_level(job, t, room=False)):
            t.limited = True  # short of cores, not of need: what it finds is not the shape's
        if u <= t.top:  # cannot grow: the best level so far is the top
            t.hi = t.top
            return self._down(job, t)
        t.phase = "verifying-up" if step else "probing-up"
        return self._move(job, t, u)

    def _down(self, job: Job, t: _Track, first: int = 0) -> list[Action]:
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

    def _converge(self, job: Job, t: _Track, target: int) -> list[Action]:
        if target > job.cores_pn:
            reach = self._max_level(job, t)
            t.capped = t.capped or reach < target
            t.limited = t.limited or t.capped
            target = min(target, reach)
        t.phase = "reference"
        if target != t.level:
            return self._move(job, t, target)
        return self._step(job, t)

    def _move(self, job: Job, t: _Track, level: int) -> list[Action]:
        t.asked = level
        self.book.clear_samples(job)  # old samples no longer describe the job
        return [SetCores(job, level)]

    def _max_level(self, job: Job, t: _Track, room: bool = True) -> int:
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

    def _finish(self, job: Job, t: _Track) -> None:
        ref = t.obs[t.level].mean
        self.book.set_reference(job, ref)
        pool = _peak(t)
        peak = pool.mean if pool.n and pool.s1 > 0 else max(ref, 1e-12)
        # Throughput lost, in windows of full throughput, from the level means
        # (per-window values would count noise as loss).
        lost = sum(lv.n * max(0.0, 1.0 - lv.mean / peak) for lv in t.obs.values() if lv.n)
        cost = {
            "converged": 1,
            "probes": t.probes,
            "windows": t.windows,
            "probe_windows": t.probe_windows,
            "below_windows": sum(t.obs[c].n for c in t.below),
            "lost_windows": lost,
        }
        for k, v in cost.items():  # a resumed search (climb after refusal) adds its growth
            self._n[k] += v - t.counted.get(k, 0)
        t.counted = cost
        began = self._began.pop(job, None)
        if began is not None:
            self._settle_s.append(round(max(0.0, self._now - began), 1))
        if t.kind in ("full", "verify", "resize") and not t.limited and self.config.search:
            before = self.learned.cores(t.key)
            self.learned.record(t.key, t.level)
            if self.learned.cores(t.key) != before:
                self.generation += 1  # queued jobs of this shape may fit elsewhere now
            if self.config.start == "paper":
                owner = (job.user, self._category(job))
                if t.level > self._owner_max.get(owner, 0):
                    self._owner_max[owner] = t.level
                    self.generation += 1  # this owner's queued jobs start higher now
        t.phase, t.reference, t.since, t.run = "converged", ref, 0, 0
        t.base_sum, t.base_n = t.obs[t.level].s1, float(t.obs[t.level].n)
        t.recent.clear()

    def _watch(self, job: Job, t: _Track, x: float) -> list[Action]:
        """Converged: hold the cores unless throughput shifts persistently."""
        cfg = self.config
        t.since += 1
        t.recent.append(x)
        if t.capped and t.hi > t.level and t.since >= cfg.cooldown_windows << t.retries:
            # Held below hi for want of cores: climb back once there is room, with a
            # doubling back-off so a driver that keeps refusing is asked rarely.
            t.cap = None
            if self._max_level(job, t) > t.level:
                t.retries += 1
                t.capped = False
                if t.kind == "reference":  # trusted learned value: just go there
                    return self._converge(job, t, t.hi)
                return self._down(job, t)  # resume the search where it was cut short
        base = t.base_sum / t.base_n if t.base_n else t.reference
        ratio = x / base if base > 0 else 1.0
        # Noise alone must not look like a shift: the band is at least shift_z stds.
        band = max(cfg.shift_tolerance, cfg.shift_z * self._rel_std(t)[0])
        sign = 1 if ratio > 1 + band else -1 if ratio < 1 - band else 0
        colocated = self._cpu_colocated(job)
        if sign == 0:
            t.run = 0
            if not colocated:  # refine baseline and noise (capped weight: may drift slowly)
                t.base_sum, t.base_n = t.base_sum + x, t.base_n + 1
                if t.base_n > 100:
                    t.base_sum, t.base_n = t.base_sum * 100 / t.base_n, 100.0
                t.noise_ss, t.noise_dof = t.noise_ss + (ratio - 1.0) ** 2, t.noise_dof + 1
            return []
        if colocated:  # contention from CPU jobs is the contention eliminator's business
            t.run = 0
            self._n["shifts_ignored"] += 1
            return []
        t.run = t.run + sign if t.run * sign > 0 else sign
        if abs(t.run) < cfg.shift_windows or t.since < cfg.cooldown_windows:
            return []
        self._n["retunes"] += 1
        seed = list(t.recent)[-cfg.shift_windows :]
        return self._begin(job, t, "shift-rise" if sign > 0 else "shift-drop", seed=seed)

    @staticmethod
    def _cpu_colocated(job: Job) -> bool:
        return any(
            getattr(n, "cpu_job_cores", 0) > 0 or any(j.kind == CPU for j in n.jobs)
            for n in job.placement
        )


def _shape(key: Sequence[Any]) -> Shape:
    """A shape key as a tuple (a JSON round trip makes lists of them)."""
    model, gpus, nodes = key
    return (str(model), int(gpus), int(nodes))
