"""The rules every trace format shares, as names: the fractional-GPU and censored
choices, the excluded and adjusted keys a TraceReport counts under, and the row types
a format module hands to the TraceBuilder."""

from __future__ import annotations

from decimal import Decimal

FRACTIONAL_CHOICES = ("whole", "drop")
CENSORED_CHOICES = ("keep", "drop")
MAX_BAD_ROW_EXAMPLES = 20
MAX_DUPLICATE_EXAMPLES = 5

# Excluded-reason keys shared by the formats (format modules may add their own).
NEVER_STARTED = "never_started"
ZERO_DURATION = "zero_duration"
FRACTIONAL_GPU = "fractional_gpu"
CENSORED = "censored"

# Adjusted-treatment keys.
FRACTIONAL_ROUNDED_UP = "fractional_gpu_rounded_up"
CENSORED_KEPT = "censored_kept"
CORES_RAISED = "cores_raised_to_1"
DUPLICATE_IDS = "duplicate_id_renamed"
# Extra jobs made when one row becomes several (PAI CPU tasks): the identity
# rows_read == jobs_loaded - adjusted[EXTRA_JOBS] + sum(excluded) + skipped holds.
EXTRA_JOBS = "extra_jobs_from_instances"

# An exact time stamp: int for integer text (the common case), Decimal otherwise.
Time = int | Decimal
# (id, submit, duration, gpus, cores, mem_mib, nodes, flags); submit is exact until finish().
TraceRow = tuple[str, Time, float, int, int, int, int, int]
# What one row became: a job, several jobs, or the name of the reason it was excluded.
Outcome = TraceRow | list[TraceRow] | str


def check_options(fractional: str, censored: str) -> None:
    """Raise ValueError unless both options are among their choices."""
    if fractional not in FRACTIONAL_CHOICES:
        raise ValueError(f"fractional must be one of {FRACTIONAL_CHOICES}, not {fractional!r}")
    if censored not in CENSORED_CHOICES:
        raise ValueError(f"censored must be one of {CENSORED_CHOICES}, not {censored!r}")
