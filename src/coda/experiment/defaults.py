"""The paper's claim, the experiment's defaults and the names of what it measures: the
policies, loads and seeds it runs by default, the per-run metrics it keeps and the terms
a gain splits into.
"""

from __future__ import annotations

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

# (key, label, kind) of the per-run numbers that get a mean and CI per (policy, load).
# kind: "pct" (fraction 0..1), "duration" (s), "count", "number".
METRICS: tuple[tuple[str, str, str], ...] = (
    ("gpu_util_busy", "GPU util (busy share of active GPUs, the paper's)", "pct"),
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
