"""The controller's mirror of Slurm (SlurmView) is incremental: it looks again only at
records that changed. Whatever the history, the mirror must equal one built from
scratch on the same Slurm state."""

from __future__ import annotations

import random

import pytest
from test_slurm_controller import FakeSlurm

from coda.cycle import Scheduler
from coda.policy import PolicyOptions, make_policy
from coda.slurm.client import SlurmClient
from coda.slurm.view import SlurmView

OPTIONS = PolicyOptions(estimates="time-limits", reclaim="requeue")
NODES = {"g1": (8, 2), "g2": (8, 2), "c1": (8, 0)}


def _picture(view: SlurmView) -> dict[str, tuple]:
    return {
        name: (n.free_gpus, n.free_cores, n.cpu_job_cores, sorted(j.idx for j in n.jobs))
        for name, n in view.nodes.items()
    }


def _fresh(client: SlurmClient) -> SlurmView:
    view = SlurmView(Scheduler(make_policy("coda", OPTIONS)))
    view.sync(client.nodes(), client.jobs(), [], 1000.0)
    return view


@pytest.mark.parametrize("seed", range(12))
def test_the_incremental_mirror_equals_a_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    fake = FakeSlurm()
    for name, (cpus, gpus) in NODES.items():
        fake.node(name, cpus, gpus=gpus)
    client = SlurmClient(fake.run)
    kept = SlurmView(Scheduler(make_policy("coda", OPTIONS)))
    next_id = 1
    for _ in range(40):
        op = rng.random()
        live = [j for j in fake.jobs.values() if j["job_state"] in ("RUNNING", "PENDING")]
        if op < 0.4 or not live:
            name = rng.choice(list(NODES))
            gpus = rng.choice([0, 1]) if NODES[name][1] else 0
            cores = rng.randint(1, 3)
            if rng.random() < 0.5:
                d = fake.job(next_id, f"j{next_id}", cores, gpus_pn=gpus, state="RUNNING",
                             priority=1, comment="coda:placed,req=3", nodes=name)  # fmt: skip
                d["start_time"] = 900 + next_id
            else:
                fake.job(next_id, f"j{next_id}", cores, gpus_pn=gpus, priority=1,
                         comment=f"coda:placed,req=3,grant={cores}", required=name)  # fmt: skip
            next_id += 1
        elif op < 0.6:
            rng.choice(live)["job_state"] = "COMPLETED"
        elif op < 0.8:
            j = rng.choice(live)
            if j["job_state"] == "PENDING" and j["required_nodes"]:
                j.update(job_state="RUNNING", nodes=j["required_nodes"], start_time=950)
        else:
            j = rng.choice(live)
            j["state_reason"] = rng.choice(["None", "BeginTime", "Resources"])
        kept.sync(client.nodes(), client.jobs(), [], 1000.0)
        assert _picture(kept) == _picture(_fresh(client))
