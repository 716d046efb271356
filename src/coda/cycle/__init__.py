"""The one scheduling cycle every driver runs (simulator, node agent, Slurm
controller): arrays, heads, backfill with reservations, reclaim, filter, score
and pick over an index of nodes, and a reason for every job not started.

Importable with ``coda.policy`` alone; knows nothing of the drivers."""

from coda.cycle.decisions import Decision, Executor, Reclaimed, Returned, Start, describe
from coda.cycle.invariant import InvariantError
from coda.cycle.reasons import Reason
from coda.cycle.reservations import Reservation
from coda.cycle.scheduler import Scheduler

__all__ = [
    "Decision",
    "Executor",
    "InvariantError",
    "Reason",
    "Reclaimed",
    "Returned",
    "Reservation",
    "Scheduler",
    "Start",
    "describe",
]
