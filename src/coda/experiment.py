"""The headline experiment: does CODA reproduce the paper's claim?

The paper (Zhao et al., ICDCS 2020) reports +20.8% GPU utilisation (relative) with
CPU-job queuing no longer. This module runs every policy x load x seed on one trace
and cluster (one prepared workload per load and seed, shared by all policies, so that
differences between policies are paired), plus a robustness sweep with perturbed
profiles and noisier throughput samples, and turns the runs into statistics (mean and
95% Student-t confidence interval over seeds), a decomposition of CODA's gain and a
verdict. Rendering (markdown, JSON, plots) lives in `coda.report.experiment`.

Everything here works on *records*: the few numbers of one run's summary that the
experiment needs (`RunRecord`). The analysis functions take records only, so they
can be tested on made-up summaries.
"""

from __future__ import annotations

import math
import os
import shlex
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from typing import Any

from coda.policy import POLICIES
from coda.report.tables import finite, fmt_duration, fmt_number, lookup
from coda.sim.run import RunConfig, prepare, run_policy

# ---------------------------------------------------------------- the claim and defaults

PAPER_GAIN_PCT = 20.8  # relative GPU-utilisation gain the paper reports
DNN_QUEUE_STRESS_S = 60.0  # the baseline must queue DNN jobs longer than this on average
BASELINE = "static-separate"
SUBJECT = "coda"
UPPER_BOUND = "oracle"
DEFAULT_POLICIES = (
    "static-separate",
    "static-shared",
    "coda",
    "coda-no-slimming",
    "coda-no-colocation",
    "coda-no-eliminator",
    "oracle",
)
ROBUSTNESS_POLICIES = ("static-separate", "static-shared", "coda")
# The ablation chain: each step adds one mechanism to the one before.
CHAIN = (
    ("static-separate", "baseline"),
    ("coda-no-colocation", "+ slimming"),
    ("coda-no-eliminator", "+ co-location"),
    ("coda", "+ contention eliminator"),
)
DEFAULT_LOADS = (0.8, 1.0, 1.3)
DEFAULT_SEEDS = 5
DEFAULT_PERTURB = 0.3
DEFAULT_NOISE = 0.1

# Two-sided 95% Student-t critical values t_{0.975, df}, df = 1..30 (no scipy here).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
Z975 = 1.96  # normal approximation beyond df 30

# (key, label, kind) of the per-run numbers that get a mean and CI per (policy, load).
# kind: "pct" (fraction 0..1), "duration" (s), "count", "number".
METRICS: tuple[tuple[str, str, str], ...] = (
    ("gpu_util_effective", "GPU util (effective)", "pct"),
    ("gpu_util_allocated", "GPU util (allocated)", "pct"),
    ("gpu_lost_cores", "GPU lost to too few cores", "pct"),
    ("gpu_lost_contention", "GPU lost to contention", "pct"),
    ("cpu_util", "CPU util (held)", "pct"),
    ("cpu_util_useful", "CPU util (useful)", "pct"),
    ("dnn_queue_mean", "DNN queuing (mean)", "duration"),
    ("cpu_queue_mean", "CPU queuing (mean)", "duration"),
    ("dnn_jct_mean", "DNN JCT (mean)", "duration"),
    ("cpu_jct_mean", "CPU JCT (mean)", "duration"),
    ("preemptions", "preemptions", "count"),
    ("probes_per_search", "allocator probes / search", "number"),
    ("detect_p50", "eliminator detect (median)", "duration"),
    ("recover_p50", "eliminator recover (median)", "duration"),
    ("unfinished", "jobs unfinished", "count"),
)
# Kept per run (runs.csv, results.json) but not aggregated.
EXTRA_METRICS = (
    "dnn_queue_p95",
    "cpu_queue_p95",
    "dnn_jct_p95",
    "cpu_jct_p95",
    "dnn_jobs",
    "cpu_jobs",
    "finished",
    "preempted_jobs",
    "preemption_lost_core_s",
    "contention_episodes",
    "contention_detected",
    "contention_unrecovered",
    "allocator_probes",
    "allocator_searches",
    "offered_gpu_load",
    "max_reachable_load",
    "time_scale",
    "wall_seconds",
)

# The three parts of a gain in effective GPU utilisation; they add up exactly because
# effective = allocated - lost_cores - lost_contention in every run.
TERMS = (
    ("allocated", "more GPUs allocated (jobs admitted on freed cores)"),
    ("cores", "less lost to too few cores (starved jobs sped up, minus search cost)"),
    ("contention", "less lost to contention (interference avoided)"),
)
UNSPLIT_LABEL = "less lost to cores + contention (not split: summaries lack gpu_lost_*)"


# ---------------------------------------------------------------- configuration


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
        ("--horizon", b.horizon, d.horizon),
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


