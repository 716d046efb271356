"""Figures of `coda experiment paper`, in the spirit of the paper's: GPU active rate, busy
utilisation (the paper's) and effective utilisation over time (first seed), queuing-delay
CDFs per job kind and policy, per-user p99 queuing, and the histogram of granted minus
requested cores (coda)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coda.experiment.paper import PaperRecord
from coda.report.plots import line_styles, mark_no_data, palette, plt, save_figure

HOUR_S = 3600.0
PLOT_FILES = ("gpu_over_time.png", "queue_cdf.png", "user_p99.png", "core_delta.png")


def _first(records: Sequence[PaperRecord], policy: str) -> PaperRecord | None:
    """The policy's lowest-seed successful run (the first seed unless it failed)."""
    ok = sorted((r for r in records if r.policy == policy and r.ok), key=lambda r: r.seed)
    return ok[0] if ok else None


def plot_over_time(records: Sequence[PaperRecord], policies: Sequence[str], path: Path) -> Path:
    keys = ("gpu_util_allocated", "gpu_util_busy", "gpu_util_effective")
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 8), sharex=True)
    colours, styles = palette(len(policies)), line_styles(len(policies))
    drawn = False
    for i, p in enumerate(policies):
        r = _first(records, p)
        if r is None or not r.series:
            continue
        t = r.series["t"] / HOUR_S
        for ax, key in zip(axes, keys, strict=True):
            if key in r.series:
                ax.plot(t, 100 * r.series[key], color=colours[i], ls=styles[i], lw=1, label=p)
        drawn = True
    axes[0].set_ylabel("GPU active rate (%)")
    axes[1].set_ylabel("GPU utilisation,\nbusy share of active GPUs (%)")
    axes[2].set_ylabel("work done over all GPUs,\neffective (%)")
    axes[2].set_xlabel("hours into the measurement window (first seed)")
    if drawn:
        axes[0].legend(fontsize=8, ncol=min(4, len(policies)))
    else:
        mark_no_data(axes[0])
    return save_figure(fig, path)


def plot_queue_cdf(records: Sequence[PaperRecord], policies: Sequence[str], path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    colours, styles = palette(len(policies)), line_styles(len(policies))
    for ax, kind in zip(axes, ("dnn", "cpu"), strict=True):
        drawn = False
        for i, p in enumerate(policies):
            r = _first(records, p)
            if r is None or not r.series or not r.series[f"{kind}_queue_s"].size:
                continue
            # +1 s so that "did not queue" shows on a log axis.
            x = np.sort(r.series[f"{kind}_queue_s"]) + 1.0
            y = np.arange(1, x.size + 1) / x.size
            ax.step(x, 100 * y, where="post", color=colours[i], ls=styles[i], label=p)
            drawn = True
        ax.set_xscale("log")
        ax.set_xlabel("queuing time + 1 s (log)")
        ax.set_title(f"{kind.upper()} jobs (first seed)")
        if drawn:
            ax.legend(fontsize=8)
        else:
            mark_no_data(ax)
    axes[0].set_ylabel("jobs queued at most this long (%)")
    return save_figure(fig, path)


def plot_user_p99(records: Sequence[PaperRecord], policies: Sequence[str], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(12, 4))
    got = {
        p: r.metrics.get("user_queue_p99_s") or {} for p in policies if (r := _first(records, p))
    }
    users = sorted({u for d in got.values() for u in d})
    if not users:
        mark_no_data(ax)
        return save_figure(fig, path)
    colours = palette(len(policies))
    width = 0.8 / max(len(got), 1)
    x = np.arange(len(users))
    for i, (p, d) in enumerate(got.items()):
        vals = [d.get(u, np.nan) / 60.0 for u in users]
        ax.bar(x + i * width, vals, width, color=colours[policies.index(p)], label=p)
    step = max(1, len(users) // 40)  # at most ~40 tick labels
    ax.set_xticks(x[::step] + 0.4 - width / 2, users[::step], rotation=90, fontsize=7)
    ax.set_ylabel("p99 queuing (min)")
    ax.set_title("Per-user 99th-percentile queuing time (first seed)")
    ax.legend(fontsize=8, ncol=min(4, len(got)))
    return save_figure(fig, path)


def plot_core_delta(records: Sequence[PaperRecord], path: Path, policy: str = "coda") -> Path:
    fig, ax = plt.subplots(figsize=(8, 4))
    hist: dict[int, int] = {}
    for r in records:  # summed over every seed of the policy
        if r.policy == policy and r.ok:
            for k, v in (r.metrics.get("core_delta_hist") or {}).items():
                hist[int(k)] = hist.get(int(k), 0) + int(v)
    if not hist:
        mark_no_data(ax, f"no {policy} run")
    else:
        keys = sorted(hist)
        total = sum(hist.values())
        ax.bar(keys, [100 * hist[k] / total for k in keys], width=0.9)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlabel("cores granted (settled) minus requested, per DNN job")
        ax.set_ylabel("DNN jobs (%)")
    ax.set_title(f"{policy}: granted minus requested cores (all seeds)")
    return save_figure(fig, path)


def write_plots(records: Sequence[PaperRecord], policies: Sequence[str], out: Path) -> list[str]:
    """Every figure into out; returns the file names (relative to out)."""
    plot_over_time(records, policies, out / PLOT_FILES[0])
    plot_queue_cdf(records, policies, out / PLOT_FILES[1])
    plot_user_p99(records, policies, out / PLOT_FILES[2])
    plot_core_delta(records, out / PLOT_FILES[3])
    return list(PLOT_FILES)
