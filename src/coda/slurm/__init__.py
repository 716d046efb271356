"""CODA over a Slurm cluster: the controller (placement), the per-node agent,
and the Slurm client they share. Imports policy/ and runtime/, never sim/."""
