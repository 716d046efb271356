"""`coda experiment cpu-harm`: what co-location costs each CPU job, on several workloads,
beside what it gains the GPUs (docs/metrics.md, "CPU jobs' harm").

Each workload runs FIFO, DRF, CODA without its harm budget (``coda-unbounded``, CODA
as the paper describes it) and CODA on the same jobs; every CPU job's execution (first
start to end) is compared with the same job's under FIFO in the same run. The
workloads: the bundled openb trace on the paper's cluster at loads 1.0 and 1.5, the
same at 1.5 with every CPU-only pod submitted twice, the paper's month, the paper's
month with CPU runtimes of days (a median of one day, as many CPU core-hours), and a
trace the user names (Helios, ...).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coda.experiment.paper import PaperConfig
from coda.experiment.pool import run_each
from coda.sim.cpu_harm import cpu_stretch
from coda.study.config import MAX_SEED, RunConfig
from coda.workload.generate import generate
from coda.workload.traces import bundled_trace_path, load_trace
from coda.workload.traces.generic_csv import write_csv

POLICIES = ("fifo", "drf", "coda-unbounded", "coda")
# The workloads, by name (``trace``: the user's --trace).
CASES = ("openb-1.0", "openb-1.5", "openb-cpu-twice-1.5", "paper-month", "paper-month-cpu-days",
         "paper-month-cpu-days-half-ckpt", "trace")  # fmt: skip
HALF = 0.5  # the share of CPU jobs that checkpoint in the "-half-ckpt" workload
GAIN_NOISE = 1e-9  # a gain this close to 0 judges nothing
BASELINE = "fifo"
BEFORE, AFTER = "coda-unbounded", "coda"
DAY_S = 86_400.0
# The targets for CODA on every workload (vs FIFO on the same jobs).
OVER_1_5X_MAX = 0.01
OVER_2X_MAX = 0.0
JCT_RATIO_MAX = 1.05
GAIN_KEPT_MIN = 0.90  # CODA's gain in work done over FIFO, of CODA-unbounded's

# What each run reports: (key, label, unit). Keys from the summary and its paper block.
KEYS: tuple[tuple[str, str, str], ...] = (
    ("gpu_util_effective", "GPU work done", "share"),
    ("gpu_util_busy", "busy share of active GPUs", "share"),
    ("cpu_jct_ratio", "CPU JCT mean, x FIFO", "x"),
    ("cpu_within_180s_share", "CPU jobs placed within 3 min", "share"),
    ("stretch_p99", "stretch vs FIFO p99", "x"),
    ("stretch_max", "stretch vs FIFO max", "x"),
    ("stretch_over_1_5x_share", "over 1.5x FIFO", "share"),
    ("stretch_over_2x_share", "over 2x FIFO", "share"),
    ("cpu_slowdown_p99", "slowdown vs alone p99", "x"),
    ("cpu_throttled_s_mean", "throttled mean", "s"),
    ("cpu_throttled_s_max", "throttled max", "s"),
    ("cpu_shrunk_s_mean", "shrunk mean", "s"),
    ("cpu_lost_core_s_mean", "work lost mean (core-s)", "n"),
    ("cpu_lost_core_s_max", "work lost max (core-s)", "n"),
    ("cpu_preempted_share", "CPU jobs preempted", "share"),
)


@dataclass(frozen=True)
class HarmCase:
    """One workload: its label and its run's setting for a seed (traces it needs are
    written before the pool starts, as ``files(seed)`` names them)."""

    name: str
    label: str
    config: Callable[[int], RunConfig]


@dataclass(frozen=True)
class HarmStudyConfig:
    out: Path
    seeds: int = 1
    first_seed: int = 0
    jobs: int | None = None  # the paper months' jobs (None: the preset's 100,000)
    trace: str | None = None  # a trace of the user's, run beside the others
    format: str | None = None
    cluster: str | None = None  # --trace's (None: the paper cluster)
    load: float | None = None  # --trace's offered GPU load (None: 1.5)
    cases: tuple[str, ...] | None = None  # only these (by name); None: every one
    workers: int = 1
    tune: dict[str, str] = field(default_factory=dict)  # AFTER's knobs (``coda`` only)

    def validate(self) -> None:
        """Every option, and --trace and --cluster read once, before any run."""
        if self.seeds < 1 or self.first_seed < 0:
            raise ValueError("--seeds must be >= 1 and --first-seed >= 0")
        if self.first_seed + self.seeds - 1 > MAX_SEED:
            raise ValueError(
                f"--first-seed {self.first_seed} with --seeds {self.seeds} passes the last "
                f"seed, {MAX_SEED}"
            )
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.tune:
            from coda.policy import PolicyOptions, make_policy

            try:  # checked once here: a bad knob stops before any run
                make_policy(AFTER, PolicyOptions(tune=self.tune))
            except ValueError as e:
                raise ValueError(f"--tune: {e}") from None
        if self.trace is None:
            for name, v in (("--format", self.format), ("--cluster", self.cluster),
                            ("--load", self.load)):  # fmt: skip
                if v is not None:
                    raise ValueError(f"{name} is --trace's; no --trace is given")
        if self.load is not None and not 0.0 < self.load <= 1000.0:
            raise ValueError(f"--load must be in (0, 1000], got {self.load}")
        if self.jobs is not None and self.jobs < 100:
            raise ValueError(f"--jobs must be >= 100, got {self.jobs}")
        if self.cases is not None:
            if not self.cases:
                raise ValueError("--cases names no workload")
            for name in self.cases:
                if name not in CASES:
                    raise ValueError(f"--cases: unknown {name!r}; known: {', '.join(CASES)}")
            if "trace" in self.cases and self.trace is None:
                raise ValueError("--cases: 'trace' needs --trace")
            if self.trace is not None and "trace" not in self.cases:
                raise ValueError("--trace is given but --cases leaves 'trace' out")
        if self.trace is not None:
            from coda.study.run import prepare

            try:  # read once here: a bad trace or cluster stops before any run
                prepare(self.trace_config(self.first_seed))
            except (ValueError, OSError) as e:
                raise ValueError(f"--trace {self.trace}: {e}") from None

    def trace_config(self, seed: int) -> RunConfig:
        return RunConfig(
            trace=self.trace,
            format=self.format,
            cluster=self.cluster or "paper",
            load=self.load if self.load is not None else 1.5,
            seed=seed,
        )


def _month(cfg: HarmStudyConfig) -> PaperConfig:
    return PaperConfig(out=cfg.out, jobs=cfg.jobs, seeds=cfg.seeds, first_seed=cfg.first_seed)


def _days_params(cfg: HarmStudyConfig) -> Any:
    """The paper month with CPU runtimes of days: the same DNN jobs, CPU jobs a day long
    at the median, and as few of them as keep the month's CPU core-hours."""
    base = _month(cfg).params()
    n_dnn = base.n_jobs * (1.0 - base.cpu_share)
    n_cpu = base.n_jobs * base.cpu_share * base.cpu_runtime_median_s / DAY_S
    return dataclasses.replace(
        base,
        n_jobs=int(round(n_dnn + n_cpu)),
        cpu_share=n_cpu / (n_dnn + n_cpu),
        cpu_runtime_median_s=DAY_S,
        cpu_min_runtime_s=min(base.cpu_min_runtime_s, DAY_S),
    )


