"""A job's processes, found through its cgroup (never by name), and signalled."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from coda.runtime.cgroups import CgroupError, JobGroups
from coda.runtime.managed import Managed
from coda.runtime.shim import alive


class JobProcesses:
    """Signals every process of a job: its cgroup is the list, plus its supervisor."""

    def __init__(self, cgroups: JobGroups) -> None:
        self.cg = cgroups

    def pids(self, m: Managed) -> list[int]:
        """The job's processes now (none if its group is gone)."""
        try:
            return self.cg.pids(m.cgroup) if self.cg.exists(m.cgroup) else []
        except CgroupError:
            return []

    def signal(self, m: Managed, sig: int) -> None:
        for p in self.pids(m):
            send_signal(p, sig)
        if m.shim_pid is not None and alive(m.shim_pid, m.shim_start):
            send_signal(m.shim_pid, sig)

    def kill_until_gone(self, m: Managed, seconds: float = 1.0) -> None:
        """SIGKILL the job's cgroup members until none is left (forks included), for at
        most ``seconds``."""
        end = time.monotonic() + seconds
        while (pids := self.pids(m)) and time.monotonic() < end:
            for p in pids:
                send_signal(p, signal.SIGKILL)
            time.sleep(0.01)


def send_signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def quietly(fn: Callable[[], Any]) -> None:
    """Run a best-effort clean-up step; a kernel that refuses it is not an error."""
    try:
        fn()
    except (OSError, CgroupError):
        pass
