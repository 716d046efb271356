"""Read the CODA paper's Figures 2a, 3, 10 and 11 from the vector data of its PDF.

    python tools/read_paper_figures.py PATH/TO/2020coda.pdf

The readings in docs/paper.md come from this script. The paper's text is public (the
first author's homepage repository on GitHub, mivenHan/mivenHan.github.io, holds it as
publication/2020coda/2020coda.pdf in its history); it is not shipped here. The figures
are vector drawings: every line is a list of points in page coordinates, and each
axis has tick marks at known positions. A value is read by mapping a point from its
tick marks to the tick labels (linear axes; Figure 11's time axis is logarithmic),
about +-0.2 points. The tick labels of Figure 3 are drawn as outlines, not text, so
their values are given below (read from the rendered page).

Needs pdfplumber (`pip install pdfplumber`); it is not one of CODA's dependencies.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any

# Colours of the lines as the PDF states them (CMYK).
BLUE_1N1G = (0.804, 0.647, 0.0, 0.0)
ORANGE_1N4G = (0.0, 0.42, 1.0, 0.0)


@dataclass(frozen=True)
class Axis:
    """Tick positions (page points) and their values; a point maps linearly between
    the first and last tick (or in log10 of the value where `log`)."""

    at: tuple[float, ...]
    values: tuple[float, ...]
    log: bool = False

    def value(self, pos: float) -> float:
        a0, a1 = self.at[0], self.at[-1]
        v0, v1 = self.values[0], self.values[-1]
        if self.log:
            v0, v1 = math.log10(v0), math.log10(v1)
        v = v0 + (pos - a0) * (v1 - v0) / (a1 - a0)
        return 10**v if self.log else v


# Figure 2a (the PDF's fourth page): stacked bars of job kinds, percentage axis with a
# tick every 2 points (70 at the top tick), bars for CPU-only and GPU jobs.
FIG2A_Y = Axis((74.78, 165.13), (70, 20))
FIG2A_BARS = {99.7: "CPU-only jobs", 144.9: "GPU jobs"}


def figure2a(pdf: Any) -> dict[str, float]:
    """Each bar's top (the share of that week's jobs of that kind, %)."""
    page = pdf.pages[3]
    tops: dict[str, float] = {}
    for r in page.rects:
        name = FIG2A_BARS.get(round(r["x0"], 1))
        if name and r["top"] < 200:
            tops[name] = min(tops.get(name, 1e9), r["top"])
    if set(tops) != set(FIG2A_BARS.values()):
        raise ValueError("Figure 2a's bars not found")
    return {name: FIG2A_Y.value(top) for name, top in tops.items()}


@dataclass(frozen=True)
class Panel:
    """One panel of Figure 3: cores 1..14 along x, busy % on the left axis, training
    speed (relative to 1 core) on the right axis."""

    name: str
    x_left: float  # page x of the panel's left edge (1 core)
    top: float
    bottom: float
    busy: Axis
    speed: Axis


# Figure 3 (page 856 of the proceedings, the PDF's fourth page). Tick positions are
# the PDF's tick-mark lines; values from the tick labels on the rendered page.
FIGURE3 = (
    Panel(
        "AlexNet", 86.66, 234.6, 298.69,
        Axis((285.29, 267.75, 250.21), (40, 60, 80)),
        Axis((280.27, 259.58, 238.89), (4, 8, 12)),
    ),
    Panel(
        "Bi-att-flow", 185.35, 234.6, 298.69,
        Axis((294.4, 281.87, 269.34, 256.81, 244.28), (14, 16, 18, 20, 22)),
        Axis((295.78, 286.0, 276.22, 266.45, 256.67, 246.89, 237.11), (1, 2, 3, 4, 5, 6, 7)),
    ),
    Panel(
        "DeepSpeech", 86.66, 311.51, 375.61,
        Axis((369.5, 358.06, 346.62, 335.17, 323.73, 312.29), (50, 60, 70, 80, 90, 100)),
        Axis((372.84, 342.18, 311.51), (1, 2, 3)),
    ),
    Panel(
        "Transformer", 185.35, 311.51, 375.61,
        Axis((371.28, 358.72, 346.17, 333.61, 321.06), (30, 40, 50, 60, 70)),
        Axis((372.69, 363.24, 353.8, 344.35, 334.9, 325.45, 316.0), (1, 1.5, 2, 2.5, 3, 3.5, 4)),
    ),
)  # fmt: skip


def _curves_in(page: Any, panel: Panel) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """The panel's four lines: (config, busy|speed) -> [(cores, value)]."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    step = None
    for c in page.curves:
        if abs(c["x0"] - panel.x_left) > 0.2 or not panel.top - 1 <= c["top"] <= panel.bottom:
            continue
        if len(c["pts"]) < 13:
            continue
        colour = tuple(c["stroking_color"])
        config = {BLUE_1N1G: "1N1G", ORANGE_1N4G: "1N4G"}.get(colour)
        if config is None:
            continue
        kind = "speed" if c.get("dash") else "busy"
        xs = [x for x, _ in c["pts"]]
        step = (max(xs) - min(xs)) / 13  # 14 core counts, 1..14
        axis = panel.speed if kind == "speed" else panel.busy
        out[(config, kind)] = [
            (round(1 + (x - panel.x_left) / step), axis.value(y)) for x, y in c["pts"]
        ]
    return out


