"""cgroup drivers: a fake tree in tmp_path (v1 split, v1 co-mounted, v2) plus real-kernel
tests that run only as root on a host with cgroup v1 cpuset/cpu mounts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes import CG, Affinity, v1_tree, v2_tree

from coda.runtime.cgroups import (
    CgroupBusy,
    CgroupDriver,
    CgroupError,
    CgroupV1,
    CgroupV2,
    detect,
    format_cpus,
    parse_cpus,
    safe_child,
    validate_name,
)


@pytest.fixture(params=["split", "comount"])
def v1(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[CgroupV1, Affinity]:
    aff = Affinity()
    mounts = v1_tree(tmp_path, comount=request.param == "comount")
    drv = detect(str(mounts), prefix=str(tmp_path), setaffinity=aff)
    assert isinstance(drv, CgroupV1)
    drv.setup()
    return drv, aff


@pytest.fixture
def v2(tmp_path: Path) -> tuple[CgroupV2, Affinity]:
    aff = Affinity()
    drv = detect(str(v2_tree(tmp_path)), prefix=str(tmp_path), setaffinity=aff)
    assert isinstance(drv, CgroupV2)
    drv.setup()
    return drv, aff


def fake(path: str | Path, text: str) -> None:
    """Stand in for a file the kernel would maintain."""
    Path(path).write_text(text)


# ---------------------------------------------------------------- detection


def test_detect_v1_split(tmp_path: Path) -> None:
    drv = detect(str(v1_tree(tmp_path)), prefix=tmp_path)
    assert isinstance(drv, CgroupV1) and isinstance(drv, CgroupDriver)
    assert drv.version == 1
    assert drv.mounts["cpu"] != drv.mounts["cpuacct"]
    assert drv.mounts["cpuset"] == tmp_path / "sys/fs/cgroup/cpuset"
    assert "memory" not in drv.mounts


def test_detect_v1_comounted(tmp_path: Path) -> None:
    drv = detect(str(v1_tree(tmp_path, comount=True)), prefix=tmp_path)
    assert isinstance(drv, CgroupV1)
    assert drv.mounts["cpu"] == drv.mounts["cpuacct"] == tmp_path / "sys/fs/cgroup/cpu,cpuacct"
    drv.setup()
    drv.create("j")
    assert len(drv.procs_files("j")) == 3  # cpuset, cpu+cpuacct once, freezer


def test_detect_v2(tmp_path: Path) -> None:
    drv = detect(str(v2_tree(tmp_path)), prefix=tmp_path, parent="p")
    assert isinstance(drv, CgroupV2) and drv.version == 2
    assert drv.parent_dir == tmp_path / "sys/fs/cgroup/p"


def test_detect_v2_without_controllers(tmp_path: Path) -> None:
    mounts = v2_tree(tmp_path, controllers="io memory")
    with pytest.raises(CgroupError, match="lacks controllers cpuset, cpu"):
        detect(str(mounts), prefix=tmp_path)


def test_detect_nothing(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n")
    with pytest.raises(CgroupError, match="v1 lacks cpuset, cpu.*no cgroup2 mount"):
        detect(str(mounts), prefix=tmp_path)
    with pytest.raises(CgroupError, match="read"):
        detect(str(tmp_path / "missing"))


def test_detect_prefer(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)  # hybrid: v1 controllers plus an empty cgroup2
    assert detect(str(mounts), prefix=tmp_path).version == 1
    with pytest.raises(CgroupError, match="unified lacks controllers"):
        detect(str(mounts), prefix=tmp_path, prefer="v2")
    fake(tmp_path / "sys/fs/cgroup/unified/cgroup.controllers", "cpuset cpu\n")
    assert detect(str(mounts), prefix=tmp_path, prefer="v2").version == 2
    with pytest.raises(ValueError):
        detect(str(mounts), prefix=tmp_path, prefer="v3")


def test_detect_v2_prefer_v1_fails(tmp_path: Path) -> None:
    with pytest.raises(CgroupError, match="v1 lacks cpuset, cpu"):
        detect(str(v2_tree(tmp_path)), prefix=tmp_path, prefer="v1")


def test_detect_unescapes_mount_paths(tmp_path: Path) -> None:
    for d in ("cpu set", "cpu"):
        (tmp_path / d).mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text("cgroup /cpu\\040set cgroup rw,cpuset 0 0\ncgroup /cpu cgroup rw,cpu 0 0\n")
    drv = detect(str(mounts), prefix=tmp_path)
    assert isinstance(drv, CgroupV1)
    assert drv.mounts["cpuset"] == tmp_path / "cpu set"


def test_v1_without_freezer_or_cpuacct(tmp_path: Path) -> None:
    drv = detect(str(v1_tree(tmp_path, freezer=False)), prefix=tmp_path)
    assert isinstance(drv, CgroupV1)
    drv.setup()
    drv.create("j")
    with pytest.raises(CgroupError, match="freezer not mounted"):
        drv.freeze("j")
    del drv.mounts["cpuacct"]
    with pytest.raises(CgroupError, match="cpuacct not mounted"):
        drv.cpu_usage_s("j")


def test_v1_needs_cpuset_and_cpu(tmp_path: Path) -> None:
    with pytest.raises(CgroupError, match="cpuset"):
        CgroupV1(tmp_path, mounts={"cpu": tmp_path})


# ---------------------------------------------------------------- cpu lists


@pytest.mark.parametrize(
    ("cpus", "text"),
    [([0, 1, 2, 3, 6], "0-3,6"), ([5], "5"), ([3, 1, 2, 2], "1-3"), ([0, 2, 4], "0,2,4")],
)
def test_format_cpus(cpus: list[int], text: str) -> None:
    assert format_cpus(cpus) == text
    assert parse_cpus(text) == sorted(set(cpus))


@pytest.mark.parametrize(
    ("text", "cpus"), [("0-2,5\n", [0, 1, 2, 5]), ("", []), ("\n", []), ("7", [7])]
)
def test_parse_cpus(text: str, cpus: list[int]) -> None:
    assert parse_cpus(text) == cpus


# ---------------------------------------------------------------- v1 on the fake tree


def test_v1_setup_copies_cpuset_and_is_idempotent(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    parent = drv.mounts["cpuset"] / "coda"
    assert (parent / "cpuset.cpus").read_text() == "0-3"
    assert (parent / "cpuset.mems").read_text() == "0"
    for c in ("cpu", "cpuacct", "freezer"):
        assert (drv.mounts[c] / "coda").is_dir()
    fake(parent / "cpuset.cpus", "1-2\n")  # an admin narrowed the parent
    drv.setup()
    assert drv.available_cpus() == [1, 2]


def test_v1_available_cpus_falls_back_to_root(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    fake(drv.mounts["cpuset"] / "coda" / "cpuset.cpus", "\n")
    assert drv.available_cpus() == [0, 1, 2, 3]


def test_v1_create(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    assert not drv.exists("job-1")
    drv.create("job-1")
    drv.create("job-1")  # idempotent
    d = drv.mounts["cpuset"] / "coda" / "job-1"
    assert (d / "cpuset.cpus").read_text() == "0-3"
    assert (d / "cpuset.mems").read_text() == "0"
    for c in ("cpu", "cpuacct", "freezer"):
        assert (drv.mounts[c] / "coda" / "job-1").is_dir()
    assert drv.exists("job-1")
    drv.create("b")
    assert drv.names() == ["b", "job-1"]
    assert drv.cpus("job-1") == [0, 1, 2, 3]


def test_create_needs_setup(tmp_path: Path) -> None:
    drv = detect(str(v1_tree(tmp_path)), prefix=tmp_path)
    with pytest.raises(CgroupError, match="call setup"):
        drv.create("j")


def test_v1_set_cpus_widen_and_shrink(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, aff = v1
    drv.create("j")
    d = drv.mounts["cpuset"] / "coda" / "j"
    fake(d / "tasks", "101\n102\n103\n")
    drv.set_cpus("j", [2])
    assert (d / "cpuset.cpus").read_text() == "2"
    assert aff.calls == []  # shrinking: the kernel narrows tasks itself
    aff.gone.add(102)
    drv.set_cpus("j", [0, 1, 2, 3, 6, 5])
    assert (d / "cpuset.cpus").read_text() == "0-3,5-6"
    assert drv.cpus("j") == [0, 1, 2, 3, 5, 6]
    assert aff.calls == [(101, {0, 1, 2, 3, 5, 6}), (103, {0, 1, 2, 3, 5, 6})]
    aff.calls.clear()
    drv.set_cpus("j", [0, 1])  # narrower again
    drv.set_cpus("j", [1, 2])  # same size but adds CPU 2: wider in what matters
    assert aff.calls == [(101, {1, 2}), (103, {1, 2})]
    with pytest.raises(ValueError):
        drv.set_cpus("j", [])


def test_setaffinity_other_errors_are_reported(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1

    def refuse(tid: int, cpus: set[int]) -> None:
        raise PermissionError(1, "Operation not permitted")

    drv.cpuset_writer.setaffinity = refuse  # the writer owns the affinity call
    drv.create("j")
    drv.set_cpus("j", [0])
    fake(drv.mounts["cpuset"] / "coda" / "j" / "tasks", "7\n")
    with pytest.raises(CgroupError, match=r"sched_setaffinity\(7, 0-1\)"):
        drv.set_cpus("j", [0, 1])


def test_v1_quota(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    drv.create("j")
    d = drv.mounts["cpu"] / "coda" / "j"
    drv.set_quota("j", 1.5)
    assert (d / "cpu.cfs_period_us").read_text() == "100000"
    assert (d / "cpu.cfs_quota_us").read_text() == "150000"
    assert drv.quota("j") == 1.5
    drv.set_quota("j", 0.001)  # clamped to the kernel minimum
    assert (d / "cpu.cfs_quota_us").read_text() == "1000"
    assert drv.quota("j") == 0.01
    drv.set_quota("j", None)
    assert (d / "cpu.cfs_quota_us").read_text() == "-1"
    assert drv.quota("j") is None
    with pytest.raises(ValueError):
        drv.set_quota("j", -1)


def test_period_is_configurable(tmp_path: Path) -> None:
    v1_tree(tmp_path)
    drv = CgroupV1(tmp_path / CG.lstrip("/"), period_us=50_000)  # mounts: <root>/<controller>
    assert set(drv.mounts) == {"cpuset", "cpu", "cpuacct", "freezer"}
    drv.setup()
    drv.create("j")
    drv.set_quota("j", 2)
    d = drv.mounts["cpu"] / "coda" / "j"
    assert (d / "cpu.cfs_period_us").read_text() == "50000"
    assert (d / "cpu.cfs_quota_us").read_text() == "100000"
    assert drv.quota("j") == 2
    with pytest.raises(ValueError):
        CgroupV1(tmp_path, period_us=10)


def test_v1_freeze(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    drv.create("j")
    f = drv.mounts["freezer"] / "coda" / "j" / "freezer.state"
    drv.freeze("j")
    assert f.read_text() == "FROZEN" and drv.frozen("j")
    fake(f, "FREEZING\n")  # the kernel may report this while it works
    assert not drv.frozen("j")
    drv.thaw("j")
    assert f.read_text() == "THAWED" and not drv.frozen("j")


def test_v1_add_pid_and_procs_files(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    drv.create("j")
    files = drv.procs_files("j")
    assert files[0] == str(drv.mounts["cpuset"] / "coda" / "j" / "cgroup.procs")
    assert len(files) == len({drv.mounts[c].resolve() for c in drv.mounts})
    drv.add_pid("j", 4242)
    assert all(Path(f).read_text() == "4242" for f in files)
    assert drv.pids("j") == [4242]
    fake(drv.mounts["cpuset"] / "coda" / "j" / "tasks", "4242\n4243\n")
    assert drv.threads("j") == [4242, 4243]


def test_v1_usage(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    drv.create("j")
    assert drv.pids("j") == [] and drv.threads("j") == []  # no files yet on a fake tree
    fake(drv.mounts["cpuacct"] / "coda" / "j" / "cpuacct.usage", "2500000000\n")
    assert drv.cpu_usage_s("j") == 2.5


def test_v1_remove_and_teardown(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    drv.create("a")
    drv.create("b")
    drv.set_quota("a", 1)
    drv.add_pid("b", 99)
    with pytest.raises(CgroupBusy, match="processes"):
        drv.remove("b")
    with pytest.raises(CgroupBusy, match="a, b"):
        drv.teardown()
    drv.remove("a")
    drv.remove("a")  # missing is fine
    assert not drv.exists("a")
    assert not any((drv.mounts[c] / "coda" / "a").exists() for c in drv.mounts)
    fake(drv.mounts["cpuset"] / "coda" / "b" / "cgroup.procs", "")
    for f in drv.procs_files("b"):
        fake(f, "")
    drv.remove("b")
    assert drv.names() == []
    drv.teardown()
    drv.teardown()  # idempotent
    assert not any((drv.mounts[c] / "coda").exists() for c in drv.mounts)


def test_teardown_sees_children_in_any_controller(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    (drv.mounts["freezer"] / "coda" / "stray").mkdir()
    with pytest.raises(CgroupBusy, match="stray"):
        drv.teardown()


# ---------------------------------------------------------------- v2 on the fake tree


def test_v2_setup_enables_controllers(v2: tuple[CgroupV2, Affinity], tmp_path: Path) -> None:
    drv, _ = v2
    root = tmp_path / CG.lstrip("/")
    assert (root / "cgroup.subtree_control").read_text() == "+cpuset +cpu"
    assert (root / "coda" / "cgroup.subtree_control").read_text() == "+cpuset +cpu"
    fake(root / "coda" / "cgroup.subtree_control", "cpuset cpu\n")  # as the kernel shows it
    drv.setup()  # nothing left to enable: no write
    assert (root / "coda" / "cgroup.subtree_control").read_text() == "cpuset cpu\n"


def test_v2_setup_without_controllers(tmp_path: Path) -> None:
    v2_tree(tmp_path, controllers="memory")
    drv = CgroupV2(tmp_path / CG.lstrip("/"))
    with pytest.raises(CgroupError, match="cgroup.controllers lacks cpuset, cpu"):
        drv.setup()


def test_v2_groups(v2: tuple[CgroupV2, Affinity]) -> None:
    drv, aff = v2
    drv.create("j")
    d = drv.parent_dir / "j"
    assert drv.names() == ["j"] and drv.exists("j")
    fake(drv.parent_dir / "cpuset.cpus.effective", "0-3\n")
    fake(d / "cgroup.threads", "11\n12\n")
    drv.set_cpus("j", [0, 1])  # empty cpuset.cpus meant all of 0-3: a shrink
    assert (d / "cpuset.cpus").read_text() == "0-1"
    assert aff.calls == []
    drv.set_cpus("j", range(4))
    assert aff.calls == [(11, {0, 1, 2, 3}), (12, {0, 1, 2, 3})]
    assert drv.available_cpus() == [0, 1, 2, 3]

    drv.set_quota("j", 2.25)
    assert (d / "cpu.max").read_text() == "225000 100000"
    assert drv.quota("j") == 2.25
    drv.set_quota("j", 0)
    assert (d / "cpu.max").read_text() == "1000 100000"
    drv.set_quota("j", None)
    assert (d / "cpu.max").read_text() == "max 100000"
    assert drv.quota("j") is None

    drv.freeze("j")
    assert (d / "cgroup.freeze").read_text() == "1" and drv.frozen("j")
    fake(d / "cgroup.events", "populated 1\nfrozen 0\n")  # asked, not reached yet
    assert not drv.frozen("j")
    drv.thaw("j")
    assert (d / "cgroup.freeze").read_text() == "0"

    assert drv.procs_files("j") == [str(d / "cgroup.procs")]
    drv.add_pid("j", 77)
    assert drv.pids("j") == [77]
    fake(d / "cpu.stat", "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    assert drv.cpu_usage_s("j") == 1.5
    fake(d / "cpu.stat", "user_usec 1\n")
    with pytest.raises(CgroupError, match="usage_usec"):
        drv.cpu_usage_s("j")

    with pytest.raises(CgroupBusy):
        drv.remove("j")
    with pytest.raises(CgroupBusy):
        drv.teardown()
    fake(d / "cgroup.procs", "")
    drv.remove("j")
    drv.teardown()
    assert not drv.parent_dir.exists()


def test_v2_available_cpus_falls_back_to_root(v2: tuple[CgroupV2, Affinity]) -> None:
    drv, _ = v2
    assert drv.available_cpus() == [0, 1, 2, 3]  # parent has no effective file on a fake tree


# ---------------------------------------------------------------- names and errors


BAD_NAMES = ["../x", "/abs", "a/b", "", ".", "..", "x" * 65, "-lead", ".hidden", "a b", "a\n"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names(v1: tuple[CgroupV1, Affinity], name: str) -> None:
    drv, _ = v1
    with pytest.raises(ValueError, match="invalid group name"):
        validate_name(name)
    for op in (drv.create, drv.remove, drv.exists, drv.freeze, drv.pids):
        with pytest.raises(ValueError):
            op(name)
    with pytest.raises(ValueError):
        drv.set_cpus(name, [0])


@pytest.mark.parametrize("name", BAD_NAMES[:4])
def test_bad_names_v2(v2: tuple[CgroupV2, Affinity], name: str) -> None:
    drv, _ = v2
    with pytest.raises(ValueError):
        drv.create(name)


def test_good_names() -> None:
    for name in ("a", "job-1", "J_2.x", "x" * 64, "0"):
        assert validate_name(name) == name


def test_bad_parent_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        CgroupV2(tmp_path, parent="../etc")


def test_symlink_escape(v1: tuple[CgroupV1, Affinity], tmp_path: Path) -> None:
    drv, _ = v1
    outside = tmp_path / "outside"
    outside.mkdir()
    (drv.mounts["cpuset"] / "coda" / "evil").symlink_to(outside)
    with pytest.raises(ValueError, match="resolves outside"):
        drv.create("evil")
    with pytest.raises(ValueError, match="resolves outside"):
        drv.set_cpus("evil", [0])
    with pytest.raises(ValueError, match="resolves outside"):
        safe_child(drv.mounts["cpuset"] / "coda", "evil")
    assert list(outside.iterdir()) == []
    assert drv.names() == []  # a symlink is not a group


def test_error_names_file_and_value(v1: tuple[CgroupV1, Affinity]) -> None:
    drv, _ = v1
    drv.create("j")
    quota = drv.mounts["cpu"] / "coda" / "j" / "cpu.cfs_quota_us"
    quota.mkdir()  # any write now fails with EISDIR
    with pytest.raises(CgroupError) as err:
        drv.set_quota("j", 1)
    assert str(quota) in str(err.value) and "'100000'" in str(err.value)
    assert "Is a directory" in str(err.value)
    with pytest.raises(CgroupError, match=r"read .*/nope/cpuset\.cpus: No such file"):
        drv.set_cpus("nope", [0])


# ---------------------------------------------------------------- real kernel

REAL_REASON = "needs root and cgroup v1 cpuset/cpu mounts (runs in CI as root)"


def _real_v1_missing() -> bool:
    """True unless we are root on Linux with writable v1 cpuset and cpu mounts."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return True
    try:
        drv = detect(prefer="v1")
    except CgroupError:
        return True
    assert isinstance(drv, CgroupV1)
    return not all(os.access(drv.mounts[c], os.W_OK) for c in ("cpuset", "cpu"))


