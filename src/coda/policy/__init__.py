"""Pure decision code: no I/O, no wall clock. Drivers (simulator, node runtime) call it."""

from __future__ import annotations

from collections.abc import Callable

from coda.policy.baselines import drf, fifo, slurm, static_separate, static_shared
from coda.policy.coda import (
    coda,
    coda_no_colocation,
    coda_no_eliminator,
    coda_no_slimming,
    coda_unbounded,
    oracle,
)
from coda.policy.framework import Policy
from coda.policy.options import PolicyOptions
from coda.policy.tune import tune_policy

POLICIES: dict[str, Callable[[PolicyOptions], Policy]] = {
    "static-separate": static_separate,
    "static-shared": static_shared,
    "fifo": fifo,
    "drf": drf,
    "slurm": slurm,
    "coda": coda,
    "coda-no-slimming": coda_no_slimming,
    "coda-no-colocation": coda_no_colocation,
    "coda-no-eliminator": coda_no_eliminator,
    "coda-unbounded": coda_unbounded,
    "oracle": oracle,
}

# Policies whose cycle plans every queued job (up to the backfill depth) on every node
# at each event, as Slurm's backfill does (cycle/every_job.py): meant for replay-sized
# clusters (coda replay's), many times slower than fifo on a long queue. Runs of "every
# policy" on big traces (bench/bench_sim.py, the compiled build's test) leave them out.
REPLAY_SCALE_POLICIES = ("slurm",)


def make_policy(name: str, options: PolicyOptions | None = None) -> Policy:
    """The policy registered under ``name``, built from ``options`` (its knobs tuned);
    a clear error lists the known names."""
    try:
        factory = POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r}; known policies: {known}") from None
    opts = options or PolicyOptions()
    policy = factory(opts)
    tune_policy(policy, opts.tune)
    return policy


__all__ = ["POLICIES", "REPLAY_SCALE_POLICIES", "Policy", "PolicyOptions", "make_policy"]
