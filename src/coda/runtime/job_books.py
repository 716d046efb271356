"""The books a node agent's jobs are kept in, as its actuator and sampler ask them: the
room a job may grow into, CPUs taken and given back, preempted jobs queued again, and
each job's progress record. Each job source (``JobSource``) keeps its own."""

from __future__ import annotations

from typing import Protocol

from coda.policy.state import Job
from coda.runtime.managed import Managed
from coda.runtime.progress import Progress


class JobBooks(Protocol):
    """Where a node's jobs hold their cores, and where their progress is read."""

    preempts: bool  # a preempted job can be queued again (``requeue``)

    def room(self, m: Managed) -> int:
        """How many more cores ``m`` could get now."""
        ...

    def take(self, m: Managed, k: int) -> list[int]:
        """``k`` more CPUs for ``m`` (``room`` said there are), taken from the books."""
        ...

    def hold(self, m: Managed, sign: int) -> None:
        """Book a job's CPUs and GPUs as taken (+1) or given back (-1)."""
        ...

    def books_changed(self, grew: bool) -> None:
        """The node's free cores changed outside the scheduler (a cpuset resize)."""
        ...

    def freeze(self, m: Managed) -> str | None:
        """Freeze the job's processes (the cgroup freezer); None once asked of the
        kernel, else why it could not be."""
        ...

    def bus_eased(self) -> None:
        """The node's memory bus calmed: jobs a bus rule kept waiting may fit now."""
        ...

    def requeue(self, job_id: int, job: Job) -> None:
        """A preempted job queued again (asked only of a source that ``preempts``)."""
        ...

    def read_progress(self, m: Managed) -> Progress | None:
        """The job's progress record, from a file only its own user could have written."""
        ...
