"""The control loops' one runner (``ControlLoop``), as ``coda.cycle`` is the scheduling
cycle's: every body feeds it samples and ticks and carries its actions out."""

from coda.control.loop import ALLOCATOR, ELIMINATOR, ControlLoop, ControlSink

__all__ = ["ALLOCATOR", "ELIMINATOR", "ControlLoop", "ControlSink"]
