"""Where a node agent's jobs come from, as a typed interface: the node's own queue
(``LocalQueue``: the agent starts and supervises them) or Slurm's jobs on the node
(``coda.slurm.agent.SlurmJobs``: Slurm starts them, the agent finds them). The agent
(``NodeAgent``) runs the control loop on them either way; a source is asked only what
differs: which jobs there are, and whose books their cores are in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from coda.policy.framework import ExplainsSearch, Policy
from coda.policy.state import Node
from coda.runtime.actions import Actuator
from coda.runtime.decision_log import DecisionLog
from coda.runtime.job_books import JobBooks
from coda.runtime.managed import AgentConfig, Managed
from coda.runtime.node_ledger import NodeLedger
from coda.runtime.processes import JobProcesses
from coda.runtime.store import Store


class AgentHost(Protocol):
    """What a job source reads and books on its node agent."""

    store: Store
    config: AgentConfig
    policy: Policy
    jobs: NodeLedger
    processes: JobProcesses
    decisions: DecisionLog
    actuator: Actuator
    node_name: str
    state_dir: Path
    clock: Callable[[], float]
    wall: Callable[[], float]
    log: Callable[[str], None]

    @property
    def search(self) -> ExplainsSearch | None: ...

    def phase(self, m: Managed) -> str: ...

    def place(self, m: Managed, now: float) -> None: ...

    def release(self, m: Managed, now: float) -> None: ...

    def remove_groups(self, m: Managed) -> None: ...


class JobSource(JobBooks, Protocol):
    """The jobs one node agent drives, and the books their cores are kept in."""

    # ------------------------------------------------------------ lifecycle
    def open(self) -> Node:
        """The node as this source knows it (and, where the source hands out CPUs and
        GPUs itself, the job table's free ones)."""
        ...

    def resume(self, now: float) -> None:
        """Jobs already running found again; the agent's record written."""
        ...

    def intake(self, now: float) -> None:
        """Before a period's samples: jobs that ended released, new ones started or
        found, cancels and time limits acted on."""
        ...

    def after_control(self, now: float) -> None:
        """After a period's actions are written: what the source reports outward."""
        ...

    def leave(self, stop_jobs: bool, now: float) -> None:
        """The agent is leaving: stop the jobs if asked (and if they are its to stop)."""
        ...

    def close(self) -> None:
        """After the agent's last write: groups of ended jobs removed, state saved."""
        ...
