"""A study's setup, validated once where each part is built: ``RunConfig`` names the
trace, cluster and workload, and nests the policy's knobs (``PolicyOptions``, checked
in its constructor) and the simulator's (``SimulationOptions``, checked in its own).

Light to import (no numpy): the CLI builds its options from the tuples and ranges here.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda.policy.options import (
    MIN_CONTROL_PERIOD_S,
    RECLAIMS,
    PolicyOptions,
    checked_seconds,
)
from coda.sim.constants import GRANTS

__all__ = [
    "BUNDLED",
    "DEFAULT_CLUSTER",
    "DEFAULT_LOAD",
    "DEFAULT_POLICY",
    "DEFAULT_TIME_LIMIT_S",
    "DEFAULT_WARMUP",
    "MAX_HORIZON_S",
    "MAX_LOAD",
    "MAX_SAMPLES",
    "MAX_SEED",
    "PAPER_CLUSTER",
    "PAPER_SETTING_CLUSTER",
    "POLICY_KNOBS",
    "SIMULATION_KNOBS",
    "RunConfig",
    "SimulationOptions",
]

# The main job's default: the bundled trace on a tenth of its own cluster (same
# mix of node shapes), arrivals compressed to an offered GPU load of 1.0. On the
# full 6,212-GPU cluster the trace's 7k GPU pods cannot make GPU jobs queue at
# all (see `max_reachable_load`); at this size they do under the baselines.
DEFAULT_CLUSTER = "openb:0.1"
DEFAULT_LOAD = 1.0
# A job without a time limit is planned as running this long in --estimates time-limits
# mode (docs/metrics.md): a common site default of one day (Slurm itself has none).
DEFAULT_TIME_LIMIT_S = 86400.0
# The share of first arrivals left out of the measurement window (the same value as
# coda.workload.scaling.DEFAULT_WARMUP, as tests/test_study.py checks: that module
# loads numpy).
DEFAULT_WARMUP = 0.01
BUNDLED = "bundled:alibaba-openb-2023"

# The paper's cluster: about 80 PCIe servers, 400 GTX 1080Ti GPUs (5 per server on
# average), two 14-core Xeon Gold 6132 each (28 cores), no CPU-only servers. The paper
# gives no per-server GPU counts: ASSUMPTION (ours) 60 servers of 4 GPUs and 20 of 8,
# the two common PCIe chassis, which gives 80 servers, 400 GPUs and 5 per server.
PAPER_CLUSTER = "60x4g28c,20x8g28c"
PAPER_SETTING_CLUSTER = "paper"  # its name as --cluster takes it (`coda compare`'s default)

# Stated ranges of a run's numeric settings (the CLI's options show and check them too).
MAX_LOAD = 1000.0  # offered GPU load, x GPU capacity
MAX_HORIZON_S = 1e10  # simulated seconds (about 317 years)
MAX_SEED = 2**32 - 1
MAX_SAMPLES = 100_000  # time-series points per run

# A simulation's policy knobs by default: PolicyOptions' own, but a job without a time
# limit is planned with a day's (DEFAULT_TIME_LIMIT_S) instead of none.
DEFAULT_POLICY = PolicyOptions(default_time_limit_s=DEFAULT_TIME_LIMIT_S)


def _number(
    owner: str, name: str, v: Any, lo: float, hi: float, lo_open: bool, hi_open: bool
) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{owner}: {name} must be a finite number, got {v!r}")
    if v < lo or (lo_open and v == lo) or v > hi or (hi_open and v == hi):
        span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ValueError(f"{owner}: {name} must be in {span}, got {v!r}")


def _integer(owner: str, name: str, v: Any, lo: int, hi: int) -> None:
    # numbers.Integral: int and numpy's integers alike, without importing numpy.
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not lo <= int(v) <= hi:
        raise ValueError(f"{owner}: {name} must be an integer in [{lo}, {hi}], got {v!r}")


@dataclass(frozen=True)
class SimulationOptions:
    """The simulator's own knobs (``coda.sim.engine.Simulator``): ``horizon`` (stop at
    this simulated time; None: when every job finished), ``samples`` (time-series
    points), ``noise`` (relative std of one throughput sample the allocator sees),
    ``cycle_period_s`` (a periodic scheduler's cycle, CODA's Slurm controller: 1 s; 0:
    after every event) and ``grants``: how the books treat a running job's cpuset
    changes, elastic (CODA's node agent: narrowed-away cores are free at once) or fixed
    (Slurm's: a job holds its grant until it ends; needs reclaim "requeue")."""

    horizon: float | None = None
    samples: int = 1000
    noise: float = 0.05
    cycle_period_s: float = 0.0
    grants: str = "elastic"

    def __post_init__(self) -> None:
        # Configs are built directly too (experiments, benchmarks), past the CLI's checks:
        # a NaN here would silently mean "no horizon".
        if self.horizon is not None:
            _number("simulation", "horizon", self.horizon, 0.0, MAX_HORIZON_S, True, False)
        _integer("simulation", "samples", self.samples, 2, MAX_SAMPLES)
        _number("simulation", "noise", self.noise, 0.0, 1.0, False, False)
        checked_seconds(
            "cycle_period_s", self.cycle_period_s, at_least=MIN_CONTROL_PERIOD_S, or_zero=True
        )
        if self.grants not in GRANTS:
            raise ValueError(
                f"simulation: grants must be one of {', '.join(GRANTS)}, got {self.grants!r}"
            )


# The knobs under their flat names (a run's summary "config" and the CLI's options):
# which of the nested options holds each.
POLICY_KNOBS = (
    "estimates",
    "default_time_limit_s",
    "order",
    "gpu_subarrays",
    "allocator_start",
    "start_delay_s",
    "control_period_s",
    "reclaim",
    "settle_windows",
)
SIMULATION_KNOBS = tuple(f.name for f in dataclasses.fields(SimulationOptions))
# A run's summary "config", in this order (as it always was).
_SUMMARY_ORDER = (
    "trace", "format", "cluster", "load", "seed", "profiles", "mix", "skip_bad_rows",
    "fractional", "censored", "horizon", "warmup", "samples", "noise", "perturb",
    "estimates", "default_time_limit_s", "order", "gpu_subarrays", "allocator_start",
    "start_delay_s", "control_period_s", "cycle_period_s", "reclaim", "grants",
    "settle_windows", "cpu_checkpoint_share",
)  # fmt: skip


@dataclass(frozen=True)
class RunConfig:
    """One simulated run's setup: the trace and how it is read, the cluster, the
    workload built from it (profiles, mix, perturbation) and its load, the seed; the
    policy's knobs (``policy``) and the simulator's (``simulation``). Every part is
    checked where it is built; this checks its own fields and what the simulator
    asks of the policy's (a reclaim it can carry out; fixed grants only with requeue)."""

    trace: str | None = None  # None: the bundled Alibaba openb 2023 trace
    format: str | None = None  # None: detect from the header
    cluster: str = DEFAULT_CLUSTER
    load: float | None = DEFAULT_LOAD  # None: keep the trace's own arrival times
    seed: int = 0  # the model draw, the profile perturbation and the sample noise
    profiles: str = "coda"
    mix: str | None = None
    skip_bad_rows: bool = False
    fractional: str = "whole"
    censored: str = "keep"
    warmup: float = DEFAULT_WARMUP  # share of first arrivals left out of the window
    perturb: float = 0.0  # scale every profile value by U(1-p, 1+p) (robustness)
    # Each CPU job checkpoints with this probability (ASSUMPTION, ours: 1.0, every one
    # does, once per the policy's checkpoint interval); the rest lose their whole run
    # when requeued.
    cpu_checkpoint_share: float = 1.0
    policy: PolicyOptions = DEFAULT_POLICY
    simulation: SimulationOptions = field(default_factory=SimulationOptions)

    def __post_init__(self) -> None:
        if self.load is not None:
            _number("run config", "load", self.load, 0.0, MAX_LOAD, True, False)
        _number("run config", "warmup", self.warmup, 0.0, 1.0, False, True)
        _number("run config", "perturb", self.perturb, 0.0, 1.0, False, True)
        _number("run config", "cpu_checkpoint_share", self.cpu_checkpoint_share, 0.0, 1.0,
                False, False)  # fmt: skip
        _integer("run config", "seed", self.seed, 0, MAX_SEED)
        # The loaders' own check of their options (coda.workload.traces); imported here
        # since the loaders load numpy, which importing this module must not.
        from coda.workload.traces._common import check_options

        try:
            check_options(self.fractional, self.censored)
        except ValueError as e:
            raise ValueError(f"run config: {e}") from None
        for name in ("trace", "format", "mix"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str | Path):
                raise ValueError(f"run config: {name} must be text, got {type(v).__name__}")
        if not isinstance(self.cluster, str) or not isinstance(self.profiles, str):
            raise ValueError("run config: cluster and profiles must be text")
        if not isinstance(self.skip_bad_rows, bool):
            raise ValueError("run config: skip_bad_rows must be true or false")
        if not isinstance(self.policy, PolicyOptions):
            raise ValueError(f"run config: policy must be PolicyOptions, got {self.policy!r}")
        if not isinstance(self.simulation, SimulationOptions):
            raise ValueError(
                f"run config: simulation must be SimulationOptions, got {self.simulation!r}"
            )
        # What the simulator can carry out of the policy's knobs.
        if self.policy.reclaim not in RECLAIMS:
            raise ValueError(
                f"run config: a simulation's reclaim must be one of {', '.join(RECLAIMS)}, "
                f"got {self.policy.reclaim!r}"
            )
        if self.simulation.grants == "fixed" and self.policy.reclaim != "requeue":
            raise ValueError(
                "run config: fixed grants need reclaim 'requeue' (a shrunk CPU job would "
                "keep its grant: Slurm never changes a running job's allocation)"
            )

    def varied(
        self,
        *,
        policy: Mapping[str, Any] | None = None,
        simulation: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> RunConfig:
        """This config with some of its fields, and of its nested options' fields,
        replaced (all at once: checked once, on the result)."""
        new: dict[str, Any] = dict(fields)
        if policy:
            new["policy"] = dataclasses.replace(self.policy, **policy)
        if simulation:
            new["simulation"] = dataclasses.replace(self.simulation, **simulation)
        return dataclasses.replace(self, **new)

    def as_dict(self) -> dict[str, Any]:
        """Flat, as a run's summary "config" has it (the CLI's option names, in
        seconds; PolicyOptions' tune only where set, its filters and categories,
        the driver's, left out)."""
        flat: dict[str, Any] = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("policy", "simulation")
        }
        flat.update((k, getattr(self.policy, k)) for k in POLICY_KNOBS)
        flat.update(dataclasses.asdict(self.simulation))
        out = {k: flat[k] for k in _SUMMARY_ORDER}
        if self.policy.tune:
            out["tune"] = dict(self.policy.tune)
        return out
