"""resctrl on a fake tree: availability, MB rounding/clamping, MBM sums."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda.runtime.resctrl import NoResctrl, Resctrl, ResctrlControl, ResctrlError


def resctrl_tree(tmp_path: Path, mba: bool = True, mon: bool = True) -> Path:
    root = tmp_path / "resctrl"
    (root / "info" / "L3").mkdir(parents=True)
    if mba:
        mb = root / "info" / "MB"
        mb.mkdir()
        (mb / "min_bandwidth").write_text("10\n")
        (mb / "bandwidth_gran").write_text("10\n")
    if mon:
        (root / "info" / "L3_MON").mkdir()
    return root


@pytest.fixture
def rc(tmp_path: Path) -> Resctrl:
    r = Resctrl(resctrl_tree(tmp_path))
    r.create("job")
    g = r.root / "job"
    (g / "schemata").write_text("    L3:0=7ff;1=7ff\n    MB:0= 100;1= 100\n")
    for dom, val in (("00", "1000"), ("01", "234")):
        (g / "mon_data" / f"mon_L3_{dom}").mkdir(parents=True)
        (g / "mon_data" / f"mon_L3_{dom}" / "mbm_total_bytes").write_text(val + "\n")
    return r


def test_absent_root(tmp_path: Path) -> None:
    r = Resctrl(tmp_path / "nope")
    assert not r.available and not r.mba_available and not r.mon_available
    with pytest.raises(ResctrlError, match="not mounted"):
        r.create("x")
    assert Resctrl().root == Path("/sys/fs/resctrl")  # default constructs anywhere


def test_flags(tmp_path: Path) -> None:
    r = Resctrl(resctrl_tree(tmp_path, mba=False, mon=False))
    assert r.available and not r.mba_available and not r.mon_available
    r.create("g")
    assert r.mbm_bytes("g") == 0  # no monitoring: zero, not an error
    with pytest.raises(ResctrlError, match="no MBA"):
        r.set_mb("g", 50)


def test_flags_full(rc: Resctrl) -> None:
    assert rc.available and rc.mba_available and rc.mon_available


def test_mb_parse(rc: Resctrl) -> None:
    assert rc.mb("job") == {0: 100, 1: 100}


@pytest.mark.parametrize(("percent", "value"), [(50, 50), (41, 50), (1, 10), (0, 10), (250, 100)])
def test_set_mb(rc: Resctrl, percent: int, value: int) -> None:
    rc.set_mb("job", percent)
    assert (rc.root / "job" / "schemata").read_text() == f"MB:0={value};1={value}\n"
    assert rc.mb("job") == {0: value, 1: value}


def test_set_mb_without_mb_line(rc: Resctrl) -> None:
    (rc.root / "job" / "schemata").write_text("L3:0=7ff\n")
    with pytest.raises(ResctrlError, match="no MB line"):
        rc.set_mb("job", 50)


def test_mbm_bytes(rc: Resctrl) -> None:
    assert rc.mbm_bytes("job") == 1234
    (rc.root / "job" / "mon_data" / "mon_L3_01" / "mbm_total_bytes").write_text("Unavailable\n")
    assert rc.mbm_bytes("job") == 1000


def test_assign_one_write_per_pid(rc: Resctrl) -> None:
    rc.assign("job", [10, 11, 12])
    assert (rc.root / "job" / "tasks").read_text() == "10\n11\n12\n"


def test_names_validated(rc: Resctrl, tmp_path: Path) -> None:
    for bad in ("../x", "a/b", "", "..", "info/../../x"):
        with pytest.raises(ValueError):
            rc.create(bad)
    (rc.root / "evil").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="resolves outside"):
        rc.set_mb("evil", 50)


def test_remove(rc: Resctrl) -> None:
    rc.remove("job")
    rc.remove("job")
    assert not (rc.root / "job").exists()


@pytest.mark.parametrize("absent", [True, False])
def test_both_implement_the_protocol(tmp_path: Path, absent: bool) -> None:
    # The agent holds a ResctrlControl and asks its flags: no getattr probing.
    r: ResctrlControl = NoResctrl() if absent else Resctrl(resctrl_tree(tmp_path))
    assert isinstance(r, ResctrlControl)
    assert r.available is (not absent) and r.mba_available is (not absent)


def test_no_resctrl() -> None:
    r = NoResctrl()
    assert not r.available and not r.mba_available and not r.mon_available
    assert r.mbm_bytes("job") == 0
    r.remove("job")  # nothing to remove: no error, as when the group is gone
    for change in (lambda: r.create("job"), lambda: r.assign("job", [1])):
        with pytest.raises(ResctrlError, match="no resctrl"):
            change()
    with pytest.raises(ResctrlError, match="no resctrl"):
        r.set_mb("job", 50)
