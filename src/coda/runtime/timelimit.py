"""Slurm's time-limit syntax (``sbatch --time``), for ``coda submit --time``: parsed to
seconds exactly, and written back the way ``squeue`` shows it.

The six forms Slurm takes: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
``D-HH:MM:SS``. The first field may be as large as the cap allows (``90`` is 90
minutes, ``36:00:00`` 36 hours); the fields after it are clock fields (seconds and
minutes below 60, hours below 24 after a day count). Unlike Slurm, seconds are kept
(Slurm rounds up to whole minutes), and 0 or ``UNLIMITED`` is refused: no ``--time``
means no limit.
"""

from __future__ import annotations

import math
import re

from coda.text import clip
from coda.workload.limits import MAX_TIME_LIMIT_S

FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
_FIELD = re.compile(r"[0-9]{1,9}")  # ASCII digits only; 9 keep int() cheap

# Per form, the seconds each field counts and the bound of each clock field (None: the
# leading field, bounded only by the cap).
_UNITS = {
    (False, 1): ((60, None),),
    (False, 2): ((60, None), (1, 60)),
    (False, 3): ((3600, None), (60, 60), (1, 60)),
    (True, 1): ((86400, None), (3600, 24)),
    (True, 2): ((86400, None), (3600, 24), (60, 60)),
    (True, 3): ((86400, None), (3600, 24), (60, 60), (1, 60)),
}


def parse_time_limit(text: str) -> float:
    """Seconds in a Slurm time limit; ValueError saying what is wrong with it."""
    days, dash, clock = text.partition("-")
    fields = [days, *clock.split(":")] if dash else text.split(":")
    units = _UNITS.get((bool(dash), len(fields) - bool(dash)))
    if units is None or not all(_FIELD.fullmatch(f) for f in fields):
        raise ValueError(f"{clip(text, 40)} is not a time limit: use {FORMS}")
    total = 0
    for f, (unit, bound) in zip(fields, units, strict=True):
        v = int(f)
        if bound is not None and v >= bound:
            name = {1: "seconds", 60: "minutes", 3600: "hours"}[unit]
            raise ValueError(f"{clip(text, 40)}: the {name} must be below {bound}, not {v}")
        total += v * unit
    if total == 0:
        raise ValueError(f"{clip(text, 40)}: a limit must be more than 0 (leave it out for none)")
    if total > MAX_TIME_LIMIT_S:
        raise ValueError(f"{clip(text, 40)} is over the cap of {MAX_TIME_LIMIT_S // 86400} days")
    return float(total)


def format_time_limit(seconds: float | None) -> str:
    """``1-02:04:00``, ``1:30:00``, ``5:00`` (as squeue shows a limit); "-" for none.
    A fraction of a second counts as a whole one."""
    if seconds is None:
        return "-"
    s = math.ceil(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h}:{m:02d}:{s:02d}"
    return f"{m}:{s:02d}"
