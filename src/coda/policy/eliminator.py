"""The real-time contention eliminator: a periodic controller per GPU node.

Signal: each training job's recent throughput against its own reference (set by
the allocator once the job's cores converged), plus the node's memory-bandwidth
share where the node reports one. Action: throttle the node's CPU jobs through
their CPU quota. The loop follows Heracles, PARTIES and Crane (docs/reference.md):

- cut fast, grow slowly: a severe drop sends every CPU job to ``min_quota`` in
  one tick; otherwise the heaviest bandwidth users step down by ``step_down``;
  quotas come back by ``step_up`` only after ``restore_ticks`` healthy ticks in
  a row and ``cooldown_s`` after the last throttle;
- hysteresis: "degraded" and "healthy" are separate thresholds; in between the
  controller holds. A drop must also stand out of the job's own sample noise;
- every throttle is judged: if the worst ratio has not improved by
  ``improve_min`` after ``revert_ticks`` ticks, the step goes back (the whole
  chain of steps, if the chain did not help either) and the node backs off:
  the slowdown comes from elsewhere, e.g. two PCIe-heavy training jobs;
- degradation at a level a restore set undoes that restore and doubles the
  healthy ticks needed to reach that level again (lower levels come back at the
  base pace), so a level just too high is probed ever more rarely instead of
  oscillated around; a probe that holds resets the pace;
- a solo reference: a training job's reference measured beside a CPU job (the
  co-runner came first) would hide that co-runner's contention for the job's whole
  life. Before judging such a job, a *solo probe* holds the node's CPU jobs at
  ``min_quota`` for the job's next ``window`` samples (at most ``probe_ticks``
  ticks, once per reference, counted), takes the better of the two speeds as the
  reference and puts the quotas back. The allocator re-measures the reference when
  the job's cores change, and a job's earlier solo speed at a count is reused;
- a bounded cost per victim: a training job's throughput is its own claim (its
  progress records), which a job can forge. Where the node reports its memory
  bandwidth, the counters must agree (the gate) before any throttle. Where it does
  not, a CPU job sharing the node with another user's training job may lose at
  most ``victim_share`` of its core-time to quotas below 1, from an allowance that
  refills at that rate and holds at most ``victim_grace_core_s`` (so at most that
  share since the eliminator first saw it plus the grace, and never a long quiet
  spell's banked allowance in one block); a job whose allowance runs out goes back to
  full quota and is not throttled again until it refills (``budget_release``). A
  user's training job may cost that user's own CPU jobs without bound;
- a bound on every CPU job (the policy's harm budget, coda.policy.harm_budget, where
  it keeps one): a job whose bucket is dry is not throttled, and one that runs dry
  while throttled goes back to full quota (``dry_release``), whoever's job it is and
  whatever counters the node has.

Pure decision code: samples come from the ThroughputHistory, time from the caller.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from coda.policy.feedback import ThroughputHistory
from coda.policy.framework import Action, SetQuota
from coda.policy.harm_budget import HarmBudget
from coda.policy.state import CPU, DNN, Job, Node

_EPS = 1e-9


@dataclass
class EliminatorConfig:
    period_s: float = 10.0
    window: int = 2  # recent samples averaged per DNN job (only those after the last action)
    drop_tolerance: float = 0.05  # degraded: some ratio recent/reference < 1 - drop_tolerance
    healthy_tolerance: float = 0.025  # healthy: every ratio >= 1 - healthy_tolerance
    severe_drop: float = 0.20  # fast path: ratio < 1 - severe_drop -> CPU jobs to min_quota
    bw_high: float = 0.85  # bandwidth share that counts as saturated (early warning)
    # The paper's trigger: throttle only once the node passes this share of its memory
    # bandwidth (where the node reports it): below it, a training job's drop comes from
    # elsewhere (its own co-located training jobs, PCIe) and throttling only slows CPU jobs.
    bw_gate: float = 0.75
    step_down: float = 0.25  # quota decrease per step (absolute)
    min_quota: float = 0.1
    step_up: float = 0.1  # quota increase per restore step
    restore_ticks: int = 3  # consecutive healthy ticks before a restore step
    cooldown_s: float = 30.0  # no restore within this long after a throttle
    revert_ticks: int = 3  # ticks after a throttle to judge whether it helped
    improve_min: float = 0.02  # ratio gain that counts as "it helped"
    backoff_s: float = 300.0  # after a revert, no throttle here unless the signal worsens
    # Beyond the core knobs:
    noise_z: float = 2.0  # a drop must exceed this many standard errors of sample noise
    heavy_share: float = 0.5  # a step throttles the heaviest CPU jobs drawing this bw share
    max_restore_ticks: int = 192  # cap on the doubled healthy-tick requirement
    max_backoff_doublings: int = 3  # repeated reverts back off up to 2**this x backoff_s
    calm_s: float = 600.0  # forget a node this long after its last action once all is restored
    history: int = 1000  # decisions kept for display
    # Without bandwidth counters, what a CPU job may lose to throttles: this share of its
    # core-time, from an allowance that holds at most the grace (core-seconds).
    victim_share: float = 0.5
    victim_grace_core_s: float = 60.0
    # A solo probe lasts at most this many ticks (0: no probes; references taken beside
    # a CPU job are then trusted as they are).
    probe_ticks: int = 6

    def __post_init__(self) -> None:
        fractions = ("drop_tolerance", "healthy_tolerance", "severe_drop", "bw_high", "bw_gate",
                     "step_down", "min_quota", "step_up", "improve_min", "heavy_share",
                     "victim_share")  # fmt: skip
        for name in fractions:
            v = getattr(self, name)
            if not 0.0 < v <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {v}")
        counts = ("window", "restore_ticks", "revert_ticks", "max_restore_ticks", "history")
        for name in counts:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.victim_grace_core_s < math.inf:
            raise ValueError(f"victim_grace_core_s must be >= 0, got {self.victim_grace_core_s}")
        if self.probe_ticks < 0:
            raise ValueError(f"probe_ticks must be >= 0, got {self.probe_ticks}")
        if self.period_s <= 0 or min(self.cooldown_s, self.backoff_s, self.calm_s) < 0:
            raise ValueError("period_s must be > 0; cooldown_s, backoff_s, calm_s >= 0")
        if self.healthy_tolerance > self.drop_tolerance:
            raise ValueError("healthy_tolerance must not exceed drop_tolerance (hysteresis)")


@dataclass(slots=True)
class _Signal:
    """The worst training job's numbers on a node (ratios to reference)."""

    mean: float | None  # window mean; None while some job's window is not full
    partial: float  # mean over whatever fresh samples there are
    upper: float  # mean plus its noise margin: "degraded" is judged on it
    since: float  # mean over every sample since the last action: judges a throttle
    base: float  # the level before acting, as well as noise lets us tell
    severe: bool
    share: float | None  # node bandwidth share, None when the node does not report it


