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

This module is the plugin: samples in, core changes out, the converged watch and what
a finished search teaches. The step rule is core_search.py, a search's state
search_track.py, window statistics window_stats.py, the knobs allocator_config.py
and the per-shape book learned_profiles.py.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from coda.policy.allocator_config import START_POINTS, AllocatorConfig
from coda.policy.core_search import CoreSearch, free_room
from coda.policy.feedback import ThroughputHistory
from coda.policy.framework import Action
from coda.policy.learned_profiles import SCHEMA, LearnedProfiles, Shape
from coda.policy.search_track import Track, pooled_peak
from coda.policy.state import CPU, Job
from coda.policy.window_stats import Level

# Names importers find here (the config, the profile book and the growth rule moved out).
__all__ = [
    "SCHEMA",
    "START_POINTS",
    "AdaptiveAllocator",
    "AllocatorConfig",
    "LearnedProfiles",
    "Shape",
    "free_room",
]


class AdaptiveAllocator(CoreSearch):
    """CoreCount and JobControl plugin: slims each DNN job to its measured optimum."""

    # wants_samples reads only the job's own track, which only its calls move.
    answers_on_calls = True

    def __init__(
        self,
        book: ThroughputHistory,
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
        # Each job's track lives on the job (Job.control_state); this holds only those
        # of jobs whose slot another allocator holds (a job driven by two policies).
        self._tracks: dict[Job, Track] = {}
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
        if job.kind == CPU or not self.config.search or self.config.start == "request":
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
        t = Track(key, recent=deque(maxlen=self.config.shift_windows), owner=self)
        held = job.control_state
        if held is None or self._owns(held):
            job.control_state = t
            if self._tracks:
                self._tracks.pop(job, None)
        else:
            self._tracks[job] = t
        if not self.config.search:
            return self._begin(job, t, "reference")
        if self.config.start in ("paper", "request"):
            return self._begin(job, t, "full")  # searches from its start point, every time
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
        t = self._track(job)
        if t is None:  # a driver that skipped on_start
            self.on_start(job, now)
            t = self._track(job)
            assert t is not None  # on_start just made it
        refused = False
        if t.asked is not None:
            asked, t.asked = t.asked, None
            if job.cores_pn == asked:
                t.level, t.stay, t.settle = asked, 0, self.config.settle_windows
                if asked not in t.obs:
                    t.obs[asked] = Level()
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
        if self._cpu_colocated(job):
            t.contended.add(t.level)
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
        t = self._track(job)
        if t is not None and job.control_state is t:
            job.control_state = None
        elif t is not None:
            del self._tracks[job]
        if t is not None and t.phase != "converged":
            self._n["abandoned"] += 1
        self.book.forget(job)

    def _owns(self, state: object) -> bool:
        return isinstance(state, Track) and state.owner is self

    def _track(self, job: Job) -> Track | None:
        t = job.control_state
        if isinstance(t, Track) and t.owner is self:
            return t
        return self._tracks.get(job) if self._tracks else None

    def wants_samples(self, job: Job) -> bool:
        """While searching or measuring a reference; and while held below its answer
        for want of cores (it counts windows to its next climb)."""
        t = self._track(job)
        return t is not None and (t.phase != "converged" or (t.capped and t.hi > t.level))

    def waiting_for_room(self, job: Job) -> bool:
        """Converged below its answer for want of cores and no free core on its nodes
        to climb into: its windows only count down to a climb that cannot happen yet.
        A driver whose free cores change only with its jobs (the simulator) may stop
        sampling it until they do."""
        t = self._track(job)
        if t is None or t.phase != "converged" or not (t.capped and t.hi > t.level):
            return False
        return free_room(job.placement) == 0

    def on_resize(self, job: Job, now: float) -> list[Action]:
        if job.kind == CPU:
            return []
        t = self._track(job)
        if t is None:
            return self.on_start(job, now)
        t.key = self._key(job)
        self._n["retunes"] += 1
        self._n["resizes"] += 1
        return self._begin(job, t, "resize")

    def state(self, job: Job) -> str:
        t = self._track(job)
        return "idle" if t is None else t.phase

    def explain(self, job: Job) -> dict[str, Any]:
        """Why the job holds its cores: the search's phase and bounds, and the mean
        throughput and windows measured at each core count (JSON-able, for humans)."""
        t = self._track(job)
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
        # Counts as ints (held as floats: a compiled build stores them so), the
        # lost windows rounded.
        out: dict[str, Any] = {
            k: round(v, 3) if k == "lost_windows" else int(v) for k, v in self._n.items()
        }
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

    # ------------------------------------------------ converging and watching
    def _key(self, job: Job) -> Shape:
        return (job.model or "", job.gpus_pn, job.nodes)

    def _finish(self, job: Job, t: Track) -> None:
        ref = t.obs[t.level].mean
        if t.level in t.contended:
            # Measured beside a CPU job: not the speed to judge contention against. The
            # job's own solo speed at this count, if it had one, else the eliminator
            # probes for it (a solo reference, docs/policies.md).
            known = self.book.solo_speed(job, t.level)
            if known is not None:
                self.book.set_reference(job, max(ref, known))
            else:
                self.book.set_reference(job, ref, solo=False)
        else:
            self.book.set_reference(job, ref)
            self.book.learn_solo(job, t.level, ref)
        pool = pooled_peak(t)
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
        learns = self.config.search and self.config.start != "request"
        if t.kind in ("full", "verify", "resize") and not t.limited and learns:
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

    def _watch(self, job: Job, t: Track, x: float) -> list[Action]:
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
        return any(n.cpu_job_cores > 0 or any(j.kind == CPU for j in n.jobs) for n in job.placement)