# ---------------------------------------------------------------- one run's numbers


def _probes_per_search(summary: dict) -> tuple[float | None, float | None, float | None]:
    """(probes per search, probes, searches) from policy_stats.allocator, where reported."""
    alloc = lookup(summary, "policy_stats", "allocator")
    if not isinstance(alloc, dict):
        return None, None, None
    probes = finite(alloc.get("probes"))
    searches = None
    # Searches that ended (converged); the allocator's stats have used these names.
    for key in ("searches_converged", "converged", "searches"):
        searches = finite(alloc.get(key))
        if searches is not None:
            break
    per = finite(alloc.get("mean_probes_per_search"))
    if per is None and probes is not None and searches:
        per = probes / searches
    return per, probes, searches


def metrics_from_summary(summary: dict) -> dict[str, float | None]:
    """The numbers the experiment keeps from one run's summary; missing ones are None."""

    def g(*keys: str) -> float | None:
        return finite(lookup(summary, *keys))

    per_search, probes, searches = _probes_per_search(summary)
    return {
        "gpu_util_effective": g("gpu_util_effective"),
        "gpu_util_allocated": g("gpu_util_allocated"),
        "gpu_lost_cores": g("gpu_lost_cores"),
        "gpu_lost_contention": g("gpu_lost_contention"),
        "cpu_util": g("cpu_util"),
        "cpu_util_useful": g("cpu_util_useful"),
        "dnn_queue_mean": g("dnn_queue_delay_s", "mean"),
        "cpu_queue_mean": g("cpu_queue_delay_s", "mean"),
        "dnn_jct_mean": g("dnn_jct_s", "mean"),
        "cpu_jct_mean": g("cpu_jct_s", "mean"),
        "preemptions": g("preemption", "count"),
        "probes_per_search": per_search,
        "detect_p50": g("contention", "detect_s", "p50"),
        "recover_p50": g("contention", "recover_s", "p50"),
        "unfinished": g("jobs", "unfinished"),
        "dnn_queue_p95": g("dnn_queue_delay_s", "p95"),
        "cpu_queue_p95": g("cpu_queue_delay_s", "p95"),
        "dnn_jct_p95": g("dnn_jct_s", "p95"),
        "cpu_jct_p95": g("cpu_jct_s", "p95"),
        "dnn_jobs": g("jobs", "dnn"),
        "cpu_jobs": g("jobs", "cpu"),
        "finished": g("jobs", "finished"),
        "preempted_jobs": g("preemption", "jobs"),
        "preemption_lost_core_s": g("preemption", "lost_core_s"),
        "contention_episodes": g("contention", "episodes"),
        "contention_detected": g("contention", "detected"),
        "contention_unrecovered": g("contention", "unrecovered"),
        "allocator_probes": probes,
        "allocator_searches": searches,
        "offered_gpu_load": g("offered_gpu_load"),
        "max_reachable_load": g("max_reachable_load"),
        "time_scale": g("time_scale"),
        "wall_seconds": g("wall_seconds"),
    }


