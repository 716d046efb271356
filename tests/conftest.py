"""Fixtures every test file may use."""

from slurm_cluster import cluster

__all__ = ["cluster"]
