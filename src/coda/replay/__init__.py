"""CODA measured on a real Slurm: a trace replayed through the real stack (plain Slurm,
then CODA) and through the simulator on the same jobs (``coda replay``)."""
