"""The headline experiment's figures: GPU utilisation and queuing against load, the
decomposition of the gain with the ablation chain, and the robustness sweep per seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from coda.experiment import (
    PAPER_GAIN_PCT,
    Analysis,
    ExperimentResult,
)
from coda.report.experiment_format import figure_title, fmt_relative
from coda.report.plots import line_styles, mark_no_data, palette, plt, save_figure


def _series(
    a: Analysis, policy: str, key: str, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    means, halves = [], []
    for load in a.loads:
        e = a.stats[(policy, load)][key]
        means.append(np.nan if e.mean is None else e.mean * scale)
        halves.append(0.0 if e.half is None else e.half * scale)
    return np.array(means), np.array(halves)


def _lines_vs_load(ax: Axes, a: Analysis, key: str, scale: float, ylabel: str, title: str) -> bool:
    colours, styles = palette(len(a.policies)), line_styles(len(a.policies))
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
        mark_no_data(ax)
    return drawn


def plot_gpu_util_vs_load(result: ExperimentResult, path: Path) -> Path:
    """Effective and allocated GPU util vs load, one line per policy, 95% CI bars."""
    a = result.analysis
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    _lines_vs_load(axes[0], a, "gpu_util_effective", 100.0, "GPU util (%)", "effective")
    _lines_vs_load(axes[1], a, "gpu_util_allocated", 100.0, "GPU util (%)", "allocated")
    fig.suptitle("GPU utilisation vs load (mean, 95% CI over seeds) — " + figure_title(result))
    fig.tight_layout()
    return save_figure(fig, path)


def _time_scale(a: Analysis, keys: Sequence[str]) -> tuple[float, str]:
    top = 0.0
    for cell in a.stats.values():
        for k in keys:
            m = cell[k].mean
            if m is not None:
                top = max(top, abs(m) + (cell[k].half or 0.0))
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
    fig.suptitle("Mean queuing delay vs load (95% CI over seeds) — " + figure_title(result))
    fig.tight_layout()
    return save_figure(fig, path)


def _stacked(
    ax: Axes,
    x: np.ndarray,
    parts: list[tuple[str, list[float | None]]],
    colours: Sequence[Any],
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
        _stacked(ax, x, parts, palette(len(parts)))
        ax.plot(x, [d.gain_pct or 0.0 for d in decs], "kD", ms=6, label="total gain")
        for xi, d in zip(x, decs, strict=True):
            ax.annotate(
                fmt_relative(d.gain_pct),
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
        mark_no_data(ax, f"{a.subject} not run")
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
        _stacked(ax, np.arange(len(loads)), parts, palette(len(parts)), hatch=hatch)
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
    fig.suptitle(
        "Decomposition of the GPU-utilisation gain (mean over seeds) — " + figure_title(result)
    )
    fig.tight_layout()
    return save_figure(fig, path)


def plot_robustness(result: ExperimentResult, path: Path) -> Path:
    """Per seed of the robustness sweep: the gain, and CPU-job queuing and DNN JCT of
    every policy in the sweep."""
    a = result.analysis
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    r = a.robustness
    rob = [x for x in result.records if x.kind == "robustness" and x.ok]
    if r is None or not rob:
        for ax in axes:
            mark_no_data(ax, "robustness sweep not run")
        fig.suptitle("Robustness — " + figure_title(result))
        fig.tight_layout()
        return save_figure(fig, path)
    seeds = sorted({x.seed for x in rob})
    x = np.arange(len(seeds))
    ax = axes[0]
    if any(s.gain_pct is not None for s in r.rows):
        by_seed = {s.seed: s for s in r.rows}
        gains = [by_seed[s].gain_pct if s in by_seed else None for s in seeds]
        holds = [by_seed[s].holds if s in by_seed else None for s in seeds]
        verdicts = ["tab:green" if h else "tab:red" if h is False else "grey" for h in holds]
        ax.bar(x, [0.0 if g is None else g for g in gains], 0.6, color=verdicts)
        ax.axhline(PAPER_GAIN_PCT, color="grey", ls="--", lw=1, label=f"+{PAPER_GAIN_PCT:g}%")
        ax.axhline(0, color="black", lw=0.6)
        ax.legend(fontsize=8, loc="upper left")
    else:
        mark_no_data(ax, f"{r.subject} not run")
    ax.set_title(f"{r.subject} vs {r.base}: effective GPU util gain\n(green: holds on that seed)")
    ax.set_ylabel("relative gain (%)")
    policies = list(dict.fromkeys(x.policy for x in rob))
    colours = palette(len(policies))
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
        f"{r.noise:g}\n" + figure_title(result)
    )
    fig.tight_layout()
    return save_figure(fig, path)
