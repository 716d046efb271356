"""results.json and report.md of `coda experiment regimes`: per cell and policy the paper
metrics (means over seeds, 95% CIs), per cell and baseline CODA's gain, and the tables an
operator reads (rows cores per GPU, columns CPU-job share, one set per load).

Gains are paired by seed (the same workload under both policies): per seed coda / baseline
- 1 of effective GPU utilisation, its difference in points and the CPU- and DNN-job mean
JCT ratios coda / baseline; a cell's gain is their mean over seeds with a Student-t 95% CI
(coda.experiment.stats.mean_ci). results.json's schema: docs/regimes.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coda.experiment.paper_results import METRICS, aggregate
from coda.experiment.regimes import (
    BASELINES,
    CLUSTERS,
    PAPER_CORES,
    PAPER_CPU_SHARE,
    SPLIT,
    TARGET,
    Cell,
    CellRecord,
    GeneratedWorkload,
    RegimesConfig,
    WorkloadKey,
    cluster_spec,
)
from coda.experiment.stats import mean_ci
from coda.report.paper_report import format_value
from coda.values import finite
from coda.writing import write_text

SCHEMA = "coda.experiment.regimes/1"
# (key, coda's value x baseline's value -> the per-seed statistic; None: not defined)
GAINS: dict[str, Callable[[float, float], float | None]] = {
    "gpu_util_gain_rel": lambda c, b: c / b - 1.0 if b > 0 else None,
    "gpu_util_gain_points": lambda c, b: 100.0 * (c - b),
}
# The same on the paper's utilisation (the busy share of the active GPUs).
BUSY_GAIN = "gpu_busy_gain_rel"
RATIOS = {"cpu_jct_ratio": "cpu_jct_mean_s", "dnn_jct_ratio": "dnn_jct_mean_s"}
# Points of GPUs held: the part of the gain that is more work run, not faster jobs.
ALLOCATED = "gpu_alloc_gain_points"
# The detail table's columns (paper metric keys).
DETAIL = (
    "gpu_util_busy",
    "gpu_util_effective",
    "gpu_util_allocated",
    "gpu_active_queued",
    "gpu_frag_cores",
    "cpu_within_180s_share",
    "cpu_jct_mean_s",
    "dnn_jct_mean_s",
)
UNITS = {k: u for k, _, u in METRICS}
LABELS = {k: label for k, label, _ in METRICS}


def is_paper_cell(cell: Cell) -> bool:
    return cell.cores == PAPER_CORES and cell.cpu_share == PAPER_CPU_SHARE


def _per_seed(records: Sequence[CellRecord], policy: str) -> dict[int, dict[str, Any]]:
    return {r.seed: r.record.metrics for r in records if r.policy == policy and r.ok}


def gain_block(records: Sequence[CellRecord], baseline: str) -> dict[str, Any]:
    """coda against `baseline` on one cell's cluster, paired by seed."""
    base, coda = _per_seed(records, baseline), _per_seed(records, TARGET)
    seeds = sorted(set(base) & set(coda))
    values: dict[str, list[float | None]] = {k: [] for k in (*GAINS, *RATIOS, ALLOCATED, BUSY_GAIN)}
    for s in seeds:
        b, c = finite(base[s].get("gpu_util_effective")), finite(coda[s].get("gpu_util_effective"))
        for key, fn in GAINS.items():
            values[key].append(fn(c, b) if b is not None and c is not None else None)
        ba, ca = (
            finite(base[s].get("gpu_util_allocated")),
            finite(coda[s].get("gpu_util_allocated")),
        )
        values[ALLOCATED].append(100.0 * (ca - ba) if ba is not None and ca is not None else None)
        bb, cb = finite(base[s].get("gpu_util_busy")), finite(coda[s].get("gpu_util_busy"))
        values[BUSY_GAIN].append(cb / bb - 1.0 if bb and cb is not None else None)
        for key, metric in RATIOS.items():
            bm, cm = finite(base[s].get(metric)), finite(coda[s].get(metric))
            values[key].append(cm / bm if bm and cm is not None else None)
    out: dict[str, Any] = {"cluster": BASELINES[baseline], "seeds_paired": seeds}
    for key, vs in values.items():
        out[key] = {**mean_ci(vs).to_dict(), "per_seed": vs}
    return out