def build_cases(cfg: HarmStudyConfig, write: bool = True) -> list[HarmCase]:
    """Every workload, its traces written into ``cfg.out`` where ``write``."""
    out = cfg.out
    doubled = out / "openb-cpu-twice.csv"
    month = _month(cfg)

    def openb(load: float) -> Callable[[int], RunConfig]:
        return lambda seed: RunConfig(cluster="paper", load=load, seed=seed)

    def generated(prefix: str, checkpoint_share: float = 1.0) -> Callable[[int], RunConfig]:
        return lambda seed: RunConfig(
            trace=str(out / f"{prefix}-seed{seed}.csv"), cluster="paper", load=None, seed=seed,
            cpu_checkpoint_share=checkpoint_share,
        )  # fmt: skip

    cases = [
        HarmCase("openb-1.0", "openb, load 1.0", openb(1.0)),
        HarmCase("openb-1.5", "openb, load 1.5", openb(1.5)),
        HarmCase(
            "openb-cpu-twice-1.5",
            "openb with every CPU-only pod twice, load 1.5",
            lambda seed: RunConfig(
                trace=str(doubled), format="csv", cluster="paper", load=1.5, seed=seed
            ),
        ),
        HarmCase("paper-month", "the paper's month", generated("paper-month")),
        HarmCase(
            "paper-month-cpu-days",
            "the paper's month, CPU jobs a day long",
            generated("paper-month-cpu-days"),
        ),
        HarmCase(
            "paper-month-cpu-days-half-ckpt",
            "the paper's month, CPU jobs a day long, half of them never checkpointing",
            generated("paper-month-cpu-days", HALF),
        ),
    ]
    if cfg.trace is not None:
        tc = cfg.trace_config(cfg.first_seed)
        label = f"{Path(cfg.trace).name} on {tc.cluster}, load {tc.load:g}"
        cases.append(HarmCase("trace", label, cfg.trace_config))
    if cfg.cases is not None:
        cases = [c for c in cases if c.name in cfg.cases]
    if write:
        out.mkdir(parents=True, exist_ok=True)
        names = {c.name for c in cases}
        if "openb-cpu-twice-1.5" in names:
            write_csv(cpu_twice(bundled_trace_path()), doubled)
        seeds = range(cfg.first_seed, cfg.first_seed + cfg.seeds)
        days = {"paper-month-cpu-days", "paper-month-cpu-days-half-ckpt"}
        for wanted, name, params in (
            ({"paper-month"}, "paper-month", month.params()),
            (days, "paper-month-cpu-days", _days_params(cfg)),
        ):
            if wanted & names:
                for seed in seeds:
                    write_csv(generate(params, seed), out / f"{name}-seed{seed}.csv")
    return cases