def figure3(pdf: Any) -> list[dict[str, Any]]:
    """Per panel and configuration: busy at 1 core, the best busy and its cores, speed
    at 1 core and at its peak (and where), busy at the speed peak."""
    page = pdf.pages[3]
    rows = []
    for panel in FIGURE3:
        curves = _curves_in(page, panel)
        for config in ("1N1G", "1N4G"):
            busy = dict(curves[(config, "busy")])
            speed = dict(curves[(config, "speed")])
            best_busy = max(busy, key=lambda k: busy[k])
            peak = max(speed, key=lambda k: speed[k])
            rows.append(
                {
                    "model": panel.name,
                    "config": config,
                    "busy_1": busy[1],
                    "busy_best": busy[best_busy],
                    "busy_best_cores": best_busy,
                    "speed_1": speed[1],
                    "speed_peak": speed[peak],
                    "speed_peak_cores": peak,
                    "busy_at_speed_peak": busy.get(peak),
                    "speed_low": speed[1] / speed[peak],
                    "speed_last": speed[max(speed)],
                }
            )
    return rows


# Figure 10 (the PDF's ninth page): percentage axis, ticks 100 ... 30 by 10.
FIG10_Y = Axis((73.0, 153.2), (100, 30))
FIG10_SERIES = {
    (0.0, 0.765, 0.804, 0.0): "FIFO active",
    (0.404, 0.388, 0.016, 0.0): "DRF active",
    (0.588, 0.0, 0.753, 0.0): "CODA active",
    (0.0859999, 1.0, 1.0, 0.02): "FIFO busy",
    (0.667, 0.737, 0.0, 0.0): "DRF busy",
    (0.851, 0.173, 1.0, 0.035): "CODA busy",
}


def _centre_line(pts: list[tuple[float, float]], grid: list[float]) -> list[float | None]:
    """The line's value at each x of the grid. A stroked line is a polyline; a filled
    outline (some series are drawn as the outline of a thick line) has two crossings
    at each x, and the line is their middle."""
    segs = sorted(
        (min(x0, x1), max(x0, x1), x0, y0, x1, y1)
        for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False)
        if x1 != x0
    )
    out: list[float | None] = []
    j = 0
    for x in grid:
        while j < len(segs) and segs[j][1] < x - 50:
            j += 1
        ys = []
        for lo, hi, x0, y0, x1, y1 in segs[j:]:
            if lo > x:
                break
            if lo <= x < hi:
                ys.append(y0 + (x - x0) * (y1 - y0) / (x1 - x0))
        out.append(FIG10_Y.value((min(ys) + max(ys)) / 2) if ys else None)
    return out


def figure10(pdf: Any, points: int = 4000) -> dict[str, dict[str, float]]:
    """Per series: the time average, and for the active rates the share of time above
    90% and at or above 90% (the curve sits on whole percents, often on 90 itself)."""
    page = pdf.pages[8]
    x0, x1 = 106.2, 530.4
    grid = [x0 + (x1 - x0) * (i + 0.5) / points for i in range(points)]
    series: dict[str, list[float | None]] = {}
    for c in page.curves:
        if c["top"] > 160 or len(c["pts"]) < 50:
            continue
        colour = c["stroking_color"] or c["non_stroking_color"]
        name = FIG10_SERIES.get(tuple(colour))
        if name:
            series[name] = _centre_line(c["pts"], grid)
    out: dict[str, dict[str, float]] = {}
    for name, vals in series.items():
        got = [v for v in vals if v is not None]
        row = {"mean": sum(got) / len(got)}
        if name.endswith("active"):
            row["over_90"] = sum(v > 90.0 + 1e-6 for v in got) / len(got)
            row["at_least_90"] = sum(v >= 90.0 - 0.5 for v in got) / len(got)
        out[name] = row
    for policy in ("FIFO", "DRF", "CODA"):
        act, busy = series[f"{policy} active"], series[f"{policy} busy"]
        pairs = [(a, b) for a, b in zip(act, busy, strict=True) if a is not None and b is not None]
        weighted = sum(a * b for a, b in pairs) / sum(a for a, _ in pairs)
        out[f"{policy} busy"]["active_weighted"] = weighted
    return out


