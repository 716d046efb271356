"""Reclaim on Slurm when things go wrong: a requeue Slurm refuses, and a CPU job that
is placed but not started yet (Slurm cannot requeue it). Never more placed on a node
than it holds, never an exception out of a cycle."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fakes import LOOSE_HARM
from test_one_cycle import T0, StartingSlurm

from coda.slurm.client import SlurmClient, SlurmError
from coda.slurm.controller import Controller


class Refusing(StartingSlurm):
    """Refuses ``requeuehold`` while ``refuse`` is set, and always for a job that is
    not running (as Slurm does)."""

    refuse = False

    def run(self, argv: Sequence[str]) -> str:
        if list(argv[:2]) == ["scontrol", "requeuehold"]:
            job = self.jobs[int(argv[2])]
            if self.refuse or job["job_state"] != "RUNNING":
                self.calls.append(list(argv))
                raise SlurmError(f"{' '.join(argv)}: Job is pending execution")
        return super().run(argv)


def _setup(tmp_path: Path, fake: StartingSlurm) -> Controller:
    fake.node("g1", 3, gpus=2)
    d = tmp_path / "ctl"
    d.mkdir(mode=0o700)
    # Reclaim itself is tested here: a budget that lets it take the test's young jobs.
    return Controller(SlurmClient(fake.run), d, policy="coda-no-slimming", wall=lambda: fake.now,
                      tune=LOOSE_HARM)  # fmt: skip


def _add(fake: StartingSlurm, jid: int, name: str, cpus: int, gpus: int, limit: int) -> None:
    j = fake.job(jid, name, cpus, gpus_pn=gpus)
    j.update(submit_time=int(fake.now), requeue=True, time_limit=limit)


def _held_cores(fake: StartingSlurm, node: str) -> int:
    return sum(
        j["cpus"]
        for j in fake.jobs.values()
        if j["job_state"] == "RUNNING" and node in j["nodes"].split(",")
    )


def test_a_refused_requeue_places_nothing_on_the_cores_it_did_not_free(tmp_path: Path) -> None:
    fake = Refusing()
    fake.now = T0
    ctl = _setup(tmp_path, fake)
    _add(fake, 100, "A", 2, 1, 60)
    _add(fake, 101, "C", 1, 0, 30)
    ctl.cycle()
    ctl.cycle()
    assert fake.jobs[101]["job_state"] == "RUNNING"
    fake.now = T0 + 100
    fake.jobs[100]["job_state"] = "COMPLETED"
    _add(fake, 102, "B", 3, 2, 60)  # needs C's core
    fake.refuse = True
    ctl.cycle()  # no exception
    assert fake.jobs[102]["priority"] == 0, "B not released onto cores C still holds"
    assert fake.jobs[101]["admin_comment"].startswith("coda:placed"), "C's mark put back"
    fake.refuse = False
    for _ in range(3):
        fake.now += 1
        ctl.cycle()
    assert fake.jobs[102]["job_state"] == "RUNNING"
    assert fake.jobs[101]["restart_cnt"] == 1 and fake.jobs[101]["job_state"] != "RUNNING"
    assert _held_cores(fake, "g1") <= 3
    # A later DNN job's reclaim finds the books right (no InvariantError).
    fake.now += 10
    fake.jobs[102]["job_state"] = "COMPLETED"
    _add(fake, 103, "D", 3, 2, 60)
    for _ in range(2):
        ctl.cycle()
    assert _held_cores(fake, "g1") <= 3


def test_a_placed_cpu_job_not_started_yet_is_not_requeued(tmp_path: Path) -> None:
    fake = Refusing()
    fake.now = T0
    ctl = _setup(tmp_path, fake)
    real_run = fake.run

    def no_start(argv: Sequence[str]) -> str:  # Slurm has not started C yet
        out = real_run(argv)
        if list(argv[:2]) == ["scontrol", "release"]:
            job = fake.jobs[int(argv[2])]
            job.update(job_state="PENDING", nodes="", start_time=0, state_reason="Priority")
        return out

    ctl.slurm = SlurmClient(no_start)
    _add(fake, 101, "C", 1, 0, 30)
    ctl.cycle()
    assert fake.jobs[101]["admin_comment"].startswith("coda:placed")
    _add(fake, 102, "B", 3, 2, 60)
    fake.now += 1
    ctl.cycle()
    assert fake.ids("requeuehold") == [], "only running jobs are requeued"
    assert fake.jobs[102]["priority"] == 0, "B waits: C's core is spoken for"


def test_a_running_job_coda_did_not_place_is_never_requeued(tmp_path: Path) -> None:
    """A job its user held (released by them) or one from before CODA is the user's
    and Slurm's: requeueing it killed it and overwrote its comment (attack helper)."""
    fake = Refusing()
    fake.now = T0
    ctl = _setup(tmp_path, fake)
    theirs = fake.job(7, "theirs", 3, comment="(null)", state="RUNNING", priority=1, nodes="g1")
    theirs.update(submit_time=int(fake.now) - 100, requeue=True, start_time=int(fake.now) - 50)
    _add(fake, 102, "B", 3, 2, 60)  # a DNN job that would need its cores
    for _ in range(2):
        fake.now += 1
        ctl.cycle()
    assert fake.ids("requeuehold") == [] and fake.jobs[7]["job_state"] == "RUNNING"
    assert fake.jobs[7]["admin_comment"] == "(null)"
    assert fake.jobs[102]["priority"] == 0  # it waits, as it would under Slurm


def test_a_comment_that_cannot_be_put_back_after_a_refused_requeue_is_no_crash(
    tmp_path: Path,
) -> None:
    fake = Refusing()
    fake.now = T0
    ctl = _setup(tmp_path, fake)
    _add(fake, 101, "C", 1, 0, 30)
    ctl.cycle()
    ctl.cycle()
    assert fake.jobs[101]["job_state"] == "RUNNING"
    fake.jobs[101]["admin_comment"] += " (checked by admin)"  # spaces: scontrol takes none
    fake.refuse = True
    _add(fake, 102, "B", 3, 2, 60)
    fake.now += 1
    ctl.cycle()  # no exception: the comment could not be put back, and that is said
    assert fake.jobs[102]["priority"] == 0
