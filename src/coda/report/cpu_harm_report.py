"""The report of `coda experiment cpu-harm`: per workload, each policy's GPU gain beside
what its CPU jobs paid (coda.experiment.cpu_harm_study)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coda.values import fmt_count, fmt_duration, fmt_pct, fmt_times

_UNITS = {"share": fmt_pct, "x": fmt_times, "s": fmt_duration, "n": fmt_count}


def report_markdown(res: Mapping[str, Any], command: str) -> str:
    from coda.experiment.cpu_harm_study import AFTER, BASELINE, BEFORE, KEYS

    st = res["setting"]
    seeds = f"{st['first_seed']}...{st['first_seed'] + st['seeds'] - 1}"
    out = [
        "# What co-location costs each CPU job",
        "",
        f"- reproduce: `{command}`",
        f"- policies {', '.join(st['policies'])} on each workload, seeds {seeds} (maxima: the "
        "largest over seeds, the rest the mean of the seeds' figures); the paper's months: "
        + (f"{st['jobs']:,} jobs" if st["jobs"] else "100,000 jobs")
        + " at the paper's rate on the paper cluster.",
        f"- a CPU job's execution is its first start to its end (a requeue's wait counts, "
        f"the queue before it does not); its stretch is that over the same job's under "
        f"{BASELINE}, its slowdown that over its runtime alone with the cores it asked "
        '(docs/metrics.md, "CPU jobs\' harm").',
        f"- `{BEFORE}`: CODA without each CPU job's harm budget (the paper's CODA); "
        f'`{AFTER}`: with it (docs/policies.md, "Each CPU job\'s harm budget").',
        "- targets for CODA on every workload: at most 1% of CPU jobs over 1.5x FIFO's "
        "execution, none over 2x, CPU JCT <= 1.05x FIFO's, its gain in GPU work done "
        f"over FIFO at least 90% of `{BEFORE}`'s.",
        "",
    ]
    head = ["policy", *(label for _, label, _ in KEYS)]
    for case in res["cases"]:
        out += [f"## {case['label']}", ""]
        if not case["runs"]:
            out += ["No run finished (see results.json's errors).", ""]
            continue
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for policy, m in case["policies"].items():
            cells = [f"`{policy}`"] + [_UNITS[unit](m.get(key)) for key, _, unit in KEYS]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        gains = case["gain"]
        out.append(
            "Gain in GPU work done over FIFO: "
            + ", ".join(f"`{p}` {'-' if g is None else f'{g:+.1%}'}" for p, g in gains.items())
            + "."
        )
        out += [""] + [f"- {v}" for v in case["verdict"]] + [""]
    if res.get("errors"):
        out += ["## Failed runs", ""]
        out += [f"- {e['case']} seed {e['seed']}: {e['error']}" for e in res["errors"]]
        out.append("")
    return "\n".join(out)
