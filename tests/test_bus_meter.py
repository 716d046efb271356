"""The node agent's memory-bus meter (resctrl MBM counters) on a fake resctrl tree, and
the bus rule acting on what it measures in a node agent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakes import fake_v1_driver

from coda.policy.state import Node
from coda.runtime.agent import AgentConfig
from coda.runtime.bus_meter import BusMeter
from coda.runtime.local_queue import local_agent
from coda.runtime.metrics import render
from coda.runtime.resctrl import NoResctrl, Resctrl
from coda.runtime.store import JobSpec, Store

GB = 10**9


def mon_tree(tmp_path: Path, mon: bool = True) -> Resctrl:
    root = tmp_path / "resctrl"
    (root / "info" / "L3").mkdir(parents=True)
    if mon:
        (root / "info" / "L3_MON").mkdir()
    return Resctrl(root)


def count(r: Resctrl, group: str, *per_domain: int | str) -> None:
    """Set a group's cumulative bytes, one value per L3 domain ("" is the default group)."""
    base = r.root / group if group else r.root
    for i, v in enumerate(per_domain):
        d = base / "mon_data" / f"mon_L3_{i:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "mbm_total_bytes").write_text(f"{v}\n")


def test_rate_over_every_group(tmp_path: Path) -> None:
    r = mon_tree(tmp_path)
    count(r, "", 1 * GB, 1 * GB)
    count(r, "job-1", 5 * GB)
    meter = BusMeter(r)
    assert meter.read(0.0) is None  # one read: no span yet
    count(r, "", 2 * GB, 2 * GB)  # +2 GB over both domains
    count(r, "job-1", 9 * GB)  # +4 GB
    assert meter.read(2.0) == pytest.approx(3.0)
    # A group made since (counts from zero), one gone, one made anew (its count fell).
    (r.root / "job-1").rename(r.root / "old")
    count(r, "job-2", 1 * GB)
    count(r, "old", 2 * GB)
    assert meter.read(3.0) == pytest.approx(1.0 + 2.0)
    assert r.mbm_counts() == {
        ("", "mon_L3_00"): 2 * GB,
        ("", "mon_L3_01"): 2 * GB,
        ("job-2", "mon_L3_00"): GB,
        ("old", "mon_L3_00"): 2 * GB,
    }
    # The same group made anew (its count fell), a name no cgroup would take: the fall
    # adds nothing, the group is counted (another tool's groups are traffic too).
    count(r, "old", 1 * GB)
    count(r, "a group", 3 * GB)
    assert meter.read(4.0) == pytest.approx(3.0)


def test_a_counter_missing_for_a_span_adds_nothing(tmp_path: Path) -> None:
    """A domain that reads "Unavailable" (or a group that cannot be read) for one span
    is neither counted from zero when it comes back nor taken as a fall: no spike."""
    r = mon_tree(tmp_path)
    big = 10**15
    count(r, "", big, big)
    count(r, "job", big)
    meter = BusMeter(r)
    meter.read(0.0)
    count(r, "", "Unavailable", big + GB)
    (r.root / "job" / "mon_data").rename(r.root / "job" / "hidden")
    assert meter.read(1.0) == pytest.approx(1.0)
    count(r, "", big + 2 * GB, big + 2 * GB)
    (r.root / "job" / "hidden").rename(r.root / "job" / "mon_data")
    assert meter.read(2.0) == pytest.approx(1.0)  # the domain back: nothing for it yet
    count(r, "", big + 4 * GB, big + 3 * GB)
    count(r, "job", big + 5 * GB)
    assert meter.read(3.0) == pytest.approx(2 + 1 + 5)


def test_counters_that_are_not_plain_files_are_not_read(tmp_path: Path) -> None:
    """A fake tree may hold a pipe or a symlink where a counter should be: nothing
    blocks, nothing outside the tree is read."""
    r = mon_tree(tmp_path)
    count(r, "", 0, 0, 0)
    outside = tmp_path / "outside"
    outside.write_text(f"{100 * GB}\n")
    meter = BusMeter(r)
    meter.read(0.0)
    base = r.root / "mon_data"
    (base / "mon_L3_00" / "mbm_total_bytes").unlink()
    os.mkfifo(base / "mon_L3_00" / "mbm_total_bytes")
    (base / "mon_L3_01" / "mbm_total_bytes").unlink()
    (base / "mon_L3_01" / "mbm_total_bytes").symlink_to(outside)
    (base / "mon_L3_02" / "mbm_total_bytes").write_text(f"{GB}\n")
    assert meter.read(1.0) == pytest.approx(1.0)


def test_short_spans_keep_the_last_rate(tmp_path: Path) -> None:
    r = mon_tree(tmp_path)
    count(r, "", 0)
    meter = BusMeter(r, min_span_s=0.5)
    meter.read(0.0)
    count(r, "", 4 * GB)
    assert meter.read(1.0) == pytest.approx(4.0)
    count(r, "", 100 * GB)
    assert meter.read(1.2) == pytest.approx(4.0)  # too short a span to judge
    assert meter.read(2.0) == pytest.approx(96.0)


