"""Which CPU jobs give cores back cheaply, and a score that keeps the others away
from the cores training jobs will want back."""

from __future__ import annotations

from dataclasses import dataclass

from coda.policy.harm_budget import HarmBudget
from coda.policy.state import Job, Node


def gives_back_cheaply(job: Job, short_s: float) -> bool:
    """Whether taking a CPU job's cores back costs little: it may be requeued, and it
    checkpoints or its time limit (all a scheduler knows of its length) is at most
    ``short_s``. Any other requeue throws its whole run away, and once its harm budget
    no longer covers that it keeps the cores a training job wanted."""
    return job.preemptible and (job.checkpoints or job.time_limit <= short_s)


@dataclass
class ReturnsCheaply:
    """Score: a CPU job that does not give cores back cheaply prefers a GPU node whose
    GPUs are all busy (no training job lands there to take them back until one ends),
    then the one with the fewest idle GPUs. Short: within the harm budget's cap (such
    a job is requeued within its budget)."""

    harm: HarmBudget

    def score(self, job: Job, node: Node, cores_pn: int) -> float:
        if job.is_dnn or node.gpus == 0 or gives_back_cheaply(job, self.harm.config.cap_s):
            return 0.0
        return -node.free_gpus / node.gpus
