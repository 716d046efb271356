"""The headline experiment's outputs: report.md, results.json, runs.csv, plots, and the
compact terminal table. The numbers come from `coda.experiment`; this module only
renders them. Like every other report, each title states trace, cluster, loads, seeds.
"""

from __future__ import annotations

import csv
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table
from rich.text import Text

from coda.experiment import (
    DNN_QUEUE_STRESS_S,
    EXTRA_METRICS,
    GAINS,
    METRICS,
    PAPER_GAIN_PCT,
    Analysis,
    Estimate,
    ExperimentResult,
    RunRecord,
    describe_loads,
    reproduce_command,
    robustness_policies,
    signed,
)
from coda.report.files import _cell, _write_json
from coda.report.plots import _colours, _linestyles, _no_data, _save, plt
from coda.report.tables import MISSING, describe_cluster, fmt_duration

REPORT_FILES = (
    "report.md",
    "results.json",
    "runs.csv",
    "gpu_util_vs_load.png",
    "queuing_vs_load.png",
    "gain_decomposition.png",
    "robustness.png",
)


# ---------------------------------------------------------------- formatting


def _duration_unit(seconds: float) -> tuple[float, str, int]:
    """(divisor, unit, decimals) the way fmt_duration picks them, for a value and its CI."""
    a = abs(seconds)
    if a < 10:
        return 1.0, "s", 2
    if a < 120:
        return 1.0, "s", 1
    if a < 7200:
        return 60.0, "min", 1
    return 3600.0, "h", 1


def fmt_estimate(est: Estimate | None, kind: str) -> str:
    """'83.4% ± 0.6' (pct, CI half-width in points), '12.3 ± 0.4 min' (duration),
    '+21.0% [18.2, 23.8]' (gain: the CI's bounds), '—' when there is no value."""
    if est is None or est.mean is None:
        return MISSING
    m, h = est.mean, est.half
    if kind == "gain":
        text = f"{signed(m, 1)}%"
        return text + (f" [{signed(est.low, 1)}, {signed(est.high, 1)}]" if h is not None else "")
    if kind == "pct":
        return f"{100 * m:.1f}%" + (f" ± {100 * h:.1f}" if h is not None else "")
    if kind == "duration":
        if h is None:
            return fmt_duration(m)
        # One unit for both, from the larger (a CI can dwarf a mean near 0).
        div, unit, dec = _duration_unit(max(abs(m), h))
        value = f"{m / div:.{dec}f}"
        if float(value) == 0:
            value = f"{0:.{dec}f}"  # no '-0.0'
        return f"{value} ± {h / div:.{dec}f} {unit}"
    if kind == "count":
        return f"{m:,.1f}" + (f" ± {h:,.1f}" if h is not None else "")
    return f"{m:.3g}" + (f" ± {h:.2g}" if h is not None else "")


def _pp(x: float | None) -> str:
    return MISSING if x is None else f"{signed(100 * x, 2)} pp"


def _rel(x: float | None) -> str:
    return MISSING if x is None else f"{signed(x, 1)}%"