real = pytest.mark.skipif(_real_v1_missing(), reason=REAL_REASON)


class Real:
    """A driver on the real mounts with a unique parent, plus the processes we start."""

    def __init__(self) -> None:
        self.drv = detect(parent=f"coda-test-{os.getpid()}-{uuid.uuid4().hex[:8]}", prefer="v1")
        assert isinstance(self.drv, CgroupV1)
        self.procs: list[subprocess.Popen] = []

    def spawn(self, code: str, group: str | None = None) -> subprocess.Popen[str]:
        """Start ``python -c code``; with ``group`` the child joins it before exec."""
        files = self.drv.procs_files(group) if group else []

        def join() -> None:  # what the agent's preexec function does
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        p = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, preexec_fn=join
        )
        self.procs.append(p)
        return p

    def cleanup(self) -> None:
        """Thaw, kill and reap our processes, then drop the groups; every step runs."""
        names = self.drv.names()
        try:
            if "freezer" in self.drv.mounts:
                for n in names:  # a frozen task cannot die
                    self.drv.thaw(n)
        finally:
            for p in self.procs:
                p.kill()
                p.wait()
                if p.stdout:
                    p.stdout.close()
            try:
                for n in names:
                    self.drv.remove(n)
            finally:
                self.drv.teardown()