def cpu_twice(path: Path) -> Any:
    """The trace with every CPU-only job submitted a second time (same submit time,
    its id suffixed '#again')."""
    table = load_trace(path).jobs
    cpu = np.flatnonzero(np.asarray(table.gpus) == 0)
    both = table.take(np.concatenate([np.arange(len(table)), cpu]))
    both.ids = list(table.ids) + [f"{table.ids[i]}#again" for i in cpu.tolist()]
    return both.sorted_by_submit()


@dataclass(frozen=True)
class HarmRun:
    case: str
    seed: int
    config: RunConfig
    tune: dict[str, str] = field(default_factory=dict)  # AFTER's knobs only


@dataclass
class HarmRecord:
    case: str
    seed: int
    wall_s: float
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None


def run_case(run: HarmRun) -> HarmRecord:
    """Every policy on one workload and seed, FIFO first; each CPU job's execution
    against FIFO's. A failure is the record's one-line error."""
    from coda.study.run import prepare, run_policy

    start = time.perf_counter()
    try:
        prepared = prepare(run.config)
        base = run_policy(prepared, BASELINE)
        out: dict[str, dict[str, Any]] = {}
        base_jct = base.summary["paper"].get("cpu_jct_mean_s")
        tuned = dataclasses.replace(
            prepared, config=prepared.config.varied(policy={"tune": run.tune})
        )
        for name in POLICIES:
            if name == BASELINE:
                res = base
            else:
                res = run_policy(tuned if name == AFTER and run.tune else prepared, name)
            paper = res.summary["paper"]
            m = {k: paper.get(k) for k, _, _ in KEYS if k in paper}
            m["gpu_util_effective"] = res.summary.get("gpu_util_effective")
            m["gpu_util_busy"] = res.summary.get("gpu_util_busy")
            jct = paper.get("cpu_jct_mean_s")
            m["cpu_jct_ratio"] = jct / base_jct if jct and base_jct else None
            stretch = cpu_stretch(res, base, BASELINE)
            m.update({k: v for k, v in stretch.items() if k.startswith("stretch")})
            m["stretch_jobs"] = stretch["jobs"]
            out[name] = m
    except Exception as exc:  # noqa: BLE001 - recorded, the other workloads go on
        text = " ".join(str(exc).split()) or type(exc).__name__
        return HarmRecord(run.case, run.seed, time.perf_counter() - start,
                          error=f"{type(exc).__name__}: {text}")  # fmt: skip
    return HarmRecord(run.case, run.seed, time.perf_counter() - start, out)


def plan(cfg: HarmStudyConfig, cases: Sequence[HarmCase]) -> list[HarmRun]:
    seeds = range(cfg.first_seed, cfg.first_seed + cfg.seeds)
    return [HarmRun(c.name, s, c.config(s), dict(cfg.tune)) for c in cases for s in seeds]


