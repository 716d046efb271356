"""Each user's job logs on a node within their share of root's state directory.

A job's stdout and stderr are capped each (its shim copies at most ``log_bytes``);
what one user's logs hold together, running jobs' and kept finished ones', is checked
here every LOG_CHECK_EVERY_S: past ``user_log_bytes``, that user's oldest finished
jobs (rows, decisions, directories) go first, before their time is up.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from coda.runtime.store import Store

LOG_CHECK_EVERY_S = 60.0
LOG_CHECK_ROWS = 20_000  # jobs looked at in one check at most (a stat of two files each)


def log_bytes(job_dir: Path) -> int:
    """What a job's logs take (0 for a log that is not there)."""
    total = 0
    for name in ("stdout", "stderr"):
        try:
            total += os.lstat(job_dir / name).st_size
        except OSError:
            pass
    return total


class LogQuota:
    """When the next check is due, and the check itself."""

    def __init__(self, job_dir: Callable[[int], Path]) -> None:
        self.job_dir = job_dir
        self.next_check = -float("inf")

    def over(self, store: Store, user_log_bytes: int, now: float) -> list[int]:
        """Finished jobs to purge now so that each user's logs fit ``user_log_bytes``
        (running jobs' logs counted first, then the newest finished); [] between
        checks."""
        if now < self.next_check:
            return []
        self.next_check = now + LOG_CHECK_EVERY_S
        held: dict[int | None, int] = {}
        out = []
        for jid, uid, finished in store.log_owners(LOG_CHECK_ROWS):
            held[uid] = held.get(uid, 0) + log_bytes(self.job_dir(jid))
            if finished and held[uid] > user_log_bytes:
                out.append(jid)
        return out
