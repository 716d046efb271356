"""Run the differential cases of tests/test_compiled_build.py in this interpreter and
print one JSON line per (case, policy): a digest of every job's outcome and the
summary's figures. Run by that test under the pure and the compiled build alike.

    python tests/compiled_case.py OUT_DIR
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

# Per-job columns that carry every decision: when each job started and ended, its
# cores, the times it lost cores, and why it waited.
JOB_COLUMNS = ("start", "end", "cores_granted", "preemptions", "shrinks", "wait_reason")
# Summary fields that depend on the host, not the decisions.
HOST_FIELDS = {"wall_seconds", "events_per_s", "config", "trace"}


def which_build() -> dict[str, str]:
    """Where the hot modules were loaded from (a .so when compiled)."""
    import coda.cycle.scheduler
    import coda.policy.allocator
    import coda.sim.engine

    mods = (coda.cycle.scheduler, coda.policy.allocator, coda.sim.engine)
    return {m.__name__: Path(m.__file__ or "").suffix for m in mods}


def digest(result: Any) -> dict[str, Any]:
    h = hashlib.sha256()
    for col in JOB_COLUMNS:
        h.update(col.encode())
        h.update(repr(np.asarray(result.jobs[col]).tolist()).encode())
    summary = {k: v for k, v in result.summary.items() if k not in HOST_FIELDS}
    text = json.dumps(summary, sort_keys=True, default=str)
    return {"jobs": h.hexdigest(), "summary": hashlib.sha256(text.encode()).hexdigest()}


def cases(out: Path) -> list[tuple[str, Any, tuple[str, ...]]]:
    from coda.experiment.paper import PaperConfig, write_workloads
    from coda.policy import POLICIES
    from coda.sim.run import RunConfig

    # The bundled trace on its default cluster, exact estimates: every policy.
    every = tuple(POLICIES)
    # The generated paper workload on the paper cluster, backfill from time limits:
    # deep CPU queues, reservations and reclaim.
    paper = PaperConfig(out=out, jobs=1500, seeds=1)
    write_workloads(paper)
    return [
        ("bundled", RunConfig(), every),
        ("paper-1500", paper.run_config(0), ("fifo", "coda", "coda-no-eliminator")),
        ("bundled-limits", dataclasses.replace(RunConfig(), estimates="time-limits"), ("coda",)),
    ]


def main(argv: list[str]) -> int:
    from coda.sim.run import prepare, run_policy

    out = Path(argv[1])
    print(json.dumps({"build": which_build()}), flush=True)
    for name, config, policies in cases(out):
        prepared = prepare(config)
        for policy in policies:
            row = {"case": name, "policy": policy, **digest(run_policy(prepared, policy))}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
