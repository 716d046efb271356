"""The Slurm node agent on an emulated node (``coda slurm agent --board``;
coda.slurm.board_cgroups): jobs are found in the (fake) cgroup tree, but their CPUs and
CPU quota are kept on the node's board, numbered as Slurm declares the node's cores,
and the job groups' real cpusets are never written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_slurm_agent import UID, Env, converge

from coda.policy.framework import SetCores, SetQuota
from coda.runtime.board import Board, Grant
from coda.runtime.cgroups import CgroupError
from coda.slurm.board_cgroups import BoardCgroups
from coda.slurm.cgroups import SlurmJobCgroups

DECLARED = 28


class BoardEnv(Env):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        (tmp / "board").mkdir()
        self.board = Board(tmp / "board", agent_uid=UID)

    def cgroups(self) -> SlurmJobCgroups:
        return BoardCgroups(super().cgroups(), self.board, DECLARED)


@pytest.fixture
def benv(tmp_path: Path):
    e = BoardEnv(tmp_path)
    yield e
    e.store.close()


def test_a_job_is_adopted_with_slurms_count_on_the_declared_node(benv: BoardEnv) -> None:
    benv.job(5, cpus="0")  # the real cpuset holds one real CPU; Slurm granted 2 of 28
    agent = benv.agent()
    m = agent.jobs.running[5]
    assert m.cpus == [0, 1] and agent.source.info[5].grant == [0, 1]
    assert agent.node is not None and agent.node.cores == DECLARED
    assert benv.board.grant(5) == Grant((0, 1), 1.0)
    assert benv.cpuset(5) == "0"


def test_the_allocator_slims_the_job_on_the_board_not_its_cpuset(benv: BoardEnv) -> None:
    benv.job(5, cpus="0-1")
    agent = benv.agent()
    converge(benv, agent, 5)
    assert agent.jobs.running[5].cpus == [0]
    assert benv.board.grant(5) == Grant((0,), 1.0)
    assert benv.cpuset(5) == "0-1"  # the kernel's, untouched
    assert benv.affinity.calls == []
    assert benv.slurm.updates[-1][-1].endswith(",settled=1")


def test_a_throttle_is_a_quota_on_the_board(benv: BoardEnv) -> None:
    benv.job(6, cpus="0-1", name="prep", gres=None)
    agent = benv.agent()
    m = agent.jobs.running[6]
    agent.actuator.carry_out([SetQuota(m.job, 0.5)], benv.clock(), "test")
    assert benv.board.grant(6) == Grant((0, 1), 0.5)
    assert not (benv.root / "cpu" / "coda_slurm_n1" / "job_6").exists()
    agent.shutdown()  # throttles are always lifted on the way out
    assert benv.board.grant(6) == Grant((0, 1), 1.0)


def test_a_restarted_agent_reads_the_narrowed_cpus_from_the_board(benv: BoardEnv) -> None:
    benv.job(5, cpus="0-1")
    first = benv.agent()
    first.actuator.carry_out([SetCores(first.jobs.running[5].job, 1)], benv.clock(), "test")
    assert benv.board.grant(5) == Grant((0,), 1.0)
    second = benv.agent()  # the first died without a word
    m = second.jobs.running[5]
    assert m.cpus == [0] and second.source.info[5].grant == [0, 1]
    second.actuator.carry_out([SetCores(m.job, 2)], benv.clock(), "test")
    assert benv.board.grant(5) == Grant((0, 1), 1.0)
    assert "refused" not in benv.actions(5)


def test_a_job_that_ends_takes_its_grant_off_the_board(benv: BoardEnv) -> None:
    jd = benv.job(5, cpus="0-1")
    agent = benv.agent()
    assert benv.board.grant(5) is not None
    shutil.rmtree(jd)
    benv.step(agent, {})
    assert 5 not in agent.jobs.running and benv.board.grant(5) is None


def test_a_grant_is_never_written_for_a_group_that_is_not_a_jobs(benv: BoardEnv) -> None:
    real = SlurmJobCgroups("n1", benv.root, version=1)
    cg = BoardCgroups(real, benv.board, DECLARED)
    for name in ("../../etc", f"uid_{UID}/job_5/../../x", "job_5"):
        with pytest.raises(CgroupError):
            cg.granted(name, 2)
    with pytest.raises(ValueError):
        BoardCgroups(real, benv.board, 0)
    assert list(benv.board.path.iterdir()) == []
