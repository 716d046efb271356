"""One job's search state (levels measured, bounds, converged watch) and the noise and
peak estimates pooled over its windows."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from coda.policy.learned_profiles import Shape
from coda.policy.window_stats import Level


@dataclass(slots=True)
class Track:
    """One job's search (or converged watch); reset by each new search."""

    key: Shape
    # First: what a driver's questions read (wants_samples, on every sample of every job).
    owner: Any = None  # the control whose track this is (Job.control_state)
    phase: str = "measuring"
    capped: bool = False  # converged below hi for want of free cores
    hi: int = 0  # smallest level known at peak (0: not yet)
    level: int = 0  # cores the current windows are measured at
    kind: str = "full"  # full | verify | reference | resize | shift-drop | shift-rise
    asked: int | None = None  # SetCores awaiting confirmation at the next sample
    settle: int = 0  # windows still to discard
    stay: int = 0  # valid windows since the level last changed
    start: int = 0
    obs: dict[int, Level] = field(default_factory=dict)
    below: set[int] = field(default_factory=set)  # levels judged below tolerance
    contended: set[int] = field(default_factory=set)  # levels measured beside a CPU job
    lo: int = 0  # largest level known below tolerance
    top: int = 0  # upward probing: the best level so far
    cap: int | None = None  # growth refused above this
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


def pooled_noise(t: Track) -> tuple[float, int]:
    """Relative squared deviations from each level's mean over the job's windows, and dof."""
    ss, dof = t.noise_ss, t.noise_dof
    for lv in t.obs.values():
        if lv.n > 1:
            ss += lv.ss_rel()
            dof += lv.n - 1
    return ss, dof


def pooled_peak(t: Track, but: int = 0) -> Level:
    """The peak estimate: all windows at levels not judged short (except level ``but``).

    Pooling every level at peak, rather than taking the best-looking one, keeps the
    estimate from being biased up by selection (which would call at-peak levels short).
    """
    out = Level()
    for c, lv in t.obs.items():
        if c not in t.below and c != but:
            out.n, out.s1, out.s2 = out.n + lv.n, out.s1 + lv.s1, out.s2 + lv.s2
    return out
