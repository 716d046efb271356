"""Why a job is not started: every refusal the cycle makes carries one (kube: Status).

A reason has a code (what kind of refusal), a short ``token`` for places that hold
only a word (Slurm's AdminComment mark, metrics labels) and a sentence for people.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# Codes, each a kind of refusal.
GPUS = "gpus"  # no usable node has the free GPUs
CORES = "cores"  # ... has the GPUs but not the free cores
MEMORY = "memory"  # ... has GPUs and cores but not the memory
FILTER = "filter"  # a filter plugin refused every node that had room
RESERVATION = "reservation"  # room exists, but only on nodes reserved for an earlier job
FIFO = "fifo"  # no runtime estimates, so no backfill: waits behind its array's head
DEPTH = "depth"  # the cycle's backfill depth ran out before it got to this job
NEVER = "never"  # too big for every node it may use, even empty (not queued)
NEW = "new"  # queued since the last cycle
CYCLE = "cycle"  # waited only for the scheduler's next cycle (a periodic scheduler)
DEPENDENCY = "dependency"  # its dependency on other jobs is not met (Slurm's --dependency)
# A driver's: the cycle started it, but carrying that out failed (tried again next cycle).
RECLAIM = "reclaim"  # the cores it was to take back from CPU jobs were not given back
PLACE = "place"  # the cluster manager refused the placement written for it
# Every code, in the order above (metrics list each, 0 where no job has it).
CODES = (GPUS, CORES, MEMORY, FILTER, RESERVATION, FIFO, DEPTH, NEVER, NEW, CYCLE, DEPENDENCY,
         RECLAIM, PLACE)  # fmt: skip
_REASONS_KEPT = 4096  # distinct reasons shared (Reasons.why) before starting afresh


@dataclass(frozen=True, slots=True)
class Reason:
    code: str
    detail: str = ""
    # The job whose reservation or headship it waits behind, if any.
    behind: str | None = None

    @property
    def token(self) -> str:
        """One word of [A-Za-z0-9_.:+-]: ``cores``, ``reservation:12``, ``filter:X``."""
        return _token(self)

    def __str__(self) -> str:
        if self.code == GPUS:
            return f"waits for GPUs: no usable node has {self.detail} free"
        if self.code == CORES:
            return f"waits for cores: no node with its GPUs has {self.detail} free cores"
        if self.code == MEMORY:
            return f"waits for memory: no node with its GPUs and cores has {self.detail} MiB free"
        if self.code == FILTER:
            return f"refused by the {self.detail} filter on every node with room"
        if self.code == RESERVATION:
            return f"would delay the reservation of job {self.behind} (backfill)"
        if self.code == FIFO:
            return f"behind job {self.behind} (no runtime estimates: strict FIFO, no backfill)"
        if self.code == DEPTH:
            return "not examined yet (backfill depth reached)"
        if self.code == NEVER:
            return f"can never run here: {self.detail}"
        if self.code == NEW:
            return "queued since the last cycle"
        if self.code == CYCLE:
            return "waits for the scheduler's next cycle"
        if self.code == DEPENDENCY:
            return "waits for its dependency on other jobs"
        if self.code == RECLAIM:
            return "waits for cores CPU jobs hold: taking them back failed (tried again)"
        if self.code == PLACE:
            return "its placement was refused (tried again)"
        return self.code


class Reasons:
    """Reasons are values, so equal ones are shared: a cycle notes one for every job it
    tries, and a queue of thousands waits for a few dozen distinct ones."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str, str | None], Reason] = {}

    def why(self, code: str, detail: str = "", behind: str | None = None) -> Reason:
        """``Reason(code, detail, behind)``, the one made before where there is one."""
        key = (code, detail, behind)
        reason = self._kept.get(key)
        if reason is None:
            if len(self._kept) >= _REASONS_KEPT:
                self._kept.clear()
            reason = self._kept[key] = Reason(code, detail, behind)
        return reason


# A queue of thousands waits for a few dozen distinct reasons: each word made once.
@functools.lru_cache(maxsize=4096)
def _token(r: Reason) -> str:
    if r.code in (RESERVATION, FIFO) and r.behind is not None:
        # The node agent and Slurm name jobs ``name#id``: the id is what people use.
        return f"{r.code}:{_safe(r.behind.rpartition('#')[2])}"
    if r.code == FILTER and r.detail:
        return f"{FILTER}:{_safe(r.detail)}"
    return r.code


def _safe(text: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "_.:+-") else "_" for c in text)