# Figure 11: the CDF axis (0.4 ... 1.0) and the log time axis (10^1 ... 10^4 s).
FIG11_Y = Axis((298.73, 212.42), (0.4, 1.0))
FIG11_X = Axis((104.05, 195.41), (10.0, 10_000.0), log=True)
FIG11_SERIES = {
    (0.514, 0.388, 1.0, 0.173): "FIFO_GPU",
    (0.0, 0.525, 1.0, 0.0): "FIFO_CPU",
    (0.369, 0.737, 0.0, 0.0): "DRF_GPU",
    (0.694, 0.008, 0.929, 0.0): "DRF_CPU",
    (0.753, 0.333, 0.055, 0.0): "CODA_GPU",
    (0.016, 0.98, 1.0, 0.004): "CODA_CPU",
}


def figure11(pdf: Any) -> dict[str, list[tuple[float, float]]]:
    """Each curve's marker points: (seconds, share of jobs started within)."""
    page = pdf.pages[8]
    out = {}
    for c in page.curves:
        name = FIG11_SERIES.get(tuple(c["stroking_color"] or ()))
        if name and 160 < c["top"] < 330 and len(c["pts"]) == 7:
            out[name] = [(FIG11_X.value(x), FIG11_Y.value(y)) for x, y in c["pts"]]
    missing = set(FIG11_SERIES.values()) - set(out)
    if missing:
        raise ValueError(f"Figure 11 lacks {', '.join(sorted(missing))}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tools/read_paper_figures.py PATH/TO/2020coda.pdf", file=sys.stderr)
        return 2
    path = argv[1]
    if not os.path.isfile(path):
        print(f"read_paper_figures: {path}: not a file", file=sys.stderr)
        return 1
    try:
        import pdfplumber
    except ImportError:
        print("read_paper_figures: needs pdfplumber (pip install pdfplumber)", file=sys.stderr)
        return 2
    try:
        pdf = pdfplumber.open(path)
    except Exception as e:  # noqa: BLE001 - any unreadable file: one line
        print(f"read_paper_figures: {path}: cannot read: {e}", file=sys.stderr)
        return 1
    try:
        with pdf:
            _print_readings(pdf)
    except (IndexError, KeyError, ValueError, ZeroDivisionError) as e:
        print(
            f"read_paper_figures: {path}: not the CODA paper's layout (Figures 2a, 3, 10 and "
            f"11 on its 4th and 9th pages): {type(e).__name__} {e}",
            file=sys.stderr,
        )
        return 1
    return 0


def _print_readings(pdf: Any) -> None:
    """Every reading of Figures 3, 10 and 11, as the Markdown docs/paper.md shows (all
    read before anything is printed)."""
    fig2a, fig3, fig10, fig11 = figure2a(pdf), figure3(pdf), figure10(pdf), figure11(pdf)
    print("## Figure 2a (share of the week's jobs, %)\n")
    for name, v in fig2a.items():
        print(f"- {name}: {v:.1f}%")
    print()
    print("## Figure 3 (busy %, speed relative to 1 core)\n")
    print("| model | config | busy at 1 core | best busy (cores) | speed 1 -> peak (cores) "
          "| busy at speed peak | speed_low | speed at 14 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in fig3:
        print(
            f"| {r['model']} | {r['config']} | {r['busy_1']:.1f}% | "
            f"{r['busy_best']:.1f}% ({r['busy_best_cores']}) | 1.0 -> {r['speed_peak']:.2f} "
            f"({r['speed_peak_cores']}) | {r['busy_at_speed_peak']:.1f}% | "
            f"{r['speed_low']:.4f} | {r['speed_last']:.2f} |"
        )
    print("\n## Figure 10 (time averages over the two weeks shown)\n")
    for name, row in fig10.items():
        parts = [f"{k} {v:.1f}%" if k == "mean" or k == "active_weighted" else
                 f"{k} {100 * v:.1f}% of the time" for k, v in row.items()]  # fmt: skip
        print(f"- {name}: " + ", ".join(parts))
    print("\n## Figure 11 (share of jobs started within T)\n")
    for name, pts in fig11.items():
        print(f"- {name}: " + ", ".join(f"{t:,.0f} s: {100 * v:.1f}%" for t, v in pts))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
