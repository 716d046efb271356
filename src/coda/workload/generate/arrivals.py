"""Arrival times of a Poisson process whose rate follows a daily cycle.

The rate is ``rate * (1 + a * cos(2 pi (t - peak) / period))``: its mean over a period
is ``rate``, so n arrivals span about n / rate whatever the amplitude. The first n
events of the process are found by time rescaling: unit-rate event times (cumulative
sums of exponentials) pushed through the inverse of the cumulative rate.
"""

from __future__ import annotations

import math

import numpy as np

DAY_S = 86_400.0
MAX_AMPLITUDE = 0.9  # below 1 the rate stays > 0 and the inversion below converges
_TOLERANCE_S = 1e-4
_MAX_ROUNDS = 400  # amplitude**rounds * period is far below the tolerance at 0.9


def daily_poisson(
    rng: np.random.Generator,
    n: int,
    rate_per_s: float,
    amplitude: float,
    peak_s: float,
    period_s: float = DAY_S,
) -> np.ndarray:
    """The first n arrival times (s, ascending, from t = 0) of the process above."""
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise ValueError(f"arrival rate must be finite and > 0 per s, got {rate_per_s}")
    if not 0 <= amplitude <= MAX_AMPLITUDE:
        raise ValueError(f"daily amplitude must be in [0, {MAX_AMPLITUDE}], got {amplitude}")
    target = np.cumsum(rng.exponential(1.0, n)) / rate_per_s  # what the mean rate gives
    if amplitude == 0 or n == 0:
        return target
    w = 2 * math.pi / period_s
    shift = math.sin(w * peak_s)
    t = target.copy()
    # Solve t + a/w (sin(w (t - peak)) + sin(w peak)) = target. The map t -> t - error
    # is a contraction (its slope a cos(.) is at most a < 1 in size), so it converges
    # from any start, a factor a per round.
    for _ in range(_MAX_ROUNDS):
        error = t + (amplitude / w) * (np.sin(w * (t - peak_s)) + shift) - target
        t -= error
        if float(np.max(np.abs(error))) < _TOLERANCE_S:
            break
    return np.sort(t)  # ascending even where two arrivals are closer than the tolerance