def cell_block(
    cell: Cell,
    records: Sequence[CellRecord],
    workloads: dict[WorkloadKey, GeneratedWorkload],
    seeds: int,
) -> dict[str, Any]:
    mine = [r for r in records if r.cell == cell]
    clusters: dict[str, Any] = {}
    for cluster, policies in CLUSTERS.items():
        here = [r.record for r in mine if r.cluster == cluster]
        loads = [
            workloads[(cell.cpu_share, s, cell.cores)].core_load(cell.load, cluster == SPLIT)
            for s in range(seeds)
        ]
        clusters[cluster] = {  # the same arrivals on both (same GPUs)
            "spec": cluster_spec(cell.cores_per_gpu, cluster == SPLIT),
            "offered_core_load": mean_ci(loads).mean,
            "policies": {p: aggregate(here, p) for p in policies},
        }
    windows = [
        workloads[(cell.cpu_share, s, cell.cores)].window_h.get(cell.load) for s in range(seeds)
    ]
    return {
        "cores_per_gpu": cell.cores_per_gpu,
        "cores_per_server": cell.cores,
        "cpu_share": cell.cpu_share,
        "load": cell.load,
        "paper_cell": is_paper_cell(cell),
        "window_h": mean_ci(windows).mean,
        "clusters": clusters,
        "gains": {
            b: gain_block([r for r in mine if r.cluster == c], b) for b, c in BASELINES.items()
        },
    }


def results(
    cfg: RegimesConfig,
    setting: dict[str, Any],
    records: Sequence[CellRecord],
    workloads: dict[WorkloadKey, GeneratedWorkload],
    wall_s: float,
) -> dict[str, Any]:
    """What results.json holds."""
    return {
        "schema": SCHEMA,
        "setting": setting,
        "wall_s": wall_s,
        "cells": [cell_block(c, records, workloads, cfg.seeds) for c in cfg.cells()],
        "errors": [
            {
                "cores_per_gpu": r.cell.cores_per_gpu,
                "cpu_share": r.cell.cpu_share,
                "load": r.cell.load,
                "cluster": r.cluster,
                "policy": r.policy,
                "seed": r.seed,
                "error": r.record.error,
            }
            for r in records
            if not r.ok
        ],
    }


# ---------------------------------------------------------------- report.md


def _est(block: dict[str, Any], fmt: Callable[[float], str], suffix: str = "") -> str:
    """'+23.1%' or, with a CI, '+23.1% ±4.0'; '-' where not computable."""
    mean, half = block.get("mean"), block.get("ci95_half")
    if mean is None:
        return "-"
    return fmt(mean) + suffix + (f" ±{fmt(half).lstrip('+')}" if half is not None else "")


def _pct(v: float) -> str:
    return f"{100 * v:+.1f}%"


def _pts(v: float) -> str:
    return f"{v:+.1f}"


def _ratio(v: float) -> str:
    return f"{v:.2f}"


def _grid(
    cells: Sequence[dict[str, Any]], load: float, text: Callable[[dict[str, Any]], str]
) -> list[str]:
    """One table at `load`: rows cores per GPU, columns CPU-job share."""
    here = [c for c in cells if c["load"] == load]
    rs = sorted({c["cores_per_gpu"] for c in here})
    shares = sorted({c["cpu_share"] for c in here})
    head = ["cores per GPU (cores per server)"] + [f"CPU share {100 * s:g}%" for s in shares]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rs:
        row = [c for c in here if c["cores_per_gpu"] == r]
        by_share = {c["cpu_share"]: c for c in row}
        cells_text = []
        for s in shares:
            c = by_share.get(s)
            t = text(c) if c else "-"
            cells_text.append(f"{t} (paper)" if c and c["paper_cell"] else t)
        lines.append(f"| {r:g} ({row[0]['cores_per_server']}) | " + " | ".join(cells_text) + " |")
    return lines


def _gain_text(c: dict[str, Any]) -> str:
    parts = []
    for b in BASELINES:
        g = c["gains"][b]
        busy = g.get(BUSY_GAIN)
        parts.append(
            f"{_est(g['gpu_util_gain_rel'], _pct)} ({_est(g['gpu_util_gain_points'], _pts)} pt"
            + (f"; busy {_est(busy, _pct)}" if busy else "")
            + ")"
        )
    return " / ".join(parts)


def _jct_text(c: dict[str, Any]) -> str:
    return " / ".join(_est(c["gains"][b]["cpu_jct_ratio"], _ratio) for b in BASELINES)


def _core_load_text(c: dict[str, Any]) -> str:
    return " / ".join(format_value(c["clusters"][cl]["offered_core_load"], "n") for cl in CLUSTERS)


