"""Run the differential cases of tests/test_compiled_build.py in this interpreter and
print one JSON line per (case, policy): a digest of every per-job column and the time
series, and the summary. Run by that test under the pure and the compiled build alike.

    python tests/compiled_case.py OUT_DIR
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

# Summary fields that depend on the host, not the decisions.
HOST_FIELDS = {"wall_seconds", "events_per_s", "config", "trace"}


def which_build() -> dict[str, Any]:
    """The build that runs (coda.build_kind), and a digest of the compiled modules'
    sources as installed (a compiled build installs them beside its extension modules),
    so that a build older than the source tree shows."""
    import coda
    from coda.build_kind import build_kind

    return {"kind": build_kind(), "sources": source_digest(Path(coda.__file__).parent)}


def source_digest(package: Path) -> str:
    """A digest of the files the compiled build compiles, under a ``coda`` package dir."""
    from coda.build_kind import compiled_files

    h = hashlib.sha256()
    for f in compiled_files(package):
        h.update(f.relative_to(package).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def digest(result: Any) -> dict[str, Any]:
    """Every per-job column and the time series as digests; the summary in full, less
    what depends on the host."""
    h = hashlib.sha256()
    for table in (result.jobs, result.timeseries):
        for col in sorted(table):
            h.update(col.encode())
            h.update(repr(np.asarray(table[col]).tolist()).encode())
    summary = {k: v for k, v in result.summary.items() if k not in HOST_FIELDS}
    return {"jobs": h.hexdigest(), "summary": json.loads(json.dumps(summary, default=str))}


def cases(out: Path) -> list[tuple[str, Any, tuple[str, ...]]]:
    from coda.experiment.paper import PaperConfig, write_workloads
    from coda.policy import POLICIES, REPLAY_SCALE_POLICIES
    from coda.replay.plan import ClusterShape, fitting, load_table, prepare_replay
    from coda.study.config import RunConfig

    # The bundled trace on its default cluster, exact estimates: every policy but those
    # meant for replay-sized clusters, which run on the replay's workload and cluster.
    every = tuple(p for p in POLICIES if p not in REPLAY_SCALE_POLICIES)
    shape = ClusterShape(4, 4, 5, 28)
    replay = prepare_replay(fitting(load_table(None, None, 0, 120), shape)[0], shape,
                            out / "replay", 0, load=0.9).config  # fmt: skip
    # The generated paper workload on the paper cluster, backfill from time limits:
    # deep CPU queues, reservations and reclaim.
    paper = PaperConfig(out=out, jobs=1500, seeds=1)
    write_workloads(paper)
    base = RunConfig()
    return [
        ("bundled", base, every),
        ("paper-1500", paper.run_config(0), ("fifo", "coda", "coda-no-eliminator")),
        ("bundled-limits", base.varied(policy={"estimates": "time-limits"}), ("coda",)),
        ("replay-4x5g28c", replay, (*REPLAY_SCALE_POLICIES, "fifo", "coda")),
        # CODA's other knobs, and the run options that reach the policies' inputs.
        (
            "bundled-variants",
            base.varied(
                policy={"order": "fifo", "gpu_subarrays": True, "allocator_start": "paper"},
                perturb=0.2,
                mix="AlexNet=2,ResNet50=1,Transformer=1",
                seed=3,
            ),
            ("coda",),
        ),
        (
            "bundled-no-estimates",
            base.varied(policy={"estimates": "none"}, simulation={"noise": 0.0}),
            ("coda",),
        ),
        # The cycle's own invariants checked after every event (InvariantError on a break).
        (
            "small-checked",
            base.varied(cluster="openb:0.05", simulation={"horizon": 3e5}),
            ("coda",),
        ),
    ]


class CountingFilter:
    """A static filter that passes every node and counts how often it is asked."""

    static = True
    by_shape = True

    def __init__(self) -> None:
        self.calls = 0

    def filter(self, job: Any, node: Any, cores_pn: int) -> bool:
        self.calls += 1
        return True


def never_fits_cost(jobs: int = 200, nodes: int = 1000) -> dict[str, Any]:
    """How many static-filter calls the cycle's can-it-ever-fit check makes for
    ``jobs`` one-node jobs on ``nodes`` nodes that all fit: one each where it stops at
    the first fitting node, as it should in both builds."""
    from coda.cycle.scheduler import Scheduler
    from coda.policy import make_policy
    from coda.policy.options import PolicyOptions
    from coda.policy.state import Job, Node

    counter = CountingFilter()
    policy = make_policy("fifo", PolicyOptions(filters=(counter,)))
    sched = Scheduler(policy, [Node(i, f"n{i}", 8, 64, 0, 0.0) for i in range(nodes)])
    never = 0
    for i in range(jobs):
        job = Job(i, f"j{i}", 0.0, gpus=1, cores=4, mem_mib=0, nodes=1, work=100.0)
        never += sched.book.never_fits(job, 4) is not None
    return {"case": "never-fits-cost", "jobs": jobs, "never": never, "calls": counter.calls}


def main(argv: list[str]) -> int:
    from coda.study.run import prepare, run_policy

    out = Path(argv[1])
    print(json.dumps({"build": which_build()}), flush=True)
    print(json.dumps(never_fits_cost()), flush=True)
    for name, config, policies in cases(out):
        prepared = prepare(config)
        checked = name.endswith("-checked")
        for policy in policies:
            result = run_policy(prepared, policy, check_invariants=checked)
            row = {"case": name, "policy": policy, **digest(result)}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
