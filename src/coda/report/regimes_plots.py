"""Heat maps of `coda experiment regimes`: one per (baseline, load), cores per GPU up the
side, CPU-job share along the bottom, each cell coloured by CODA's relative gain in
effective GPU utilisation (a diverging map centred on 0, one scale for every map) and
annotated with it and the CPU-job JCT ratio coda / baseline; the paper's cell outlined."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import Rectangle

from coda.experiment.regimes import BASELINES, PAPER_CORES, PAPER_CPU_SHARE, TARGET
from coda.report.plots import plt, save_figure

CMAP = "RdBu"  # red below 0 (coda loses), blue above


def heatmap_name(baseline: str, load: float) -> str:
    return f"heatmap-{baseline}-load{load:g}.png"


def _matrix(
    cells: Sequence[dict[str, Any]], baseline: str, load: float, key: str
) -> tuple[list[float], list[float], np.ndarray]:
    """(r values, shares, means[r, share]) at one load; NaN where not computable."""
    here = [c for c in cells if c["load"] == load]
    rs = sorted({c["cores_per_gpu"] for c in here})
    shares = sorted({c["cpu_share"] for c in here})
    m = np.full((len(rs), len(shares)), np.nan)
    for c in here:
        v = c["gains"][baseline][key]["mean"]
        if v is not None:
            m[rs.index(c["cores_per_gpu"]), shares.index(c["cpu_share"])] = v
    return rs, shares, m


def plot_heatmap(
    cells: Sequence[dict[str, Any]], baseline: str, load: float, limit: float, path: Path
) -> Path:
    """One map; `limit` (in %) is the colour scale's half-range, shared by every map."""
    rs, shares, gain = _matrix(cells, baseline, load, "gpu_util_gain_rel")
    _, _, jct = _matrix(cells, baseline, load, "cpu_jct_ratio")
    cores = {c["cores_per_gpu"]: c["cores_per_server"] for c in cells}
    pct = 100.0 * gain
    fig, ax = plt.subplots(figsize=(1.8 * len(shares) + 2.5, 1.0 * len(rs) + 1.8))
    cmap = plt.get_cmap(CMAP).with_extremes(bad="lightgrey")  # failed cells grey
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit)
    im = ax.imshow(np.ma.masked_invalid(pct), cmap=cmap, norm=norm, origin="lower", aspect="auto")
    for i in range(len(rs)):
        for j in range(len(shares)):
            if np.isnan(pct[i, j]):
                text, dark = "no result", False
            else:
                ratio = "-" if np.isnan(jct[i, j]) else f"{jct[i, j]:.2f}"
                text, dark = f"{pct[i, j]:+.1f}%\nCPU JCT x{ratio}", abs(pct[i, j]) > 0.6 * limit
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="white" if dark else "black")  # fmt: skip
    paper = [
        (i, j)
        for i, r in enumerate(rs)
        for j, share in enumerate(shares)
        if cores[r] == PAPER_CORES and share == PAPER_CPU_SHARE
    ]
    for i, j in paper:
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=2.5, ec="black"))
    ax.set_xticks(range(len(shares)), [f"{100 * s:g}%" for s in shares])
    ax.set_yticks(range(len(rs)), [f"{r:g} ({cores[r]} c)" for r in rs])
    ax.set_xlabel("CPU-job share of all jobs")
    ax.set_ylabel("cores per GPU (cores per server)")
    cluster = BASELINES[baseline]
    ax.set_title(
        f"{TARGET} over {baseline} ({cluster} cluster), offered GPU load {load:g}\n"
        "gain in effective GPU utilisation (relative)"
        + ("; outlined: the paper's setting" if paper else ""),
        fontsize=10,
    )
    fig.colorbar(im, ax=ax, label=f"{TARGET} / {baseline} - 1 (%)")
    return save_figure(fig, path)


def write_heatmaps(res: dict[str, Any], out: Path) -> dict[float, list[str]]:
    """Every map into out; returns the file names (relative to out) per load."""
    cells = res["cells"]
    loads = res["setting"]["grid"]["loads"]
    names: dict[float, list[str]] = {load: [] for load in loads}
    values = [
        abs(100.0 * v)
        for c in cells
        for b in BASELINES
        if (v := c["gains"][b]["gpu_util_gain_rel"]["mean"]) is not None
    ]
    limit = max([1.0, *values])  # one scale for every map; TwoSlopeNorm needs vmin < 0 < vmax
    for baseline in BASELINES:
        for load in loads:
            name = heatmap_name(baseline, load)
            plot_heatmap(cells, baseline, load, limit, out / name)
            names[load].append(name)
    return names
