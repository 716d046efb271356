"""Figures of one or several runs: utilisation over time, queuing-delay CDFs, summary bars.

Every figure's title states trace, cluster, load and seed, like every table does.
Figures are written to files only (Agg backend): the simulator runs on machines
without a display.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display here, and files are all we want

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from coda.report.tables import describe_cluster  # noqa: E402
from coda.sim.result import SimResult  # noqa: E402
from coda.values import MISSING, finite, fmt_duration, fmt_number, lookup  # noqa: E402
from coda.writing import seekable_output  # noqa: E402

# pyplot is shared with experiment_plots, which must not import it before the Agg switch.
__all__ = [
    "DELAY_FLOOR_S",
    "DPI",
    "plot_comparison_bars",
    "plot_queue_delay_cdf",
    "plot_utilisation",
    "plt",
    "queue_delays",
]

# An RGBA colour as a colormap returns it.
Colour = tuple[float, float, float, float]

DPI = 150

# Delays below this are drawn at it on the log axis (most jobs may start at once).
DELAY_FLOOR_S = 1.0

# Readable ticks for a log time axis in seconds.
_TIME_TICKS = (
    (1, "1 s"),
    (10, "10 s"),
    (60, "1 min"),
    (600, "10 min"),
    (3600, "1 h"),
    (6 * 3600, "6 h"),
    (86400, "1 d"),
    (7 * 86400, "1 w"),
    (30 * 86400, "30 d"),
    (365 * 86400, "1 y"),
)


def _title(summaries: Sequence[dict[str, Any]]) -> str:
    """'trace X · cluster Y · load 0.9 · seed 0', with 'varies' where runs differ."""

    def shared(fn: Callable[[dict[str, Any]], str]) -> str:
        values = {fn(s) for s in summaries}
        return values.pop() if len(values) == 1 else "varies"

    if not summaries:
        return ""
    trace = shared(lambda s: str(s.get("trace", MISSING)))
    # Compared whole (specs that differ only in their middles differ), shown cut.
    whole = {describe_cluster(s.get("cluster"), clip=False) for s in summaries}
    cluster = describe_cluster(summaries[0].get("cluster")) if len(whole) == 1 else "varies"
    load = shared(lambda s: fmt_number(s.get("load")))
    seed = shared(lambda s: str(s.get("seed", MISSING)))
    return f"{trace} · {cluster}\nload {load} · seed {seed}"


def _policy(summary: dict[str, Any]) -> str:
    return str(summary.get("policy", "?"))


def palette(n: int) -> list[Colour]:
    # tab10 stays distinguishable up to 10 policies; tab20 beyond that.
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def line_styles(n: int) -> list[str]:
    # Policies often coincide on a metric (e.g. the same CPU load); dashes keep both visible.
    styles = ("-", "--", "-.", ":")
    return [styles[i % len(styles)] for i in range(n)]


def _require(items: Sequence[object], what: str) -> None:
    if not items:
        raise ValueError(f"{what} needs at least one run")


def save_figure(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with seekable_output(path) as f:
            fig.savefig(f, format=path.suffix[1:] or "png", dpi=DPI, bbox_inches="tight")
    finally:
        plt.close(fig)  # pyplot keeps figures alive otherwise; comparisons make many
    return path


def mark_no_data(ax: Axes, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")


# ---------------------------------------------------------------- utilisation over time


def plot_utilisation(results: list[SimResult], path: Path) -> Path:
    """GPU effective, GPU allocated and CPU utilisation over time, one line per policy."""
    panels = (
        ("gpu_util_effective", "GPU util, effective (%)"),
        ("gpu_util_allocated", "GPU util, allocated (%)"),
        ("cpu_util", "CPU util, cores held (%)"),
    )
    _require(results, "plot_utilisation")
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 8.5), sharex=True)
    colours = palette(len(results))
    styles = line_styles(len(results))
    top = 100.0
    for ax, (key, ylabel) in zip(axes, panels, strict=True):
        drawn = False
        for r, colour, style in zip(results, colours, styles, strict=True):
            t, y = r.timeseries.get("t"), r.timeseries.get(key)
            if t is None or y is None or len(t) == 0:
                continue
            t = np.asarray(t, dtype=np.float64) / 3600.0
            y = 100.0 * np.asarray(y, dtype=np.float64)
            avg = finite(r.summary.get(key))
            if avg is None and np.isfinite(y).any():
                avg = float(np.nanmean(y)) / 100.0
            label = _policy(r.summary) + (f" (avg {100 * avg:.1f}%)" if avg is not None else "")
            ax.plot(t, y, color=colour, ls=style, lw=1.0, label=label)
            if np.isfinite(y).any():
                top = max(top, float(np.nanmax(y)))
            drawn = True
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, top * 1.05)
        ax.grid(True, alpha=0.3)
        if drawn:
            # Outside the axes: with several policies an inside legend hides the lines.
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        else:
            mark_no_data(ax)
    axes[-1].set_xlabel("time since window start (h)")
    fig.suptitle("Utilisation over time — " + _title([r.summary for r in results]))
    fig.tight_layout()
    return save_figure(fig, path)


# ---------------------------------------------------------------- queuing delay CDF


def queue_delays(result: SimResult, dnn: bool) -> tuple[np.ndarray, int]:
    """Queuing delays (start - submit) of the started DNN or CPU jobs, and how many
    jobs of that kind never started (they have no delay, but must not be hidden)."""
    jobs = result.jobs
    if not all(k in jobs for k in ("is_dnn", "submit", "start")):
        return np.empty(0), 0
    mask = np.asarray(jobs["is_dnn"], dtype=bool)
    if not dnn:
        mask = ~mask
    submit = np.asarray(jobs["submit"], dtype=np.float64)[mask]
    start = np.asarray(jobs["start"], dtype=np.float64)[mask]
    started = np.isfinite(start) & np.isfinite(submit)
    return start[started] - submit[started], int((~started).sum())


def _log_time_axis(ax: Axes, hi: float) -> None:
    ax.set_xscale("log")
    ax.set_xlim(DELAY_FLOOR_S * 0.8, max(hi * 1.5, 100.0))
    ticks = [(v, lab) for v, lab in _TIME_TICKS if v <= max(hi * 1.5, 100.0)]
    ax.set_xticks([v for v, _ in ticks])
    ax.set_xticklabels([lab for _, lab in ticks])
    ax.minorticks_off()


def plot_queue_delay_cdf(results: list[SimResult], path: Path) -> Path:
    """CDF of queuing delay for DNN and CPU jobs (two panels), one line per policy.

    Log x axis; delays under DELAY_FLOOR_S are drawn at it, so the curve's height at
    the left edge is the share of jobs that started (almost) at once.
    """
    _require(results, "plot_queue_delay_cdf")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    colours = palette(len(results))
    styles = line_styles(len(results))
    for ax, dnn, name in ((axes[0], True, "DNN jobs"), (axes[1], False, "CPU jobs")):
        hi = DELAY_FLOOR_S
        drawn = False
        for r, colour, style in zip(results, colours, styles, strict=True):
            delays, never = queue_delays(r, dnn)
            if delays.size == 0:
                continue
            x = np.sort(np.maximum(delays, DELAY_FLOOR_S))
            y = np.arange(1, x.size + 1) / x.size
            # Start the step at the floor so a curve with no zero delays is still visible.
            x = np.concatenate([[DELAY_FLOOR_S], x])
            y = np.concatenate([[0.0], y])
            immediate = 100.0 * float((delays < DELAY_FLOOR_S).mean())
            label = f"{_policy(r.summary)} (n={delays.size:,}, {immediate:.0f}% < 1 s"
            label += f", {never:,} never started)" if never else ")"
            ax.step(x, y, where="post", color=colour, ls=style, lw=1.3, label=label)
            hi = max(hi, float(x[-1]))
            drawn = True
        _log_time_axis(ax, hi)
        ax.set_ylim(0, 1.02)
        ax.set_title(name)
        ax.set_xlabel(
            f"queuing delay (start − submit), log scale; < {DELAY_FLOOR_S:g} s drawn at it"
        )
        ax.grid(True, which="major", alpha=0.3)
        if drawn:
            ax.legend(loc="lower right", fontsize=8, framealpha=0.8)
        else:
            mark_no_data(ax, "no started jobs")
    axes[0].set_ylabel("fraction of started jobs")
    fig.suptitle("Queuing delay CDF — " + _title([r.summary for r in results]))
    fig.tight_layout()
    return save_figure(fig, path)


# ---------------------------------------------------------------- summary bars


def _duration_unit(max_seconds: float) -> tuple[float, str]:
    if max_seconds < 120:
        return 1.0, "s"
    if max_seconds < 7200:
        return 60.0, "min"
    return 3600.0, "h"


def _bar_group(
    ax: Axes,
    groups: Sequence[str],
    values: list[list[float | None]],  # [policy][group]
    names: Sequence[str],
    colours: list[Colour],
    fmt: Callable[[float], str],
) -> None:
    """Grouped bars with the value written on each bar; None draws no bar but says n/a."""
    n = max(len(names), 1)
    width = 0.8 / n
    x = np.arange(len(groups))
    for i, (name, vals, colour) in enumerate(zip(names, values, colours, strict=True)):
        pos = x - 0.4 + width * (i + 0.5)
        heights = [v if v is not None else 0.0 for v in vals]
        bars = ax.bar(pos, heights, width * 0.95, color=colour, label=name)
        for bar, v in zip(bars, vals, strict=True):
            ax.annotate(
                fmt(v) if v is not None else "n/a",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                rotation=90 if n > 4 else 0,
            )
    ax.set_xticks(x)
    ax.set_xticklabels(groups)
    ax.grid(True, axis="y", alpha=0.3)


def plot_comparison_bars(summaries: list[dict[str, Any]], path: Path) -> Path:
    """Per policy: the time-average utilisations, and the mean DNN / CPU queuing delay."""
    _require(summaries, "plot_comparison_bars")
    util_keys = [
        ("gpu_util_effective", "GPU\neffective"),
        ("gpu_util_allocated", "GPU\nallocated"),
        ("cpu_util", "CPU\nheld"),
    ]
    if any(finite(s.get("cpu_util_useful")) is not None for s in summaries):
        util_keys.append(("cpu_util_useful", "CPU\nuseful"))
    delay_keys = [("dnn_queue_delay_s", "DNN jobs"), ("cpu_queue_delay_s", "CPU jobs")]

    names = [_policy(s) for s in summaries]
    colours = palette(len(summaries))
    fig, (ax_u, ax_d) = plt.subplots(
        1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [len(util_keys), 2]}
    )

    util = [
        [None if (v := finite(s.get(k))) is None else 100.0 * v for k, _ in util_keys]
        for s in summaries
    ]
    _bar_group(ax_u, [lab for _, lab in util_keys], util, names, colours, lambda v: f"{v:.1f}%")
    top = max([v for row in util for v in row if v is not None] + [100.0])
    ax_u.set_ylim(0, top * 1.15)
    ax_u.set_ylabel("time-average utilisation (%)")
    ax_u.set_title("Utilisation")

    raw = [[finite(lookup(s, k, "mean")) for k, _ in delay_keys] for s in summaries]
    present = [v for row in raw for v in row if v is not None]
    scale, unit = _duration_unit(max(present, default=0.0))
    delays = [[None if v is None else v / scale for v in row] for row in raw]
    _bar_group(
        ax_d,
        [lab for _, lab in delay_keys],
        delays,
        names,
        colours,
        lambda v: fmt_duration(v * scale),
    )
    ax_d.set_ylim(0, max(present, default=1.0) / scale * 1.2 or 1.0)
    ax_d.set_ylabel(f"mean queuing delay ({unit})")
    ax_d.set_title("Mean queuing delay")

    handles, labels = ax_u.get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=min(len(names), 5),
        fontsize=9,
        bbox_to_anchor=(0.5, -0.02),
    )
    fig.suptitle("Policy comparison — " + _title(summaries))
    fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(names) - 1) // 5), 1, 1))
    return save_figure(fig, path)
