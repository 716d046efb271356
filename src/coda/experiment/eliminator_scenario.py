"""`coda experiment eliminator`: the contention eliminator in the paper's own scenario
(Section VI-E; docs/paper.md): the paper's month with 0.5% of CPU jobs memory-bandwidth
heavy (and 2% and 5%), CODA with and without its eliminator.

The paper: without the eliminator "the average GPU utilization decreased by 2.3% when
tasks are queuing" and "the overall number of queueing tasks doubles". Beside the two
policies, each seed runs CODA without the eliminator on the same month with every CPU
job drawing no memory bandwidth ("quiet"): the difference to the plain run is all the
busy share CPU co-runners cost, the most any eliminator could win back; what is lost
in the quiet run comes from the training jobs themselves (their bandwidth, PCIe).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda.experiment.paper import (
    PaperConfig,
    PaperRecord,
    Run,
    run_labelled,
    write_workloads,
)
from coda.experiment.stats import mean_ci
from coda.workload.generate import generate, write_csv
from coda.workload.generate.paper import DEFAULT_SPEECH_READING

HEAVY_SHARES = (0.005, 0.02, 0.05)
PAPER_SHARE = 0.005  # Section VI-E's scenario
WITH, WITHOUT = "coda", "coda-no-eliminator"
QUIET = "quiet"  # coda-no-eliminator on the month with CPU jobs drawing no bandwidth
ARMS = (WITH, WITHOUT, QUIET)
# The paper's effect of removing the eliminator: -2.3 (points of busy utilisation) and
# the number of queuing jobs x2; the target allows 1 point.
PAPER_BUSY_EFFECT = -0.023
PAPER_QUEUE_RATIO = 2.0
BUSY_TOLERANCE = 0.01

# (key, label, unit) of what each arm reports.
KEYS: tuple[tuple[str, str, str], ...] = (
    ("gpu_util_busy", "busy share of active GPUs", "share"),
    ("gpu_util_busy_queued", "busy share of active GPUs while DNN jobs queue", "share"),
    ("gpu_active_queued", "GPU active rate while DNN jobs queue", "share"),
    ("gpu_busy_lost_contention", "busy share lost to interference", "share"),
    ("queued_jobs_mean", "jobs queued, time-averaged", "n"),
    ("dnn_queued_jobs_mean", "DNN jobs queued, time-averaged", "n"),
    ("dnn_no_queue_share", "DNN jobs not queuing", "share"),
    ("gpu_frag_cores", "GPU fragmentation from too few cores", "share"),
    ("cpu_jct_mean_s", "CPU JCT mean", "s"),
)


@dataclass(frozen=True)
class ScenarioConfig:
    out: Path
    seeds: int = 3
    first_seed: int = 0
    shares: tuple[float, ...] = HEAVY_SHARES
    speech_reading: str = DEFAULT_SPEECH_READING
    workers: int = 1
    jobs: int | None = None  # the month's jobs at its rate (None: 100,000)

    def validate(self) -> None:
        if not self.shares or any(not 0.0 <= s <= 1.0 for s in self.shares):
            raise ValueError(f"--heavy-shares must be in [0, 1], got {list(self.shares)}")
        if len(set(self.shares)) != len(self.shares):
            raise ValueError("--heavy-shares: a share is named twice")
        for share in self.shares:
            self.paper_config(share).validate()

    def paper_config(self, share: float) -> PaperConfig:
        """The paper experiment's setting at one heavy share (its own folder)."""
        return PaperConfig(
            out=self.out / f"heavy-{share:g}",
            seeds=self.seeds,
            first_seed=self.first_seed,
            policies=(WITH, WITHOUT),
            workers=self.workers,
            speech_reading=self.speech_reading,
            heavy_share=share,
            jobs=self.jobs,
        )


@dataclass(frozen=True)
class Arm:
    share: float
    arm: str  # WITH, WITHOUT or QUIET
    run: Run


def quiet_path(pc: PaperConfig, seed: int) -> Path:
    return pc.out / f"workload-seed{seed}-quiet.csv"


def prepare_runs(cfg: ScenarioConfig) -> list[Arm]:
    """Write every share's workloads (and their quiet copies); every run, seed-major."""
    arms: list[Arm] = []
    for share in cfg.shares:
        pc = cfg.paper_config(share)
        write_workloads(pc)
        params = pc.params()
        for seed in pc.seed_list():
            table = generate(params, seed)
            assert table.cpu_bw is not None  # the generator always gives it
            table.cpu_bw = np.where(np.isnan(table.cpu_bw), np.nan, 0.0)
            write_csv(table, quiet_path(pc, seed))
            rc = pc.run_config(seed)
            arms += [Arm(share, p, Run(seed, p, rc, False)) for p in (WITH, WITHOUT)]
            quiet = dataclasses.replace(rc, trace=str(quiet_path(pc, seed)))
            arms.append(Arm(share, QUIET, Run(seed, WITHOUT, quiet, False)))
    return arms


