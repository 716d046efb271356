"""One run's record: the few numbers of its summary the experiment keeps (`RunRecord`),
so that the analysis can be tested on made-up summaries.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from coda.values import finite, lookup


def _probes_per_search(summary: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
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


def metrics_from_summary(summary: dict[str, Any]) -> dict[str, float | None]:
    """The numbers the experiment keeps from one run's summary; missing ones are None."""

    def g(*keys: str) -> float | None:
        return finite(lookup(summary, *keys))

    per_search, probes, searches = _probes_per_search(summary)
    return {
        "gpu_util_busy": g("gpu_util_busy"),
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
        summary: dict[str, Any],
        perturb: float = 0.0,
        noise: float = 0.05,
        policy: str | None = None,
    ) -> RunRecord:
        """``policy``: the registry name the run was asked for (default: the summary's)."""
        raw = summary.get("config")
        config: dict[str, Any] = raw if isinstance(raw, dict) else {}
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
