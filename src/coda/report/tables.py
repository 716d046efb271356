"""Tables of one run's summary, or of several policies side by side (rich and markdown).

Both renderers share one list of rows (`_rows`) so that the terminal table and the
markdown table always say the same thing. Every table states its trace, cluster,
load and seed: a number without them cannot be compared with anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from coda.text import clip_middle
from coda.values import (
    MISSING,
    finite,
    fmt_count,
    fmt_duration,
    fmt_number,
    fmt_pct,
    fmt_rate,
    fmt_relative,
    fmt_times,
    lookup,
)

# (summary key, label) of the utilisations, all fractions 0..1 (docs/metrics.md: the
# paper's GPU utilisation is the busy share of the active GPUs, not work done).
UTIL_KEYS = (
    ("gpu_util_busy", "GPU util (busy share of active GPUs)"),
    ("gpu_util_effective", "GPU work done (effective, all GPUs)"),
    ("gpu_util_allocated", "GPU active rate (allocated)"),
    ("cpu_util", "CPU util (held)"),
    ("cpu_util_useful", "CPU util (useful)"),
)

# (summary key, section title) of the four delay / completion-time stats.
STAT_KEYS = (
    ("dnn_queue_delay_s", "DNN queuing delay"),
    ("dnn_jct_s", "DNN job completion time"),
    ("cpu_queue_delay_s", "CPU queuing delay"),
    ("cpu_jct_s", "CPU job completion time"),
)


SPEC_SHOWN = 80  # characters of a cluster's spec in a table's header


def describe_cluster(cluster: Any, clip: bool = True) -> str:
    """'openb-nodes: 1,523 nodes (1,213 GPU + 310 CPU), 6,212 GPUs, 125,514 cores'.
    ``clip``: a long spec shown by its ends (for display; compare with clip=False)."""
    if cluster is None:
        return "cluster unknown"
    if not isinstance(cluster, dict):
        return str(cluster)
    # A spec of many groups is kept whole in summary.json; a table's header shows its ends.
    name = str(cluster.get("spec", "cluster"))
    if clip:
        name = clip_middle(name, SPEC_SHOWN)
    parts = []
    if cluster.get("nodes") is not None:
        nodes = f"{fmt_count(cluster['nodes'])} nodes"
        if cluster.get("gpu_nodes") is not None and cluster.get("cpu_nodes") is not None:
            nodes += (
                f" ({fmt_count(cluster['gpu_nodes'])} GPU + {fmt_count(cluster['cpu_nodes'])} CPU)"
            )
        parts.append(nodes)
    if cluster.get("gpus") is not None:
        parts.append(f"{fmt_count(cluster['gpus'])} GPUs")
    if cluster.get("cores") is not None:
        parts.append(f"{fmt_count(cluster['cores'])} cores")
    return f"{name}: {', '.join(parts)}" if parts else name


def describe_window(window: Any) -> str:
    if not isinstance(window, dict):
        return MISSING
    start, end = finite(window.get("start")), finite(window.get("end"))
    if start is None or end is None:
        return MISSING
    text = f"{start / 3600:.1f}–{end / 3600:.1f} h"
    if window.get("basis"):
        text += f" ({window['basis']})"
    return text


def run_context(summary: dict[str, Any], clip: bool = True) -> dict[str, str]:
    """The facts that say which experiment a number belongs to, as display strings
    (``clip``: as describe_cluster's)."""
    return {
        "trace": str(summary.get("trace", MISSING)),
        "cluster": describe_cluster(summary.get("cluster"), clip),
        "load": fmt_number(summary.get("load")),
        "seed": str(summary.get("seed", MISSING)),
        "time scale": fmt_number(summary.get("time_scale")),
        "window": describe_window(summary.get("window")),
        "profiles": str(summary.get("profile_set", MISSING)),
    }


def _shared_context(summaries: Sequence[dict[str, Any]]) -> tuple[dict[str, str], list[str]]:
    """Context values common to all runs, and the names of those that differ."""
    # Compared whole: two specs that differ only in their middles are two clusters.
    contexts = [run_context(s, clip=False) for s in summaries]
    shown = run_context(summaries[0])
    shared: dict[str, str] = {}
    differing: list[str] = []
    for key in contexts[0]:
        values = {c[key] for c in contexts}
        if len(values) == 1:
            shared[key] = shown[key]
        else:
            shared[key] = "varies"
            differing.append(key)
    return shared, differing


def _header_lines(context: dict[str, str]) -> list[str]:
    return [
        f"trace {context['trace']} · load {context['load']} · seed {context['seed']}",
        f"cluster {context['cluster']}",
    ]


def _titled_table(first: str, context: dict[str, str]) -> Table:
    """A table whose title states the run context; it is made at least as wide as the
    title so that a wide console shows each context fact on one unbroken line."""
    lines = [first, *_header_lines(context)]
    return Table(
        # Text, not str: names and notes are data, not rich markup ("[x]" must print).
        title=Text("\n".join(lines)),
        title_justify="left",
        caption_justify="left",
        min_width=max(len(line) for line in lines),
    )


# ---------------------------------------------------------------- shared row list


@dataclass(frozen=True)
class _Row:
    label: str
    get: Callable[[dict[str, Any]], Any] | None = None  # None: a section heading
    fmt: Callable[[Any], str] = fmt_count
    relative: bool = False  # show the change against the baseline column

    @property
    def is_section(self) -> bool:
        return self.get is None


def _key(*keys: str) -> Callable[[dict[str, Any]], Any]:
    return lambda s: lookup(s, *keys)


def _context(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda s: run_context(s)[key]


def _scalar_subkeys(summaries: Sequence[dict[str, Any]], *keys: str) -> list[str]:
    """Union, in first-seen order, of the numeric entries of a nested dict such as
    trace_report.excluded (its keys depend on the trace, so they cannot be fixed here)."""
    seen: dict[str, None] = {}
    for s in summaries:
        sub = lookup(s, *keys)
        if isinstance(sub, dict):
            for k, v in sub.items():
                if finite(v) is not None:
                    seen.setdefault(str(k), None)
    return list(seen)


def _harm_rows(summaries: Sequence[dict[str, Any]]) -> list[_Row]:
    """What co-location cost CPU jobs (coda.sim.cpu_harm): the tail beside the mean."""
    rows = [_Row("CPU jobs' harm (execution: first start to end)")]
    if any(isinstance(s.get("cpu_stretch"), dict) for s in summaries):
        rows += [
            _Row(f"stretch vs baseline, {stat}", _key("cpu_stretch", f"stretch_{stat}"), fmt_times)
            for stat in ("mean", "p99", "max")
        ]
        rows += [
            _Row("over 1.5x baseline", _key("cpu_stretch", "stretch_over_1_5x_share"), fmt_pct),
            _Row("over 2x baseline", _key("cpu_stretch", "stretch_over_2x_share"), fmt_pct),
        ]
    rows += [
        _Row(f"slowdown vs alone, {stat}", _key("paper", f"cpu_slowdown_{stat}"), fmt_times)
        for stat in ("mean", "p99", "max")
    ]
    rows.append(
        _Row("over 2x slower than alone", _key("paper", "cpu_slowed_over_2x_share"), fmt_pct)
    )
    for label, key, fmt in (
        ("throttled", "cpu_throttled_s", fmt_duration),
        ("shrunk", "cpu_shrunk_s", fmt_duration),
        ("work lost (core-s)", "cpu_lost_core_s", fmt_count),
    ):
        rows += [
            _Row(f"{label}, {stat}", _key("paper", f"{key}_{stat}"), fmt)
            for stat in ("mean", "max")
        ]
    return rows


def _rows(summaries: Sequence[dict[str, Any]], context_keys: Sequence[str] = ()) -> list[_Row]:
    rows: list[_Row] = []
    if context_keys:
        rows.append(_Row("Run"))
        for key in context_keys:
            rows.append(_Row(key, _context(key), str))

    rows.append(_Row("Jobs"))
    rows += [
        _Row("DNN jobs", _key("jobs", "dnn")),
        _Row("CPU jobs", _key("jobs", "cpu")),
        _Row("finished", _key("jobs", "finished")),
        _Row("unfinished", _key("jobs", "unfinished")),
        _Row("unschedulable", _key("jobs", "unschedulable")),
    ]

    rows.append(_Row("Utilisation (time-average)"))
    rows += [_Row(label, _key(key), fmt_pct, relative=True) for key, label in UTIL_KEYS]
    rows += [
        # allocated - these two = effective (docs/metrics.md)
        _Row("GPU lost: too few cores", _key("gpu_lost_cores"), fmt_pct),
        _Row("GPU lost: interference", _key("gpu_lost_contention"), fmt_pct),
    ]

    for key, title in STAT_KEYS:
        rows.append(_Row(title))
        rows += [
            _Row("jobs (n)", _key(key, "n")),
            _Row("mean", _key(key, "mean"), fmt_duration, relative=True),
            _Row("p50", _key(key, "p50"), fmt_duration),
            _Row("p95", _key(key, "p95"), fmt_duration),
            _Row("p99", _key(key, "p99"), fmt_duration),
        ]

    if any(isinstance(s.get("paper"), dict) for s in summaries):
        # The paper's metrics, over the jobs submitted inside the window (docs/metrics.md).
        rows.append(_Row("The paper's metrics (jobs in the window)"))
        rows += [
            _Row(
                "GPU active while DNN jobs queue",
                _key("paper", "gpu_active_queued"),
                fmt_pct,
                relative=True,
            ),
            _Row("time with DNN jobs queued", _key("paper", "dnn_queued_time_share"), fmt_pct),
            _Row("GPU fragmentation (cores)", _key("paper", "gpu_frag_cores"), fmt_pct),
            _Row("DNN jobs not queued", _key("paper", "dnn_no_queue_share"), fmt_pct),
            _Row("DNN jobs queued > 10 min", _key("paper", "dnn_queue_over_10min_share"), fmt_pct),
            _Row("DNN jobs queued > 1 h", _key("paper", "dnn_queue_over_1h_share"), fmt_pct),
            _Row("DNN queuing p99", _key("paper", "dnn_queue_p99_s"), fmt_duration),
            _Row("CPU queuing p99", _key("paper", "cpu_queue_p99_s"), fmt_duration),
            _Row("CPU jobs placed <= 10 s", _key("paper", "cpu_within_10s_share"), fmt_pct),
            _Row("CPU jobs placed <= 3 min", _key("paper", "cpu_within_180s_share"), fmt_pct),
            _Row("CPU JCT mean", _key("paper", "cpu_jct_mean_s"), fmt_duration, relative=True),
            _Row("CPU JCT p95", _key("paper", "cpu_jct_p95_s"), fmt_duration),
            _Row("preemptions per CPU job", _key("paper", "cpu_preemptions_per_job"), fmt_number),
            _Row("shrinks per CPU job", _key("paper", "cpu_shrinks_per_job"), fmt_number),
            _Row("CPU jobs preempted", _key("paper", "cpu_preempted_share"), fmt_pct),
            _Row("user p99 queuing, max", _key("paper", "user_queue_p99_max_s"), fmt_duration),
            _Row(
                "user p99 queuing, median", _key("paper", "user_queue_p99_median_s"), fmt_duration
            ),
        ]
    if any(isinstance(s.get("paper"), dict) for s in summaries):
        rows += _harm_rows(summaries)
    if any(lookup(s, "preemption", "count") for s in summaries):
        rows.append(_Row("Preemption (CPU jobs, for DNN jobs)"))
        rows += [
            _Row("preemptions", _key("preemption", "count")),
            _Row("jobs preempted", _key("preemption", "jobs")),
            _Row("work lost (core-s)", _key("preemption", "lost_core_s"), fmt_number),
        ]
    if any(lookup(s, "contention", "episodes") for s in summaries):
        rows.append(_Row("Interference from CPU co-runners (DNN job >5% slower)"))
        rows += [
            _Row("episodes", _key("contention", "episodes")),
            _Row("detected (co-runner throttled)", _key("contention", "detected")),
            _Row("time to detect p50", _key("contention", "detect_s", "p50"), fmt_duration),
            _Row("time to recover p50", _key("contention", "recover_s", "p50"), fmt_duration),
            _Row("time to recover p95", _key("contention", "recover_s", "p95"), fmt_duration),
        ]
    if any(lookup(s, "policy_stats", "allocator") for s in summaries):
        rows.append(_Row("Allocator"))
        rows += [
            _Row("searches", _key("policy_stats", "allocator", "searches")),
            _Row("converged", _key("policy_stats", "allocator", "converged")),
            _Row("from a learned profile", _key("policy_stats", "allocator", "reference_only")),
            _Row("probes", _key("policy_stats", "allocator", "probes")),
            _Row("probe windows", _key("policy_stats", "allocator", "probe_windows")),
            _Row(
                "throughput lost (full windows)",
                _key("policy_stats", "allocator", "lost_windows"),
                fmt_number,
            ),
            _Row("re-tunes", _key("policy_stats", "allocator", "retunes")),
        ]
    if any(lookup(s, "policy_stats", "eliminator") for s in summaries):
        rows.append(_Row("Eliminator"))
        rows += [
            _Row(k.replace("_", " "), _key("policy_stats", "eliminator", k))
            for k in _scalar_subkeys(summaries, "policy_stats", "eliminator")
            if k not in ("nodes_throttled_now", "nodes_tracked")  # end-of-run state
        ]

    trace_rows = [
        _Row("rows read", _key("trace_report", "rows_read")),
        _Row("jobs loaded", _key("trace_report", "jobs_loaded")),
        _Row("skipped bad rows", _key("trace_report", "skipped_bad_rows")),
    ]
    if any(lookup(s, "trace_report", "duplicate_ids") for s in summaries):
        # Repeated ids were kept under new names (id#2...); shown only when there are any.
        trace_rows.append(_Row("duplicate ids", _key("trace_report", "duplicate_ids")))
    for group in ("excluded", "adjusted"):
        for sub in _scalar_subkeys(summaries, "trace_report", group):
            trace_rows.append(_Row(f"{group}: {sub}", _key("trace_report", group, sub)))
    if any(isinstance(s.get("trace_report"), dict) for s in summaries):
        rows.append(_Row("Trace"))
        rows += trace_rows

    rows.append(_Row("Simulator"))
    rows += [
        _Row("wall time", _key("wall_seconds"), fmt_duration),
        _Row("events", _key("events")),
        _Row("events/s", _key("events_per_s"), fmt_rate),
    ]
    return rows


def _cells(row: _Row, summaries: Sequence[dict[str, Any]], base_index: int | None) -> list[str]:
    assert row.get is not None
    values = [row.get(s) for s in summaries]
    cells = []
    for i, v in enumerate(values):
        text = row.fmt(v)
        if row.relative and base_index is not None and i != base_index and text != MISSING:
            text += fmt_relative(v, values[base_index])
        cells.append(text)
    return cells


def _notes(summaries: Sequence[dict[str, Any]], with_policy: bool) -> list[str]:
    """Each run's notes; a note every run shares (the workload's) is listed once."""
    per_run = []
    for s in summaries:
        notes = s.get("notes") or []
        per_run.append([notes] if isinstance(notes, str) else [str(n) for n in notes])
    shared = set.intersection(*(set(n) for n in per_run)) if len(per_run) > 1 else set()
    out = [n for n in per_run[0] if n in shared] if per_run else []
    for s, notes in zip(summaries, per_run, strict=True):
        for note in notes:
            if note not in shared:
                out.append(f"{_policy(s)}: {note}" if with_policy else note)
    return out


def _policy(summary: dict[str, Any]) -> str:
    return str(summary.get("policy", "?"))


def _baseline_index(summaries: Sequence[dict[str, Any]], baseline: str | None) -> int:
    if not summaries:
        raise ValueError("no summaries to compare")
    if baseline is None:
        return 0
    for i, s in enumerate(summaries):
        if _policy(s) == baseline:
            return i
    names = ", ".join(_policy(s) for s in summaries)
    raise ValueError(f"baseline policy {baseline!r} is not among the runs ({names})")


# ---------------------------------------------------------------- public API


def summary_table(summary: dict[str, Any]) -> Table:
    """One run as a two-column table; the title states policy, trace, cluster, load, seed."""
    context = run_context(summary)
    table = _titled_table(_policy(summary), context)
    table.add_column("Metric")
    table.add_column("Value", justify="right", no_wrap=True)
    for row in _rows([summary]):
        if row.is_section:
            table.add_row(Text(row.label, style="bold"), "")
        else:
            table.add_row(Text(f"  {row.label}"), Text(_cells(row, [summary], None)[0]))
    caption = [
        f"window {context['window']} · time scale {context['time scale']} · "
        f"profiles {context['profiles']}"
    ]
    if summary.get("load_basis"):
        caption.append(f"load basis: {summary['load_basis']}")
    caption += [f"note: {n}" for n in _notes([summary], with_policy=False)]
    table.caption = Text("\n".join(caption))
    return table


def comparison_table(summaries: list[dict[str, Any]], baseline: str | None = None) -> Table:
    """Policies as columns; utilisations and means also show the change vs the baseline."""
    base = _baseline_index(summaries, baseline)
    shared, differing = _shared_context(summaries)
    table = _titled_table(f"Policy comparison · baseline {_policy(summaries[base])}", shared)
    table.add_column("Metric", min_width=24)
    for i, s in enumerate(summaries):
        header = _policy(s) + (" (baseline)" if i == base and len(summaries) > 1 else "")
        table.add_column(Text(header), justify="right", no_wrap=True)
    for row in _rows(summaries, differing):
        if row.is_section:
            table.add_row(Text(row.label, style="bold"), *[""] * len(summaries))
        else:
            table.add_row(Text(f"  {row.label}"), *map(Text, _cells(row, summaries, base)))
    caption = [
        f"window {shared['window']} · time scale {shared['time scale']} · "
        f"profiles {shared['profiles']} · (±x%) = relative change vs {_policy(summaries[base])}"
    ]
    caption += [f"note: {n}" for n in _notes(summaries, with_policy=True)]
    table.caption = Text("\n".join(caption))
    return table


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_comparison(summaries: list[dict[str, Any]], baseline: str | None = None) -> str:
    """The comparison as a GitHub markdown table, preceded by the run context."""
    base = _baseline_index(summaries, baseline)
    shared, differing = _shared_context(summaries)
    lines = [
        f"**Policy comparison** — trace `{shared['trace']}` · cluster {shared['cluster']} · "
        f"load {shared['load']} · seed {shared['seed']}",
        "",
        f"Window {shared['window']} · time scale {shared['time scale']} · "
        f"profiles {shared['profiles']} · baseline `{_policy(summaries[base])}` "
        "(bracketed: relative change vs the baseline)",
        "",
    ]
    header = ["Metric"] + [_policy(s) for s in summaries]
    lines.append("| " + " | ".join(_md_escape(h) for h in header) + " |")
    lines.append("|---|" + "---:|" * len(summaries))
    for row in _rows(summaries, differing):
        if row.is_section:
            cells = [f"**{row.label}**"] + [""] * len(summaries)
        else:
            cells = [row.label] + _cells(row, summaries, base)
        lines.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    notes = _notes(summaries, with_policy=True)
    if notes:
        lines += ["", "Notes:", ""] + [f"- {_md_escape(n)}" for n in notes]
    return "\n".join(lines) + "\n"