@dataclass(slots=True)
class _Judgement:
    before: float  # worst ratio when the throttle (chain) began
    prior: dict[Job, float]  # quotas before it: what a revert puts back
    ticks: int = 0  # ticks with fresh samples since


@dataclass(slots=True)
class _Probe:
    """A solo probe under way: the node's CPU jobs held low while its training jobs'
    solo speeds are measured."""

    refs: dict[Job, float]  # training jobs probed -> their reference when it began
    prior: dict[Job, float]  # CPU job quotas before it: what its end puts back
    ticks: int = 0


@dataclass(slots=True)
class _NodeState:
    restore_need: int  # healthy ticks a restore needs to reach a level that relapsed
    last_action: str = ""
    last_action_t: float = -math.inf  # samples at or before this are stale
    last_throttle_t: float = -math.inf
    cpu_at_action: frozenset[int] = frozenset()  # CPU job idx present at the last action
    healthy_run: int = 0
    held: dict[Job, None] = field(default_factory=dict)  # CPU jobs this node throttled
    undo: dict[Job, float] = field(default_factory=dict)  # quotas before the last restore
    bad: dict[Job, float] = field(default_factory=dict)  # quota levels that relapsed
    pending: _Judgement | None = None  # the last throttle step, not judged yet
    chain: _Judgement | None = None  # consecutive throttle steps of this episode
    backoff_until: float = -math.inf
    backoff_level: float = 0.0
    reverts_in_row: int = 0
    probe: _Probe | None = None  # a solo probe under way


def _counted(node: Node) -> bool:
    """The node's bandwidth is known job by job (the simulator's model): its gates and
    the bus's share may steer throttles. A node agent's counters give only the node's
    total, training jobs' own traffic in it: there the training jobs' throughput decides,
    under the victim budget, as on a node without counters."""
    return node.bw_gbps > 0 and node.bw_per_job


