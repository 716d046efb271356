"""A replay run several times over: each repetition's figures and their spread, so a
reader can tell a change from the run-to-run noise of a real stack."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coda.writing import write_text

# What each repetition reports: (label, path into its replay.json, format).
FIGURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("CODA's gain, real", ("gain_real",), "+.1%"),
    ("CODA's gain, simulated", ("gain_sim",), "+.1%"),
    ("plain Slurm: GPU work done, real", ("plain", "gpu_util_effective"), ".3f"),
    ("CODA: GPU work done, real", ("coda", "gpu_util_effective"), ".3f"),
    ("plain Slurm: CPU queue delay mean s, real", ("plain", "cpu_queue_delay_mean_s"), ".1f"),
    ("CODA: CPU queue delay mean s, real", ("coda", "cpu_queue_delay_mean_s"), ".1f"),
    ("CODA: CPU queue delay mean s, simulated", ("sim", "coda", "cpu_queue_delay_mean_s"), ".1f"),
    ("plain Slurm: twin's JCT error (median over jobs)", ("plain", "jct_rel_error_median"), ".1%"),
    ("CODA: twin's JCT error (median over jobs)", ("coda", "jct_rel_error_median"), ".1%"),
    ("CPU stretch p99, real", ("cpu_stretch_real", "stretch_p99"), ".2f"),
    ("CPU stretch max, real", ("cpu_stretch_real", "stretch_max"), ".2f"),
    ("CPU jobs over 1.5x, real", ("cpu_stretch_real", "stretch_over_1_5x_share"), ".1%"),
    ("CPU jobs over 2x, real", ("cpu_stretch_real", "stretch_over_2x_share"), ".1%"),
    ("CPU stretch p99, simulated", ("cpu_stretch_sim", "stretch_p99"), ".2f"),
    ("CPU stretch max, simulated", ("cpu_stretch_sim", "stretch_max"), ".2f"),
    ("CPU jobs over 1.5x, simulated", ("cpu_stretch_sim", "stretch_over_1_5x_share"), ".1%"),
    ("jobs lost or started twice (both runs)", ("lost_or_twice",), "d"),
)


def _at(result: dict[str, Any], path: tuple[str, ...]) -> float | None:
    if path == ("lost_or_twice",):
        return float(
            sum(result.get("jobs_lost", {}).values())
            + sum(result.get("jobs_started_twice", {}).values())
        )
    v: Any = result
    for key in path:
        if not isinstance(v, dict):
            return None
        v = v.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def spread(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each figure: its value in every repetition, and their min, median and max."""
    rows = []
    for label, path, fmt in FIGURES:
        values = [_at(r, path) for r in results]
        known = [v for v in values if v is not None]
        rows.append({
            "figure": label, "key": ".".join(path), "format": fmt, "values": values,
            "min": min(known) if known else None,
            "median": statistics.median(known) if known else None,
            "max": max(known) if known else None,
        })  # fmt: skip
    return rows


def _fmt(v: float | None, fmt: str) -> str:
    if v is None:
        return "—"
    return format(int(v), fmt) if fmt == "d" else format(v, fmt)


def markdown(setting: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    n = len(rows[0]["values"]) if rows else 0
    lines = [
        "# CODA on a real Slurm: replay, repeated",
        "",
        f"The same replay run {n} times over (the same {setting['jobs']} jobs, seed "
        f"{setting['seed']}, cluster `{setting['cluster']}`, speed {setting['speed']:g}x, "
        f"load {setting['load']:g}, faults {'on' if setting['faults'] else 'off'}): what "
        "moves between repetitions is the real stack's timing alone. Each repetition's "
        "report is in `rep-K/report.md`; the twin's JCT error leaves out each run's "
        "unfinished jobs, and its faults and the controller's downtime are not simulated "
        "(each report says how the twin and the stack differ).",
        "",
        "| figure | " + " | ".join(f"rep {k + 1}" for k in range(n)) + " | min | median | max |",
        "|---|" + "---:|" * (n + 3),
    ]
    for row in rows:
        cells = [_fmt(v, row["format"]) for v in row["values"]]
        cells += [_fmt(row[k], row["format"]) for k in ("min", "median", "max")]
        lines.append(f"| {row['figure']} | " + " | ".join(cells) + " |")
    lines += ["", "Figures: replay.json (every repetition's figures and their spread)."]
    return "\n".join(lines) + "\n"


def replay_repeated(
    cfg: Any,
    repeat: int,
    run: Callable[[Any, Callable[[str], None]], dict[str, Any]],
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """``run`` (coda.replay.run.replay) ``repeat`` times, each into ``rep-K`` under the
    config's folder; the spread page and its figures in the folder itself."""
    if not 1 <= repeat <= 20:
        raise ValueError(f"--repeat: 1 to 20 repetitions, got {repeat}")
    results = []
    for k in range(repeat):
        log(f"repetition {k + 1} of {repeat}")
        results.append(run(dataclasses.replace(cfg, out=cfg.out / f"rep-{k + 1}"), log))
    rows = spread(results)
    out: Path = cfg.out
    summary = {"setting": results[0]["setting"], "repetitions": repeat, "spread": rows}
    write_text(out / "replay.json", json.dumps(summary, indent=2, default=str) + "\n")
    write_text(out / "report.md", markdown(results[0]["setting"], rows))
    summary["jobs_lost"] = {
        m: sum(r["jobs_lost"].get(m, 0) for r in results) for m in results[0]["jobs_lost"]
    }
    summary["jobs_started_twice"] = {
        m: sum(r["jobs_started_twice"].get(m, 0) for r in results)
        for m in results[0]["jobs_started_twice"]
    }
    return summary
