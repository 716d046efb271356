"""report.md and results.json of `coda experiment eliminator`: the eliminator's effect
in the paper's scenario beside the paper's, each arm's figures, and the verdict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coda.experiment.eliminator_scenario import ARMS, KEYS, QUIET, WITH, WITHOUT
from coda.report.files import write_report

ARM_LABELS = {WITH: "coda", WITHOUT: "coda-no-eliminator", QUIET: "quiet (no CPU bandwidth)"}


def _est(e: Mapping[str, Any], unit: str) -> str:
    """A mean with its 95% CI: points (x100) for shares, x for ratios, else as is."""
    m, lo, hi = e.get("mean"), e.get("ci95_low"), e.get("ci95_high")
    if m is None:
        return "-"

    def f(v: float) -> str:
        if unit == "points":
            return f"{100 * v:+.2f}"
        if unit == "x":
            return f"{v:.2f}x"
        if unit == "share":
            return f"{100 * min(max(v, 0.0), 1.0):.1f}%"  # a t-interval may pass 0-100%
        if unit == "s":
            return f"{v:,.0f} s"
        return f"{v:.2f}"

    return f(m) if lo is None or hi is None else f"{f(m)} [{f(lo)}, {f(hi)}]"


def report_markdown(res: Mapping[str, Any], command: str) -> str:
    st, paper = res["setting"], res["paper"]
    out = [
        "# The contention eliminator in the paper's scenario",
        "",
        f"- reproduce: `{command}`",
        f"- the paper's month ({st['jobs']:,} jobs at the paper's rate, the preset fitted "
        f"under Figure 2b's `{st['speech_reading']}` reading) on the paper cluster, seeds "
        f"{st['first_seed']}...{st['first_seed'] + st['seeds'] - 1}, with "
        + ", ".join(f"{100 * s:g}%" for s in st["shares"])
        + " of CPU jobs memory-bandwidth heavy (each taking 25-95% of a server's memory "
        "bandwidth at full quota, Figure 7's pressures; docs/paper.md).",
        f"- the paper (Section VI-E, {100 * paper['share']:g}% heavy): without the eliminator "
        f'the busy share is {100 * paper["busy_effect"]:+.1f} points lower "when tasks are '
        f'queuing" and the number of queuing jobs {paper["queued_jobs_ratio"]:g}x; '
        "fragmentation unchanged.",
        "- quiet: CODA without its eliminator on the same month with every CPU job drawing "
        "no memory bandwidth. The plain ablation minus quiet is what all CPU co-runners cost "
        "(negative: busy share lost); what the quiet month still loses to interference, the "
        "training jobs cost each other.",
        "",
        "## Removing the eliminator (paired over seeds: mean [95% CI])",
        "",
        "| heavy CPU jobs | busy share (points) | busy share while DNN jobs queue (points) "
        "| GPU active while DNN jobs queue (points) | jobs queued (x) | DNN jobs queued (x) "
        "| fragmentation (points) | all CPU co-runners cost (points) | training jobs cost "
        "each other (points) |",
        "|---|---|---|---|---|---|---|---|---|",
        f'| paper, {100 * paper["share"]:g}% | {100 * paper["busy_effect"]:+.1f} ("2.3%") '
        f"| (the same sentence) | - | {paper['queued_jobs_ratio']:g}x | - | 0 | - | - |",
    ]
    for s in res["shares"]:
        e = s["effects"]
        dnn = e["dnn_caused"]
        out.append(
            f"| {100 * s['share']:g}% | {_est(e['busy'], 'points')} "
            f"| {_est(e['busy_queued'], 'points')} | {_est(e['active_queued'], 'points')} "
            f"| {_est(e['queued_jobs_ratio'], 'x')} | {_est(e['dnn_queued_jobs_ratio'], 'x')} "
            f"| {_est(e['frag'], 'points')} | {_est(e['cpu_caused'], 'points')} "
            f"| {_est(dnn, 'points')} |"
        )
    out += ["", "## Each arm (mean [95% CI] over seeds)", ""]
    head = ["heavy CPU jobs", "arm", *(label for _, label, _ in KEYS)]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in res["shares"]:
        for arm in ARMS:
            block = s["arms"][arm]
            cells = [_est(block[key], unit) for key, _, unit in KEYS]
            out.append(f"| {100 * s['share']:g}% | {ARM_LABELS[arm]} | " + " | ".join(cells) + " |")
    v = res["verdict"]
    out += ["", "## Verdict (at the paper's 0.5%)", ""]
    for c in v.get("checks", []):
        ours = c["ours"]
        if ours is None:
            shown = "-"
        elif c["label"].endswith("points") or "points (" in c["label"]:
            shown = f"{100 * ours:+.2f}"
        elif c["label"].endswith("x"):
            shown = f"{ours:.2f}x"
        else:
            shown = f"{ours:+.2f}%"
        state = "NOT MEASURED" if c["met"] is None else "met" if c["met"] else "MISSED"
        out.append(
            f"- {state}: removing the eliminator, {c['label']}: ours {shown}, the paper "
            f"{c['paper']}"
        )
    out += [f"- why: {w}." for w in v.get("why", [])]
    if res["errors"]:
        out += ["", "## Failed runs", ""]
        out += [
            f"- {100 * e['share']:g}% {e['arm']} seed {e['seed']}: {e['error']}"
            for e in res["errors"]
        ]
    return "\n".join(out) + "\n"


def write_outputs(out: Path, res: Mapping[str, Any], command: str) -> Sequence[Path]:
    return write_report(out, res, command, report_markdown)