@pytest.fixture
def real_cg() -> Iterator[Real]:
    r = Real()
    r.drv.setup()
    try:
        yield r
    finally:
        r.cleanup()


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


SLEEP = "import time; print('ok', flush=True); time.sleep(30)"
BUSY = "print('ok', flush=True)\nwhile True: pass"


def proc_status(pid: int, key: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(key)


@real
def test_real_lifecycle(real_cg: Real) -> None:
    drv = real_cg.drv
    parent = drv.mounts["cpuset"] / drv.parent
    assert parse_cpus((parent / "cpuset.cpus").read_text()) == drv.available_cpus()
    drv.setup()  # idempotent on the real kernel too
    drv.create("a")
    drv.create("a")
    assert drv.names() == ["a"] and drv.exists("a")
    assert drv.cpus("a") == drv.available_cpus()
    with pytest.raises(CgroupBusy):
        drv.teardown()
    drv.remove("a")
    drv.remove("a")
    assert drv.names() == [] and not drv.exists("a")


@real
def test_real_process_follows_shrink(real_cg: Real) -> None:
    drv = real_cg.drv
    cpus = drv.available_cpus()
    drv.create("j")
    p = subprocess.Popen(["sleep", "30"])
    real_cg.procs.append(p)
    drv.add_pid("j", p.pid)
    assert p.pid in drv.pids("j") and p.pid in drv.threads("j")
    assert f"{drv.parent}/j" in Path(f"/proc/{p.pid}/cgroup").read_text()
    drv.set_cpus("j", [cpus[-1]])
    assert proc_status(p.pid, "Cpus_allowed_list") == str(cpus[-1])
    with pytest.raises(CgroupBusy):
        drv.remove("j")


@real
def test_real_pinned_process_widens(real_cg: Real) -> None:
    drv = real_cg.drv
    cpus = drv.available_cpus()
    if len(cpus) < 2:
        pytest.skip("needs at least 2 CPUs")
    drv.create("j")
    p = real_cg.spawn(f"import os; os.sched_setaffinity(0, {{{cpus[0]}}})\n{SLEEP}", "j")
    assert p.stdout and p.stdout.readline() == "ok\n"
    assert p.pid in drv.pids("j")
    assert os.sched_getaffinity(p.pid) == {cpus[0]}
    drv.set_cpus("j", [cpus[0]])
    drv.set_cpus("j", cpus)
    assert os.sched_getaffinity(p.pid) == set(cpus)


@real
def test_real_quota(real_cg: Real) -> None:
    drv = real_cg.drv
    drv.create("j")
    d = drv.mounts["cpu"] / drv.parent / "j"
    assert drv.quota("j") is None
    drv.set_quota("j", 0.5)
    assert (d / "cpu.cfs_quota_us").read_text().strip() == "50000"
    assert drv.quota("j") == 0.5
    drv.set_quota("j", 0.0001)
    assert drv.quota("j") == 0.01
    drv.set_quota("j", None)
    assert drv.quota("j") is None


@real
def test_real_usage_and_freeze(real_cg: Real) -> None:
    drv = real_cg.drv
    if "cpuacct" not in drv.mounts or "freezer" not in drv.mounts:
        pytest.skip("needs cpuacct and freezer mounts")
    drv.create("j")
    p = real_cg.spawn(BUSY, "j")
    assert p.stdout and p.stdout.readline() == "ok\n"
    u0 = drv.cpu_usage_s("j")
    assert wait_for(lambda: drv.cpu_usage_s("j") > u0)

    drv.freeze("j")
    assert wait_for(lambda: drv.frozen("j"))
    u1 = drv.cpu_usage_s("j")
    time.sleep(0.2)
    assert drv.cpu_usage_s("j") == u1  # frozen tasks do not run
    drv.thaw("j")
    assert wait_for(lambda: not drv.frozen("j"))
    assert wait_for(lambda: drv.cpu_usage_s("j") > u1)


@real
def test_real_invalid_cpu_names_file(real_cg: Real) -> None:
    drv = real_cg.drv
    drv.create("j")
    bad = max(drv.available_cpus()) + 1000
    with pytest.raises(CgroupError) as err:
        drv.set_cpus("j", [bad])
    msg = str(err.value)
    assert str(drv.mounts["cpuset"] / drv.parent / "j" / "cpuset.cpus") in msg
    assert repr(str(bad)) in msg


def test_one_cpu_quota_codec_serves_both_versions_and_both_drivers() -> None:
    from coda.runtime.cgroup_files import MIN_QUOTA_US, CpuQuota

    q = CpuQuota(100_000)
    assert (q.v1_quota(1.5), q.v2_max(1.5)) == ("150000", "150000 100000")
    assert (q.v1_quota(None), q.v2_max(None)) == ("-1", "max 100000")
    assert q.quota_us(0.0) == MIN_QUOTA_US  # the kernel's floor
    assert q.read_v2("150000 100000\n") == 1.5 and q.read_v2("max 100000") is None
    assert CpuQuota.read_v1("150000", "100000") == 1.5 and CpuQuota.read_v1("-1", "1") is None
    for bad in (float("inf"), float("nan"), -0.5, True):
        with pytest.raises(ValueError, match="non-negative number of cores"):
            q.quota_us(bad)  # type: ignore[arg-type]
    # Neither driver encodes a quota of its own.
    from pathlib import Path

    import coda.runtime.cgroups as rc

    for path in (Path(rc.__file__), Path(rc.__file__).parent.parent / "slurm" / "cgroups.py"):
        text = path.read_text()
        assert "round(" not in text and "MIN_QUOTA_US" not in text, path


def test_every_cgroup_file_is_named_once_for_both_versions() -> None:
    from coda.runtime import cgroup_files as cf

    names = [f.knob for f in cf.REGISTRY]
    assert len(names) == len(set(names))
    assert cf.CPU_QUOTA.v1 == "cpu.cfs_quota_us" and cf.CPU_QUOTA.v2 == "cpu.max"
    assert cf.THREADS.v1 == "tasks" and cf.THREADS.v2 == "cgroup.threads"
    assert cf.PROCS.file == "cgroup.procs"
    with pytest.raises(LookupError):
        _ = cf.EVENTS.v1  # v1 has no cgroup.events: asking for it is an error, not ""
    with pytest.raises(LookupError):
        _ = cf.CPU_QUOTA.file  # named differently in each version
    # The drivers name no cgroup file themselves: every name comes from the registry.
    import re
    from pathlib import Path

    src = Path(cf.__file__).parent
    files = {f.v1_file for f in cf.REGISTRY} | {f.v2_file for f in cf.REGISTRY}
    for path in (src / "cgroups.py", src.parent / "slurm" / "cgroups.py"):
        literals = set(re.findall(r'"([a-z_.]+)"', path.read_text()))
        assert not literals & files, (path.name, literals & files)


def turn_every_knob(drv: CgroupDriver) -> None:
    drv.create("j")
    drv.set_cpus("j", [0])
    drv.set_quota("j", 0.5)
    drv.freeze("j")
    drv.add_pid("j", 42)
    assert drv.quota("j") == 0.5 and drv.cpus("j") == [0]


# On the fake tree, every knob a driver turns lands in the file the registry names
# for its version, and in no file named for the other one.


def test_v1_driver_writes_the_registrys_v1_files(v1: tuple[CgroupV1, Affinity]) -> None:
    from coda.runtime import cgroup_files as cf

    drv = v1[0]
    turn_every_knob(drv)
    cpuset, cpu = drv.mounts["cpuset"] / "coda" / "j", drv.mounts["cpu"] / "coda" / "j"
    freezer = drv.mounts["freezer"] / "coda" / "j"
    assert (cpuset / cf.CPUS.v1).read_text() == "0"
    assert (cpu / cf.CPU_QUOTA.v1).read_text() == "50000"
    assert (cpu / cf.CPU_PERIOD.v1).read_text() == "100000"
    assert (freezer / cf.FREEZE.v1).read_text() == "FROZEN"
    assert (cpuset / cf.PROCS.v1).read_text() == "42"
    assert not (cpu / cf.CPU_QUOTA.v2).exists() and not (freezer / cf.FREEZE.v2).exists()


def test_v2_driver_writes_the_registrys_v2_files(v2: tuple[CgroupV2, Affinity]) -> None:
    from coda.runtime import cgroup_files as cf

    drv = v2[0]
    turn_every_knob(drv)
    d = drv.parent_path() / "j"
    assert (d / cf.CPUS.v2).read_text() == "0"
    assert (d / cf.CPU_QUOTA.v2).read_text() == "50000 100000"  # quota and period, one file
    assert (d / cf.FREEZE.v2).read_text() == "1"
    assert (d / cf.PROCS.v2).read_text() == "42"
    assert not (d / cf.CPU_QUOTA.v1).exists() and not (d / cf.FREEZE.v1).exists()


def test_cpuset_writer_orders_a_tree(tmp_path: Path) -> None:
    from coda.runtime.cgroups import CpusetWriter

    tree = [tmp_path / "job", tmp_path / "job" / "step"]
    for d in tree:
        d.mkdir(exist_ok=True)
    writes: list[tuple[str, str]] = []
    aff = Affinity()

    def record(path: Path, value: str) -> None:
        writes.append((path.parent.name, value))

    writer = CpusetWriter(aff, record)
    writer.write(tree, {0}, {0, 1}, lambda: [7])  # narrow: children first, no affinity
    assert writes == [("step", "0"), ("job", "0")] and aff.calls == []
    writes.clear()
    writer.write(tree, {2, 3}, {0}, lambda: [7])  # grow: parents to the union first
    assert writes == [("job", "0,2-3"), ("step", "0,2-3"), ("step", "2-3"), ("job", "2-3")]
    assert aff.calls == [(7, {2, 3})]
    writes.clear()
    writer.write(tree[:1], {0, 1}, {0}, lambda: [])  # one group: no union step needed
    assert writes == [("job", "0-1")]