@pytest.mark.parametrize("junk", ["Unavailable", "-5", "1e9", "12" * 20, "\xff", "\u00b2", ""])
def test_counters_that_are_not_counts_count_nothing(tmp_path: Path, junk: str) -> None:
    r = mon_tree(tmp_path)
    count(r, "", 0, 0)
    meter = BusMeter(r)
    meter.read(0.0)
    count(r, "", junk, GB)
    assert meter.read(1.0) == pytest.approx(1.0)
    count(r, "", 7 * GB, 2 * GB)  # back to a count: from here on, as any other
    assert meter.read(2.0) == pytest.approx(1.0)
    count(r, "", 9 * GB, 3 * GB)
    assert meter.read(3.0) == pytest.approx(3.0)


def test_no_counters_no_rate(tmp_path: Path) -> None:
    assert BusMeter(NoResctrl()).read(1.0) is None
    r = mon_tree(tmp_path, mon=False)
    count(r, "", GB)
    meter = BusMeter(r)
    assert not meter.counting and meter.read(0.0) is None and meter.read(5.0) is None
    # A counter that cannot be read (a directory where the file should be) adds
    # nothing; a tree that can no longer be listed gives no rate.
    r = mon_tree(tmp_path / "b")
    count(r, "", 0)
    meter = BusMeter(r)
    meter.read(0.0)
    f = r.root / "mon_data" / "mon_L3_00" / "mbm_total_bytes"
    f.unlink()
    f.mkdir()
    assert meter.read(1.0) == 0.0
    (r.root / "info" / "L3_MON").rmdir()
    assert meter.read(2.0) is None and meter.gbps is None


def test_update_puts_the_bus_on_the_node(tmp_path: Path) -> None:
    r = mon_tree(tmp_path)
    count(r, "", 0)
    node = Node(0, "n", 1, 4, 0, 0.0)
    meter = BusMeter(r)
    assert not meter.update(node, 10.0, 0.0) and node.bw_gbps == 0  # no rate yet: aside
    count(r, "", 8 * GB)
    assert meter.update(node, 10.0, 1.0)  # the rules come in: a retry does no harm
    assert (node.bw_gbps, node.bw_used) == (10.0, pytest.approx(8.0))
    count(r, "", 17 * GB)
    assert not meter.update(node, 10.0, 2.0)  # busier: nothing to retry
    count(r, "", 26 * GB)
    assert not meter.update(node, 10.0, 3.0)  # 9 to 9: not calmer
    count(r, "", 27 * GB)
    assert meter.update(node, 10.0, 4.0) and node.bw_used == pytest.approx(1.0)  # calmer
    assert node.bw_per_job is False  # the node's total only: no job's share is known
    # Counters gone: the rules stand aside again, and what they refused may go.
    (r.root / "info" / "L3_MON").rmdir()
    assert meter.update(node, 10.0, 5.0) and (node.bw_gbps, node.bw_used) == (0.0, 0.0)
    assert not meter.update(node, 10.0, 6.0)


def test_bad_bus_bandwidth_is_refused() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="bus_gbps"):
            AgentConfig(bus_gbps=bad)


@pytest.mark.parametrize("counting", [True, False])
def test_agent_keeps_a_cpu_job_off_a_busy_bus(tmp_path: Path, counting: bool) -> None:
    """A node agent that counts memory traffic holds a CPU job back while the training
    bus is busy (the bus rule, BusHeadroom) and starts it once the bus calms; without
    counters the same job starts at once."""
    r = mon_tree(tmp_path, mon=counting)
    count(r, "", 0)
    t = [100.0]
    drv = fake_v1_driver(tmp_path)
    store = Store(tmp_path / "state" / "coda.db")
    cfg = AgentConfig(period_s=1.0, window_s=2.0, gpus=1, bus_gbps=10.0)
    agent = local_agent(store, drv, tmp_path / "state", cfg, resctrl=r, clock=lambda: t[0])
    agent.start()
    try:
        jid = store.submit(JobSpec(argv=["/bin/sleep", "30"], name="cpu", cores=1))
        t[0] += 1.0
        count(r, "", 8 * GB)  # 8 GB/s of a 10 GB/s bus: over its 0.7 share
        agent.tick()
        row = store.job(jid)
        if not counting:
            assert row.state == "running" and agent.node.bw_gbps == 0
            assert "coda_node_bus_gbps" not in render(agent)
            return
        assert row.state == "queued" and "BusHeadroom" in (row.wait_reason or ""), row
        assert agent.node.bw_used == pytest.approx(8.0)
        assert "coda_node_bus_gbps 8.0" in render(agent)
        t[0] += 1.0
        count(r, "", 10 * GB)  # 2 GB/s
        agent.tick()
        assert store.job(jid).state == "running"
    finally:
        for m in list(agent.jobs.running.values()):
            agent.processes.signal(m, 9)
        store.close()