def _yes(x: bool | None) -> str:
    return MISSING if x is None else ("yes" if x else "**no**")


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(_md_escape(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" if a == "l" else "---:" for a in align) + "|")
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return lines


def _context(result: ExperimentResult) -> dict[str, str]:
    ok = [r for r in result.records if r.ok]
    ctx = ok[0].context if ok else {}
    base = result.config.base
    return {
        "trace": str(ctx.get("trace") or base.trace or "bundled"),
        "cluster": describe_cluster(ctx.get("cluster")) if ctx else base.cluster,
        "profiles": str(ctx.get("profile_set") or base.profiles),
        "loads": describe_loads(result.config.loads),
        "seeds": f"0-{result.config.seeds - 1}" if result.config.seeds > 1 else "0",
    }


def _title(result: ExperimentResult) -> str:
    c = _context(result)
    # A cluster given as a long node spec would stretch the figure to its width.
    cluster = textwrap.fill(c["cluster"], 110, break_on_hyphens=False)
    return f"{c['trace']} · {cluster}\nloads {c['loads']} · seeds {c['seeds']}"


def _present_metrics(a: Analysis) -> tuple[list[tuple[str, str, str]], list[str]]:
    """METRICS that at least one cell has, and the labels of those no run reported."""
    present, absent = [], []
    for key, label, kind in METRICS:
        if any(cell[key].mean is not None for cell in a.stats.values()):
            present.append((key, label, kind))
        else:
            absent.append(label)
    return present, absent


# ---------------------------------------------------------------- verdict text


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


# ---------------------------------------------------------------- markdown


def _verdict_section(result: ExperimentResult) -> list[str]:
    a = result.analysis
    v = a.headline
    badge = {"met": "MET", "not met": "NOT MET"}.get(v.status, v.status.upper())
    lines = [
        "## Verdict",
        "",
        f"The paper reports **+{PAPER_GAIN_PCT:g}% GPU utilisation** (relative) with CPU-job "
        f"queuing no longer. Target: at a load where `{a.base}` queues DNN jobs (mean DNN "
        f"queuing > {DNN_QUEUE_STRESS_S:g} s), `{a.subject}`'s relative gain in effective "
        f"GPU utilisation >= {PAPER_GAIN_PCT:g}%, its CPU-job mean queuing <= `{a.base}`'s "
        f"and its mean DNN JCT <= `{a.base}`'s. Judged on the mean over seeds (paired per "
        "seed); the 95% CI says whether the margin is significant.",
        "",
        f"**Headline load {v.load:g}: {badge}.** {v.summary}",
        "",
    ]
    if v.conditions:
        lines += _md_table(
            ["condition", "result", "detail"],
            [
                [c.label, "met" if c.met else "**not met**" if c.met is False else "n/a", c.detail]
                for c in v.conditions
            ],
            "lll",
        )
        lines.append("")
    if v.failed():
        lines.append(
            "Failed: "
            + "; ".join(c.detail for c in v.failed())
            + ". See [Where the gain comes from](#where-the-gain-comes-from)."
        )
        lines.append("")
        lines += _headroom_lines(result, v.load)
    rows = []
    for x in a.verdicts.values():
        cond = {c.key: c for c in x.conditions}

        def cell(key: str, kind: str, cond=cond) -> str:
            c = cond.get(key)
            if c is None:
                return MISSING
            mark = "" if c.met else " ✗" if c.met is False else " ?"
            return fmt_estimate(c.ci, kind) + mark

        rows.append(
            [
                f"{x.load:g}" + (" (headline)" if x.load == a.judged_load else ""),
                cell("stress", "duration"),
                cell("gpu_gain", "gain"),
                cell("cpu_queue", "duration"),
                cell("dnn_jct", "duration"),
                x.status,
            ]
        )
    lines += [
        "Verdict at every load (✗ = condition not met):",
        "",
        *_md_table(
            [
                "load",
                f"{a.base} DNN queuing (mean)",
                "GPU util gain [95% CI]",
                "CPU queuing Δ",
                "DNN JCT Δ",
                "verdict",
            ],
            rows,
        ),
        "",
        f"Met at loads: {', '.join(f'{x:g}' for x in a.met_at()) or 'none'}.",
        "",
    ]
    if a.robustness is not None:
        lines += [a.robustness.summary + ".", ""]
    return lines


def _headroom_lines(result: ExperimentResult, load: float) -> list[str]:
    """Why a missed gain target was (or was not) within reach: the oracle's gain, and
    where the baseline loses GPU capacity, from the runs themselves."""
    a = result.analysis
    base = a.stats.get((a.base, load), {})
    oracle = a.gains.get(("oracle", load), {}).get("gpu_gain_pct")
    eff, alloc = base.get("gpu_util_effective"), base.get("gpu_util_allocated")
    cores, cont = base.get("gpu_lost_cores"), base.get("gpu_lost_contention")
    if (
        oracle is None
        or oracle.mean is None
        or any(e is None or e.mean is None for e in (eff, alloc, cores, cont))
    ):
        return []
    o_alloc = a.stats.get(("oracle", load), {}).get("gpu_util_allocated")
    text = (
        f"Why: the `oracle` (every job's optimal cores known, no search, no interference at "
        f"all) gains {oracle.mean:+.1f}% at load {load:g}, so "
        + (
            "no policy could reach the target here"
            if oracle.mean < PAPER_GAIN_PCT
            else "the target is within the oracle's reach"
        )
        + f". `{a.base}` holds {alloc.mean:.1%} of GPUs and uses {eff.mean:.1%}: it loses "
        f"{cores.mean * 100:.1f} pp to too few cores (what slimming can win back) and "
        f"{cont.mean * 100:.1f} pp to interference, most of it between training jobs on "
        "the same node (memory bandwidth, PCIe), which throttling CPU jobs cannot remove."
    )
    if o_alloc is not None and o_alloc.mean is not None:
        text += (
            f" GPUs allocated: {alloc.mean:.1%} under `{a.base}`, {o_alloc.mean:.1%} under "
            "`oracle`: where these are equal, cores do not keep GPUs idle on this cluster "
            "(the trace's requests fit its nodes), so freeing cores admits no extra jobs."
        )
    return [text, ""]


def _what_was_run(result: ExperimentResult, command: str) -> list[str]:
    cfg, c = result.config, _context(result)
    main = [r for r in result.records if r.kind == "main"]
    rob = [r for r in result.records if r.kind == "robustness"]
    base = cfg.base
    lines = [
        "## What was run",
        "",
        f"- Trace `{c['trace']}`, cluster {c['cluster']}, profiles `{c['profiles']}`"
        + (f", model mix `{base.mix}`" if base.mix else "")
        + f", warm-up {base.warmup:g}"
        + (f", horizon {base.horizon:g} s" if base.horizon else ""),
        f"- Loads {c['loads']} (headline load {cfg.judged_load:g}); seeds {c['seeds']}; "
        f"one workload per (load, seed), shared by every policy, so differences are paired.",
        f"- Policies: {', '.join(f'`{p}`' for p in result.policies)}"
        + (
            f"; not registered, skipped: {', '.join(f'`{p}`' for p in result.skipped)}"
            if result.skipped
            else ""
        ),
        f"- Main grid: {len(main)} runs (allocator sample noise {base.noise:g}, "
        f"profiles unperturbed).",
    ]
    if cfg.robustness:
        lines.append(
            f"- Robustness sweep: {len(rob)} runs at load {cfg.judged_load:g}, every profile "
            f"value scaled by U(1-{cfg.perturb:g}, 1+{cfg.perturb:g}) (drawn per seed), "
            f"sample noise {cfg.noise:g}; policies "
            f"{', '.join(f'`{p}`' for p in robustness_policies(cfg))}."
        )
    else:
        lines.append("- Robustness sweep: off (`--no-robustness`).")
    lines += [
        f"- {len(result.errors)} failed runs; wall time {fmt_duration(result.wall_s)}.",
        "",
        "Reproduce:",
        "",
        "```sh",
        command,
        "```",
        "",
    ]
    return lines


def _results_section(result: ExperimentResult) -> list[str]:
    a = result.analysis
    present, absent = _present_metrics(a)
    lines = [
        "## Results per load",
        "",
        "Mean over seeds ± the 95% confidence half-width (Student t; in percentage points for "
        "utilisations). Utilisations are time averages over the measurement window.",
        "",
    ]
    for load in a.loads:
        lines.append(f"### Load {load:g}" + (" (headline)" if load == a.judged_load else ""))
        lines.append("")
        rows = [
            [label] + [fmt_estimate(a.stats[(p, load)][key], kind) for p in a.policies]
            for key, label, kind in present
        ]
        lines += _md_table(["metric", *a.policies], rows)
        lines.append("")
    if absent:
        lines += [f"Not reported by these runs (no policy gave them): {', '.join(absent)}.", ""]

    others = [p for p in a.policies if p != a.base]
    if others:
        lines += [
            f"### Paired differences vs `{a.base}`",
            "",
            "Per seed, policy minus baseline on the same workload; mean [95% CI] over seeds. "
            "GPU rows are relative changes in %, the rest differences in time.",
            "",
        ]
        rows = []
        for p in others:
            for load in a.loads:
                g = a.gains[(p, load)]
                rows.append(
                    [p, f"{load:g}"]
                    + [
                        fmt_estimate(g[key], kind) if kind == "gain" else _fmt_diff(g[key])
                        for key, _, kind, _ in GAINS
                    ]
                )
        lines += _md_table(["policy", "load", *[label for _, label, _, _ in GAINS]], rows)
        lines.append("")
    return lines


def _fmt_diff(est: Estimate) -> str:
    if est.mean is None:
        return MISSING
    text = ("+" if est.mean >= 0 else "-") + fmt_duration(abs(est.mean))
    if est.low is not None and est.high is not None:
        lo, hi = est.low, est.high
        text += f" [{'-' if lo < 0 else '+'}{fmt_duration(abs(lo))}, "
        text += f"{'-' if hi < 0 else '+'}{fmt_duration(abs(hi))}]"
    return text


def _decomposition_section(result: ExperimentResult) -> list[str]:
    a = result.analysis
    lines = [
        "## Where the gain comes from",
        "",
        "In every run effective GPU util = allocated − lost to too few cores − lost to "
        "contention, so the gain of one policy over another splits exactly into: **more GPUs "
        "allocated** (jobs admitted on the cores slimming frees), **less lost to too few "
        "cores** (starved jobs sped up, minus what the allocator's search costs) and **less "
        "lost to contention** (interference avoided). Means over seeds, paired per seed; in "
        "points of GPU capacity (pp) and as % of the baseline's effective utilisation (these "
        "add up to the relative gain of the mean utilisations, which can differ slightly from "
        "the mean of the per-seed relative gains used by the verdict).",
        "",
    ]
    decs = [d for d in a.decomposition.values() if d is not None]
    if not decs:
        lines += [f"No decomposition: `{a.subject}` was not run.", ""]
    else:
        labels = [label for _, label, _ in decs[0].terms()]
        rows = []
        for d in decs:
            rows.append(
                [f"{d.load:g}", str(d.seeds), _pp(d.gain) + f" ({_rel(d.gain_pct)})"]
                + [f"{_pp(v)} ({_rel(d.relative(v))})" for _, _, v in d.terms()]
                + [MISSING if d.residual is None else f"{100 * d.residual:.1e} pp"]
            )
        lines.append(f"`{a.subject}` vs `{a.base}`:")
        lines.append("")
        lines += _md_table(["load", "seeds", "gain", *labels, "residual"], rows)
        lines.append("")
        if not decs[0].split:
            lines += [
                "The runs do not report `gpu_lost_cores` / `gpu_lost_contention`, so the "
                "loss is not split between cores and contention.",
                "",
            ]
    chains = {load: steps for load, steps in a.chain.items() if steps}
    if chains:
        lines += [
            "### Ablation chain",
            "",
            "Each step adds one mechanism (the ablations that ran); the last row is the "
            "headroom to the oracle. Step gains are in % of the baseline's effective util, so "
            "they add up to the cumulative gain.",
            "",
        ]
        rows = []
        for load, steps in chains.items():
            for s in steps:
                d = s.step
                rows.append(
                    [f"{load:g}", f"{s.label} (`{d.base}` → `{d.other}`)", _rel(d.gain_pct)]
                    + [_rel(d.relative(v)) for _, _, v in d.terms()]
                    + [_rel(s.cumulative_pct)]
                )
        labels = [label for _, label, _ in next(iter(chains.values()))[0].step.terms()]
        lines += _md_table(
            ["load", "step", "step gain", *labels, "cumulative"],
            rows,
            "ll" + "r" * (len(labels) + 2),
        )
        lines.append("")
    return lines


def _jct_delta(base: float | None, other: float | None) -> str:
    """The difference itself: two means of hours can print alike and still differ."""
    if base is None or other is None or not base:
        return MISSING
    d = other - base
    return f"{'+' if d >= 0 else '-'}{fmt_duration(abs(d))} ({d / base:+.2%})"


def _robustness_section(result: ExperimentResult) -> list[str]:
    r = result.analysis.robustness
    if r is None:
        return []
    lines = ["## Robustness", "", r.summary + ".", ""]
    rows = [
        [
            str(s.seed),
            fmt_estimate(Estimate(1, s.base_eff, None, None), "pct"),
            fmt_estimate(Estimate(1, s.subject_eff, None, None), "pct"),
            _rel(s.gain_pct),
            fmt_duration(s.base_cpu_queue),
            fmt_duration(s.subject_cpu_queue),
            fmt_duration(s.base_dnn_jct),
            fmt_duration(s.subject_dnn_jct),
            _jct_delta(s.base_dnn_jct, s.subject_dnn_jct),
            _yes(s.holds),
            _yes(s.meets_target),
        ]
        for s in r.rows
    ]
    lines += _md_table(
        [
            "seed",
            f"{r.base} GPU eff",
            f"{r.subject} GPU eff",
            "gain",
            f"{r.base} CPU queuing",
            f"{r.subject} CPU queuing",
            f"{r.base} DNN JCT",
            f"{r.subject} DNN JCT",
            "DNN JCT Δ",
            "holds",
            f">= {PAPER_GAIN_PCT:g}%",
        ],
        rows,
    )
    lines += [
        "",
        f"*holds*: {r.subject} beats {r.base} on effective GPU util, with CPU-job mean queuing "
        "no higher and mean DNN JCT no worse, on that seed's perturbed workload.",
        "",
    ]
    return lines


def _errors_section(result: ExperimentResult) -> list[str]:
    if not result.errors:
        return []
    lines = ["## Failed runs", ""]
    rows = [
        [r.kind, r.policy, f"{r.load:g}", str(r.seed), f"{r.perturb:g}", f"{r.noise:g}", r.error]
        for r in result.errors
    ]
    lines += _md_table(["kind", "policy", "load", "seed", "perturb", "noise", "error"], rows)
    lines += ["", "Full tracebacks and configs are in results.json (`errors`).", ""]
    return lines


def _notes_section(result: ExperimentResult) -> list[str]:
    a = result.analysis
    notes = []
    if result.skipped:
        notes.append(
            f"policies not registered, skipped: {', '.join(result.skipped)} "
            "(`coda policies` lists those that are)"
        )
    if result.config.headline_load is None and len(a.loads) > 1:
        notes.append(
            f"headline load = the highest load ({a.judged_load:g}); `--headline-load` "
            "chooses another"
        )
    n = len(result.records)
    notes += [text if k == n else f"{text} ({k} of {n} runs)" for text, k in a.notes]
    if not notes:
        return []
    return ["## Notes", "", *[f"- {_md_escape(x)}" for x in notes], ""]


def markdown_report(result: ExperimentResult, command: str | None = None) -> str:
    """report.md: verdict first, then what was run, tables, decomposition, robustness."""
    c = _context(result)
    command = command or reproduce_command(result.config)
    lines = [
        "# CODA headline experiment: the paper's +20.8% GPU utilisation claim",
        "",
        f"Trace `{c['trace']}` · cluster {c['cluster']} · loads {c['loads']} · "
        f"seeds {c['seeds']} · profiles `{c['profiles']}`",
        "",
    ]
    lines += _verdict_section(result)
    lines += _what_was_run(result, command)
    lines += _results_section(result)
    lines += _decomposition_section(result)
    lines += _robustness_section(result)
    lines += _errors_section(result)
    lines += _notes_section(result)
    return "\n".join(lines).rstrip("\n") + "\n"


# ---------------------------------------------------------------- JSON and CSV


def results_dict(result: ExperimentResult, command: str | None = None) -> dict[str, Any]:
    cfg = result.config
    analysis = result.analysis.to_dict()
    return {
        "experiment": {
            "command": command or reproduce_command(cfg),
            "claim": f"+{PAPER_GAIN_PCT:g}% GPU utilisation (relative), CPU queuing no longer",
            "target_gain_pct": PAPER_GAIN_PCT,
            "dnn_queue_stress_s": DNN_QUEUE_STRESS_S,
            "loads": list(cfg.loads),
            "seeds": list(range(cfg.seeds)),
            "headline_load": cfg.judged_load,
            "policies_requested": list(cfg.policies),
            "policies_run": list(result.policies),
            "policies_skipped": list(result.skipped),
            "baseline": cfg.baseline,
            "subject": cfg.subject,
            "robustness": {
                "enabled": cfg.robustness,
                "perturb": cfg.perturb,
                "noise": cfg.noise,
                "policies": list(robustness_policies(cfg)) if cfg.robustness else [],
            },
            "base_config": asdict(cfg.base),
            "runs": len(result.records),
            "failed": len(result.errors),
            "wall_s": result.wall_s,
        },
        "verdict": analysis.pop("verdict"),
        **analysis,
        "runs": [
            {k: v for k, v in r.to_dict().items() if k != "traceback"} for r in result.records
        ],
        "errors": [
            {
                "kind": r.kind,
                "policy": r.policy,
                "load": r.load,
                "seed": r.seed,
                "error": r.error,
                "config": r.config,
                "traceback": r.traceback,
            }
            for r in result.errors
        ],
    }


RUN_COLUMNS = ("kind", "policy", "load", "seed", "perturb", "noise", "error")


def write_runs_csv(records: Sequence[RunRecord], path: Path) -> Path:
    """One row per run: its coordinates, error (empty if none) and every kept metric."""
    keys = [k for k, _, _ in METRICS] + [k for k in EXTRA_METRICS]
    with Path(path).open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow([*RUN_COLUMNS, *keys])
        for r in records:
            row = [r.kind, r.policy, r.load, r.seed, r.perturb, r.noise, r.error or ""]
            row += [r.metrics.get(k) for k in keys]
            w.writerow(["" if v is None else _cell(v) for v in row])
    return Path(path)


# ---------------------------------------------------------------- plots


def _series(a: Analysis, policy: str, key: str, scale: float = 1.0):
    means, halves = [], []
    for load in a.loads:
        e = a.stats[(policy, load)][key]
        means.append(np.nan if e.mean is None else e.mean * scale)
        halves.append(0.0 if e.half is None else e.half * scale)
    return np.array(means), np.array(halves)


def _lines_vs_load(ax, a: Analysis, key: str, scale: float, ylabel: str, title: str) -> bool:
    colours, styles = _colours(len(a.policies)), _linestyles(len(a.policies))
    loads = np.array(a.loads, dtype=float)
    # A small sideways offset per policy keeps overlapping error bars readable.
    span = (loads.max() - loads.min()) or 1.0
    offsets = (np.arange(len(a.policies)) - (len(a.policies) - 1) / 2) * span * 0.008
    drawn = False
    for p, colour, style, off in zip(a.policies, colours, styles, offsets, strict=True):
        y, h = _series(a, p, key, scale)
        if np.isnan(y).all():
            continue
        ax.errorbar(
            loads + off,
            y,
            yerr=h,
            color=colour,
            ls=style,
            marker="o",
            ms=4,
            capsize=3,
            lw=1.3,
            label=p,
        )
        drawn = True
    ax.set_xlabel("offered GPU load (× GPU capacity)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xticks(loads)
    ax.set_xticklabels([f"{x:g}" for x in loads])
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(fontsize=8, framealpha=0.8)
    else:
        _no_data(ax)
    return drawn


def plot_gpu_util_vs_load(result: ExperimentResult, path: Path) -> Path:
    """Effective and allocated GPU util vs load, one line per policy, 95% CI bars."""
    a = result.analysis
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    _lines_vs_load(axes[0], a, "gpu_util_effective", 100.0, "GPU util (%)", "effective")
    _lines_vs_load(axes[1], a, "gpu_util_allocated", 100.0, "GPU util (%)", "allocated")
    fig.suptitle("GPU utilisation vs load (mean, 95% CI over seeds) — " + _title(result))
    fig.tight_layout()
    return _save(fig, path)


def _time_scale(a: Analysis, keys: Sequence[str]) -> tuple[float, str]:
    top = 0.0
    for cell in a.stats.values():
        for k in keys:
            if cell[k].mean is not None:
                top = max(top, abs(cell[k].mean) + (cell[k].half or 0.0))
    if top < 120:
        return 1.0, "s"
    if top < 7200:
        return 60.0, "min"
    return 3600.0, "h"


def plot_queuing_vs_load(result: ExperimentResult, path: Path) -> Path:
    """CPU-job and DNN-job mean queuing delay vs load, one line per policy, 95% CI bars."""
    a = result.analysis
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, name in (
        (axes[0], "cpu_queue_mean", "CPU jobs"),
        (axes[1], "dnn_queue_mean", "DNN jobs"),
    ):
        div, unit = _time_scale(a, [key])
        _lines_vs_load(ax, a, key, 1.0 / div, f"mean queuing delay ({unit})", name)
        ax.set_ylim(bottom=0)
    fig.suptitle("Mean queuing delay vs load (95% CI over seeds) — " + _title(result))
    fig.tight_layout()
    return _save(fig, path)


def _stacked(
    ax,
    x: np.ndarray,
    parts: list[tuple[str, list[float | None]]],
    colours,
    width: float = 0.6,
    hatch: Sequence[str | None] | None = None,
) -> None:
    """Stacked bars where negative parts stack downwards from 0, positive ones upwards."""
    pos, neg = np.zeros(len(x)), np.zeros(len(x))
    for i, ((label, values), colour) in enumerate(zip(parts, colours, strict=True)):
        v = np.array([0.0 if y is None else y for y in values])
        bottom = np.where(v >= 0, pos, neg)
        ax.bar(
            x,
            v,
            width,
            bottom=bottom,
            color=colour,
            label=label,
            hatch=hatch[i] if hatch else None,
            edgecolor="white",
        )
        pos += np.where(v >= 0, v, 0)
        neg += np.where(v < 0, v, 0)


def plot_gain_decomposition(result: ExperimentResult, path: Path) -> Path:
    """Per load, the subject's gain over the baseline split into its exact parts; and the
    ablation chain's steps where those runs exist."""
    a = result.analysis
    decs = [d for d in a.decomposition.values() if d is not None]
    chains = {load: steps for load, steps in a.chain.items() if steps}
    ncols = 2 if chains else 1
    fig, axes = plt.subplots(1, ncols, figsize=(7 * ncols, 5), squeeze=False)
    ax = axes[0][0]
    if decs:
        x = np.arange(len(decs))
        labels = [label for _, label, _ in decs[0].terms()]
        values = [[d.relative(v) for _, _, v in d.terms()] for d in decs]
        parts = [(labels[i], [row[i] for row in values]) for i in range(len(labels))]
        _stacked(ax, x, parts, _colours(len(parts)))
        ax.plot(x, [d.gain_pct or 0.0 for d in decs], "kD", ms=6, label="total gain")
        for xi, d in zip(x, decs, strict=True):
            ax.annotate(
                _rel(d.gain_pct),
                (xi, d.gain_pct or 0.0),
                xytext=(8, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        ax.axhline(
            PAPER_GAIN_PCT, color="grey", ls="--", lw=1, label=f"paper: +{PAPER_GAIN_PCT:g}%"
        )
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(x)
        ax.set_xticklabels([f"load {d.load:g}" for d in decs])
        ax.legend(fontsize=7, loc="upper left", framealpha=0.85)
    else:
        _no_data(ax, f"{a.subject} not run")
    ax.set_ylabel(f"gain in effective GPU util, % of {a.base}'s")
    ax.set_title(f"{a.subject} vs {a.base}: where the gain comes from")
    ax.grid(True, axis="y", alpha=0.3)
    if chains:
        ax = axes[0][1]
        loads = list(chains)
        step_labels = list(dict.fromkeys(s.label for steps in chains.values() for s in steps))
        parts = []
        for label in step_labels:
            vals = []
            for load in loads:
                match = [s for s in chains[load] if s.label == label]
                vals.append(match[0].step.gain_pct if match else None)
            parts.append((label, vals))
        hatch = ["//" if "upper bound" in label else None for label in step_labels]
        _stacked(ax, np.arange(len(loads)), parts, _colours(len(parts)), hatch=hatch)
        ax.axhline(
            PAPER_GAIN_PCT, color="grey", ls="--", lw=1, label=f"paper: +{PAPER_GAIN_PCT:g}%"
        )
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(np.arange(len(loads)))
        ax.set_xticklabels([f"load {x:g}" for x in loads])
        ax.set_ylabel(f"cumulative gain, % of {a.base}'s effective util")
        ax.set_title("Ablation chain (each step adds one mechanism)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", framealpha=0.85)
    fig.suptitle("Decomposition of the GPU-utilisation gain (mean over seeds) — " + _title(result))
    fig.tight_layout()
    return _save(fig, path)


def plot_robustness(result: ExperimentResult, path: Path) -> Path:
    """Per seed of the robustness sweep: the gain, and CPU-job queuing and DNN JCT of
    every policy in the sweep."""
    a = result.analysis
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    r = a.robustness
    rob = [x for x in result.records if x.kind == "robustness" and x.ok]
    if r is None or not rob:
        for ax in axes:
            _no_data(ax, "robustness sweep not run")
        fig.suptitle("Robustness — " + _title(result))
        fig.tight_layout()
        return _save(fig, path)
    seeds = sorted({x.seed for x in rob})
    x = np.arange(len(seeds))
    ax = axes[0]
    if any(s.gain_pct is not None for s in r.rows):
        by_seed = {s.seed: s for s in r.rows}
        gains = [by_seed[s].gain_pct if s in by_seed else None for s in seeds]
        holds = [by_seed[s].holds if s in by_seed else None for s in seeds]
        colours = ["tab:green" if h else "tab:red" if h is False else "grey" for h in holds]
        ax.bar(x, [0.0 if g is None else g for g in gains], 0.6, color=colours)
        ax.axhline(PAPER_GAIN_PCT, color="grey", ls="--", lw=1, label=f"+{PAPER_GAIN_PCT:g}%")
        ax.axhline(0, color="black", lw=0.6)
        ax.legend(fontsize=8, loc="upper left")
    else:
        _no_data(ax, f"{r.subject} not run")
    ax.set_title(f"{r.subject} vs {r.base}: effective GPU util gain\n(green: holds on that seed)")
    ax.set_ylabel("relative gain (%)")
    policies = list(dict.fromkeys(x.policy for x in rob))
    colours = _colours(len(policies))
    for ax, key, name in (
        (axes[1], "cpu_queue_mean", "CPU-job mean queuing"),
        (axes[2], "dnn_jct_mean", "DNN-job mean JCT"),
    ):
        vals = {(x.policy, x.seed): x.get(key) for x in rob}
        top = max([v for v in vals.values() if v is not None] + [0.0])
        div, unit = (1.0, "s") if top < 120 else (60.0, "min") if top < 7200 else (3600.0, "h")
        width = 0.8 / len(policies)
        for i, (p, colour) in enumerate(zip(policies, colours, strict=True)):
            ys = [vals.get((p, s)) for s in seeds]
            ax.bar(
                x - 0.4 + width * (i + 0.5),
                [0.0 if y is None else y / div for y in ys],
                width * 0.95,
                color=colour,
                label=p,
            )
        ax.set_title(name)
        ax.set_ylabel(unit)
        ax.legend(fontsize=8)
    for ax in axes:
        ax.set_xticks(x)
        ax.set_xticklabels([f"seed {s}" for s in seeds])
        ax.set_xlabel("seed (profiles perturbed per seed)")
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(
        f"Robustness at load {r.load:g}: profiles ±{100 * r.perturb:g}%, sample noise "
        f"{r.noise:g}\n" + _title(result)
    )
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------- files and terminal


def write_experiment(
    result: ExperimentResult, out_dir: Path, command: str | None = None
) -> list[Path]:
    """report.md, results.json, runs.csv and the four plots (REPORT_FILES) in out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = command or reproduce_command(result.config, str(out_dir))
    md = out_dir / "report.md"
    md.write_text(markdown_report(result, command), encoding="utf-8")
    plots: list[tuple[Callable[[ExperimentResult, Path], Path], str]] = [
        (plot_gpu_util_vs_load, "gpu_util_vs_load.png"),
        (plot_queuing_vs_load, "queuing_vs_load.png"),
        (plot_gain_decomposition, "gain_decomposition.png"),
        (plot_robustness, "robustness.png"),
    ]
    return [
        md,
        _write_json(results_dict(result, command), out_dir / "results.json"),
        write_runs_csv(result.records, out_dir / "runs.csv"),
        *[fn(result, out_dir / name) for fn, name in plots],
    ]


def experiment_table(result: ExperimentResult) -> Table:
    """Compact terminal table: per load and policy, GPU util, gain, queuing, DNN JCT."""
    a = result.analysis
    c = _context(result)
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
