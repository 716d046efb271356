"""Who owns each job: the trace's user column, else a seeded assignment.

Fair-share policies (DRF) share the cluster between tenants, and the paper's
fairness metric is per user, so every job needs an owner. Traces such as the
Alibaba openb list have no user column; their jobs are then given to
``DEFAULT_USERS`` users (the paper's cluster had about 80) drawn uniformly from
the run's own random stream, so the same seed gives the same owners.
"""

from __future__ import annotations

import numpy as np

from coda.workload.jobs import JobTable

DEFAULT_USERS = 80  # the paper's cluster: "about 80 users"
_STREAM = 13  # this assignment's own random stream beside the run seed


def users_of(jobs: JobTable, seed: int, n_users: int = DEFAULT_USERS) -> list[str]:
    """Each job's owner: the table's own where it has them (an empty name counts as
    unknown and is assigned), else one of ``n_users`` seeded users ``u00``..."""
    if n_users < 1:
        raise ValueError(f"need at least one user, got {n_users}")
    rng = np.random.default_rng([seed, _STREAM])
    drawn = rng.integers(0, n_users, size=len(jobs)).tolist()
    width = len(str(n_users - 1))
    given = jobs.user
    return [
        given[i] if given is not None and given[i] else f"u{d:0{width}d}"
        for i, d in enumerate(drawn)
    ]