@dataclass
class RunRecord:
    """One run: which (kind, policy, load, seed, perturb, noise), its numbers, or its error."""

    kind: str  # "main" or "robustness"
    policy: str
    load: float
    seed: int
    perturb: float
    noise: float
    metrics: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)  # trace, cluster, profile set
    config: dict[str, Any] = field(default_factory=dict)  # the RunConfig, as a dict
    error: str | None = None
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def get(self, key: str) -> float | None:
        return self.metrics.get(key)

    @classmethod
    def from_summary(
        cls,
        kind: str,
        summary: dict,
        perturb: float = 0.0,
        noise: float = 0.05,
        policy: str | None = None,
    ) -> RunRecord:
        """``policy``: the registry name the run was asked for (default: the summary's)."""
        config = summary.get("config") if isinstance(summary.get("config"), dict) else {}
        notes = summary.get("notes") or []
        return cls(
            kind=kind,
            policy=policy or str(summary.get("policy")),
            load=float(summary["load"]),
            seed=int(summary["seed"]),
            perturb=float(config.get("perturb", perturb)),
            noise=float(config.get("noise", noise)),
            metrics=metrics_from_summary(summary),
            notes=[notes] if isinstance(notes, str) else [str(n) for n in notes],
            context={
                "trace": summary.get("trace"),
                "cluster": summary.get("cluster"),
                "profile_set": summary.get("profile_set"),
            },
            config=dict(config),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- running


@dataclass(frozen=True)
class Group:
    """Runs that share one prepared workload: every policy at one (kind, load, seed)."""

    kind: str
    config: RunConfig
    policies: tuple[str, ...]


def plan(cfg: ExperimentConfig) -> list[Group]:
    """The main grid (load x seed, every registered policy), then the robustness sweep."""
    cfg.validate()
    policies, _ = split_policies(cfg.policies)
    groups = [
        Group("main", replace(cfg.base, load=load, seed=seed), policies)
        for load in cfg.loads
        for seed in range(cfg.seeds)
    ]
    if cfg.robustness:
        rob = robustness_policies(cfg)
        groups += [
            Group(
                "robustness",
                replace(
                    cfg.base,
                    load=cfg.judged_load,
                    seed=seed,
                    perturb=cfg.perturb,
                    noise=cfg.noise,
                ),
                rob,
            )
            for seed in range(cfg.seeds)
        ]
    return [g for g in groups if g.policies]


def check_workloads(cfg: ExperimentConfig) -> None:
    """Prepare seed 0 of every load (and of the robustness sweep) in this process, so
    that bad input (a malformed trace, an unreachable load) fails at once with one
    message instead of once per run."""
    seen = set()
    for group in plan(cfg):
        key = (group.config.load, group.config.perturb)
        if key not in seen:
            seen.add(key)
            prepare(replace(group.config, seed=0))


def _error_record(group: Group, policy: str, exc: BaseException) -> RunRecord:
    c = group.config
    return RunRecord(
        kind=group.kind,
        policy=policy,
        load=float(c.load if c.load is not None else math.nan),
        seed=c.seed,
        perturb=c.perturb,
        noise=c.noise,
        config=asdict(c),
        error=f"{type(exc).__name__}: {exc}",
        traceback="".join(traceback.format_exception(exc)),
    )


def run_group(group: Group, on_run: Callable[[], None] | None = None) -> list[RunRecord]:
    """Prepare the workload once, run every policy on it. A failure is recorded with the
    run's config and the other runs go on."""
    try:
        prepared = prepare(group.config)
    except Exception as exc:  # noqa: BLE001 - reported per run, not swallowed
        records = [_error_record(group, p, exc) for p in group.policies]
        if on_run:
            for _ in records:
                on_run()
        return records
    records = []
    for policy in group.policies:
        try:
            summary = run_policy(prepared, policy).summary
            records.append(
                RunRecord.from_summary(
                    group.kind, summary, group.config.perturb, group.config.noise, policy
                )
            )
        except Exception as exc:  # noqa: BLE001
            records.append(_error_record(group, policy, exc))
        if on_run:
            on_run()
    return records


def _sort_key(cfg: ExperimentConfig) -> Callable[[RunRecord], tuple]:
    order = {p: i for i, p in enumerate(cfg.policies)}
    return lambda r: (r.kind != "main", r.load, r.seed, order.get(r.policy, len(order)))


@dataclass
class ExperimentResult:
    config: ExperimentConfig
    policies: tuple[str, ...]  # run
    skipped: tuple[str, ...]  # asked for but not registered
    records: list[RunRecord]
    wall_s: float
    analysis: Analysis

    @property
    def errors(self) -> list[RunRecord]:
        return [r for r in self.records if not r.ok]


def run_experiment(
    cfg: ExperimentConfig,
    progress: Callable[[int, int], None] | None = None,
) -> ExperimentResult:
    """Run the whole plan, inline (workers 1) or in a process pool; then analyse.
    ``progress(done, total)`` is called in this process as runs finish."""
    start = time.perf_counter()
    policies, skipped = split_policies(cfg.policies)
    groups = plan(cfg)
    total = sum(len(g.policies) for g in groups)
    done = 0
    if progress:
        progress(0, total)

    def tick(n: int = 1) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    workers = min(cfg.workers or os.cpu_count() or 1, max(len(groups), 1))
    records: list[RunRecord] = []
    if workers <= 1:
        for group in groups:
            records += run_group(group, on_run=tick)
    else:
        # spawn, not fork: the caller may run threads (the progress bar's refresher).
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(run_group, g): g for g in groups}
            for future in as_completed(futures):
                group = futures[future]
                try:
                    got = future.result()
                except Exception as exc:  # noqa: BLE001 - a worker died: record, go on
                    got = [_error_record(group, p, exc) for p in group.policies]
                records += got
                tick(len(got))
    records.sort(key=_sort_key(cfg))
    analysis = analyse(records, cfg, policies)
    return ExperimentResult(cfg, policies, skipped, records, time.perf_counter() - start, analysis)


# ---------------------------------------------------------------- statistics


