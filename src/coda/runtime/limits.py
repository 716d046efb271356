"""What one user may store in, and cost, a (root) node agent: its limits and their checks.

A user reaches the agent through its socket only, and everything a user sends ends up
in the agent's state directory (root's) and in the agent's memory and time. So:
- one spec holds at most ``spec_bytes`` of command, environment, working directory,
  name and model (refused at submit, naming the biggest field);
- one user's queued and running jobs hold at most ``user_bytes`` of specs together;
- finished jobs are kept ``keep_finished_s`` after they end, and at most
  ``finished_per_user`` of each user's (the oldest go first); the agent purges at most
  ``PURGE_BATCH`` rows a pass, so a purge never makes a tick long;
- one job's stdout and stderr hold at most ``log_bytes`` each (the job's supervisor
  copies them and drops the rest, saying how much); one user's logs, running and kept,
  hold at most ``user_log_bytes`` together: past it, the user's oldest finished jobs
  are purged first;
- one status answer lists at most ``status_rows`` jobs (and says how many more);
- one user's requests may take at most ``user_share`` of the socket thread's time
  (a budget that refills at that rate, up to ``BURST_S`` seconds); over it, the
  request is answered "busy" at once, so one user's loop of requests cannot starve
  another user's. Root and the agent's own user have no budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from coda.runtime.jobspec import MAX_SPEC_BYTES, JobSpec, SpecError

KIB = 1 << 10
MIB = 1 << 20
DAY_S = 86400.0

# The ranges the agent's options accept (hostile or mistyped values are refused).
SPEC_BYTES_RANGE = (1 * KIB, MAX_SPEC_BYTES)
USER_BYTES_RANGE = (64 * KIB, 1 << 30)
KEEP_FINISHED_RANGE = (1.0, 366 * DAY_S)
FINISHED_PER_USER_RANGE = (0, 1_000_000)
LOG_BYTES_RANGE = (64 * KIB, 1 << 40)
STATUS_ROWS_RANGE = (10, 10_000)
USER_SHARE_RANGE = (0.01, 1.0)

PURGE_BATCH = 500  # rows deleted in one pass at most
PURGE_EVERY_S = 5.0  # a pass at most this often, unless the last one was full
PURGE_PASS_S = 0.2  # a pass that takes longer is halved next time
COMPACT_PAGES = 256  # free database pages given back after a pass (1 MiB of 4 KiB pages)
BURST_S = 1.0  # a user's budget of socket time holds at most this much


@dataclass(frozen=True)
class Limits:
    spec_bytes: int = 64 * KIB
    user_bytes: int = 16 * MIB
    keep_finished_s: float = DAY_S
    finished_per_user: int = 500
    status_rows: int = 200
    user_share: float = 0.25
    log_bytes: int = 64 * MIB
    user_log_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        def whole(name: str, lo: int, hi: int) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be a whole number in [{lo}, {hi}], got {v!r}")

        def real(name: str, lo: float, hi: float) -> None:
            v = getattr(self, name)
            ok = isinstance(v, int | float) and not isinstance(v, bool)
            if not ok or not (math.isfinite(v) and lo <= v <= hi):
                raise ValueError(f"{name} must be a number in [{lo:g}, {hi:g}], got {v!r}")

        whole("spec_bytes", *SPEC_BYTES_RANGE)
        whole("user_bytes", *USER_BYTES_RANGE)
        whole("finished_per_user", *FINISHED_PER_USER_RANGE)
        whole("status_rows", *STATUS_ROWS_RANGE)
        whole("log_bytes", *LOG_BYTES_RANGE)
        whole("user_log_bytes", *LOG_BYTES_RANGE)
        real("keep_finished_s", *KEEP_FINISHED_RANGE)
        real("user_share", *USER_SHARE_RANGE)
        if self.user_log_bytes < 2 * self.log_bytes:
            raise ValueError(
                f"user_log_bytes ({self.user_log_bytes}) must hold one job's two logs "
                f"({2 * self.log_bytes})"
            )
        if self.user_bytes < self.spec_bytes:
            raise ValueError(
                f"user_bytes ({self.user_bytes}) must be at least spec_bytes ({self.spec_bytes})"
            )

    def describe_retention(self) -> str:
        """How long finished jobs are kept, in words (for status and docs)."""
        return (
            f"finished jobs are kept {format_span(self.keep_finished_s)} after they end, "
            f"at most {self.finished_per_user} per user"
        )


def format_span(seconds: float) -> str:
    """``86400`` -> ``24 h``; ``90`` -> ``90 s``; ``5400`` -> ``90 min``."""
    if seconds >= 7200 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def check_spec_bytes(spec: JobSpec, limit: int) -> int:
    """The spec's size in bytes, or SpecError (one line naming its biggest field)."""
    sizes = spec.stored_sizes()
    total = sum(sizes.values())
    if total > limit:
        field, most = max(sizes.items(), key=lambda kv: kv[1])
        raise SpecError(
            f"the spec holds {total} bytes, over this agent's {limit} per job; "
            f"'{field}' alone holds {most}: make it smaller"
        )
    return total


class TimeBudget:
    """Per-uid budgets of server time: each refills at ``share`` seconds per second, up
    to ``burst`` seconds; a request is let in while its uid's budget is positive and
    costs what it took. Bounded memory: uids whose budget is full again are forgotten."""

    MAX_UIDS = 4096

    def __init__(
        self, share: float, burst: float = BURST_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.share = share
        self.burst = burst
        self._clock = clock
        self._left: dict[int, tuple[float, float]] = {}  # uid -> (budget, as of)

    def _now(self, uid: int) -> float:
        got = self._left.get(uid)
        if got is None:
            return self.burst
        left, at = got
        return min(self.burst, left + max(0.0, self._clock() - at) * self.share)

    def left_s(self, uid: int) -> float:
        """Seconds of the socket's time ``uid`` may spend now (0 if none)."""
        return max(0.0, self._now(uid))

    def wait_s(self, uid: int) -> float:
        """0 if ``uid`` may be served now, else how long until it may."""
        left = self._now(uid)
        return 0.0 if left > 0 else (-left + 1e-3) / self.share

    def charge(self, uid: int, seconds: float) -> None:
        left = self._now(uid) - max(0.0, seconds)
        now = self._clock()
        if left >= self.burst:
            self._left.pop(uid, None)
            return
        if len(self._left) >= self.MAX_UIDS and uid not in self._left:
            # Forget the fullest budgets first (they cost their users nothing to forget).
            for u in sorted(self._left, key=self._now, reverse=True)[: self.MAX_UIDS // 4]:
                del self._left[u]
        self._left[uid] = (left, now)
