"""The fit table of `coda experiment paper --fit` (fit.md) and of the experiment itself
(report.md's "Baselines against the paper"): each published baseline figure, the
paper's value, ours under fifo and drf, and the distance in tolerances."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coda.writing import write_text

SPEECH_READING_TEXT = {
    "dnn": "the share of DNN jobs that train a speech model (86.4%, held exactly)",
    "all": "the share of all of that week's jobs (at least 56.8% of DNN jobs train speech; "
    "searched)",
}


def _value(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key.endswith("_s"):
        return f"{v:,.0f} s"
    return f"{100 * v:.1f}%"


def _distance(d: Any) -> str:
    return "-" if d is None else f"{d:.2f}"


def figure_table_markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """figure | source | paper (fifo / drf) | fifo | drf | distance (fifo / drf)."""
    by_key: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(r["key"], {})[r["policy"]] = r
    lines = [
        "| figure | source | paper | fifo | drf | distance (fifo / drf) |",
        "|---|---|---|---|---|---|",
    ]
    for key, per in by_key.items():
        first = next(iter(per.values()))
        if "workload" in per:
            w = per["workload"]
            paper = _value(key, w["paper"])
            cells = [_value(key, w["ours"]), "(the workload)", _distance(w["distance"])]
        else:
            f, d = per.get("fifo"), per.get("drf")
            papers = [_value(key, x["paper"]) for x in (f, d) if x is not None]
            paper = " / ".join(papers) if len(set(papers)) > 1 else papers[0]
            if first["kind"] == "at_most":
                paper = "at most " + paper
            elif first["kind"] == "at_least":
                paper = "at least " + paper
            cells = [
                _value(key, f["ours"]) if f else "(not a fifo figure)",
                _value(key, d["ours"]) if d else "(fifo only)",
                " / ".join(_distance(x["distance"]) for x in (f, d) if x is not None),
            ]
        label = str(first["figure"]).replace(", at most", "").replace(", at least", "")
        lines.append(f"| {label} | {first['source']} | {paper} | " + " | ".join(cells) + " |")
    return lines


def fit_markdown(res: Mapping[str, Any]) -> str:
    out = [
        "# The paper workload fitted to the baselines' published figures",
        "",
        f"- reproduce: `{res['command']}`",
        f"- Figure 2b read as {SPEECH_READING_TEXT.get(res['speech_reading'], '?')} "
        f'(`--speech-reading {res["speech_reading"]}`; docs/paper.md, "Figure 2b").',
        f"- fitted on workload seeds {', '.join(str(s) for s in res['fit_seeds'])}, each "
        "figure the mean over them (the experiment evaluates seeds 0, 1, 2, ... by default, "
        "none of them fitted), on the paper cluster, at the paper's rate (100,000 jobs in 30 "
        "days, no compression), against fifo and drf only: CODA's figures play no part.",
        "- fitted to the evaluation month's own figures (Section VI, Figures 10 and 11); the "
        "production week of Section III (Figures 1 and 2c) is not this month and is not fitted.",
        f"- candidates run: {len(res['tried'])}; distance of the best: "
        f"{res['distance']:.3f} (mean squared error in tolerances: 5 points for a single "
        "figure, 8 for a queuing-CDF point)",
        "",
        "## Fit table (the chosen parameters, the fit seeds' mean)",
        "",
        *figure_table_markdown(res["table"]),
        "",
        "## Chosen knobs",
        "",
        "| knob | value | searched over | what |",
        "|---|---|---|---|",
    ]
    for name, v in res["knobs"].items():
        lo, hi, what = res["knob_box"][name]
        out.append(f"| `{name}` | {v:.4g} | {lo:g} - {hi:g} | {what} |")
    out += ["", "As `PaperParams` (the preset holds these):", "", "```"]
    out += [f"{k} = {v!r}" for k, v in res["params"].items()]
    out += ["```", ""]
    if res["unmet"]:
        out += [
            "## Figures missed by more than their tolerance",
            "",
            *[
                f"- {r['figure']} ({r['policy']}, {r['source']}): paper "
                f"{_value(r['key'], r['paper'])}, ours {_value(r['key'], r['ours'])}"
                for r in res["unmet"]
            ],
            "",
        ]
    if res.get("conflicts"):
        out += [
            "## Why: what the search's candidates show",
            "",
            *conflict_lines(res["conflicts"]),
            "",
        ]
    return "\n".join(out)


def conflict_lines(conflicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per missed figure: out of reach of the knobs, or met only by candidates
    that missed which other figures."""
    lines = []
    for c in conflicts:
        head = f"- {c['figure']} ({c['policy']}): "
        if not c["meeting"]:
            closest = "-" if c["closest"] is None else _value(c["key"], c["closest"])
            lines.append(
                head + f"no candidate of {c['candidates']} met it (closest: {closest}); the "
                "knobs' box does not reach it."
            )
            continue
        others = [f"{o['figure']} ({o['policy']}, {o['of']} of them)" for o in c["then_missed"][:3]]
        lines.append(
            head
            + f"{c['meeting']} of {c['candidates']} candidates met it; "
            + (
                "they missed " + "; ".join(others) + "."
                if others
                else "each also met every figure the chosen one meets, but was farther on the rest."
            )
        )
    return lines


def write_fit(out: Path, res: Mapping[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "fit.json", out / "fit.md"
    write_text(js, json.dumps(res, indent=2, allow_nan=False, default=float) + "\n")
    write_text(md, fit_markdown(res))
    return [js, md]