def run_scenario(
    cfg: ScenarioConfig,
    arms: Sequence[Arm],
    on_done: Callable[[Arm, PaperRecord, int, int], None] | None = None,
) -> list[tuple[Arm, PaperRecord]]:
    """Run the prepared arms (prepare_runs) in cfg.workers processes."""
    return run_labelled([(a, a.run) for a in arms], cfg.workers, on_done)


def _per_seed(
    runs: Sequence[tuple[Arm, PaperRecord]], share: float, arm: str
) -> dict[int, dict[str, Any]]:
    return {r.seed: r.metrics for a, r in runs if a.share == share and a.arm == arm and r.ok}


def _paired(
    a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]], fn: Callable[[Any, Any], Any]
) -> dict[str, Any]:
    vals = []
    for seed in sorted(set(a) & set(b)):
        v = fn(a[seed], b[seed])
        if v is not None and math.isfinite(v):
            vals.append(v)
    return mean_ci(vals).to_dict()


def _diff(key: str) -> Callable[[Any, Any], float | None]:
    def fn(x: dict[str, Any], y: dict[str, Any]) -> float | None:
        u, v = x.get(key), y.get(key)
        return None if u is None or v is None else u - v

    return fn


def _ratio(key: str) -> Callable[[Any, Any], float | None]:
    def fn(x: dict[str, Any], y: dict[str, Any]) -> float | None:
        u, v = x.get(key), y.get(key)
        return None if u is None or not v else u / v

    return fn


def summarise(cfg: ScenarioConfig, runs: Sequence[tuple[Arm, PaperRecord]]) -> dict[str, Any]:
    """results.json: per share, each arm's means and the eliminator's paired effects."""
    shares: list[dict[str, Any]] = []
    for share in cfg.shares:
        per = {arm: _per_seed(runs, share, arm) for arm in ARMS}
        arms = {
            arm: {
                key: mean_ci(m.get(key) for m in per[arm].values()).to_dict() for key, _, _ in KEYS
            }
            for arm in ARMS
        }
        without, with_, quiet = per[WITHOUT], per[WITH], per[QUIET]
        effects = {
            # Removing the eliminator: the ablation's value minus CODA's.
            "busy": _paired(without, with_, _diff("gpu_util_busy")),
            "busy_queued": _paired(without, with_, _diff("gpu_util_busy_queued")),
            "active_queued": _paired(without, with_, _diff("gpu_active_queued")),
            "frag": _paired(without, with_, _diff("gpu_frag_cores")),
            "queued_jobs_ratio": _paired(without, with_, _ratio("queued_jobs_mean")),
            "dnn_queued_jobs_ratio": _paired(without, with_, _ratio("dnn_queued_jobs_mean")),
            # All that CPU co-runners cost (the plain month minus the quiet one), and
            # what the training jobs cost each other (the quiet month's loss), as changes.
            "cpu_caused": _paired(without, quiet, _diff("gpu_util_busy")),
            "dnn_caused": mean_ci(
                -float(v)
                for m in quiet.values()
                if (v := m.get("gpu_busy_lost_contention")) is not None
            ).to_dict(),
        }
        shares.append({"share": share, "arms": arms, "effects": effects})
    target = next((s for s in shares if abs(s["share"] - PAPER_SHARE) < 1e-12), None)
    return {
        "setting": {
            "seeds": cfg.seeds,
            "first_seed": cfg.first_seed,
            "shares": list(cfg.shares),
            "speech_reading": cfg.speech_reading,
            "jobs": cfg.jobs or PaperConfig(out=cfg.out).params().n_jobs,
            "arms": {
                WITH: "CODA",
                WITHOUT: "CODA without its eliminator",
                QUIET: "CODA without its eliminator, CPU jobs drawing no bandwidth",
            },
        },  # fmt: skip
        "paper": {
            "share": PAPER_SHARE,
            "busy_effect": PAPER_BUSY_EFFECT,
            "queued_jobs_ratio": PAPER_QUEUE_RATIO,
            "busy_tolerance": BUSY_TOLERANCE,
        },
        "shares": shares,
        "verdict": verdict(target),
        "errors": [
            {"share": a.share, "arm": a.arm, "seed": r.seed, "error": r.error}
            for a, r in runs
            if not r.ok
        ],
    }


