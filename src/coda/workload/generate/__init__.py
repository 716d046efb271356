"""Generated workloads: seeded job tables whose every parameter has a stated source.

`PRESETS` names the parameter sets; `generate_preset(name, seed, ...)` makes one table
and `write_csv` (the generic csv format, optional columns included) writes it, so that
`coda trace generate --preset paper --out f.csv` and then `coda simulate --trace f.csv`
run the same jobs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coda.workload.generate.paper import (
    PaperParams,
    describe,
    generate,
    marginals,
    parameter_table,
    speech_preset,
)
from coda.workload.jobs import JobTable
from coda.workload.traces.generic_csv import write_csv

# "paper": Figure 2b read as the share of all jobs (ours); "paper-speech-dnn": as the
# speech share of DNN jobs (docs/paper.md, "Figure 2b").
PRESETS: dict[str, PaperParams] = {
    "paper": speech_preset("all"),
    "paper-speech-dnn": speech_preset("dnn"),
}


def generate_preset(
    name: str,
    seed: int = 0,
    *,
    n_jobs: int | None = None,
    days: float | None = None,
    arrival_scale: float | None = None,
) -> JobTable:
    """The preset's workload for `seed`, with the given parameters replaced."""
    try:
        params = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
    changes: dict[str, Any] = {"n_jobs": n_jobs, "days": days, "arrival_scale": arrival_scale}
    # One replace, so the parameters are checked together (days / arrival_scale).
    params = dataclasses.replace(params, **{k: v for k, v in changes.items() if v is not None})
    return generate(params, seed)


__all__ = [
    "PRESETS",
    "PaperParams",
    "describe",
    "generate",
    "generate_preset",
    "marginals",
    "parameter_table",
    "speech_preset",
    "write_csv",
]
