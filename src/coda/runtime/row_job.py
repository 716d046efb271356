"""A job row as the policies see it: a plain ``Job``, as the simulator builds one."""

from __future__ import annotations

import functools
import math
import os

from coda.policy.state import Job
from coda.runtime.store import JobRow
from coda.workload.perf import ProfileSet, load_profile_set


def job_of(r: JobRow) -> Job:
    """The policies' view of a row: its size, owner, time limit and PCIe class."""
    model = r.model or r.name
    job = Job(
        r.id,
        f"{r.name}#{r.id}",
        r.submit_t,
        r.gpus,
        r.cores,
        0,
        1,
        float("inf"),
        model=model,
        # The tenant fair share shares between: its owner (no uid: the agent's own
        # user, as the row's run does), as in the Slurm controller.
        user=str(r.uid if r.uid is not None else os.geteuid()),
        time_limit=r.time_limit_s if r.time_limit_s is not None else math.inf,
        pcie_heavy=pcie_heavy(model, r.gpus) if r.gpus else False,
        checkpoints=bool(r.checkpoints),
    )
    job.preemptions = r.preemptions
    return job


def pcie_heavy(model: str, gpus: int) -> bool:
    """A model's PCIe class from the bundled profiles by name (False if unknown), so
    the PCIe score plugin sees on a real node what it sees in the simulator."""
    profiles = bundled_profiles()
    if model not in profiles.models:
        return False
    return profiles.job_perf(model, max(1, gpus), 1).pcie_heavy


@functools.cache
def bundled_profiles() -> ProfileSet:
    return load_profile_set("coda")
