"""report.md of `coda experiment paper`: the setting, the paper's table beside ours
(paper | ours [95% CI]), the targets, the workload's marginals and the plots."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coda.experiment.fit import FIT_SEEDS
from coda.experiment.paper import PRESET_JOBS, PaperRecord
from coda.experiment.paper_results import METRICS, TARGET_POLICY
from coda.report.fit_report import figure_table_markdown
from coda.writing import write_text

MAIN_POLICIES = ("fifo", "drf", "coda")


def format_value(v: float | None, unit: str) -> str:
    """A metric's value for a table: a share as a percentage, seconds, or 3 digits."""
    if v is None:
        return "-"
    if unit == "share":
        return f"{100 * v:.1f}%"
    if unit == "s":
        return f"{v:,.0f} s"
    return f"{v:.3g}"


def ours(block: dict[str, Any], key: str, unit: str) -> str:
    """A mean with its 95% CI, e.g. '45.1% [44.0%, 46.2%]'; one seed: the value alone."""
    mean = block.get(key)
    ci = block.get("ci", {}).get(key, {})
    lo, hi = ci.get("low"), ci.get("high")
    if mean is None:
        return "-"
    if lo is None or hi is None:
        return format_value(mean, unit)
    return f"{format_value(mean, unit)} [{format_value(lo, unit)}, {format_value(hi, unit)}]"


def _paper_text(paper: dict[str, Any], key: str, policy: str) -> str:
    entry = paper.get(key, {}).get(policy)
    return entry["text"] if entry else "-"


