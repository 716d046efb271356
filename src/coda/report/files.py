"""Write a run (or a comparison of runs) to a folder: JSON, CSV, markdown and PNG.

JSON is written strictly (no NaN / Infinity tokens, which most JSON parsers reject):
non-finite numbers become null. In CSV an empty cell means "no value" (NaN).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from coda.report.tables import markdown_comparison
from coda.sim.result import TIMESERIES_COLUMNS, SimResult
from coda.writing import text_output, write_text

# Order of SimResult.jobs columns in jobs.csv; any other arrays follow in their own order.
JOB_COLUMNS = (
    "job_id",
    "is_dnn",
    "submit",
    "start",
    "end",
    "gpus",
    "cores_requested",
    "cores_granted",
    "wait_reason",
)

# Files write_comparison puts at the top of its folder, beside the per-policy folders.
COMPARISON_FILES = (
    "comparison.json",
    "comparison.md",
    "utilisation.png",
    "queue_delay_cdf.png",
    "comparison_bars.png",
)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(name: str) -> str:
    """A policy name usable as one folder name: anything outside [A-Za-z0-9._-] becomes
    '_', and a leading '.' too (no hidden folders, no '.' or '..')."""
    cleaned = _UNSAFE.sub("_", str(name))
    cleaned = re.sub(r"^\.", "_", cleaned)
    return cleaned or "_"


def to_jsonable(value: Any) -> Any:
    """Plain JSON types: numpy scalars/arrays unwrapped, NaN/inf -> None, tuples -> lists."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [to_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(obj: Any, path: Path) -> Path:
    with text_output(path) as f:
        # allow_nan=False: fail loudly rather than ever write a NaN token.
        json.dump(to_jsonable(obj), f, indent=2, allow_nan=False)
        f.write("\n")
    return path


def write_report(
    out: Path,
    res: Mapping[str, Any],
    command: str,
    markdown: Callable[[Mapping[str, Any], str], str],
) -> list[Path]:
    """An experiment's results.json (with the command that reran it) and report.md."""
    out.mkdir(parents=True, exist_ok=True)
    js = write_json({**res, "command": command}, out / "results.json")
    md = out / "report.md"
    write_text(md, markdown(res, command))
    return [js, md]


def format_cell(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "1" if value else "0"
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            return ""
        # Whole numbers without '.0' keep the file small; repr round-trips the rest exactly.
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    return str(value)


def _write_columns(columns: dict[str, np.ndarray], order: Iterable[str], path: Path) -> Path:
    """Equal-length arrays as CSV columns; `order` first, then any other columns."""
    order = list(order)
    names = [c for c in order if c in columns] + [c for c in columns if c not in order]
    arrays = [np.asarray(columns[c]) for c in names]
    lengths = {len(a) for a in arrays}
    if len(lengths) > 1:
        sizes = ", ".join(f"{n}={len(a)}" for n, a in zip(names, arrays, strict=True))
        raise ValueError(f"{path.name}: columns differ in length ({sizes})")
    with text_output(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(names)
        for row in zip(*(a.tolist() for a in arrays), strict=True):
            writer.writerow([format_cell(v) for v in row])
    return path


def write_run(result: SimResult, out_dir: Path) -> list[Path]:
    """summary.json, timeseries.csv, jobs.csv, utilisation.png, queue_delay_cdf.png."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    timeseries = dict(result.timeseries)
    if not timeseries:
        # An empty table still gets its header, so readers need no special case.
        timeseries = {c: np.empty(0) for c in TIMESERIES_COLUMNS}
    from coda.report.plots import plot_queue_delay_cdf, plot_utilisation  # matplotlib: here only

    return [
        write_json(result.summary, out_dir / "summary.json"),
        _write_columns(timeseries, TIMESERIES_COLUMNS, out_dir / "timeseries.csv"),
        _write_columns(dict(result.jobs), JOB_COLUMNS, out_dir / "jobs.csv"),
        plot_utilisation([result], out_dir / "utilisation.png"),
        plot_queue_delay_cdf([result], out_dir / "queue_delay_cdf.png"),
    ]


def _unique_folder_names(results: list[SimResult]) -> list[str]:
    """safe_name of each policy; repeats (or names that clash once cleaned) get -2, -3..."""
    # Reserve the top-level file names so that a policy called 'comparison.md' cannot clash.
    used: set[str] = set(COMPARISON_FILES)
    out = []
    for r in results:
        base = safe_name(str(r.summary.get("policy", "run")))
        name, k = base, 2
        while name in used:
            name, k = f"{base}-{k}", k + 1
        used.add(name)
        out.append(name)
    return out


def write_comparison(
    results: list[SimResult], out_dir: Path, baseline: str | None = None
) -> list[Path]:
    """comparison.json/.md, overlaid plots, comparison_bars.png, and out_dir/<policy>/ per run."""
    if not results:
        raise ValueError("write_comparison needs at least one result")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = [r.summary for r in results]
    markdown = markdown_comparison(summaries, baseline)  # validates the baseline first
    paths = [write_json(summaries, out_dir / "comparison.json")]
    md_path = out_dir / "comparison.md"
    write_text(md_path, markdown)
    paths.append(md_path)
    from coda.report.plots import (  # matplotlib: here only
        plot_comparison_bars,
        plot_queue_delay_cdf,
        plot_utilisation,
    )

    paths.append(plot_utilisation(results, out_dir / "utilisation.png"))
    paths.append(plot_queue_delay_cdf(results, out_dir / "queue_delay_cdf.png"))
    paths.append(plot_comparison_bars(summaries, out_dir / "comparison_bars.png"))
    for result, folder in zip(results, _unique_folder_names(results), strict=True):
        paths += write_run(result, out_dir / folder)
    return paths