def _check(label: str, ours: float | None, paper: str, met: bool) -> dict[str, Any]:
    """One claim checked; `met` None where nothing was measured (no run, no queue)."""
    return {"label": label, "ours": ours, "paper": paper, "met": None if ours is None else met}


def verdict(at_paper: dict[str, Any] | None) -> dict[str, Any]:
    """The paper's claims at 0.5% heavy, each checked, and why the first is missed.

    The target reads "the average GPU utilization decreased by 2.3% when tasks are
    queuing" as the busy share while DNN jobs queue, 2.3 points lower without the
    eliminator (within 1 point); beside it the same over the whole month and as 2.3%
    relative, the queued jobs doubling (within 25%) and fragmentation unchanged (within
    1 point). Why: what all CPU co-runners cost against what the eliminator wins back."""
    if at_paper is None:
        return {
            "met": False,
            "checks": [],
            "why": [f"the paper's share ({PAPER_SHARE:.1%}) was not run"],
        }
    e = at_paper["effects"]
    queued, busy = e["busy_queued"]["mean"], e["busy"]["mean"]
    cpu = e["cpu_caused"]["mean"]
    ratio, frag = e["queued_jobs_ratio"]["mean"], e["frag"]["mean"]
    with_queued = at_paper["arms"][WITH]["gpu_util_busy_queued"]["mean"]
    relative = 100 * queued / with_queued if queued is not None and with_queued else None

    def near(v: float | None, want: float, tol: float) -> bool:
        return v is not None and abs(v - want) <= tol

    checks = [
        _check("busy share while DNN jobs queue, points (the target)", queued,
               "-2.3", near(queued, PAPER_BUSY_EFFECT, BUSY_TOLERANCE)),
        _check("busy share over the month, points", busy, "-2.3",
               near(busy, PAPER_BUSY_EFFECT, BUSY_TOLERANCE)),
        _check("busy share while DNN jobs queue, relative %", relative, "-2.3%",
               near(relative, 100 * PAPER_BUSY_EFFECT, 100 * BUSY_TOLERANCE)),
        _check("jobs queued, time-averaged, x", ratio, "2x",
               near(ratio, PAPER_QUEUE_RATIO, 0.25 * PAPER_QUEUE_RATIO)),
        _check("fragmentation, points", frag, "unchanged", near(frag, 0.0, BUSY_TOLERANCE)),
    ]  # fmt: skip
    met = bool(checks[0]["met"])
    why: list[str] = []
    if queued is None:  # no DNN job ever queued: the month's own busy share instead
        queued = busy
    if not met and queued is not None and busy is not None and cpu is not None:
        cost = (
            f"CPU co-runners cost {-100 * cpu:.2f} points of busy share in all (the plain "
            "month against the quiet one)"
        )
        if queued > 0:
            why.append(
                f"without the eliminator the GPUs are busier ({100 * queued:+.2f} points while "
                f"DNN jobs queue): its throttles cost the training jobs more than the "
                f"contention it removes; {cost}"
            )
        elif queued > PAPER_BUSY_EFFECT:
            reach = (
                f"less than the paper's {-100 * PAPER_BUSY_EFFECT:.1f}: no eliminator could win "
                "that back"
                if -cpu < -PAPER_BUSY_EFFECT
                else f"enough for the paper's {-100 * PAPER_BUSY_EFFECT:.1f}"
            )
            why.append(
                f"{cost}, {reach}; this one wins back {-100 * busy:.2f} over the month and "
                f"{-100 * queued:.2f} while DNN jobs queue: it throttles only where a node "
                "passes 75% of its memory bandwidth and a training job has slowed (Section "
                f"V-D), and the other {100 * (busy - cpu):.2f} points come from co-runners it "
                "leaves alone"
            )
        else:
            why.append(
                f"removing the eliminator costs more than the paper's 2.3 points "
                f"({100 * queued:+.2f} while DNN jobs queue); {cost}"
            )
    ratio_now = checks[3]["ours"]
    if ratio_now is not None and ratio_now < 1.0:
        why.append(
            f"the queue shrinks without the eliminator ({ratio_now:.2f}x jobs queued): "
            "throttled CPU jobs run longer and hold their cores, so more CPU jobs wait "
            "behind them; the paper's doubling needs slowed training jobs to hold GPUs "
            "longer, which a loss of this size does not"
        )
    return {"met": met, "busy_effect": queued, "cpu_caused": cpu, "checks": checks, "why": why}