def run_all(
    runs: Sequence[HarmRun], workers: int, on_done: Callable[[HarmRecord, int, int], None]
) -> list[HarmRecord]:
    records: list[HarmRecord] = []

    def failed(run: HarmRun, exc: Exception) -> HarmRecord:
        return HarmRecord(run.case, run.seed, 0.0, error=f"{type(exc).__name__}: {exc}")

    def done(_i: int, rec: HarmRecord) -> None:
        records.append(rec)
        on_done(rec, len(records), len(runs))

    run_each(runs, run_case, workers, failed, done)
    return records


def _combine(values: list[Any], key: str) -> float | None:
    xs = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    if not xs:
        return None
    return max(xs) if key.endswith("_max") else float(np.mean(xs))


def summarise(
    cfg: HarmStudyConfig, cases: Sequence[HarmCase], records: Sequence[HarmRecord]
) -> dict[str, Any]:
    """Per workload and policy, each key over seeds (maxima: the largest, the rest the
    mean), CODA's gains over FIFO and the targets' verdict."""
    out: dict[str, Any] = {
        "setting": {
            "seeds": cfg.seeds,
            "first_seed": cfg.first_seed,
            "jobs": cfg.jobs,
            "policies": list(POLICIES),
            "baseline": BASELINE,
        },  # fmt: skip
        "targets": {
            "over_1_5x_max": OVER_1_5X_MAX,
            "over_2x_max": OVER_2X_MAX,
            "jct_ratio_max": JCT_RATIO_MAX,
            "gain_kept_min": GAIN_KEPT_MIN,
        },  # fmt: skip
        "cases": [],
        "errors": [{"case": r.case, "seed": r.seed, "error": r.error} for r in records if r.error],
    }
    for case in cases:
        ok = [r for r in records if r.case == case.name and r.error is None]
        per: dict[str, dict[str, Any]] = {}
        for p in POLICIES:
            keys = sorted({k for r in ok for k in r.policies.get(p, {})})
            per[p] = {k: _combine([r.policies[p].get(k) for r in ok], k) for k in keys}
        block: dict[str, Any] = {"name": case.name, "label": case.label, "runs": len(ok),
                                 "policies": per}  # fmt: skip
        block["gain"] = {p: _gain(per, p) for p in (BEFORE, AFTER)}
        block["verdict"] = _verdict(per, block["gain"]) if ok else []
        out["cases"].append(block)
    return out


def _gain(per: dict[str, dict[str, Any]], policy: str) -> float | None:
    base = per.get(BASELINE, {}).get("gpu_util_effective")
    v = per.get(policy, {}).get("gpu_util_effective")
    return v / base - 1.0 if base and v is not None else None


def _verdict(per: dict[str, dict[str, Any]], gain: dict[str, float | None]) -> list[str]:
    after = per.get(AFTER, {})

    def line(ok: bool | None, text: str) -> str:
        return ("NOT MEASURED" if ok is None else "met" if ok else "MISSED") + f": {text}"

    def value(k: str) -> float | None:
        v = after.get(k)
        return float(v) if isinstance(v, int | float) else None

    over15, over2 = value("stretch_over_1_5x_share"), value("stretch_over_2x_share")
    jct, n = value("cpu_jct_ratio"), value("stretch_jobs")
    g0, g1 = gain.get(BEFORE), gain.get(AFTER)
    kept = g1 / g0 if g0 is not None and g1 is not None and g0 > GAIN_NOISE else None

    def fmt(v: float | None, f: str) -> str:
        return "-" if v is None else f.format(v)

    def share(v: float | None) -> str:  # a share with the jobs it is of
        return fmt(v, "{:.2%}") + ("" if v is None or n is None else f" ({v * n:.0f} of {n:.0f})")

    return [
        line(None if over15 is None else over15 <= OVER_1_5X_MAX,
             f"CPU jobs over 1.5x FIFO's execution {share(over15)} (<= 1%)"),
        line(None if over2 is None else over2 <= OVER_2X_MAX,
             f"CPU jobs over 2x {share(over2)} (none)"),
        line(None if jct is None else jct <= JCT_RATIO_MAX,
             f"CPU JCT mean {fmt(jct, '{:.3f}')}x FIFO's (<= 1.05x)"),
        line(None if kept is None else kept >= GAIN_KEPT_MIN,
             f"gain in work done {fmt(g1, '{:+.1%}')} against {fmt(g0, '{:+.1%}')} unbounded "
             f"({fmt(kept, '{:.0%}')} kept, >= 90%)"),
    ]  # fmt: skip