def _noise(ratios: list[float]) -> float:
    """Std of one sample from the median successive difference: robust to the
    level shifts actions cause. 0 until there are enough samples."""
    if len(ratios) < 4:
        return 0.0
    diffs = sorted(abs(b - a) for a, b in zip(ratios, ratios[1:], strict=False))
    n = len(diffs)
    med = diffs[n // 2] if n % 2 else 0.5 * (diffs[n // 2 - 1] + diffs[n // 2])
    return med / 0.9539  # median |N(0, 2 s^2)| = 0.6745 * sqrt(2) * s


class ContentionEliminator:
    """Throttles co-located CPU jobs while training jobs run slower than their reference."""

    def __init__(
        self,
        book: ThroughputHistory,
        config: EliminatorConfig | None = None,
        harm: HarmBudget | None = None,
    ) -> None:
        self.book = book
        self.config = config or EliminatorConfig()
        self.harm = harm
        self.period_s = self.config.period_s
        self.decisions: deque[dict[str, Any]] = deque(maxlen=self.config.history)
        self._nodes: dict[Node, _NodeState] = {}
        self._holders: dict[Job, set[Node]] = {}  # nodes holding each throttled job low
        self._dormant: set[Node] = set()  # left unwatched below the gate: fresh samples next
        # CPU jobs on nodes without bandwidth counters: [first seen, core-s lost, last tick]
        self._cost: dict[Job, list[float]] = {}
        self._counts = dict.fromkeys(
            ("ticks", "throttle_steps", "fast_paths", "restores", "reverts", "relapses"), 0
        )
        self._counts["releases"] = 0
        self._counts["gate_releases"] = 0
        # Solo probes: started, ticks they held CPU jobs low (their cost), and those
        # that ended without a sample (the reference is then kept as it was).
        self._counts["solo_probes"] = 0
        self._counts["probe_ticks"] = 0
        self._counts["probe_timeouts"] = 0
        self._counts["budget_releases"] = 0
        self._counts["dry_releases"] = 0  # CPU jobs whose harm budget ran dry

    # ------------------------------------------------------------- protocol
    def watching(self, node: Node) -> bool:
        has_dnn = has_cpu = throttled = False
        for j in node.jobs:
            if j.kind == DNN:
                has_dnn = True
            elif j.kind == CPU:
                has_cpu = True
                throttled = throttled or j.quota < 1.0 - _EPS
        if not has_cpu:
            self.forget_node(node)  # nothing left to control: free its state now
            return False
        st = self._nodes.get(node)
        if st is None and not throttled and self._below_gate(node):
            self._dormant.add(node)  # watched again later: from fresh samples
            return False  # nothing may start here (its DNN jobs need no samples for it)
        return has_dnn or throttled or (st is not None and st.pending is not None)

    def at_rest(self, node: Node) -> bool:
        """Nothing to follow up on this node: no state kept (nothing held low, no
        throttle being judged, no back-off, calm since the last action) and no CPU
        job throttled. A driver whose speeds change only with the node's jobs (the
        simulator) may stop ticking such a node until they change.

        Also at rest: holding CPU jobs low after its restores backed off to the
        slowest pace (``max_restore_ticks``) and relapsed, nothing being judged. With
        the node unchanged the next restore would only relapse again. And: nothing
        held after a revert, nothing being judged."""
        st = self._nodes.get(node)
        if self.harm is not None and any(j.kind == CPU and j.quota < 1.0 - _EPS for j in node.jobs):
            return False  # a CPU job held low may run dry: its bucket must be watched
        if self._probe_due(node):
            return False  # a training job's reference waits for its solo probe
        if not _counted(node) and self._billed(node):
            return False  # a CPU job held low is billed: its allowance must be watched
        if st is None:
            return all(j.quota >= 1.0 - _EPS for j in node.jobs if j.kind == CPU)
        if st.pending is not None or st.chain is not None or st.probe is not None:
            return False
        if st.last_action == "revert":
            # Its throttles were reverted and nothing is held: with the node unchanged,
            # the next try (after the back-off) would only be reverted too.
            return all(j.quota >= 1.0 - _EPS for j in node.jobs if j.kind == CPU)
        return st.last_action == "relapse" and st.restore_need >= self.config.max_restore_ticks

    def control(self, node: Node, now: float) -> list[Action]:
        self._counts["ticks"] += 1
        st = self._nodes.get(node)
        if st is not None:
            self._prune(node, st)
        cpu = [j for j in node.jobs if j.kind == CPU]
        if not cpu:
            self.forget_node(node)
            return []
        if not any(j.kind == DNN for j in node.jobs):
            # Nothing left to protect: every CPU job gets its share back at once.
            acts: list[Action] = [
                SetQuota(j, 1.0) for j in cpu if j.quota < 1.0 - _EPS and self._only(j, node)
            ]
            self.forget_node(node)
            if acts:
                self._counts["releases"] += 1
                self._log(now, node, "release", acts, {})
            return acts
        if st is None:
            if all(j.quota >= 1.0 - _EPS for j in cpu) and self._below_gate(node):
                self._dormant.add(node)  # its samples may stop (watching says no)
                return []  # nothing held, nothing may start below the gate: no state to keep
            st = self._nodes[node] = _NodeState(self.config.restore_ticks)
            if node in self._dormant:
                # Not watched while below the gate: a driver may not have sampled its
                # training jobs, and what it did sample describes the node as it was.
                self._dormant.discard(node)
                st.last_action_t = now
        for j in cpu:  # throttled by nobody we know (a forgotten state): adopt it
            if j.quota < 1.0 - _EPS and j not in self._holders:
                self._hold(node, st, j)
        if self.harm is not None:
            # Jobs whose harm budget is dry are not the eliminator's to slow: those held
            # low go back to full quota. A job at full quota is throttled only if its
            # bucket covers a whole period at the floor (else each throttle would cost
            # a period for a moment's earnings, and the bound would slip by that much
            # every time); the rest are left out of every decision.
            harm = self.harm
            dry = [j for j in cpu if not harm.may_slow(j)]
            released = self._dry_release(node, st, now, dry) if dry else []
            tick = self.period_s
            cpu = [
                j for j in cpu
                if harm.may_slow(j) and (j.quota < 1.0 - _EPS or harm.may_slow(j, tick))
            ]  # fmt: skip
            if released or not cpu:
                return released
        if not _counted(node):
            # Nothing the training jobs cannot forge agrees: what another user's claim
            # may cost each CPU job is bounded.
            spent = self._charge(node, cpu, now)
            if spent:
                released = self._budget_release(node, st, now, spent)
                cpu = [j for j in cpu if j not in spent]
                if released or not cpu:
                    return released
        if st.held and self._below_gate_at_full(node, st):
            return self._gate_release(node, st, now)
        if st.probe is not None:
            return self._probe_step(node, st, now, cpu)
        if self._probe_due(node):
            # A reference taken beside a CPU job cannot judge an open throttle either (its
            # job is left out of the signal): the probe's quotas go back to where they are
            # now, and the judgement starts over from its samples.
            st.pending = st.chain = None
            return self._probe_start(node, st, now, cpu)
        sig = self._signal(node, st)
        acts = self._decide(node, st, now, sig, cpu) if sig is not None else []
        if self._idle(node, st, now):
            self.forget_node(node)
        return acts

    def forget_node(self, node: Node) -> None:
        """Drop a node's state (the driver may call this when a node goes away)."""
        self._dormant.discard(node)
        st = self._nodes.pop(node, None)
        if st is not None:
            for j in list(st.held):
                self._unhold(node, st, j)

    def forget_job(self, job: Job) -> None:
        """Drop every reference to a job (optional: each tick prunes departed jobs too)."""
        self._cost.pop(job, None)
        for node in self._holders.pop(job, set()):
            st = self._nodes.get(node)
            if st is not None:
                self._strip(st, job)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self._counts)
        out["nodes_throttled_now"] = sum(
            any(j.quota < 1.0 - _EPS for j in st.held) for st in self._nodes.values()
        )
        out["nodes_tracked"] = len(self._nodes)
        return out

    # ------------------------------------------------------------- signal
    def _signal(self, node: Node, st: _NodeState) -> _Signal | None:
        cfg = self.config
        means, uppers, longs, bases = [], [], [], []
        full, severe = True, False
        for j in node.jobs:
            if j.kind != DNN:
                continue
            ref = self.book.reference(j)
            if not ref or ref <= 0:
                continue  # no reference yet: nothing to compare against
            if self.config.probe_ticks and not self.book.reference_solo(j):
                continue  # taken beside a CPU job: judged once a probe has set it
            samples = self.book.samples(j)
            kept = [v / ref for t, v in samples if t > st.last_action_t]
            if not kept:
                continue
            fresh = kept[-cfg.window :]
            nw, nl = len(fresh), len(kept)
            mean, long = sum(fresh) / nw, sum(kept) / nl
            full = full and nw >= cfg.window
            # A drop counts only once it stands out of the job's own sample noise,
            # in the window or over every sample since the last action.
            sigma = cfg.noise_z * _noise([v / ref for _, v in samples])
            upper = max(mean, min(mean + sigma / math.sqrt(nw), long + sigma / math.sqrt(nl)))
            # The window that triggers an action was picked for being low; unless
            # it differs from the longer mean by more than noise, the longer mean
            # is the fairer "before" to judge the action against.
            if sigma > 0 and abs(long - mean) <= sigma * math.sqrt(1 / nw - 1 / nl):
                bases.append(long)
            else:
                bases.append(mean)
            means.append(mean)
            uppers.append(upper)
            longs.append(long)
            # One severe sample acts at once, as long as the window agrees it is a drop.
            severe_at = 1.0 - cfg.severe_drop
            severe = severe or (
                mean < 1.0 - cfg.drop_tolerance
                and (fresh[-1] + sigma < severe_at or upper < severe_at)
            )
        if not means:
            return None
        return _Signal(
            mean=min(means) if full else None,
            partial=min(means),
            upper=min(uppers),
            since=min(longs),
            base=min(bases),
            severe=severe,
            share=node.bw_used / node.bw_gbps if _counted(node) else None,
        )

    # ------------------------------------------------------------- decisions
    def _decide(
        self, node: Node, st: _NodeState, now: float, sig: _Signal, cpu: list[Job]
    ) -> list[Action]:
        cfg = self.config
        healthy_at = 1.0 - cfg.healthy_tolerance
        p = st.pending
        if p is not None:
            p.ticks += 1
            # Judged on every sample since the step: less noisy than one window.
            judge = sig.mean is not None or p.ticks >= cfg.revert_ticks
            if judge and (sig.since >= p.before + cfg.improve_min or sig.since >= healthy_at):
                st.pending = None  # it helped
            elif p.ticks >= cfg.revert_ticks:
                return self._revert(node, st, now, sig)
            elif (
                sig.severe
                and sig.partial < p.before - cfg.improve_min
                and self._above_min(cpu)
                and not self._below_gate(node)
            ):
                return self._throttle(node, st, now, sig, cpu, fast=True)  # worse meanwhile
            else:
                return []  # still judging
        if sig.severe:
            st.healthy_run = 0
            if self._backing_off(st, now, sig.upper, cpu):
                return []
            relapse = self._relapse(st, cpu)
            if relapse:
                self._slow_restores(node, st)
            if self._below_gate(node):
                # No new throttle below the gate; a restore that relapsed still goes back
                # to the quotas that were fine (as in the milder case below).
                return self._undo_restore(node, st, now, sig) if relapse else []
            if not self._above_min(cpu):
                return []
            return self._throttle(node, st, now, sig, cpu, fast=True)
        r, upper = sig.mean, sig.upper
        if r is None:
            return []  # wait for a full window after the last action
        hot = sig.share is not None and sig.share >= cfg.bw_high
        # Early warning: on a saturated memory bus a small drop already is contention.
        if upper < 1.0 - (cfg.healthy_tolerance if hot else cfg.drop_tolerance):
            st.healthy_run = 0
            if self._backing_off(st, now, upper, cpu):
                return []
            if self._relapse(st, cpu):
                self._slow_restores(node, st)
                acts = self._undo_restore(node, st, now, sig)
                if acts:
                    return acts
            if not self._above_min(cpu):
                # All at the floor and still degraded: if the chain as a whole did
                # not help either, the CPU jobs are not the cause.
                if st.chain is not None and sig.since < st.chain.before + cfg.improve_min:
                    return self._revert(node, st, now, sig)
                return []
            if self._below_gate(node):
                return []  # degraded, but the bus is not busy: the CPU jobs are not the cause
            return self._throttle(node, st, now, sig, cpu, fast=False)
        if r < healthy_at:
            st.healthy_run = 0  # inside the hysteresis band: hold
            return []
        st.chain = None  # the episode is over: judged steps stay
        st.healthy_run += 1
        st.reverts_in_row = 0
        if st.bad and st.last_action == "restore" and st.healthy_run >= cfg.restore_ticks:
            # A level that relapsed before now held through a healthy stretch: the
            # contention really fell, so restores may go at the base pace again.
            st.bad = {j: q for j, q in st.bad.items() if j.quota < q - _EPS}
            if not st.bad:
                st.restore_need = cfg.restore_ticks
        return self._restore(node, st, now, sig)

    def _throttle(
        self, node: Node, st: _NodeState, now: float, sig: _Signal, cpu: list[Job], fast: bool
    ) -> list[Action]:
        cfg = self.config
        cands = [j for j in cpu if j.quota > cfg.min_quota + _EPS]
        targets = cands if fast else self._heaviest(cands)
        before = sig.base
        # A fast path that overrides a step still being judged reverts to before both.
        prior = dict(st.pending.prior) if st.pending is not None else {}
        if st.chain is None:
            st.chain = _Judgement(before, {})
        acts: list[Action] = []
        for j in targets:
            prior.setdefault(j, j.quota)
            st.chain.prior.setdefault(j, j.quota)
            q = cfg.min_quota if fast else max(cfg.min_quota, round(j.quota - cfg.step_down, 6))
            acts.append(SetQuota(j, q))
            self._hold(node, st, j)
        st.pending = _Judgement(before, prior)
        kind = "fast_path" if fast else "throttle"
        self._acted(st, now, kind, cpu)
        st.last_throttle_t = now
        self._counts["fast_paths" if fast else "throttle_steps"] += 1
        self._log(now, node, kind, acts, self._reason(sig))
        return acts

    def _restore(self, node: Node, st: _NodeState, now: float, sig: _Signal) -> list[Action]:
        cfg = self.config
        if st.healthy_run < cfg.restore_ticks or now - st.last_throttle_t < cfg.cooldown_s:
            return []
        mine: list[Job] = []
        for j in list(st.held):
            if j.quota < 1.0 - _EPS and self._only(j, node):
                mine.append(j)
            else:
                self._unhold(node, st, j)  # at full quota, or another node still needs it low
        if not mine:
            return []
        new = {j: min(1.0, round(j.quota + cfg.step_up, 6)) for j in mine}
        # Levels below one that relapsed come back at the base pace; reaching that
        # level again needs the (doubled) longer healthy stretch.
        if st.healthy_run < st.restore_need and any(
            q >= st.bad.get(j, math.inf) - _EPS for j, q in new.items()
        ):
            return []
        if _counted(node):
            # Bandwidth scales with quota: do not restore onto a saturated bus.
            extra = sum(j.bw_pn * (new[j] / j.quota - 1.0) for j in mine if j.quota > 0)
            if (node.bw_used + extra) / node.bw_gbps >= cfg.bw_high:
                return []
        st.undo = {j: j.quota for j in mine}
        acts: list[Action] = [SetQuota(j, q) for j, q in new.items()]
        for j, q in new.items():
            if q >= 1.0 - _EPS:
                self._unhold(node, st, j)
        self._acted(st, now, "restore", [j for j in node.jobs if j.kind == CPU])
        self._counts["restores"] += 1
        self._log(now, node, "restore", acts, self._reason(sig))
        return acts

    def _undo_restore(self, node: Node, st: _NodeState, now: float, sig: _Signal) -> list[Action]:
        """Degraded right after a restore: back to the quotas that were fine."""
        acts: list[Action] = []
        for j, q in st.undo.items():
            if j in node.jobs and j.quota > q + _EPS:
                acts.append(SetQuota(j, q))
                self._hold(node, st, j)
        st.undo = {}
        if acts:
            self._acted(st, now, "relapse", None)
            st.last_throttle_t = now
            self._counts["relapses"] += 1
            self._log(now, node, "relapse", acts, self._reason(sig))
        return acts

    def _revert(self, node: Node, st: _NodeState, now: float, sig: _Signal) -> list[Action]:
        """A throttle did not help: put the quotas back and leave this node alone.

        Only the last step goes back if the chain of steps as a whole helped;
        otherwise the whole chain does (noise can pass a useless step or two)."""
        cfg = self.config
        step, chain = st.pending, st.chain
        st.pending = st.chain = None
        whole = chain is not None and sig.since < chain.before + cfg.improve_min
        judged = chain if whole or step is None else step
        if judged is None:
            return []
        acts: list[Action] = []
        for j, q in judged.prior.items():
            if abs(j.quota - q) > _EPS:
                acts.append(SetQuota(j, q))
            if q >= 1.0 - _EPS:
                self._unhold(node, st, j)
        if not whole and chain is not None and st.held:
            # Only the last step went back: the episode goes on, and a later revert of it
            # returns to the quotas from before it began (not to a level it lowered).
            st.chain = chain
        doublings = min(st.reverts_in_row, cfg.max_backoff_doublings)
        st.backoff_until = now + cfg.backoff_s * 2**doublings
        st.backoff_level = min(judged.before, sig.since)
        st.reverts_in_row += 1
        st.undo = {}
        self._acted(st, now, "revert", [j for j in node.jobs if j.kind == CPU])
        self._counts["reverts"] += 1
        reason = self._reason(sig) | {"before": round(judged.before, 4), "whole_chain": whole}
        self._log(now, node, "revert", acts, reason)
        return acts

    # ------------------------------------------------------------- solo probes
    def _probe_due(self, node: Node) -> bool:
        """A training job here has a reference taken beside a CPU job, and a probe may
        run: the node not below the bandwidth gate (where no throttle may start, and a
        probe would only cost). With every CPU job at the floor already, the probe
        only measures."""
        if not self.config.probe_ticks or self._below_gate(node):
            return False
        book = self.book
        for j in node.jobs:
            if j.kind == DNN and book.reference(j) is not None and not book.reference_solo(j):
                return True
        return False

    def _probe_start(self, node: Node, st: _NodeState, now: float, cpu: list[Job]) -> list[Action]:
        cfg = self.config
        refs: dict[Job, float] = {}
        for j in node.jobs:
            ref = self.book.reference(j) if j.kind == DNN else None
            if ref is not None and not self.book.reference_solo(j):
                refs[j] = ref
        acts: list[Action] = []
        prior: dict[Job, float] = {}
        for j in cpu:
            # A job another node holds low is that node's to set: left out of the probe.
            if j.quota > cfg.min_quota + _EPS and self._only(j, node):
                prior[j] = j.quota
                acts.append(SetQuota(j, cfg.min_quota))
                self._hold(node, st, j)
        st.probe = _Probe(refs, prior)
        self._acted(st, now, "solo_probe", cpu)
        self._counts["solo_probes"] += 1
        self._log(now, node, "solo_probe", acts, {"references": [j.job_id for j in refs]})
        return acts

    def _probe_step(self, node: Node, st: _NodeState, now: float, cpu: list[Job]) -> list[Action]:
        """Count the probe's tick; end it once every probed job has ``window`` samples
        that began after it (the first one after the quota change straddles it), or
        after ``probe_ticks`` ticks."""
        cfg = self.config
        p = st.probe
        assert p is not None
        p.ticks += 1
        self._counts["probe_ticks"] += 1
        solo: dict[Job, list[float]] = {}
        for j in p.refs:
            fresh = [v for t, v in self.book.samples(j) if t > st.last_action_t]
            solo[j] = fresh[1:][-cfg.window :]
        if p.ticks < cfg.probe_ticks and any(len(v) < cfg.window for v in solo.values()):
            return []
        st.probe = None
        found: dict[str, float] = {}
        for j, ref in p.refs.items():
            if j not in node.jobs or self.book.reference(j) != ref:
                continue  # gone, or re-measured meanwhile (its cores changed)
            vals = solo[j]
            if not vals:
                self._counts["probe_timeouts"] += 1
                self.book.set_reference(j, ref)  # nothing better: not probed again
                continue
            speed = max(ref, sum(vals) / len(vals))
            self.book.set_reference(j, speed)
            self.book.learn_solo(j, j.cores_pn, speed)
            found[j.job_id] = round(speed / ref, 4)
        acts: list[Action] = []
        for j, q in p.prior.items():
            if j in node.jobs and abs(j.quota - q) > _EPS and self._only(j, node):
                acts.append(SetQuota(j, q))
            if q >= 1.0 - _EPS:
                self._unhold(node, st, j)
        self._acted(st, now, "probe_end", cpu)
        self._log(now, node, "probe_end", acts, {"solo_over_reference": found})
        return acts

    # ------------------------------------------------------------- cost per victim
    def _charge(self, node: Node, cpu: list[Job], now: float) -> set[Job]:
        """Add the core-seconds each CPU job sharing the node with another user's
        training job spent under full quota since the last tick; return those past
        their allowance."""
        cfg = self.config
        spent: set[Job] = set()
        for j in [j for j in self._cost if not j.placement]:
            del self._cost[j]  # finished (a driver's ledger empties its placement)
        users = {j.user for j in node.jobs if j.kind == DNN}
        for j in cpu:
            c = self._cost.get(j)
            billed = bool(users - {j.user})
            if c is None:
                if billed:  # [lost in all, allowance left, as of]
                    self._cost[j] = [0.0, cfg.victim_grace_core_s, now]
                continue
            dt = now - c[2]
            if dt > 0:
                c[2] = now
                cores = max(1, j.cores_pn)
                lost = cores * (1.0 - j.quota) * dt if billed and j.quota < 1.0 - _EPS else 0.0
                c[0] += lost
                # A bucket refilled at victim_share of the job's cores and holding at most
                # the grace: an allowance banked over a quiet spell is never spent in one
                # long block (the bound since first seen still holds: it is never more).
                c[1] = min(cfg.victim_grace_core_s, c[1] + cfg.victim_share * cores * dt) - lost
            if billed and c[1] < 0:
                spent.add(j)
        return spent

    def _billed(self, node: Node) -> bool:
        """Some CPU job here is below full quota beside another user's training job."""
        users = {j.user for j in node.jobs if j.kind == DNN}
        return any(
            j.kind == CPU and j.quota < 1.0 - _EPS and bool(users - {j.user}) for j in node.jobs
        )

    def _budget_release(
        self, node: Node, st: _NodeState, now: float, spent: set[Job]
    ) -> list[Action]:
        """CPU jobs past their allowance back to full quota, out of every judgement."""
        acts = self._let_go(node, st, spent)
        if acts:
            self._acted(st, now, "budget_release", None)
            self._counts["budget_releases"] += 1
            lost = {a.job.job_id: round(self._cost[a.job][0], 1) for a in acts}
            self._log(now, node, "budget_release", acts, {"lost_core_s": lost})
        return acts

    def _dry_release(self, node: Node, st: _NodeState, now: float, dry: list[Job]) -> list[Action]:
        """CPU jobs whose harm budget is dry: those held low back to full quota, and
        none of them in any judgement or probe."""
        acts = self._let_go(node, st, dry)
        if acts:
            self._acted(st, now, "dry_release", None)
            self._counts["dry_releases"] += 1
            if self.harm is not None:
                self.harm.counts["ran_dry"] += len(acts)
            self._log(now, node, "dry_release", acts, {})
        return acts

    def _let_go(self, node: Node, st: _NodeState, jobs: Iterable[Job]) -> list[Action]:
        """These CPU jobs back to full quota (where this node alone holds them low), out
        of every judgement and probe."""
        acts: list[Action] = []
        for j in jobs:
            if j.quota < 1.0 - _EPS and self._only(j, node):
                acts.append(SetQuota(j, 1.0))
            self._unhold(node, st, j)
            self._strip(st, j)
            if st.probe is not None:
                st.probe.prior.pop(j, None)
        return acts

    # ------------------------------------------------------------- helpers
    def _backing_off(self, st: _NodeState, now: float, r: float, cpu: list[Job]) -> bool:
        if now >= st.backoff_until:
            return False
        worse = r < st.backoff_level - self.config.drop_tolerance
        new_job = any(j.idx not in st.cpu_at_action for j in cpu)
        return not (worse or new_job)

    def _relapse(self, st: _NodeState, cpu: list[Job]) -> bool:
        """Degradation came back at a level a restore set, with no new CPU job to
        blame: that level is too high (however long it looked fine under noise)."""
        return st.last_action == "restore" and all(j.idx in st.cpu_at_action for j in cpu)

    def _slow_restores(self, node: Node, st: _NodeState) -> None:
        """A restore relapsed: remember the levels it set as too high, and make
        the next attempt at them wait twice as long."""
        base = st.restore_need if st.bad else self.config.restore_ticks
        st.restore_need = min(2 * base, self.config.max_restore_ticks)
        for j in st.undo:
            if j in node.jobs:
                st.bad[j] = j.quota

    def _heaviest(self, jobs: list[Job]) -> list[Job]:
        """The heaviest bandwidth users that together draw ``heavy_share`` of the
        CPU jobs' bandwidth (near-ties kept together); all of them if none is known."""
        total = sum(max(0.0, j.bw_pn) for j in jobs)
        if total <= 0:
            return jobs
        picked: list[Job] = []
        acc, last = 0.0, math.inf
        for j in sorted(jobs, key=lambda j: -j.bw_pn):
            if j.bw_pn <= 0 or (acc >= self.config.heavy_share * total and j.bw_pn < 0.9 * last):
                break
            picked.append(j)
            acc += j.bw_pn
            last = j.bw_pn
        return picked

    def _below_gate(self, node: Node) -> bool:
        """The node reports its bandwidth and is below the gate: no throttle may start."""
        return _counted(node) and node.bw_used < self.config.bw_gate * node.bw_gbps

    def _below_gate_at_full(self, node: Node, st: _NodeState) -> bool:
        """The bus would stay below the gate with every held job back at full quota
        (bandwidth scales with quota): what they draw is not what slows anybody."""
        if not _counted(node):
            return False  # no bandwidth counters: the gate says nothing
        extra = 0.0
        for j in st.held:
            if j.quota <= 0.0:
                return False  # stopped: what it would draw is unknown
            extra += max(0.0, j.bw_pn) * (1.0 / j.quota - 1.0)
        return node.bw_used + extra < self.config.bw_gate * node.bw_gbps

    def _gate_release(self, node: Node, st: _NodeState, now: float) -> list[Action]:
        """Give every job this node holds low its full quota back at once: below the gate
        no throttle may start (the paper's 75% trigger), so none may be held there
        either. A throttled job that only runs slower holds its cores for longer, which
        costs the CPU jobs queued behind it too."""
        acts: list[Action] = []
        for j in list(st.held):
            if j.quota < 1.0 - _EPS and self._only(j, node):
                acts.append(SetQuota(j, 1.0))
            self._unhold(node, st, j)
        st.pending = st.chain = st.probe = None
        st.undo = {}
        st.bad = {}
        st.restore_need = self.config.restore_ticks
        if acts:
            self._acted(st, now, "gate_release", None)
            self._counts["gate_releases"] += 1
            self._log(now, node, "gate_release", acts, {"bw_share": node.bw_used / node.bw_gbps})
        return acts

    def _above_min(self, cpu: list[Job]) -> bool:
        return any(j.quota > self.config.min_quota + _EPS for j in cpu)

    def _acted(self, st: _NodeState, now: float, kind: str, cpu: list[Job] | None) -> None:
        st.last_action = kind
        st.last_action_t = now
        st.healthy_run = 0
        if cpu is not None:
            st.cpu_at_action = frozenset(j.idx for j in cpu)

    def _idle(self, node: Node, st: _NodeState, now: float) -> bool:
        return (
            not st.held
            and st.pending is None
            and st.chain is None
            and st.probe is None
            and now >= st.backoff_until
            and now - st.last_action_t >= self.config.calm_s
            # Reverts in a row are remembered until the node is healthy again (forgetting
            # them would restart the back-off at its shortest, a useless throttle per
            # calm_s), or until it falls below the gate, where nothing may start.
            and (st.reverts_in_row == 0 or self._below_gate(node))
        )

    def _only(self, job: Job, node: Node) -> bool:
        """No other node holds this job low (a gang CPU job spans nodes)."""
        return self._holders.get(job, set()) <= {node}

    def _hold(self, node: Node, st: _NodeState, job: Job) -> None:
        st.held[job] = None
        self._holders.setdefault(job, set()).add(node)

    def _unhold(self, node: Node, st: _NodeState, job: Job) -> None:
        st.held.pop(job, None)
        nodes = self._holders.get(job)
        if nodes is not None:
            nodes.discard(node)
            if not nodes:
                del self._holders[job]

    def _strip(self, st: _NodeState, job: Job) -> None:
        st.held.pop(job, None)
        st.undo.pop(job, None)
        st.bad.pop(job, None)
        for name in ("pending", "chain"):
            judged = getattr(st, name)
            if judged is not None:
                judged.prior.pop(job, None)
                if not judged.prior:
                    setattr(st, name, None)

    def _prune(self, node: Node, st: _NodeState) -> None:
        """Jobs leave between ticks: node.jobs is the truth."""
        known = set(st.held) | set(st.undo) | set(st.bad)
        for judged in (st.pending, st.chain):
            if judged is not None:
                known.update(judged.prior)
        for j in known:
            if j not in node.jobs:
                self._unhold(node, st, j)
                self._strip(st, j)

    def _reason(self, sig: _Signal) -> dict[str, Any]:
        out = {"min_ratio": round(sig.mean if sig.mean is not None else sig.partial, 4)}
        if sig.share is not None:
            out["bw_share"] = round(sig.share, 4)
        return out

    def _log(
        self, now: float, node: Node, action: str, acts: list[Action], reason: dict[str, Any]
    ) -> None:
        self.decisions.append(
            {
                "time": now,
                "node": node.name,
                "action": action,
                "jobs": [a.job.job_id for a in acts],
                "quotas": [a.quota for a in acts if isinstance(a, SetQuota)],
                "reason": reason,
            }
        )
