"""A node agent's watch on the controller: once the lease shows no beat for the
fail-open time (every controller gone), the jobs still held for CODA go back to
Slurm's own scheduler, each marked ``coda:passed,why=controller-down``. New jobs are
no longer held by then either (job_submit.lua reads the same lease). A controller
that comes back holds new jobs again; the ones handed back stay Slurm's."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

from coda.slurm.client import HELD, SlurmClient, SlurmError, format_mark
from coda.slurm.lease import read_lease

DOWN_WHY = "controller-down"
PER_TICK = 200  # releases per agent tick: a tick stays short, the rest go next tick


def hand_back(
    client: SlurmClient,
    why: str = "handback",
    log: Callable[[str], None] = print,
    keep_going: Callable[[], bool] = lambda: True,
    limit: int | None = None,
) -> int:
    """Release jobs still held for CODA (``held``, or ``placing``: a controller died
    mid-placement), unchanged, each marked ``coda:passed,why=<why>``: Slurm's own
    scheduler places them. Stops at ``limit`` jobs or once ``keep_going()`` says no;
    returns how many went."""
    n = 0
    for j in client.jobs():
        if limit is not None and n >= limit:
            break
        state = (j.mark or {}).get("state")
        if not (j.state == "PENDING" and j.priority == 0 and state in ("held", "placing")):
            continue
        if not keep_going():
            break
        client.update(j.job_id, AdminComment=format_mark("passed", why=why))
        try:
            client.release(j.job_id)
        except SlurmError:
            # Marked passed but still held, nobody would release it: held again for
            # CODA, so the next handback (or controller) finds it.
            try:
                client.update(j.job_id, AdminComment=j.admin_comment or HELD)
            except (SlurmError, ValueError):
                pass
            raise
        log(f"job {j.job_id} ({j.name!r}): handed back to Slurm ({why})")
        n += 1
    return n


class FailOpen:
    """Asked after every agent tick; hands held jobs back while no controller beats.
    Several agents may watch one lease: each waits a random part of the fail-open time
    first, and checks the beat again before every job."""

    def __init__(
        self,
        client: SlurmClient,
        lease: str | Path,
        after_s: float,
        log: Callable[[str], None],
        wall: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        if not (isinstance(after_s, int | float) and 1.0 <= after_s <= 3600.0):
            raise ValueError(f"fail-open time {after_s!r}: not within 1..3600 s")
        if not str(lease):
            raise ValueError("the controller's lease: an empty path")
        self.client = client
        self.lease = Path(lease)
        self.after_s = after_s
        self.log = log
        self.wall = wall
        self.rng = rng or random.Random()
        self._down_since: float | None = None  # when this agent first saw no beat
        self._unread_since: float | None = None  # when the lease first could not be read
        self._wait_s = 0.0
        self._said = ""
        self.handed_back = 0

    def _say(self, msg: str) -> None:
        if msg != self._said:
            self.log(msg)
            self._said = msg

    def controller_alive(self) -> bool:
        """Whether a controller beat within the fail-open time (and twice the lease's
        ttl). A lease that cannot be read counts as a beat until it has not been read
        for the fail-open time: a late mount or one stale handle must not release
        every held job while the controller places them."""
        now = self.wall()
        try:
            rec = read_lease(self.lease)
            if rec is None:
                raise ValueError(f"lease {self.lease}: not there")
            if -rec.age(now) > self.after_s:
                raise ValueError(f"lease {self.lease}: its beat is {-rec.age(now):.0f} s ahead")
        except ValueError as e:
            if self._unread_since is None:
                self._unread_since = now
            self._say(f"{e}: no controller counted after {self.after_s:g} s of this")
            return now - self._unread_since < self.after_s
        self._unread_since = None
        return rec.age(now) <= max(self.after_s, 2 * rec.ttl)

    def tick(self) -> int:
        """Hand back up to PER_TICK held jobs if no controller has beaten for the
        fail-open time (and this agent's own random wait); how many went."""
        if self.controller_alive():
            if self._down_since is not None:
                self._say("a controller beats again: jobs are held for it")
            self._down_since = None
            return 0
        now = self.wall()
        if self._down_since is None:
            self._down_since = now
            self._wait_s = self.rng.uniform(0.0, self.after_s / 4)
            return 0
        if now - self._down_since < self._wait_s:
            return 0
        self._say(f"no controller beat in {self.lease} for {self.after_s:g} s (or it "
                  "could not be read that long): handing held jobs back to Slurm")  # fmt: skip
        n = 0
        try:
            # A controller back meanwhile: the rest are its again.
            n = hand_back(
                self.client, DOWN_WHY, self.log, lambda: not self.controller_alive(), PER_TICK
            )
        except SlurmError as e:
            self._say(f"handing back held jobs: {e} (again next tick)")
        self.handed_back += n
        return n
