"""The headline experiment: does CODA reproduce the paper's claim?

The paper (Zhao et al., ICDCS 2020) reports +20.8% GPU utilisation (relative) with
CPU-job queuing no longer. This package runs every policy x load x seed on one trace
and cluster (one prepared workload per load and seed, shared by all policies, so that
differences between policies are paired), plus a robustness sweep with perturbed
profiles and noisier throughput samples, and turns the runs into statistics (mean and
95% Student-t confidence interval over seeds), a decomposition of CODA's gain and a
verdict. Rendering (markdown, JSON, plots) lives in `coda.report.experiment`.

Everything here works on *records*: the few numbers of one run's summary that the
experiment needs (`RunRecord`). The analysis functions take records only, so they
can be tested on made-up summaries.

One idea per module: `defaults` (the claim, defaults, metric names), `config` (what to
run), `records` (one run's numbers), `stats` (means and CIs over seeds),
`decomposition` (where a gain comes from), `verdict` (the claim at one load), `robust`
(the robustness sweep), `analysis` (all of it from the records), `running` (the plan
and the runs). Every public name is importable from `coda.experiment`.
"""

from __future__ import annotations

from coda.experiment.analysis import Analysis, analyse, dedup_notes, describe_loads
from coda.experiment.config import (
    ExperimentConfig,
    reproduce_command,
    robustness_policies,
    split_policies,
)
from coda.experiment.decomposition import ChainStep, Decomposition, ablation_chain, decompose
from coda.experiment.defaults import (
    BASELINE,
    CHAIN,
    DEFAULT_LOADS,
    DEFAULT_NOISE,
    DEFAULT_PERTURB,
    DEFAULT_POLICIES,
    DEFAULT_SEEDS,
    DNN_QUEUE_STRESS_S,
    EXTRA_METRICS,
    METRICS,
    PAPER_GAIN_PCT,
    ROBUSTNESS_POLICIES,
    SUBJECT,
    TERMS,
    UNSPLIT_LABEL,
    UPPER_BOUND,
)
from coda.experiment.records import RunRecord, metrics_from_summary
from coda.experiment.robust import Robustness, RobustSeed, robustness
from coda.experiment.running import (
    ExperimentResult,
    Group,
    check_workloads,
    plan,
    run_experiment,
    run_group,
)
from coda.experiment.stats import (
    GAINS,
    Z975,
    Estimate,
    aggregate,
    gains,
    mean_ci,
    paired,
    relative_gain_pct,
    t_critical,
)
from coda.experiment.verdict import (
    Condition,
    LoadVerdict,
    describe_decomposition,
    judge_load,
    signed,
)

__all__ = [
    "Analysis",
    "BASELINE",
    "CHAIN",
    "ChainStep",
    "Condition",
    "DEFAULT_LOADS",
    "DEFAULT_NOISE",
    "DEFAULT_PERTURB",
    "DEFAULT_POLICIES",
    "DEFAULT_SEEDS",
    "DNN_QUEUE_STRESS_S",
    "Decomposition",
    "EXTRA_METRICS",
    "Estimate",
    "ExperimentConfig",
    "ExperimentResult",
    "GAINS",
    "Group",
    "LoadVerdict",
    "METRICS",
    "PAPER_GAIN_PCT",
    "ROBUSTNESS_POLICIES",
    "RobustSeed",
    "Robustness",
    "RunRecord",
    "SUBJECT",
    "TERMS",
    "UNSPLIT_LABEL",
    "UPPER_BOUND",
    "Z975",
    "ablation_chain",
    "aggregate",
    "analyse",
    "check_workloads",
    "decompose",
    "dedup_notes",
    "describe_decomposition",
    "describe_loads",
    "gains",
    "judge_load",
    "mean_ci",
    "metrics_from_summary",
    "paired",
    "plan",
    "relative_gain_pct",
    "reproduce_command",
    "robustness",
    "robustness_policies",
    "run_experiment",
    "run_group",
    "signed",
    "split_policies",
    "t_critical",
]
