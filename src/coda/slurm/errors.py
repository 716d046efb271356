"""What a Slurm command's failure raises (outside the compiled build's modules: mypyc
compiles no class derived from a built-in exception)."""

from __future__ import annotations


class SlurmError(RuntimeError):
    """A Slurm command failed or printed something CODA cannot read."""