def comparison_table(res: dict[str, Any], policies: Sequence[str]) -> list[str]:
    """Metric rows; per policy a 'paper' and an 'ours [95% CI]' column."""
    head = ["metric"] + [f"{p} {col}" for p in policies for col in ("paper", "ours [95% CI]")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, unit in METRICS:
        cells = [label]
        for p in policies:
            block = res["policies"][p]
            cells += [_paper_text(res["paper"], key, p), ours(block, key, unit)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def ours_table(res: dict[str, Any], policies: Sequence[str]) -> list[str]:
    head = ["metric", *policies]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, unit in METRICS:
        cells = [label] + [ours(res["policies"][p], key, unit) for p in policies]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _target_value(t: dict[str, Any]) -> str:
    v = t["value"]
    if v is None:
        return "not computable (policy not run or no jobs)"
    if t["key"] == "gpu_gain_pct":
        return f"{v:+.1f}%"
    if t["key"] in ("dnn_jct", "cpu_jct"):
        return f"{v:.3f} x fifo"
    if t["key"].endswith("_s"):
        return format_value(v, "s")
    return f"{100 * v:.2f}%"


def target_lines(targets: Sequence[dict[str, Any]]) -> list[str]:
    """One line per target, met or MISSED; a missed one with the oracle's value beside it
    where the oracle ran: missed by the oracle too, it is out of reach of any core
    allocation on this workload; met by it, CODA lost it to what it does not know."""
    out = []
    for t in targets:
        line = f"- {'met' if t['met'] else 'MISSED'}: {t['label']}: {_target_value(t)}"
        if not t["met"] and "oracle_value" in t:
            bound = _target_value({**t, "value": t["oracle_value"]})
            line += (
                f" (the oracle: {bound}, met: within reach, lost to what CODA does not know)"
                if t["oracle_met"]
                else f" (the oracle: {bound}, also missed: out of reach of any core "
                "allocation on this workload)"
            )
        out.append(line)
    return out


def _marginal(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        # generate.paper.marginals: the shares are the keys that are not counts or days.
        return f"{v:,.2f}" if key == "span_days" else f"{100 * v:.1f}%"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _points(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} points"


def _decomposition(d: dict[str, Any] | None) -> list[str]:
    """Where coda's busy-utilisation gain over fifo comes from (paper_results)."""
    if not d or d.get("gain") is None:
        return []
    sp = d["split"]
    out = [
        "",
        f"## Where {TARGET_POLICY}'s gain in busy utilisation comes from",
        "",
        f"Busy utilisation, {TARGET_POLICY} minus fifo: {_points(d['gain'])}, exactly the sum of:",
        "",
        f"- which jobs hold the GPUs (busy share at full speed): {_points(sp['mix'])}",
        f"- fewer starved jobs (slimming: cores raised to each job's optimum): "
        f"{_points(sp['fewer_starved'])}",
        f"- less interference (the eliminator): {_points(sp['less_interference'])}",
        "",
        f"GPU fragmentation from too few cores removed: {_points(d.get('frag_removed'))} of all "
        "GPUs (it decides how many GPUs are held, not how busy a held one is: the active "
        "rate).",
    ]
    if d.get("ablations"):
        out += [
            "",
            f"Each mechanism's effect ({TARGET_POLICY} minus the ablation without it):",
            "",
            "| without | busy utilisation | GPU active while jobs queue | fragmentation |",
            "|---|---|---|---|",
        ]
        out += [
            f"| {a['mechanism']} (`{a['policy']}`) | {_points(a['busy'])} | "
            f"{_points(a['active_queued'])} | {_points(a['frag'])} removed |"
            for a in d["ablations"]
        ]
    return out


def report_markdown(res: dict[str, Any], plots: Sequence[str]) -> str:
    s = res["setting"]
    run = [p for p in s["policies"]]
    main = [p for p in MAIN_POLICIES if p in run]
    rest = [p for p in run if p not in MAIN_POLICIES]
    first = s.get("first_seed", 0)
    out = ["# CODA in the paper's setting", "", "## Setting", ""]
    out += [
        f"- workload: {s['workload']}",
        *(
            [
                f"- readings of the paper (docs/paper.md): Figure 2b's speech share "
                f"`{s['speech_reading']}`, busy curves of the models Figure 3 does not show "
                f"`{s['busy_reading']}`; {100 * s['cpu_bw_heavy_share']:g}% of CPU jobs "
                "memory-bandwidth heavy"
            ]
            if s.get("speech_reading")
            else []
        ),
        f"- cluster: {s['cluster']}",
        f"- arrivals: {s['arrivals']}",
        f"- seeds: {s['seeds']} ({first}..{first + s['seeds'] - 1}); runtime estimates: "
        f"{s['estimates']}",
        f"- policies: {', '.join(run)}",
        f"- wall time: {res['wall_s']:.1f} s",
        f"- reproduce: `{s['command']}`",
    ]
    if s.get("jobs") is not None and s["jobs"] < PRESET_JOBS:
        out.append(
            f"- a shortened run ({s['jobs']:,} of the paper's {PRESET_JOBS:,} jobs, same rate): "
            "its window may be too short to fill the cluster (see the offered GPU load above); "
            "the paper's numbers are for a month"
        )
    out += [
        "",
        "Paper values: docs/paper.md (FIFO / DRF / CODA; Section VI and Figures 10, 11 and "
        "14 of the evaluation month); ours are means over seeds with Student-t 95% "
        "confidence intervals. The paper's "
        "GPU utilisation is the busy share of the active (allocated) GPUs, as the driver "
        "reports it: ours is `gpu_util_busy`, from each model's busy curve (Figure 3; "
        "docs/metrics.md). Work done over all GPUs (`gpu_util_effective`, full speed = "
        "100%) is a different quantity, shown beside it.",
        "",
        "## The paper's table beside ours",
        "",
    ]
    out += comparison_table(res, main) if main else ["(none of fifo, drf, coda was run)"]
    if rest:
        out += ["", "## Ablations and oracle (ours; the paper gives no table)", ""]
        out += ours_table(res, rest)
    if res.get("fit"):
        out += [
            "",
            "## The baselines against the paper's published figures",
            "",
            "Every figure the paper publishes for FIFO and DRF in its evaluation month, on "
            "these seeds (the workload's unpublished parts were fitted to them on seeds "
            f"{', '.join(str(x) for x in FIT_SEEDS)}: `coda experiment paper --fit`; "
            + (
                "these are the fit's own seeds"
                if set(range(first, first + s["seeds"])) <= set(FIT_SEEDS)
                else "these seeds were not fitted"
            )
            + "). Distance: the error in tolerances (5 points, 8 for a queuing-CDF point).",
            "",
            *figure_table_markdown(res["fit"]),
        ]
    out += _decomposition(res.get("decomposition"))
    out += ["", "## Targets", ""]
    out += target_lines(res["targets"])
    missed = [t["label"] for t in res["targets"] if not t["met"]]
    if missed:
        have = [
            p
            for p in ("oracle", "coda-no-slimming", "coda-no-colocation", "coda-no-eliminator")
            if p in run
        ]
        where = (
            f"the {', '.join(have)} rows above" if have else "rerun with the oracle and ablations"
        )
        out += [
            "",
            f"Missed: {'; '.join(missed)}. Where {TARGET_POLICY}'s gain comes from and what "
            f"is reachable at all: {where} (oracle bounds the gain; each ablation removes one "
            "mechanism).",
        ]
    if res["errors"]:
        out += ["", "## Failed runs", ""]
        out += [f"- {e['policy']} seed {e['seed']}: {e['error']}" for e in res["errors"]]
    marg = res.get("workload_marginals")
    if marg:
        out += ["", f"## Workload marginals (seed {first}) beside the paper's", ""]
        out += ["| marginal | ours | paper |", "|---|---|---|"]
        for key, m in marg.items():
            out.append(f"| {m['what']} | {_marginal(key, m['ours'])} | {m['paper_says']} |")
    if plots:
        out += ["", "## Plots", ""]
        out += [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


def write_outputs(
    out: Path,
    res: dict[str, Any],
    records: Sequence[PaperRecord],
    policies: Sequence[str],
) -> list[Path]:
    """results.json, the plots and report.md into out."""
    from coda.report.paper_plots import write_plots

    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    write_text(path, json.dumps(res, indent=2, allow_nan=False) + "\n")
    plots = write_plots(records, policies, out)
    report = out / "report.md"
    write_text(report, report_markdown(res, plots))
    return [path, report, *(out / p for p in plots)]
