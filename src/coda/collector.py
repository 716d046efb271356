"""Python's cyclic garbage collector, paused over a stretch of work that builds many
objects meant to live on.

Its passes walk every new object, and its full ones every live one, so a stretch that
builds hundreds of thousands of lasting objects (a simulation's jobs and events, the
Slurm controller's mirror after a restart) pays for each of them many times over while
leaving little cyclic garbage. Collection is off inside and back on after, where it
was on; what cyclic garbage the stretch left is collected then, at the usual
thresholds.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_off() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
