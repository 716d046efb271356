"""The stand-alone agent's cgroup parent: made if missing (and then removed when the
agent leaves it empty), and locked, so that one agent only manages it."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable

from coda.runtime.cgroups import CgroupDriver, CgroupError
from coda.runtime.store import Store

PARENT_MADE_KEY = "cgroup_parent_made"


class CgroupParent:
    """The parent group the agent's job groups live under."""

    def __init__(self, cgroups: CgroupDriver, store: Store, log: Callable[[str], None]) -> None:
        self.cg = cgroups
        self.store = store
        self.log = log
        self.lock_fd: int | None = None

    def take(self) -> None:
        """Make the parent (remembering that this state directory made it) and lock it."""
        parent = self.cg.parent_path()
        made = not parent.is_dir()
        self.cg.setup()
        self.lock()
        if made:
            self.store.set_meta(PARENT_MADE_KEY, str(parent))

    def lock(self) -> None:
        """One agent per cgroup parent: an exclusive flock on the parent group's own
        directory (the kernel drops it when the agent dies), whatever state directory
        each agent was given. Two agents on one parent would adopt, throttle and
        remove each other's job groups."""
        parent = self.cg.parent_path()
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CgroupError(
                f"another agent manages cgroup parent {parent} (its lock is held): "
                "give this one another --cgroup-parent"
            ) from None
        self.lock_fd = fd

    def leave(self, empty: bool) -> None:
        """Remove the parent if it is ``empty`` and an agent of this state directory made
        it (another agent's, or an operator's, stays whatever is in it); unlock it."""
        made = self.store.meta(PARENT_MADE_KEY)
        if empty and made and made == str(self.cg.parent_path()):
            try:
                self.cg.teardown()
                self.store.set_meta(PARENT_MADE_KEY, "")
            except CgroupError as e:
                self.log(f"cgroup parent kept: {e}")
        self.release()

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