def _detail(cells: Sequence[dict[str, Any]]) -> list[str]:
    head = ["r", "CPU share", "load", "cluster", "policy", *(LABELS[k] for k in DETAIL)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cells:
        for cluster, block in c["clusters"].items():
            for p, m in block["policies"].items():
                vals = [format_value(m.get(k), UNITS[k]) for k in DETAIL]
                if not m["seeds_ok"]:
                    vals = ["failed"] * len(DETAIL)
                lines.append(
                    f"| {c['cores_per_gpu']:g} | {100 * c['cpu_share']:g}% | {c['load']:g} | "
                    f"{cluster} | {p} | " + " | ".join(vals) + " |"
                )
    return lines


def report_markdown(res: dict[str, Any], plots: dict[float, list[str]]) -> str:
    s = res["setting"]
    g = s["grid"]
    seeds = s["seeds"]
    cis = "95% CI half-widths (Student t over seeds) after ±" if seeds > 1 else "1 seed, no CI"
    names = " / ".join(f"over {b} ({c} cluster)" for b, c in BASELINES.items())
    out = ["# CODA's gain by regime", "", "## Setting", ""]
    out += [
        f"- grid: cores per GPU r {', '.join(f'{v:g}' for v in g['cores_per_gpu'])}; CPU-job "
        f"share {', '.join(f'{v:g}' for v in g['cpu_shares'])}; offered GPU load "
        f"{', '.join(f'{v:g}' for v in g['loads'])}",
        f"- GPU servers: {s['gpu_servers']}, C = round(5 r) cores each (uniform)",
        f"- shared cluster (coda against fifo): the GPU servers only, as in the paper; "
        f"split cluster (coda against static-separate): plus {s['cpu_partition']['rule']}",
        *(
            f"  - r {c['cores_per_gpu']:g}: shared `{c['shared']}`, split `{c['split']}`"
            for c in s["clusters"]
        ),
        f"- workload: {s['workload']}",
        f"- load: {s['load_basis']}",
        f"- runtime estimates: {s['estimates']}; seeds: {seeds} ({cis})",
        f"- wall time: {res['wall_s']:.1f} s with {s['workers']} worker(s)",
        f"- reproduce: `{s['command']}`",
        "",
        "Gain: coda's effective GPU utilisation / the baseline's - 1 (relative), with the "
        "difference in points in brackets, paired by seed. The gain in effective utilisation "
        "is bounded by the work offered: a job's work is fixed (more cores finish it sooner), "
        "so where the baseline runs every GPU job as it arrives (its GPU active rate while "
        "DNN jobs queue is low or undefined) every policy does the same work in the long run, "
        "and a gain there is the measurement window's edge effect (docs/regimes.md, "
        '"Window"). A real gain is expected where the baseline cannot keep up (its GPU '
        "active rate while DNN jobs queue is in the table of every policy below); read the "
        "tables for where it does. After the semicolon: the relative gain in the paper's "
        "GPU utilisation, the busy share of the active GPUs (docs/metrics.md, "
        "gpu_util_busy), which counts how busy a held GPU is, not how many are held. "
        "The CPU-job JCT ratio "
        "is coda's mean CPU-job completion time / the baseline's: CODA must not buy GPU "
        "utilisation with CPU jobs' time (above 1 it does).",
    ]
    for load in g["loads"]:
        out += ["", f"## Load {load:g}", ""]
        out += [f"Gain in effective GPU utilisation (; in busy utilisation), {names}:", ""]
        out += _grid(res["cells"], load, _gain_text)
        out += ["", f"CPU-job mean JCT, coda / baseline ({' / '.join(BASELINES)}):", ""]
        out += _grid(res["cells"], load, _jct_text)
        out += [
            "",
            "Offered core load (cores the jobs ask for / cores; shared cluster: every job on "
            "every server / split cluster: CPU jobs on the CPU-only servers), from the "
            "workload, not from a run:",
            "",
        ]
        out += _grid(res["cells"], load, _core_load_text)
        windows = {
            c["cpu_share"]: c["window_h"]
            for c in res["cells"]
            if c["load"] == load and c["window_h"] is not None
        }
        out += [
            "",
            "Measurement window: "
            + ", ".join(f"{w:.1f} h at CPU share {100 * k:g}%" for k, w in sorted(windows.items()))
            + ' (DNN runtimes: median 1.6 h, mean 2.4 h; see docs/regimes.md, "Window").',
        ]
        if plots.get(load):
            out += [""] + [f"![{p}]({p})" for p in plots[load]]
    out += ["", "## Every policy in every cell (means over seeds)", ""]
    out += _detail(res["cells"])
    if res["errors"]:
        out += ["", "## Failed runs", ""]
        out += [
            f"- r {e['cores_per_gpu']:g} share {e['cpu_share']:g} load {e['load']:g} "
            f"{e['policy']} on {e['cluster']} seed {e['seed']}: {e['error']}"
            for e in res["errors"]
        ]
    return "\n".join(out) + "\n"


def write_outputs(out: Path, res: dict[str, Any]) -> list[Path]:
    """results.json, the heat maps and report.md into out."""
    from coda.report.regimes_plots import write_heatmaps

    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    write_text(path, json.dumps(res, indent=2, allow_nan=False) + "\n")
    plots = write_heatmaps(res, out)
    report = out / "report.md"
    write_text(report, report_markdown(res, plots))
    return [path, report, *(out / p for ps in plots.values() for p in ps)]
