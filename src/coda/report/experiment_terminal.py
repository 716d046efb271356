"""The headline experiment in a terminal: the verdict as plain sentences and a compact
rich table per load and policy.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from coda.experiment import (
    PAPER_GAIN_PCT,
    ExperimentResult,
)
from coda.report.experiment_format import context_of, fmt_estimate


def verdict_lines(result: ExperimentResult) -> list[str]:
    """The headline verdict, its conditions, other loads, robustness: plain sentences."""
    a = result.analysis
    v = a.headline
    lines = [
        f"Paper's claim: +{PAPER_GAIN_PCT:g}% GPU utilisation (relative) with CPU-job "
        f"queuing no longer. Judged at the headline load {v.load:g}.",
        f"VERDICT: {v.summary}",
    ]
    lines += [
        f"  [{'ok' if c.met else 'FAIL' if c.met is False else '??'}] {c.detail}"
        for c in v.conditions
    ]
    others = [x for x in a.verdicts.values() if x.load != v.load]
    if others:
        met = [f"{x:g}" for x in a.met_at()]
        lines.append("At every load: " + "; ".join(x.summary for x in a.verdicts.values()))
        lines.append(f"Met at loads: {', '.join(met) if met else 'none'}")
    if a.robustness is not None:
        lines.append(a.robustness.summary)
    if result.skipped:
        lines.append(f"Not run (not registered): {', '.join(result.skipped)}")
    if result.errors:
        lines.append(f"{len(result.errors)} run(s) FAILED; see report.md")
    return lines


def experiment_table(result: ExperimentResult) -> Table:
    """Compact terminal table: per load and policy, GPU util, gain, queuing, DNN JCT."""
    a = result.analysis
    c = context_of(result)
    table = Table(
        title=Text(
            f"Headline experiment · trace {c['trace']} · seeds {c['seeds']}\ncluster {c['cluster']}"
        ),
        title_justify="left",
        caption=Text(
            "mean ± 95% CI over seeds; gain = paired relative change in effective GPU util "
            f"vs {a.base} [95% CI]; queuing and JCT are means over jobs"
        ),
        caption_justify="left",
    )
    # Load and policy never wrap (they say what a row is); numbers wrap on narrow consoles.
    width = max(len(p) for p in a.policies)
    table.add_column("load", justify="right", no_wrap=True, min_width=4)
    table.add_column("policy", no_wrap=True, min_width=width)
    for name in ("GPU eff", "gain", "CPU queuing", "DNN queuing", "DNN JCT"):
        table.add_column(name, justify="right")
    for load in a.loads:
        for i, p in enumerate(a.policies):
            s = a.stats[(p, load)]
            g = a.gains.get((p, load))
            table.add_row(
                f"{load:g}" if i == 0 else "",
                Text(p),
                fmt_estimate(s["gpu_util_effective"], "pct"),
                fmt_estimate(g["gpu_gain_pct"], "gain") if g else "baseline",
                fmt_estimate(s["cpu_queue_mean"], "duration"),
                fmt_estimate(s["dnn_queue_mean"], "duration"),
                fmt_estimate(s["dnn_jct_mean"], "duration"),
                end_section=i == len(a.policies) - 1,
            )
    return table
