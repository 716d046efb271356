"""The performance of one DNN job shape (model, GPUs per node, nodes), as the simulator
engine reads it: training speed against cores per node, memory bandwidth, slowdown
under a co-runner's bandwidth pressure, PCIe-heaviness, and how busy its GPUs are at a
given speed. Values are checked once per shape, so the methods on the engine's hot path
need no checks."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobPerf:
    """Per-node performance of one DNN job shape (model, GPUs per node, nodes)."""

    model: str
    curve_x: tuple[float, ...]  # cores per node, ascending, first 0.0
    curve_y: tuple[float, ...]  # relative training speed in [0, 1], nondecreasing, last 1.0
    c_opt: float  # smallest cores per node at which speed reaches 1.0 (a curve_x value)
    bw_gbps: float  # memory bandwidth per node at full speed (GB/s)
    slowdown_p: tuple[float, ...]  # co-runner pressures, (0.0, 0.25, 0.5, 0.75, 0.95)
    slowdown_s: tuple[float, ...]  # iteration-time factor per pressure, incl. multi-GPU floor
    pcie_heavy: bool
    # Busy share of each of its GPUs (as the driver reports it) against relative speed:
    # piecewise linear, busy_x ascending from 0.0 to 1.0 (speed), busy_y in [0, 1].
    busy_x: tuple[float, ...] = (0.0, 1.0)
    busy_y: tuple[float, ...] = (0.0, 1.0)

    def __post_init__(self) -> None:
        # Checked once per shape (shapes are cached), so the hot methods need no checks.
        xs, ys = self.curve_x, self.curve_y
        if len(xs) < 2 or len(xs) != len(ys):
            raise ValueError(f"{self.model}: curve needs >= 2 points of equal length")
        if xs[0] != 0.0 or any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
            raise ValueError(f"{self.model}: curve_x must start at 0.0 and ascend: {xs}")
        if ys[-1] != 1.0 or any(b < a for a, b in zip(ys, ys[1:], strict=False)) or ys[0] < 0:
            raise ValueError(f"{self.model}: curve_y must be nondecreasing in [0,1], last 1.0")
        k = xs.index(self.c_opt) if self.c_opt in xs else -1
        if k < 1 or ys[k] != 1.0 or ys[k - 1] >= 1.0:
            raise ValueError(f"{self.model}: c_opt {self.c_opt} is not where the curve hits 1.0")
        ps, ss = self.slowdown_p, self.slowdown_s
        if len(ps) != len(ss) or ps[0] != 0.0 or ss[0] != 1.0:
            raise ValueError(f"{self.model}: slowdown table must start at (0.0, 1.0)")
        if any(b <= a for a, b in zip(ps, ps[1:], strict=False)) or min(ss) < 1.0:
            raise ValueError(f"{self.model}: slowdown pressures must ascend, factors >= 1")
        bx, by = self.busy_x, self.busy_y
        if len(bx) < 2 or len(bx) != len(by) or bx[0] != 0.0 or bx[-1] != 1.0 or by[0] != 0.0:
            raise ValueError(f"{self.model}: busy curve must run from (0, 0) to speed 1.0: {bx}")
        if any(b <= a for a, b in zip(bx, bx[1:], strict=False)):
            raise ValueError(f"{self.model}: busy curve speeds must ascend: {bx}")
        if any(not 0.0 <= y <= 1.0 for y in by) or any(
            b < a for a, b in zip(by, by[1:], strict=False)
        ):
            raise ValueError(f"{self.model}: busy shares must be nondecreasing in [0, 1]: {by}")

    def core_speed(self, cores: float) -> float:
        """Relative speed with `cores` per node: piecewise-linear over the curve."""
        xs = self.curve_x
        if cores >= xs[-1]:
            return 1.0
        if cores <= 0.0:
            return 0.0
        i = bisect_right(xs, cores)  # xs[i-1] <= cores < xs[i], 1 <= i < len(xs)
        ys = self.curve_y
        x0 = xs[i - 1]
        y0 = ys[i - 1]
        return y0 + (ys[i] - y0) * (cores - x0) / (xs[i] - x0)

    def slowdown(self, pressure: float) -> float:
        """Iteration-time factor under co-runner bandwidth `pressure` (fraction of node)."""
        ps = self.slowdown_p
        if pressure >= ps[-1]:
            return self.slowdown_s[-1]
        if pressure <= 0.0:
            return 1.0
        i = bisect_right(ps, pressure)
        ss = self.slowdown_s
        p0 = ps[i - 1]
        s0 = ss[i - 1]
        return s0 + (ss[i] - s0) * (pressure - p0) / (ps[i] - p0)

    def busy(self, speed: float) -> float:
        """Busy share of each of the job's GPUs when it trains at relative `speed`."""
        xs = self.busy_x
        if speed >= 1.0:
            return self.busy_y[-1]
        if speed <= 0.0:
            return 0.0
        i = bisect_right(xs, speed)
        ys = self.busy_y
        x0 = xs[i - 1]
        y0 = ys[i - 1]
        return y0 + (ys[i] - y0) * (speed - x0) / (xs[i] - x0)
