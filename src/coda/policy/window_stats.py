"""Statistics of measurement windows: running sums of the windows at one core count,
and the widening of decision margins when the noise rests on few windows or an
early look."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Two-sided 97.5% Student-t quantiles by degrees of freedom (index = dof). The
# noise is estimated from the windows themselves, so with few windows the margin
# widens: an estimate that is small by chance must not decide early.
_T975 = (math.inf, 12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t_scale(dof: int) -> float:
    if dof < len(_T975):
        return _T975[max(dof, 0)] / 1.96
    return 1.0 + 1.21 / dof  # Cornish-Fisher: t ~ z + (z^3 + z) / (4 dof)


# Early looks need more than z standard errors (O'Brien-Fleming-like): checking after
# every window would otherwise call an at-peak level short far more often than z says.
EARLY_WINDOWS = 8


@dataclass(slots=True)
class Level:
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
