"""`coda experiment paper --fit`: the paper workload's unpublished parts fitted to every
figure the paper publishes for its *baselines* (FIFO and DRF), never to CODA's.

The workload is the paper's month at the paper's rate (100,000 jobs in 30 days, no
compression). What the paper does not give is a knob (`knobs_for`): the DNN runtime tail
beyond 2 h, GPUs per job, CPU-job cores and runtimes, the daily arrival shape, the NLP
share of the DNN jobs that do not train speech, the per-user mix, and, where the reading
of Figure 2b leaves it open, the speech share. A candidate is judged by running fifo and
drf on its workload (on the fit seeds, never an evaluation seed) and comparing each
figure the paper publishes for them in its evaluation month (`FIGURES`: Section VI,
Figures 10 and 11) with ours, averaged over the fit seeds: a figure's distance is its
error in units of its tolerance (the targets' 5 points for single figures, 8 for
queuing-CDF points), and a candidate's distance is the mean of the squared figure
distances.

The search is seeded and deterministic: the preset's own point and a Latin hypercube
over the knobs' box (a quarter of the budget), then coordinate steps from the best
candidate (each knob up and down by an eighth of its box, a step that halves when a
pass finds nothing better), until the budget of candidates is spent.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np

from coda.experiment.paper import POLICY_OPTIONS, PaperRecord, Run, run_many
from coda.experiment.published import MONTH
from coda.study.config import RunConfig
from coda.workload.generate import PaperParams, generate, write_csv
from coda.workload.generate.paper import REQUEST_BANDS, request_histogram, speech_share_bounds

# The workload seeds the fit runs on (each candidate's figures are their means); the
# experiment evaluates seeds 0, 1, 2, ..., none of which the fit saw (the hold-out).
FIT_SEEDS = (1000, 1001)
FIT_SEED = FIT_SEEDS[0]
DEFAULT_BUDGET = 64  # candidates
BASELINES = ("fifo", "drf")
CLUSTER = "paper"


@dataclass(frozen=True)
class Figure:
    """One published baseline figure: our metric `key` under `policy` against `paper`.

    `kind` "value": the error counts both ways; "at_most" / "at_least": only past the
    bound. `tolerance` is the error that counts as 1."""

    key: str
    policy: str
    paper: float
    label: str
    source: str
    kind: str = "value"
    tolerance: float = 0.05

    def distance(self, ours: float | None) -> float | None:
        if ours is None or not math.isfinite(ours):
            return None
        err = ours - self.paper
        if self.kind == "at_most":
            err = max(err, 0.0)
        elif self.kind == "at_least":
            err = min(err, 0.0)
        return abs(err) / self.tolerance


# In the search, a figure counts at most this many tolerances: a queue that grows all
# month (p99 of days) must not outweigh every other figure, or the search keeps to
# candidates where nothing queues at all.
DISTANCE_CAP = 5.0


_SINGLE = 0.05  # a single figure: the targets allow 5 points
_CDF = 0.08  # a queuing-CDF point: the targets allow 8 points
# Every figure the paper publishes for its baselines in the evaluation month (Section
# VI, Figures 10 and 11: coda.experiment.published), one per baseline it gives.
FIGURES: tuple[Figure, ...] = tuple(
    Figure(
        p.key, policy, p.values[policy][0], p.label, p.source,
        tolerance=_CDF if p.cdf else _SINGLE,
    )
    for p in MONTH
    for policy in ("fifo", "drf")
    if policy in p.values
)  # fmt: skip


@dataclass(frozen=True)
class Knob:
    """One unpublished part of the workload, searched over [low, high] (log-spaced
    where `log`)."""

    name: str
    low: float
    high: float
    what: str
    log: bool = False

    def at(self, u: float) -> float:
        """The knob's value at position u in [0, 1] of its box."""
        u = min(max(float(u), 0.0), 1.0)
        if self.log:
            return math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        return self.low + u * (self.high - self.low)

    def position(self, v: float) -> float:
        if self.log:
            return (math.log(v) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (v - self.low) / (self.high - self.low)


# The knobs every reading searches. Each box holds every value the paper's text allows
# and more: the paper gives none of these.
COMMON_KNOBS: tuple[Knob, ...] = (
    Knob("dnn_tail_log_mean", 0.2, 1.5, "DNN runtime tail beyond 2 h (mean of ln(t / 2 h))"),
    # Above 0.7, too few 1-2 GPU jobs are left for Figure 2d's >= 10 cores per GPU band.
    Knob("multi_gpu_share", 0.05, 0.7, "share of DNN jobs with more than one GPU"),
    Knob("four_gpu_share", 0.05, 0.95, "of those, the share with 4 GPUs (the rest 2)"),
    Knob("cpu_runtime_median_s", 120.0, 14_400.0, "CPU-job runtime median (s)", log=True),
    Knob("cpu_runtime_sigma", 0.5, 2.5, "CPU-job runtime sigma of ln s"),
    Knob(
        "cpu_cores_ratio",
        0.2,
        1.5,
        "CPU-job cores: weight of 1, 2, 4, 8, 16 as r^0..r^4",
        log=True,
    ),
    Knob("daily_amplitude", 0.0, 0.9, "daily arrival cycle's amplitude"),
    Knob("nlp_of_rest", 0.0, 1.0, "of the DNN jobs not training speech, the NLP share"),
    Knob("user_zipf", 0.3, 2.0, "per-user mix: job share of user k as 1 / (k + 1)^s"),
)


def knobs_for(base: PaperParams) -> tuple[Knob, ...]:
    """The knobs searched under `base`'s reading of Figure 2b: the speech share of DNN
    jobs too where the reading leaves it open ("all": a range), not where it fixes it."""
    lo, hi = speech_share_bounds(base.speech_reading)
    if hi - lo < 1e-9:
        return COMMON_KNOBS
    speech = Knob("speech_share", lo, hi, "share of DNN jobs training speech models (Fig. 2b)")
    return (*COMMON_KNOBS, speech)


KNOBS: tuple[Knob, ...] = knobs_for(PaperParams())
KNOB_NAMES = tuple(k.name for k in KNOBS)


def params_for(values: Mapping[str, float], base: PaperParams | None = None) -> PaperParams:
    """The paper workload's parameters with the knobs at `values` (month, paper rate);
    the speech share is `base`'s reading's where the knobs do not give it."""
    base = base or PaperParams()
    v = dict(values)
    multi, four = v["multi_gpu_share"], v["four_gpu_share"]
    r = v["cpu_cores_ratio"]
    lo, hi = speech_share_bounds(base.speech_reading)
    speech = min(max(v.get("speech_share", lo), lo), hi)
    nlp = (1.0 - speech) * v["nlp_of_rest"]
    return dataclasses.replace(
        base,
        arrival_scale=1.0,
        dnn_tail_log_mean=round(v["dnn_tail_log_mean"], 4),
        gpu_weights=_rounded((1.0 - multi, multi * (1.0 - four), multi * four)),
        cpu_runtime_median_s=round(v["cpu_runtime_median_s"]),
        cpu_runtime_sigma=round(v["cpu_runtime_sigma"], 4),
        cpu_core_weights=_rounded(tuple(r**k for k in range(len(base.cpu_core_counts)))),
        daily_amplitude=round(v["daily_amplitude"], 4),
        domain_weights=(
            ("nlp", round(nlp, 4)),
            ("speech", round(speech, 4)),
            ("cv", round(max(1.0 - speech - nlp, 0.0), 4)),
        ),
        user_zipf=round(v["user_zipf"], 4),
    )


def _rounded(ws: Sequence[float]) -> tuple[float, ...]:
    total = sum(ws)
    return tuple(round(w / total, 4) for w in ws)


def knob_values(params: PaperParams) -> dict[str, float]:
    """The knobs' values that `params` holds (the inverse of params_for)."""
    gw = params.gpu_weights
    multi = 1.0 - gw[0] / sum(gw)
    cw = params.cpu_core_weights
    dw = dict(params.domain_weights)
    total = sum(dw.values())
    speech = dw.get("speech", 0.0) / total
    rest = 1.0 - speech
    out = {
        "dnn_tail_log_mean": params.dnn_tail_log_mean,
        "multi_gpu_share": multi,
        "four_gpu_share": gw[2] / (gw[1] + gw[2]) if gw[1] + gw[2] else 0.5,
        "cpu_runtime_median_s": params.cpu_runtime_median_s,
        "cpu_runtime_sigma": params.cpu_runtime_sigma,
        "cpu_cores_ratio": cw[1] / cw[0] if cw[0] else 1.0,
        "daily_amplitude": params.daily_amplitude,
        "nlp_of_rest": dw.get("nlp", 0.0) / total / rest if rest > 1e-9 else 0.5,
        "user_zipf": params.user_zipf,
    }
    if "speech_share" in {k.name for k in knobs_for(params)}:
        out["speech_share"] = speech
    return out


@dataclass
class Candidate:
    """One point of the search: its knobs, and once run, the baselines' metrics."""

    values: dict[str, float]
    metrics: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    requests: dict[str, float] = dataclasses.field(default_factory=dict)
    error: str | None = None

    def figure_rows(self) -> list[dict[str, Any]]:
        return figure_table(self.metrics, self.requests)

    @property
    def distance(self) -> float:
        """Mean squared figure distance; a failed run or a missing figure is far away."""
        if self.error is not None or not self.metrics:
            return math.inf
        return table_distance(self.figure_rows())


def table_distance(rows: Sequence[Mapping[str, Any]]) -> float:
    """Mean squared figure distance of a fit table, each capped at DISTANCE_CAP (a
    missing figure counts as the cap: a statistic over no jobs or no queuing time)."""
    ds = [DISTANCE_CAP if r["distance"] is None else min(r["distance"], DISTANCE_CAP) for r in rows]
    return math.fsum(d * d for d in ds) / len(ds) if ds else math.inf


def figure_table(
    metrics: Mapping[str, Mapping[str, Any]], requests: Mapping[str, float]
) -> list[dict[str, Any]]:
    """The fit table: one row per published baseline figure (policy -> our metrics) and
    per band of Figure 2d (the workload's request histogram), ours and the distance."""
    rows = []
    for f in FIGURES:
        ours = metrics.get(f.policy, {}).get(f.key)
        rows.append(
            {
                "figure": f.label,
                "key": f.key,
                "policy": f.policy,
                "source": f.source,
                "kind": f.kind,
                "paper": f.paper,
                "ours": ours,
                "distance": f.distance(ours),
            }
        )
    for key, band, _, _, paper in REQUEST_BANDS:
        ours = requests.get(key)
        rows.append(
            {
                "figure": f"DNN jobs asking {band} cores per GPU",
                "key": f"dnn_request_{key}",
                "policy": "workload",
                "source": "Fig. 2d",
                "kind": "value",
                "paper": paper,
                "ours": ours,
                "distance": None if ours is None else abs(ours - paper) / 0.05,
            }
        )
    return rows


def _lhs(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    """n points of a Latin hypercube in [0, 1]^dims."""
    cells = np.stack([rng.permutation(n) for _ in range(dims)], axis=1)
    return (cells + rng.random((n, dims))) / n


# Runs a batch of candidates (fifo and drf each), calling back as each one is done.
Evaluate = Callable[[list[Candidate], Callable[[Candidate], None]], None]


class FitSearch:
    """The seeded search over `knobs` (default KNOBS) within a budget of candidates."""

    def __init__(
        self,
        budget: int,
        seed: int,
        evaluate: Evaluate,
        start: Mapping[str, float] | None = None,
        on_candidate: Callable[[Candidate, int, int], None] | None = None,
        knobs: Sequence[Knob] = KNOBS,
    ) -> None:
        if budget < 2:
            raise ValueError(f"--fit-budget must be at least 2, got {budget}")
        self.budget = budget
        self.rng = np.random.default_rng([seed, 77])
        self.evaluate = evaluate
        self.start = dict(start) if start else None
        self.on_candidate = on_candidate
        self.knobs = tuple(knobs)
        self.tried: list[Candidate] = []

    def _run(self, batch: list[Candidate]) -> None:
        batch = batch[: self.budget - len(self.tried)]
        if not batch:
            return
        done: list[Candidate] = []

        def one_done(c: Candidate) -> None:
            done.append(c)
            if self.on_candidate:
                self.on_candidate(c, len(self.tried) + len(done), self.budget)

        self.evaluate(batch, one_done)
        self.tried += batch  # in batch order, whatever order they finished in

    def best(self) -> Candidate:
        return min(self.tried, key=lambda c: c.distance)

    def run(self) -> Candidate:
        n_random = max(1, self.budget // 4 - (1 if self.start else 0))
        points = _lhs(self.rng, n_random, len(self.knobs))
        batch = [
            Candidate({k.name: k.at(u) for k, u in zip(self.knobs, p, strict=True)}) for p in points
        ]
        if self.start:
            batch.insert(0, Candidate(dict(self.start)))
        self._run(batch)
        step = 0.125
        while len(self.tried) < self.budget and step > 1 / 128:
            improved = False
            for knob in self.knobs:
                if len(self.tried) >= self.budget:
                    break
                best = self.best()
                u = knob.position(best.values[knob.name])
                moves = [u + d for d in (-step, step) if 0.0 <= u + d <= 1.0]
                batch = [Candidate({**best.values, knob.name: knob.at(m)}) for m in moves]
                before = best.distance
                self._run(batch)
                improved |= self.best().distance < before
            if not improved:
                step /= 2
        return self.best()


def mean_metrics(per_seed: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each numeric metric's mean over the fit seeds; None where a seed lacks it or it is
    not a finite number on every seed (a figure with no value counts as missed)."""
    out: dict[str, Any] = {}
    keys = dict.fromkeys(k for m in per_seed for k in m)
    for key in keys:
        vals = [m.get(key) for m in per_seed]
        finite = [
            float(v)
            for v in vals
            if isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)
        ]
        if len(finite) == len(vals):
            out[key] = math.fsum(finite) / len(finite)
        elif all(isinstance(v, Real) or v is None for v in vals):
            out[key] = None
        else:  # not a number (a dict, a label): the first seed's
            out[key] = vals[0]
    return out


def evaluate_in_pool(
    workers: int, base: PaperParams | None = None, seeds: Sequence[int] = FIT_SEEDS
) -> Evaluate:
    """An `Evaluate` for FitSearch: each candidate's workload (its knobs on `base`) on
    each fit seed written to a temporary file, fifo and drf run on each in a process
    pool (run_many), each baseline's paper metrics averaged over the seeds."""
    base = base or PaperParams()

    def evaluate(batch: list[Candidate], one_done: Callable[[Candidate], None]) -> None:
        with tempfile.TemporaryDirectory(prefix="coda-fit-") as tmp:
            runs: list[Run] = []
            owner: list[Candidate] = []
            for i, cand in enumerate(batch):
                try:
                    params = params_for(cand.values, base)
                    tables = [generate(params, seed) for seed in seeds]
                except ValueError as e:
                    cand.error = str(e)
                    continue
                cand.requests = request_histogram(tables[0])
                for seed, table in zip(seeds, tables, strict=True):
                    path = Path(tmp) / f"candidate-{i}-seed{seed}.csv"
                    write_csv(table, path)
                    cfg = RunConfig(
                        trace=str(path), format=None, cluster=CLUSTER, load=None, seed=seed,
                        policy=POLICY_OPTIONS,
                    )  # fmt: skip
                    runs += [Run(seed, p, cfg, False) for p in BASELINES]
                    owner += [cand] * len(BASELINES)
            for cand in batch:
                if cand.error is not None:
                    one_done(cand)
            left = {id(c): len(BASELINES) * len(seeds) for c in batch}
            got: dict[int, dict[str, list[dict[str, Any]]]] = {id(c): {} for c in batch}

            def done(i: int, rec: PaperRecord) -> None:
                cand = owner[i]
                if rec.ok:
                    got[id(cand)].setdefault(rec.policy, []).append(rec.metrics)
                elif cand.error is None:
                    cand.error = f"{rec.policy} seed {rec.seed}: {rec.error}"
                left[id(cand)] -= 1
                if not left[id(cand)]:
                    if cand.error is None:
                        cand.metrics = {p: mean_metrics(ms) for p, ms in got[id(cand)].items()}
                    one_done(cand)

            run_many(runs, workers, done)

    return evaluate


def fit_result(
    best: Candidate,
    tried: Sequence[Candidate],
    command: str,
    base: PaperParams | None = None,
    seeds: Sequence[int] = FIT_SEEDS,
) -> dict[str, Any]:
    """fit.json: the chosen knobs and parameters, the fit table and the search's trail."""
    base = base or PaperParams()
    knobs = knobs_for(base)
    params = params_for(best.values, base)
    return {
        "command": command,
        "fit_seeds": list(seeds),
        "speech_reading": base.speech_reading,
        "cluster": CLUSTER,
        "baselines": list(BASELINES),
        "distance": best.distance,
        "knobs": {k.name: best.values[k.name] for k in knobs},
        "knob_box": {k.name: [k.low, k.high, k.what] for k in knobs},
        "params": {
            f.name: getattr(params, f.name)
            for f in dataclasses.fields(params)
            if f.name in FITTED_PARAMS
        },
        "table": best.figure_rows(),
        "unmet": unmet(best),
        "conflicts": conflicts(best, tried),
        "tried": [{"knobs": c.values, "distance": c.distance, "error": c.error} for c in tried],
    }


# The preset's parameters that the knobs set.
FITTED_PARAMS = (
    "arrival_scale",
    "dnn_tail_log_mean",
    "gpu_weights",
    "cpu_runtime_median_s",
    "cpu_runtime_sigma",
    "cpu_core_weights",
    "daily_amplitude",
    "domain_weights",
    "user_zipf",
)


def unmet(best: Candidate) -> list[dict[str, Any]]:
    """Figures the best candidate misses by more than their tolerance."""
    return [r for r in best.figure_rows() if r["distance"] is None or r["distance"] > 1.0]


def _figure_id(row: Mapping[str, Any]) -> tuple[str, str]:
    return str(row["key"]), str(row["policy"])


def conflicts(best: Candidate, tried: Sequence[Candidate]) -> list[dict[str, Any]]:
    """Why each figure the best candidate misses is missed, from the search's own trail.

    For a missed figure: the candidates that met it (within its tolerance), and the
    figures the best meets that those candidates missed, most often first, with how
    many of them missed each. No candidate meeting it says the knobs' box cannot reach
    it (the closest value tried is given); candidates that met it only by missing
    others say which figures cannot be met together with it."""
    ran = [c for c in tried if c.error is None and c.metrics]
    rows = {c_id: {_figure_id(r): r for r in c.figure_rows()} for c_id, c in enumerate(ran)}
    met_by_best = {
        _figure_id(r)
        for r in best.figure_rows()
        if r["distance"] is not None and r["distance"] <= 1.0
    }
    out: list[dict[str, Any]] = []
    for miss in unmet(best):
        fid = _figure_id(miss)

        def met(r: Mapping[str, Any] | None) -> bool:
            return r is not None and r["distance"] is not None and r["distance"] <= 1.0

        meeting = [i for i, by in rows.items() if met(by.get(fid))]
        closest = min(
            (by[fid] for by in rows.values() if by.get(fid, {}).get("distance") is not None),
            key=lambda r: r["distance"],
            default=None,
        )
        lost: dict[tuple[str, str], int] = {}
        for i in meeting:
            for other in met_by_best:
                if not met(rows[i].get(other)):
                    lost[other] = lost.get(other, 0) + 1
        labels = {_figure_id(r): r for r in best.figure_rows()}
        out.append(
            {
                "figure": miss["figure"],
                "key": miss["key"],
                "policy": miss["policy"],
                "candidates": len(ran),
                "meeting": len(meeting),
                "closest": None if closest is None else closest["ours"],
                "then_missed": [
                    {
                        "figure": labels[o]["figure"],
                        "key": o[0],
                        "policy": o[1],
                        "of": n,
                    }
                    for o, n in sorted(lost.items(), key=lambda kv: (-kv[1], kv[0]))
                ],
            }
        )
    return out