def t_critical(df: int) -> float:
    """Two-sided 95% Student-t critical value; 1.96 beyond df 30."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else Z975


@dataclass(frozen=True)
class Estimate:
    """Mean over seeds with its 95% confidence half-width (None below two values)."""

    n: int
    mean: float | None
    half: float | None
    sd: float | None

    @property
    def low(self) -> float | None:
        return None if self.mean is None or self.half is None else self.mean - self.half

    @property
    def high(self) -> float | None:
        return None if self.mean is None or self.half is None else self.mean + self.half

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "mean": self.mean,
            "ci95_low": self.low,
            "ci95_high": self.high,
            "ci95_half": self.half,
            "sd": self.sd,
        }


def mean_ci(values: Iterable[float | None]) -> Estimate:
    """Mean and Student-t 95% CI of the finite values; None and NaN are left out."""
    xs = [x for v in values if (x := finite(v)) is not None]
    n = len(xs)
    if n == 0:
        return Estimate(0, None, None, None)
    mean = math.fsum(xs) / n
    if n == 1:
        return Estimate(1, mean, None, None)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    return Estimate(n, mean, t_critical(n - 1) * sd / math.sqrt(n), sd)


def _by_seed(records: Iterable[RunRecord], policy: str, load: float, kind: str) -> dict:
    return {
        r.seed: r
        for r in records
        if r.ok and r.kind == kind and r.policy == policy and r.load == load
    }


def paired(
    records: Sequence[RunRecord],
    policy: str,
    base: str,
    load: float,
    fn: Callable[[RunRecord, RunRecord], float | None],
    kind: str = "main",
) -> Estimate:
    """Mean and CI of fn(policy's run, base's run) over the seeds both have."""
    a, b = _by_seed(records, policy, load, kind), _by_seed(records, base, load, kind)
    return mean_ci(fn(a[s], b[s]) for s in sorted(a.keys() & b.keys()))


def relative_gain_pct(value: float | None, base: float | None) -> float | None:
    """100 * (value - base) / base; None where undefined."""
    if value is None or base is None or base == 0:
        return None
    return 100.0 * (value - base) / base


def _rel(key: str) -> Callable[[RunRecord, RunRecord], float | None]:
    return lambda a, b: relative_gain_pct(a.get(key), b.get(key))


def _diff(key: str) -> Callable[[RunRecord, RunRecord], float | None]:
    def fn(a: RunRecord, b: RunRecord) -> float | None:
        x, y = a.get(key), b.get(key)
        return None if x is None or y is None else x - y

    return fn


# Paired comparisons against the baseline: (key, label, kind, function).
GAINS = (
    ("gpu_gain_pct", "GPU util (effective), relative gain", "gain", _rel("gpu_util_effective")),
    (
        "gpu_alloc_gain_pct",
        "GPU util (allocated), relative gain",
        "gain",
        _rel("gpu_util_allocated"),
    ),
    ("cpu_queue_diff_s", "CPU queuing mean, difference", "duration", _diff("cpu_queue_mean")),
    ("dnn_queue_diff_s", "DNN queuing mean, difference", "duration", _diff("dnn_queue_mean")),
    ("dnn_jct_diff_s", "DNN JCT mean, difference", "duration", _diff("dnn_jct_mean")),
    ("cpu_jct_diff_s", "CPU JCT mean, difference", "duration", _diff("cpu_jct_mean")),
)


def aggregate(
    records: Sequence[RunRecord], policies: Sequence[str], loads: Sequence[float]
) -> dict[tuple[str, float], dict[str, Estimate]]:
    """Mean and CI over seeds of every METRICS key, per (policy, load), main runs only."""
    out = {}
    for policy in policies:
        for load in loads:
            runs = _by_seed(records, policy, load, "main").values()
            out[(policy, load)] = {k: mean_ci(r.get(k) for r in runs) for k, _, _ in METRICS}
    return out


def gains(
    records: Sequence[RunRecord], policies: Sequence[str], loads: Sequence[float], base: str
) -> dict[tuple[str, float], dict[str, Estimate]]:
    """Paired per-seed comparisons of every other policy with the baseline."""
    return {
        (p, load): {key: paired(records, p, base, load, fn) for key, _, _, fn in GAINS}
        for p in policies
        if p != base
        for load in loads
    }


# ---------------------------------------------------------------- decomposition


@dataclass(frozen=True)
class Decomposition:
    """Mean over seeds of (other - base) in effective GPU util, split exactly into the
    TERMS. All values are fractions of GPU capacity (x100 = percentage points)."""

    base: str
    other: str
    load: float
    seeds: int
    base_eff: float  # mean effective GPU util of the base
    gain: float  # mean difference in effective GPU util
    allocated: float
    less_lost: float  # gain - allocated = cores + contention
    cores: float | None  # None where the summaries do not split the loss
    contention: float | None
    residual: float | None  # less_lost - cores - contention; 0 if the summaries are consistent

    @property
    def split(self) -> bool:
        return self.cores is not None and self.contention is not None

    def relative(self, value: float | None) -> float | None:
        """A term as a share of the base's effective util, in %: the terms then add up
        to the relative gain of the mean utilisations."""
        return None if value is None or self.base_eff == 0 else 100.0 * value / self.base_eff

    @property
    def gain_pct(self) -> float | None:
        return self.relative(self.gain)

    def terms(self) -> list[tuple[str, str, float | None]]:
        """(key, label, value) of the parts, in TERMS order (one merged part if unsplit)."""
        if self.split:
            return [(k, label, getattr(self, k)) for k, label in TERMS]
        return [
            ("allocated", TERMS[0][1], self.allocated),
            ("less_lost", UNSPLIT_LABEL, self.less_lost),
        ]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gain_pct_of_base"] = self.gain_pct
        d["terms_pct_of_base"] = {k: self.relative(v) for k, _, v in self.terms()}
        return d


def decompose(
    records: Sequence[RunRecord], base: str, other: str, load: float, kind: str = "main"
) -> Decomposition | None:
    """Paired by seed: effective = allocated - lost_cores - lost_contention in each run, so
    delta effective = delta allocated + (less lost to cores) + (less lost to contention)."""
    a, b = _by_seed(records, other, load, kind), _by_seed(records, base, load, kind)
    rows = []
    for seed in sorted(a.keys() & b.keys()):
        o, s = a[seed], b[seed]
        eo, es = o.get("gpu_util_effective"), s.get("gpu_util_effective")
        ao, as_ = o.get("gpu_util_allocated"), s.get("gpu_util_allocated")
        if None in (eo, es, ao, as_):
            continue
        gain, allocated = eo - es, ao - as_
        parts = [s.get("gpu_lost_cores"), o.get("gpu_lost_cores")]
        parts += [s.get("gpu_lost_contention"), o.get("gpu_lost_contention")]
        if None in parts:
            cores = contention = None
        else:
            cores, contention = parts[0] - parts[1], parts[2] - parts[3]
        rows.append((es, gain, allocated, cores, contention))
    if not rows:
        return None

    def mean(i: int) -> float | None:
        xs = [r[i] for r in rows]
        return None if any(x is None for x in xs) else math.fsum(xs) / len(xs)

    gain, allocated = mean(1), mean(2)
    cores, contention = mean(3), mean(4)
    less_lost = gain - allocated
    residual = None if cores is None or contention is None else less_lost - cores - contention
    return Decomposition(
        base,
        other,
        load,
        len(rows),
        mean(0),
        gain,
        allocated,
        less_lost,
        cores,
        contention,
        residual,
    )


@dataclass(frozen=True)
class ChainStep:
    label: str
    step: Decomposition  # previous policy -> this one
    cumulative_pct: float | None  # this policy's gain over the baseline, % of baseline


def ablation_chain(
    records: Sequence[RunRecord],
    load: float,
    policies: Sequence[str],
    chain: Sequence[tuple[str, str]] = CHAIN,
    upper: str = UPPER_BOUND,
) -> list[ChainStep]:
    """baseline -> each ablation -> full CODA (the ones that ran), then the oracle's
    headroom over the last; each step decomposed like the headline gain."""
    present = [(p, label) for p, label in chain if p in policies]
    if len(present) < 2 or present[0][0] != chain[0][0]:
        return []
    base = present[0][0]
    steps = []
    links = list(zip(present, present[1:], strict=False))
    if upper in policies and upper != present[-1][0]:
        links.append((present[-1], (upper, f"{upper} (upper bound)")))
    for (prev, _), (cur, label) in links:
        step = decompose(records, prev, cur, load)
        total = decompose(records, base, cur, load)
        if step is None:
            continue
        # Each step relative to the baseline's util, so the steps add up to the total.
        step = replace(step, base_eff=total.base_eff if total else step.base_eff)
        steps.append(ChainStep(label, step, total.gain_pct if total else None))
    return steps


# ---------------------------------------------------------------- verdict


@dataclass(frozen=True)
class Condition:
    key: str  # "stress", "gpu_gain", "cpu_queue", "dnn_jct"
    label: str
    met: bool | None  # None: could not be judged (no data)
    detail: str  # one sentence with the numbers
    value: float | None = None
    target: float | None = None
    ci: Estimate | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "ci"}
        d["ci"] = self.ci.to_dict() if self.ci else None
        return d


@dataclass(frozen=True)
class LoadVerdict:
    load: float
    status: str  # "met", "not met", "undetermined", "not judged"
    conditions: tuple[Condition, ...]
    summary: str
    decomposition: Decomposition | None = None

    def failed(self) -> list[Condition]:
        return [c for c in self.conditions if c.met is False]

    def to_dict(self) -> dict[str, Any]:
        return {
            "load": self.load,
            "status": self.status,
            "summary": self.summary,
            "conditions": [c.to_dict() for c in self.conditions],
        }


def _tol(x: float) -> float:
    # Means of identical runs may differ in the last bits; that is not "longer".
    return 1e-9 * max(1.0, abs(x))


def _ci_text(est: Estimate, fmt: Callable[[float], str]) -> str:
    if est.low is None or est.high is None:
        return f"n={est.n}, no CI"
    return f"95% CI {fmt(est.low)} to {fmt(est.high)}, n={est.n}"


def signed(x: float, decimals: int) -> str:
    """'+1.23', '-0.40', and '0.00' (never '-0.00') for what rounds to zero."""
    text = f"{x:+.{decimals}f}"
    return "0." + "0" * decimals if float(text) == 0 else text


def _pct(x: float) -> str:
    return f"{signed(x, 1)}%"


def _dur_signed(x: float) -> str:
    return ("+" if x >= 0 else "-") + fmt_duration(abs(x))


def _no_longer(
    records: Sequence[RunRecord],
    key: str,
    what: str,
    load: float,
    base: str,
    subject: str,
    cond: str,
    kind: str = "main",
) -> Condition:
    """subject's mean `key` no higher than base's, judged on the paired difference."""
    est = paired(records, subject, base, load, _diff(key), kind)
    a, b = _by_seed(records, subject, load, kind), _by_seed(records, base, load, kind)
    seeds = sorted(a.keys() & b.keys())
    sv = [a[s].get(key) for s in seeds if a[s].get(key) is not None and b[s].get(key) is not None]
    bv = [b[s].get(key) for s in seeds if a[s].get(key) is not None and b[s].get(key) is not None]
    label = f"{what} no longer than {base}'s"
    if est.mean is None:
        return Condition(cond, label, None, f"{what}: no data for both {subject} and {base}")
    s_mean, b_mean = math.fsum(sv) / len(sv), math.fsum(bv) / len(bv)
    met = est.mean <= _tol(b_mean)
    head = (
        f"{subject}'s {what} is {fmt_duration(s_mean)} vs {base}'s {fmt_duration(b_mean)}"
        f" (difference {_dur_signed(est.mean)}"
    )
    rel = relative_gain_pct(s_mean, b_mean)
    if rel is not None and not met:
        head += f", {rel:+.1f}%"
    head += f"; {_ci_text(est, _dur_signed)})"
    if met:
        note = " - met"
        if est.high is not None and est.high > _tol(b_mean):
            note += " on the mean; the CI reaches above 0, so not significant"
    else:
        note = f" - NOT met: longer by {fmt_duration(est.mean)}"
        if est.low is not None and est.low <= 0:
            note += " on the mean; the CI reaches 0"
    return Condition(cond, label, met, head + note, est.mean, 0.0, est)


def judge_load(
    records: Sequence[RunRecord],
    load: float,
    base: str = BASELINE,
    subject: str = SUBJECT,
    target_pct: float = PAPER_GAIN_PCT,
    stress_s: float = DNN_QUEUE_STRESS_S,
    kind: str = "main",
) -> LoadVerdict:
    """The paper's claim at one load: the baseline queues DNN jobs (> stress_s mean),
    subject's relative effective-GPU-util gain >= target_pct, its CPU-job mean queuing
    and mean DNN JCT no higher than the baseline's. Judged on means over seeds; the CI
    says whether the margin is significant."""
    base_runs = _by_seed(records, base, load, kind)
    subj_runs = _by_seed(records, subject, load, kind)
    if not subj_runs or not base_runs:
        missing = subject if not subj_runs else base
        return LoadVerdict(
            load,
            "not judged",
            (),
            f"load {load:g}: not judged - no successful {missing} runs "
            "(not registered, not in the policies, or failed)",
        )
    conditions = []

    stress = mean_ci(r.get("dnn_queue_mean") for r in base_runs.values())
    if stress.mean is None:
        conditions.append(
            Condition("stress", "baseline queues DNN jobs", None, f"{base}: no DNN queuing data")
        )
    else:
        met = stress.mean > stress_s
        text = (
            f"{base}'s mean DNN queuing is {fmt_duration(stress.mean)} "
            f"({_ci_text(stress, fmt_duration)}); "
        )
        text += (
            f"above {stress_s:g} s, so GPUs are contended - met"
            if met
            else f"not above {stress_s:g} s: the GPUs are not contended at this load, "
            "so there is little for CODA to gain - NOT met"
        )
        label = f"{base} queues DNN jobs (mean > {stress_s:g} s)"
        conditions.append(Condition("stress", label, met, text, stress.mean, stress_s, stress))

    gain = paired(records, subject, base, load, _rel("gpu_util_effective"), kind)
    dec = decompose(records, base, subject, load, kind)
    label = f"effective GPU util gain >= {target_pct:g}%"
    if gain.mean is None:
        conditions.append(Condition("gpu_gain", label, None, "no paired GPU-util data"))
    else:
        met = gain.mean >= target_pct
        text = (
            f"{subject}'s effective GPU utilisation is {_pct(gain.mean)} relative to {base}'s "
            f"({_ci_text(gain, _pct)}; paired per seed)"
        )
        if met:
            text += " - met"
            if gain.low is not None and gain.low < target_pct:
                text += f" on the mean; the CI reaches below {target_pct:g}%, so not significant"
        else:
            text += f" - NOT met: {target_pct - gain.mean:.1f} points short of {target_pct:g}%"
            if gain.high is not None and gain.high >= target_pct:
                text += " on the mean; the CI reaches the target"
            if dec is not None:
                text += "; " + describe_decomposition(dec)
        conditions.append(Condition("gpu_gain", label, met, text, gain.mean, target_pct, gain))

    conditions.append(
        _no_longer(
            records,
            "cpu_queue_mean",
            "CPU-job mean queuing",
            load,
            base,
            subject,
            "cpu_queue",
            kind,
        )
    )
    conditions.append(
        _no_longer(records, "dnn_jct_mean", "mean DNN JCT", load, base, subject, "dnn_jct", kind)
    )

    flags = [c.met for c in conditions]
    if all(f is True for f in flags):
        status = "met"
    elif any(f is False for f in flags):
        status = "not met"
    else:
        status = "undetermined"
    if status == "met":
        summary = f"load {load:g}: claim MET ({_pct(gain.mean)} effective GPU util vs {base})"
    elif status == "not met":
        failed = "; ".join(c.label for c in conditions if c.met is False)
        summary = f"load {load:g}: claim NOT MET - failed: {failed}"
    else:
        summary = f"load {load:g}: undetermined - some conditions have no data"
    return LoadVerdict(load, status, tuple(conditions), summary, dec)


def describe_decomposition(dec: Decomposition) -> str:
    """'decomposition: +3.1 pp from more GPUs allocated (...), ...' in points of capacity."""
    parts = [f"{signed(100 * v, 2)} pp {label}" for _, label, v in dec.terms() if v is not None]
    return "decomposition (points of GPU capacity): " + ", ".join(parts)


# ---------------------------------------------------------------- robustness


@dataclass(frozen=True)
class RobustSeed:
    seed: int
    base_eff: float | None
    subject_eff: float | None
    gain_pct: float | None
    base_cpu_queue: float | None
    subject_cpu_queue: float | None
    base_dnn_jct: float | None
    subject_dnn_jct: float | None
    gpu_better: bool | None
    cpu_queue_ok: bool | None
    dnn_jct_ok: bool | None
    holds: bool | None  # all three
    meets_target: bool | None  # gain >= the paper's 20.8% as well


@dataclass(frozen=True)
class Robustness:
    load: float
    perturb: float
    noise: float
    subject: str
    base: str
    rows: tuple[RobustSeed, ...]
    status: str  # "survives", "does not survive", "not judged"
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _leq(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else a <= b + _tol(b)


def robustness(
    records: Sequence[RunRecord],
    load: float,
    perturb: float,
    noise: float,
    base: str = BASELINE,
    subject: str = SUBJECT,
    target_pct: float = PAPER_GAIN_PCT,
) -> Robustness | None:
    """Per seed of the robustness sweep: does subject still beat base on effective GPU
    util, with CPU-job mean queuing no higher and mean DNN JCT no worse?"""
    b = _by_seed(records, base, load, "robustness")
    s = _by_seed(records, subject, load, "robustness")
    if not any(r.kind == "robustness" for r in records):
        return None
    rows = []
    for seed in sorted(b.keys() | s.keys()):
        br, sr = b.get(seed), s.get(seed)

        def g(r: RunRecord | None, key: str) -> float | None:
            return None if r is None else r.get(key)

        be, se = g(br, "gpu_util_effective"), g(sr, "gpu_util_effective")
        gain = relative_gain_pct(se, be)
        better = None if gain is None else gain > 0
        cpu_ok = _leq(g(sr, "cpu_queue_mean"), g(br, "cpu_queue_mean"))
        jct_ok = _leq(g(sr, "dnn_jct_mean"), g(br, "dnn_jct_mean"))
        checks = (better, cpu_ok, jct_ok)
        holds = False if False in checks else (None if None in checks else True)
        rows.append(
            RobustSeed(
                seed,
                be,
                se,
                gain,
                g(br, "cpu_queue_mean"),
                g(sr, "cpu_queue_mean"),
                g(br, "dnn_jct_mean"),
                g(sr, "dnn_jct_mean"),
                better,
                cpu_ok,
                jct_ok,
                holds,
                None if gain is None else gain >= target_pct,
            )
        )
    judged = [r for r in rows if r.holds is not None]
    held = sum(1 for r in judged if r.holds)
    where = (
        f"Robustness (load {load:g}, profiles perturbed ±{100 * perturb:g}%, "
        f"sample noise {noise:g})"
    )
    if not s:
        status, summary = "not judged", f"{where}: not judged - no {subject} runs"
    elif judged and held == len(rows):
        status = "survives"
        summary = (
            f"{where}: the conclusion survives - {subject} beats {base} on "
            f"effective GPU util with CPU-job queuing and DNN JCT no worse in all "
            f"{len(rows)} seeds"
        )
    else:
        status = "does not survive"
        summary = (
            f"{where}: holds in {held} of {len(rows)} seeds "
            f"(seeds where it fails: "
            f"{', '.join(str(r.seed) for r in rows if r.holds is not True)})"
        )
    met = sum(1 for r in rows if r.meets_target)
    if s:
        summary += f"; the gain reaches {target_pct:g}% in {met} of {len(rows)} seeds"
    return Robustness(load, perturb, noise, subject, base, tuple(rows), status, summary)


# ---------------------------------------------------------------- everything together


@dataclass
class Analysis:
    loads: tuple[float, ...]
    policies: tuple[str, ...]
    base: str
    subject: str
    judged_load: float
    stats: dict[tuple[str, float], dict[str, Estimate]]
    gains: dict[tuple[str, float], dict[str, Estimate]]
    decomposition: dict[float, Decomposition | None]
    chain: dict[float, list[ChainStep]]
    verdicts: dict[float, LoadVerdict]
    robustness: Robustness | None
    notes: list[tuple[str, int]]  # (note, number of runs that gave it)

    @property
    def headline(self) -> LoadVerdict:
        return self.verdicts[self.judged_load]

    def met_at(self) -> list[float]:
        return [load for load, v in self.verdicts.items() if v.status == "met"]

    def to_dict(self) -> dict[str, Any]:
        def cells(table: dict) -> list[dict]:
            return [
                {"policy": p, "load": load, **{k: e.to_dict() for k, e in metrics.items()}}
                for (p, load), metrics in table.items()
            ]

        return {
            "baseline": self.base,
            "subject": self.subject,
            "headline_load": self.judged_load,
            "verdict": {
                "headline": self.headline.to_dict(),
                "met_at_loads": self.met_at(),
                "per_load": [v.to_dict() for v in self.verdicts.values()],
                "robustness": self.robustness.status if self.robustness else None,
            },
            "aggregates": cells(self.stats),
            "gains_vs_baseline": cells(self.gains),
            "decomposition": [d.to_dict() for d in self.decomposition.values() if d is not None],
            "ablation_chain": [
                {
                    "load": load,
                    "steps": [
                        {"label": s.label, "cumulative_pct": s.cumulative_pct, **s.step.to_dict()}
                        for s in steps
                    ],
                }
                for load, steps in self.chain.items()
                if steps
            ],
            "robustness": self.robustness.to_dict() if self.robustness else None,
            "notes": [{"note": n, "runs": k} for n, k in self.notes],
        }


def dedup_notes(records: Iterable[RunRecord]) -> list[tuple[str, int]]:
    """Every distinct note with the number of runs that gave it, in first-seen order."""
    counts: Counter[str] = Counter()
    for r in records:
        counts.update(dict.fromkeys(r.notes, 1))
    return list(counts.items())


def analyse(
    records: Sequence[RunRecord], cfg: ExperimentConfig, policies: Sequence[str] | None = None
) -> Analysis:
    """Statistics, decomposition, verdicts and robustness from the records."""
    if policies is None:
        policies = split_policies(cfg.policies)[0]
    policies = tuple(policies)
    loads = tuple(cfg.loads)
    return Analysis(
        loads=loads,
        policies=policies,
        base=cfg.baseline,
        subject=cfg.subject,
        judged_load=cfg.judged_load,
        stats=aggregate(records, policies, loads),
        gains=gains(records, policies, loads, cfg.baseline),
        decomposition={load: decompose(records, cfg.baseline, cfg.subject, load) for load in loads},
        chain={load: ablation_chain(records, load, policies) for load in loads},
        verdicts={load: judge_load(records, load, cfg.baseline, cfg.subject) for load in loads},
        robustness=robustness(
            records, cfg.judged_load, cfg.perturb, cfg.noise, cfg.baseline, cfg.subject
        ),
        notes=dedup_notes(records),
    )


def describe_loads(loads: Sequence[float]) -> str:
    return ", ".join(fmt_number(x) for x in loads)
