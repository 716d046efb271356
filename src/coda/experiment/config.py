"""What an experiment runs (`ExperimentConfig`), which policies take part, and the command
line that reruns it.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

from coda.experiment.defaults import (
    BASELINE,
    DEFAULT_LOADS,
    DEFAULT_NOISE,
    DEFAULT_PERTURB,
    DEFAULT_POLICIES,
    DEFAULT_SEEDS,
    ROBUSTNESS_POLICIES,
    SUBJECT,
)
from coda.policy import POLICIES
from coda.study.config import RunConfig


@dataclass
class ExperimentConfig:
    """What to run. ``base`` holds the trace options; its load, seed, perturb and noise
    are replaced per run."""

    base: RunConfig = field(default_factory=RunConfig)
    loads: tuple[float, ...] = DEFAULT_LOADS
    seeds: int = DEFAULT_SEEDS
    policies: tuple[str, ...] = DEFAULT_POLICIES
    headline_load: float | None = None  # None: the highest load
    robustness: bool = True
    perturb: float = DEFAULT_PERTURB
    noise: float = DEFAULT_NOISE
    workers: int | None = None  # None: os.cpu_count(); 1: inline
    baseline: str = BASELINE
    subject: str = SUBJECT

    @property
    def judged_load(self) -> float:
        return max(self.loads) if self.headline_load is None else self.headline_load

    def validate(self) -> None:
        if not self.loads:
            raise ValueError("no loads to run")
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        if self.judged_load not in self.loads:
            raise ValueError(f"headline load {self.judged_load:g} is not among the loads")
        if self.baseline not in self.policies:
            raise ValueError(f"the policies must include the baseline {self.baseline}")


def split_policies(names: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(registered, not registered) in the given order."""
    names = list(names)
    return tuple(p for p in names if p in POLICIES), tuple(p for p in names if p not in POLICIES)


def robustness_policies(cfg: ExperimentConfig) -> tuple[str, ...]:
    """Baseline, static-shared and the subject: those asked for and registered."""
    wanted = dict.fromkeys((cfg.baseline, *ROBUSTNESS_POLICIES[1:-1], cfg.subject))
    return tuple(p for p in wanted if p in cfg.policies and p in POLICIES)


def reproduce_command(cfg: ExperimentConfig, out: str | None = None) -> str:
    """The command line that reruns this experiment (workers left out: results do not
    depend on them)."""
    b, d = cfg.base, RunConfig()
    args = [
        "coda",
        "experiment",
        "headline",
        "--loads",
        ",".join(f"{x:g}" for x in cfg.loads),
        "--seeds",
        str(cfg.seeds),
        "--policies",
        ",".join(cfg.policies),
        "--headline-load",
        f"{cfg.judged_load:g}",
        "--cluster",
        b.cluster,
    ]
    if b.trace is not None:
        args += ["--trace", str(b.trace)]
    for flag, value, default in (
        ("--format", b.format, d.format),
        ("--profiles", b.profiles, d.profiles),
        ("--mix", b.mix, d.mix),
        ("--fractional", b.fractional, d.fractional),
        ("--censored", b.censored, d.censored),
        ("--horizon", b.simulation.horizon, d.simulation.horizon),
        ("--warmup", b.warmup, d.warmup),
    ):
        if value != default:
            args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if b.skip_bad_rows:
        args.append("--skip-bad-rows")
    if cfg.robustness:
        args += ["--perturb", f"{cfg.perturb:g}", "--noise", f"{cfg.noise:g}"]
    else:
        args.append("--no-robustness")
    if out is not None:
        args += ["--out", str(out)]
    return shlex.join(args)
