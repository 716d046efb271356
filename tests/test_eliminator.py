"""The contention eliminator against an emulated driver: no simulator.

The rig plays the driver: each period it computes every training job's
throughput from a simple contention model (reference / slowdown(CPU-job
bandwidth share actually used, which scales with their quotas)), records it in
the ThroughputHistory, ticks the eliminator, and applies the SetQuota it returns.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from coda.policy.eliminator import ContentionEliminator, EliminatorConfig
from coda.policy.feedback import ThroughputHistory
from coda.policy.framework import NodeControl, SetQuota
from coda.policy.state import CPU, Job, Node

REF = 100.0  # every training job's reference throughput (samples/s)
BW = 100.0  # node memory bandwidth, GB/s


def linear(k: float) -> Callable[[float], float]:
    """Slowdown 1 + k x (share of the node's bandwidth the CPU jobs use)."""
    return lambda share: 1.0 + k * share


class Rig:
    """One GPU node, its jobs, and a driver loop around the eliminator."""

    def __init__(
        self,
        cpu_demand: list[float],
        slowdown: Callable[[float], float] | None = None,
        *,
        dnn: int = 1,
        referenced: bool = True,
        noise: float = 0.0,
        seed: int = 0,
        dnn_bw: float = 0.0,
        config: EliminatorConfig | None = None,
        reports_bw: bool = False,
    ) -> None:
        self.cfg = config or EliminatorConfig()
        # The loop's mechanics are tested on a node that does not report its bandwidth
        # (no MBM): then the paper's bandwidth gate does not apply. Bandwidth tests opt in.
        self.node = Node(0, "g0", 4, 64, 0, BW if reports_bw else 0.0)
        self.book = ThroughputHistory()
        self.elim = ContentionEliminator(self.book, self.cfg)
        self.slowdown = slowdown or linear(0.2)
        self.extra = 1.0  # slowdown that no CPU job causes (e.g. a PCIe-heavy neighbour)
        self.noise = noise
        self.rng = random.Random(seed)
        self.dnn_bw = dnn_bw
        self.tick = 0
        self.changes: list[tuple[int, str, float]] = []  # (tick, job, new quota)
        self.dnn = [
            self._add(Job(i, f"d{i}", 0.0, 1, 4, 0, 1, 1e9, model="WaveNet")) for i in range(dnn)
        ]
        if referenced:
            for j in self.dnn:
                self.book.set_reference(j, REF)
        self.demand: dict[Job, float] = {}
        self.cpu = [self.add_cpu(d) for d in cpu_demand]

    def _add(self, job: Job) -> Job:
        job.placement = [self.node]
        job.cores_pn = 4
        self.node.jobs[job] = None
        return job

    def add_cpu(self, demand: float) -> Job:
        job = self._add(Job(100 + len(self.demand), f"c{len(self.demand)}", 0.0, 0, 4, 0, 1, 1e9))
        self.demand[job] = demand  # GB/s at quota 1
        return job

    def remove(self, job: Job) -> None:
        del self.node.jobs[job]
        job.placement = []

    def cpu_share(self) -> float:
        return sum(self.demand[j] * j.quota for j in self.node.jobs if j.kind == CPU) / BW

    def step(self) -> list[SetQuota]:
        self.tick += 1
        now = self.tick * self.cfg.period_s
        # The sample at `now` covers the period that just ended, under the quotas set then.
        for j in self.node.jobs:
            j.bw_pn = self.demand[j] * j.quota if j.kind == CPU else self.dnn_bw
        self.node.bw_used = sum(j.bw_pn for j in self.node.jobs)
        slow = self.slowdown(self.cpu_share()) * self.extra
        for j in self.dnn:
            if j in self.node.jobs:
                noise = 1.0 + self.rng.gauss(0.0, self.noise) if self.noise else 1.0
                self.book.add(j, now, REF / slow * noise)
        acts = self.elim.control(self.node, now)
        for a in acts:
            assert isinstance(a, SetQuota)
            assert a.job.kind == CPU, "never throttle a training job"
            assert a.job in self.node.jobs
            assert self.cfg.min_quota - 1e-9 <= a.quota <= 1.0
            if a.quota != a.job.quota:
                self.changes.append((self.tick, a.job.job_id, a.quota))
            a.job.quota = a.quota
        return acts

    def run(self, ticks: int) -> list[list[SetQuota]]:
        return [self.step() for _ in range(ticks)]

    def ratio(self) -> float:
        return 1.0 / (self.slowdown(self.cpu_share()) * self.extra)

    def quotas(self) -> list[float]:
        return [j.quota for j in self.cpu]

    def change_ticks(self) -> list[int]:
        return sorted({t for t, _, _ in self.changes})


def first_change(rig: Rig) -> int:
    return rig.change_ticks()[0]


# ------------------------------------------------------------------ detection
def test_is_a_node_control():
    elim = ContentionEliminator(ThroughputHistory())
    control: NodeControl = elim  # the type checker holds it to the Protocol
    assert control.period_s == 10.0 and not control.watching(Node(0, "n", 1, 8, 0, 10.0))


def test_moderate_drop_throttles_within_two_ticks_one_step_at_a_time():
    # CPU job at full quota: slowdown 1.125 -> ratio 0.889 (degraded, not severe).
    rig = Rig([50.0], linear(0.25))
    rig.step()
    assert rig.changes == []  # one fresh sample: the window (2) is not full yet
    rig.step()
    assert rig.changes == [(2, "c0", 0.75)]
    # Each step is judged on a full fresh window: next step two ticks later.
    rig.run(2)
    assert rig.changes[-1] == (4, "c0", 0.5)
    rig.run(20)
    # 0.25 -> ratio 0.97: inside the hysteresis band, so it stays there.
    assert rig.quotas() == [0.25]
    assert [q for _, _, q in rig.changes] == [0.75, 0.5, 0.25]
    assert rig.elim.stats()["throttle_steps"] == 3


def test_drop_after_a_quiet_period_is_caught_within_two_ticks():
    rig = Rig([0.0], linear(0.25))
    rig.run(10)
    assert rig.changes == []
    rig.demand[rig.cpu[0]] = 50.0  # the CPU job enters a memory-heavy phase
    onset = rig.tick + 1
    rig.run(2)
    assert rig.changes and rig.changes[0][0] <= onset + 1


def test_severe_drop_takes_the_fast_path_in_one_tick():
    rig = Rig([0.0, 0.0], linear(1.0))
    rig.run(5)
    rig.demand = {j: 40.0 for j in rig.cpu}  # share 0.8 -> ratio 0.56
    rig.step()
    # The very first contended sample: every CPU job straight to min_quota.
    assert rig.quotas() == [0.1, 0.1]
    assert rig.elim.stats()["fast_paths"] == 1
    assert rig.elim.decisions[-1]["action"] == "fast_path"
    assert rig.elim.decisions[-1]["jobs"] == ["c0", "c1"]


def test_heaviest_bandwidth_users_go_first():
    rig = Rig([40.0, 4.0], linear(0.25))
    rig.run(2)
    assert rig.changes == [(2, "c0", 0.75)]  # c1 draws little: left alone


def test_cpu_jobs_that_look_alike_are_throttled_together():
    for demand in ([20.0, 20.0], [0.0, 0.0]):  # equal bandwidth, or none reported
        rig = Rig(demand, lambda share: 1.0)
        rig.extra = 1.1  # ratio 0.91, whatever the bandwidth says
        rig.run(2)
        assert sorted(rig.changes) == [(2, "c0", 0.75), (2, "c1", 0.75)]


# ------------------------------------------------------------------ restore
def test_restores_step_by_step_after_contention_goes_away():
    rig = Rig([40.0, 40.0], linear(1.0))
    rig.run(1)
    assert rig.quotas() == [0.1, 0.1]  # fast path at tick 1
    rig.run(9)
    # Still degraded (share 0.08 -> ratio 0.926), but all at the floor and the fast
    # path clearly helped (0.56 -> 0.93): hold.
    assert rig.changes[-1][0] == 1
    # The heavy neighbour leaves; the other one's demand falls to nothing.
    rig.remove(rig.cpu[0])
    rig.demand[rig.cpu[1]] = 0.0
    t0 = rig.tick
    rig.run(60)
    ticks = [t for t, job, _ in rig.changes if job == "c1" and t > t0]
    quotas = [q for t, job, q in rig.changes if job == "c1" and t > t0]
    assert quotas == pytest.approx([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    # One tick for the contended sample to leave the window, then restore_ticks (3)
    # healthy windows; later steps: one tick for a fresh sample after the action,
    # then 3 healthy full windows: 4 ticks apart.
    assert ticks[0] == t0 + 4
    assert [b - a for a, b in zip(ticks, ticks[1:], strict=False)] == [4] * 8
    assert rig.elim.stats()["restores"] == 9
    assert rig.elim.stats()["nodes_throttled_now"] == 0


def test_restore_waits_for_the_cooldown():
    cfg = EliminatorConfig(cooldown_s=120.0)
    rig = Rig([40.0], linear(1.0), config=cfg)
    rig.step()
    assert rig.quotas() == [0.1]
    throttle_t = rig.tick
    rig.demand[rig.cpu[0]] = 0.0
    rig.run(30)
    first_restore = [t for t, _, q in rig.changes if q > 0.1][0]
    # Healthy from tick 3 on, but no restore before 120 s after the throttle.
    assert first_restore == throttle_t + 12


def test_no_restore_inside_the_hysteresis_band():
    # Ratio 0.962 whatever the quota: neither degraded nor healthy: hold.
    rig = Rig([40.0], linear(1.0))
    rig.step()
    assert rig.quotas() == [0.1]
    rig.slowdown = lambda share: 1.04
    rig.run(100)
    assert rig.quotas() == [0.1]
    assert len(rig.changes) == 1


def test_released_at_once_when_the_training_job_leaves():
    rig = Rig([40.0], linear(1.0))
    rig.step()
    assert rig.quotas() == [0.1]
    rig.remove(rig.dnn[0])
    acts = rig.step()
    assert [(a.job.job_id, a.quota) for a in acts] == [("c0", 1.0)]
    assert rig.elim.stats()["nodes_tracked"] == 0


# ------------------------------------------------------------------ stability
THRESHOLD = 1.2 / 0.59  # slope of the threshold model below


def threshold(share: float) -> float:
    """Harmless up to 41% CPU share, sharp beyond: quota 0.4 is fine, 0.5 is not."""
    return 1.0 + THRESHOLD * max(0.0, share - 0.41)


@pytest.mark.parametrize(("noise", "bound"), [(0.0, 3), (0.01, 10), (0.02, 20)])
def test_steady_contention_settles(noise, bound):
    # Ratio 0.88 at full quota; a partial throttle (0.25) puts it inside the band.
    for seed in range(5):
        rig = Rig([60.0], linear(0.227), noise=noise, seed=seed)
        ratios = []
        for _ in range(500):
            rig.step()
            ratios.append(rig.ratio())
        assert len(rig.changes) <= bound
        # Protected: 0.88 unthrottled. Noise costs a little: a step that helped only
        # just more than improve_min can be judged useless, reverted, backed off.
        assert sum(ratios) / len(ratios) >= (0.96 if noise == 0.0 else 0.94)
        if noise == 0.0:
            assert rig.changes == [(2, "c0", 0.75), (4, "c0", 0.5), (6, "c0", 0.25)]


def test_sample_noise_alone_does_not_throttle():
    # 5% noise per sample (the simulator's default), no contention at all: a
    # 2-sample window dips below 0.95 every few ticks; the noise margin keeps
    # false alarms rare and the judgement reverts the ones that slip through.
    for seed in range(5):
        rig = Rig([30.0], lambda share: 1.0, noise=0.05, seed=seed)
        quotas = []
        for _ in range(500):
            rig.step()
            quotas.append(rig.quotas()[0])
        assert len(rig.changes) <= 10
        assert sum(quotas) / len(quotas) >= 0.95


def test_a_level_just_too_high_is_probed_ever_more_rarely():
    rig = Rig([100.0], threshold)
    rig.run(500)
    relapses = [d["time"] / 10.0 for d in rig.elim.decisions if d["action"] == "relapse"]
    # Each relapse doubles the healthy ticks the next probe needs: gaps 9, 15, 27, 51, ...
    gaps = [b - a for a, b in zip(relapses, relapses[1:], strict=False)]
    assert len(gaps) >= 4
    assert all(b >= 1.5 * a for a, b in zip(gaps, gaps[1:], strict=False))
    # 1 fast path + 4 restores, then 2 changes per probe: 7 probes in 500 ticks.
    assert len(rig.changes) <= 20
    assert rig.quotas() == [pytest.approx(0.4)]


def test_only_the_level_that_relapsed_waits_longer():
    rig = Rig([100.0], threshold)
    rig.run(80)  # relapses at 0.5; restore_need has doubled a few times
    need = rig.elim._nodes[rig.node].restore_need
    assert need >= 4 * rig.cfg.restore_ticks
    rig.slowdown = linear(2.0)  # a burst: fast path to the floor
    rig.step()
    assert rig.quotas() == [0.1]
    rig.slowdown = threshold
    t0 = rig.tick
    rig.run(40)
    ups = [(t, q) for t, _, q in rig.changes if t > t0]
    # Up to 0.4 at the base pace (first: flush the window, then 3 healthy ticks)...
    assert ups == [(t0 + 4, 0.2), (t0 + 8, 0.3), (t0 + 12, 0.4)]
    rig.run(need)
    # ... but 0.5, which relapsed before, only after the doubled healthy stretch.
    assert rig.changes[-2][2] == pytest.approx(0.5)
    assert rig.changes[-2][0] == t0 + 12 + 1 + need


def test_restore_speeds_up_again_after_a_long_healthy_stretch():
    rig = Rig([100.0], threshold)
    rig.run(200)
    need = rig.elim._nodes[rig.node].restore_need
    last_relapse = [d["time"] / 10 for d in rig.elim.decisions if d["action"] == "relapse"][-1]
    assert need >= 32
    rig.demand[rig.cpu[0]] = 10.0  # the CPU job's memory-heavy phase ends for good
    rig.run(100)
    assert rig.quotas() == [1.0]
    ups = [t for t, _, _ in rig.changes if t > 200]
    # One slow probe (the relapsed level), which holds; then the base pace again.
    assert ups[0] == last_relapse + 1 + need
    assert [b - a for a, b in zip(ups, ups[1:], strict=False)] == [4] * 5


# ------------------------------------------------------------------ revert
def test_throttle_that_does_not_help_is_reverted_and_not_retried():
    # Two PCIe-heavy training jobs slow each other: CPU jobs are innocent.
    rig = Rig([20.0])
    rig.slowdown = lambda share: 1.0
    rig.extra = 1.12  # ratio 0.89
    rig.run(2)
    assert rig.changes == [(2, "c0", 0.75)]
    rig.run(rig.cfg.revert_ticks)
    assert rig.changes[-1] == (2 + rig.cfg.revert_ticks, "c0", 1.0)
    assert rig.elim.stats()["reverts"] == 1
    backoff_ticks = int(rig.cfg.backoff_s / rig.cfg.period_s)
    rig.run(backoff_ticks - 1)
    assert len(rig.changes) == 2  # no retry during the back-off
    assert rig.elim.decisions[-1]["action"] == "revert"
    # After it: one more try, reverted again, and the back-off doubles.
    rig.run(10)
    assert len(rig.changes) == 4
    rig.run(2 * backoff_ticks - 10)
    assert len(rig.changes) == 4


def test_useless_throttles_grow_rarer_and_the_node_comes_to_rest():
    # An innocent slowdown for a day: the back-off doubles to its cap and stays there
    # (it is not forgotten after calm_s), and from the first revert, with nothing held,
    # the node is at rest (a driver whose node does not change may stop ticking it).
    rig = Rig([20.0])
    rig.slowdown = lambda share: 1.0
    rig.extra = 1.12
    cfg = rig.cfg
    at_rest_after: int | None = None
    for _ in range(8640):
        rig.step()
        reverts = rig.elim.stats()["reverts"]
        if at_rest_after is None and reverts and rig.elim.at_rest(rig.node):
            at_rest_after = reverts
    assert at_rest_after == 1
    longest = cfg.backoff_s * 2**cfg.max_backoff_doublings
    shortest = cfg.backoff_s * (1 + 2 + 4)  # the first three back-offs
    assert rig.elim.stats()["reverts"] <= 3 + (86400 - shortest) / longest + 1


def test_a_whole_chain_revert_goes_back_to_before_the_episode():
    # Step 1 helps (kept); step 2 does not and goes back alone (the chain helped). Later
    # the episode as a whole is judged useless: its revert returns to full quota, not to
    # the 0.75 that step 1 set (no ratchet across partial reverts).
    rig = Rig([20.0])
    rig.slowdown = lambda share: 1.0 + 0.6 * share  # ratio 0.893 at quota 1, 0.917 at 0.75
    rig.run(3)
    assert rig.quotas() == [0.75]
    rig.slowdown = lambda share: 1.0 / 0.917  # throttling no longer helps
    rig.run(10)
    assert rig.quotas() == [0.75]
    assert rig.elim.decisions[-1]["reason"]["whole_chain"] is False
    rig.slowdown = lambda share: 1.0 / 0.89  # worse than before the episode began
    rig.run(60)
    last = rig.elim.decisions[-1]
    assert last["action"] == "revert" and last["reason"]["whole_chain"] is True
    assert rig.quotas() == [1.0]


def test_fast_path_that_does_not_help_is_reverted():
    rig = Rig([20.0, 20.0])
    rig.slowdown = lambda share: 1.0
    rig.extra = 1.35  # ratio 0.74: severe
    rig.step()
    assert rig.quotas() == [0.1, 0.1]
    rig.run(rig.cfg.revert_ticks)
    assert rig.quotas() == [1.0, 1.0]
    assert rig.elim.stats()["reverts"] == 1


def test_back_off_ends_when_the_signal_worsens():
    rig = Rig([20.0])
    rig.slowdown = lambda share: 1.0
    rig.extra = 1.12
    rig.run(5)  # throttle at 2, revert at 5
    assert rig.elim.stats()["reverts"] == 1
    rig.run(5)
    assert len(rig.changes) == 2
    rig.slowdown = lambda share: 1.0 + 1.0 * share  # a real CPU-side squeeze too: 0.8
    rig.run(3)
    assert len(rig.changes) > 2


def test_new_cpu_job_during_back_off_may_be_throttled():
    rig = Rig([20.0])
    rig.slowdown = lambda share: 1.0
    rig.extra = 1.12
    rig.run(5)
    newcomer = rig.add_cpu(30.0)
    rig.run(2)
    assert any(job == newcomer.job_id for _, job, _ in rig.changes)


# ------------------------------------------------------------------ guard rails
def test_ignores_training_jobs_without_a_reference():
    rig = Rig([40.0], linear(1.0), referenced=False)
    rig.run(30)
    assert rig.changes == []


def test_only_referenced_jobs_count():
    rig = Rig([40.0], linear(0.25), dnn=2, referenced=False)
    rig.book.set_reference(rig.dnn[1], REF)
    rig.run(4)
    assert rig.changes and all(job.startswith("c") for _, job, _ in rig.changes)


def test_quotas_stay_in_bounds_under_noise():
    cfg = EliminatorConfig()
    rig = Rig([30.0, 10.0, 50.0], linear(0.5), dnn=2, noise=0.05, seed=7, config=cfg)
    for i in range(400):
        if i % 50 == 25:  # demand shifts now and then
            for j in rig.cpu:
                rig.demand[j] = rig.rng.choice([0.0, 10.0, 40.0])
        rig.step()
        assert all(cfg.min_quota - 1e-9 <= q <= 1.0 for q in rig.quotas())  # the rig checks each
    json.dumps(rig.elim.stats())
    json.dumps(list(rig.elim.decisions))


def test_tolerates_a_cpu_job_leaving_between_ticks():
    rig = Rig([40.0, 40.0], linear(1.0))
    rig.step()
    assert rig.quotas() == [0.1, 0.1]
    rig.remove(rig.cpu[0])
    rig.run(3)
    rig.remove(rig.cpu[1])
    assert rig.step() == []
    assert rig.elim.stats()["nodes_tracked"] == 0
    assert rig.elim._holders == {}


def test_job_leaving_while_a_throttle_is_judged():
    rig = Rig([20.0, 1.0])
    rig.slowdown = lambda share: 1.0
    rig.extra = 1.12
    rig.run(2)
    assert [job for _, job, _ in rig.changes] == ["c0"]
    rig.remove(rig.cpu[0])  # the throttled job leaves before the judgement
    rig.run(5)
    assert rig.elim._holders == {}
    assert all(job != "c0" for t, job, _ in rig.changes if t > 2)


def test_forget_job_and_node_drop_every_reference():
    rig = Rig([40.0, 40.0], linear(1.0))
    rig.step()
    assert rig.elim.stats()["nodes_throttled_now"] == 1
    rig.elim.forget_job(rig.cpu[0])
    assert rig.cpu[0] not in rig.elim._holders
    rig.elim.forget_node(rig.node)
    assert rig.elim._holders == {} and rig.elim.stats()["nodes_tracked"] == 0


def test_watching():
    rig = Rig([], dnn=1)
    elim, node = rig.elim, rig.node
    assert not elim.watching(node)  # training job alone
    cpu = rig.add_cpu(10.0)
    assert elim.watching(node)  # training job + CPU job
    rig.remove(rig.dnn[0])
    assert not elim.watching(node)  # CPU job alone at full quota
    cpu.quota = 0.5
    assert elim.watching(node)  # ... but throttled: must be given back
    rig.remove(cpu)
    assert not elim.watching(node)
    assert not elim.watching(Node(1, "empty", 4, 64, 0, BW))


def test_stale_quota_is_adopted_and_restored():
    rig = Rig([0.0])
    rig.cpu[0].quota = 0.5  # throttled by a forgotten state (or a restart)
    rig.run(10)
    assert rig.quotas() == [pytest.approx(0.7)]
    rig.run(20)
    assert rig.quotas() == [1.0]


def test_gang_cpu_job_is_restored_only_when_no_node_holds_it():
    book = ThroughputHistory()
    elim = ContentionEliminator(book)
    a, b = Node(0, "a", 4, 64, 0, 0.0), Node(1, "b", 4, 64, 0, 0.0)  # no MBM: no gate
    cpu = Job(9, "gang", 0.0, 0, 8, 0, 2, 1e9)
    cpu.placement = [a, b]
    da, db = (Job(i, f"d{i}", 0.0, 1, 4, 0, 1, 1e9) for i in range(2))
    for node, d in ((a, da), (b, db)):
        node.jobs[d] = None
        node.jobs[cpu] = None
        book.set_reference(d, REF)
    # Node a sees severe contention; node b is fine.
    for t in (10.0, 20.0):
        book.add(da, t, 70.0 if t > 10 else 100.0)
        book.add(db, t, 100.0)
        for node in (a, b):
            for act in elim.control(node, t):
                cpu.quota = act.quota
    assert cpu.quota == 0.1
    for i in range(3, 40):
        t = 10.0 * i
        book.add(da, t, 70.0)
        book.add(db, t, 100.0)
        for act in elim.control(b, t):  # b must not undo what a still needs
            cpu.quota = act.quota
    assert cpu.quota == 0.1


# ------------------------------------------------------------------ bandwidth
@pytest.mark.parametrize(("dnn_bw", "throttled"), [(40.0, True), (30.0, False)])
def test_throttles_only_past_the_papers_bandwidth_gate(dnn_bw, throttled):
    # CPU jobs 40 GB/s + training job 40 (share 0.80) or 30 (0.70); ratio 0.93 either way:
    # below 75% of the node's bandwidth the drop comes from elsewhere (the paper's rule).
    rig = Rig([20.0, 20.0], lambda share: 1.075, dnn_bw=dnn_bw, reports_bw=True)
    rig.run(30)
    assert bool(rig.changes) is throttled
    if not throttled:
        assert rig.elim.stats()["nodes_tracked"] == 0  # nothing kept for a node below the gate
        assert rig.elim.stats()["ticks"] == 30


def test_a_node_that_crosses_the_gate_is_judged_on_fresh_samples():
    # Below the gate the node is not watched (a driver need not sample it); once it
    # passes, the samples from before describe another state: a full window of new
    # ones comes first.
    rig = Rig([20.0, 20.0], lambda share: 1.075, dnn_bw=30.0, reports_bw=True)
    rig.run(10)
    assert not rig.elim.watching(rig.node) and rig.changes == []
    rig.dnn_bw = 40.0  # share 0.80 from the next tick on
    rig.run(10)
    assert rig.elim.watching(rig.node)
    assert first_change(rig) == 13  # tick 11 starts the state; 12 and 13 fill the window


def test_no_fast_path_below_the_gate_while_a_step_is_judged():
    # Past the gate a step is taken; it brings the node below the gate; a severe drop
    # while that step is judged does not send the CPU jobs to the floor.
    rig = Rig([30.0], linear(0.5), dnn_bw=50.0, reports_bw=True)
    rig.run(2)
    assert rig.quotas() == [0.75]  # node now 72.5% of its bandwidth
    rig.slowdown = lambda share: 1.5
    rig.run(2)
    assert min(rig.quotas()) >= 0.75
    assert "fast_path" not in [d["action"] for d in rig.elim.decisions]


def test_a_severe_relapse_below_the_gate_undoes_the_restore():
    # Throttled at 75% of the bus, restored to 0.85 (70.5%, below the gate); a severe
    # drop then goes back to the quota that was fine, as a mild one would.
    rig = Rig([30.0], linear(0.5), dnn_bw=45.0, reports_bw=True)
    rig.run(3)
    assert rig.quotas() == [0.75]
    rig.slowdown = lambda share: 1.0
    while rig.quotas() == [0.75] and rig.tick < 60:
        rig.step()
    assert rig.quotas() == [0.85]
    rig.slowdown = lambda share: 1.5
    rig.run(3)
    assert rig.quotas() == [0.75]
    assert [d["action"] for d in rig.elim.decisions][-1] == "relapse"


def test_severe_drop_below_the_gate_is_left_alone():
    rig = Rig([20.0], lambda share: 1.5, dnn_bw=20.0, reports_bw=True)  # share 0.40
    rig.run(20)
    assert rig.changes == []


def test_a_throttle_is_still_judged_and_restored_below_the_gate():
    # Share 0.80 until the CPU jobs are cut, then below the gate: the chain stops there,
    # the throttle that helped is kept, and quotas come back once the drop is gone.
    rig = Rig([30.0], linear(0.5), dnn_bw=50.0, reports_bw=True)
    rig.run(3)
    assert rig.quotas() == [0.75]  # one step: 50 + 22.5 GB/s = 72.5% < 75%, no second step
    rig.run(10)
    assert rig.quotas() == [0.75]
    rig.slowdown = lambda share: 1.0
    rig.run(60)
    assert rig.quotas() == [1.0]


@pytest.mark.parametrize(("dnn_bw", "throttled"), [(45.0, True), (0.0, False)])
def test_bandwidth_early_warning(dnn_bw, throttled):
    # CPU job 45 GB/s + training job: share 0.9 (hot) or 0.45; ratio 0.962 either way.
    rig = Rig([45.0], lambda share: 1.04, dnn_bw=dnn_bw, reports_bw=True)
    rig.run(10)
    assert bool(rig.changes) is throttled
    if throttled:
        assert rig.changes[0][0] == 2
        assert rig.elim.decisions[0]["reason"]["bw_share"] == pytest.approx(0.9)


def test_no_restore_onto_a_saturated_bus():
    rig = Rig([40.0], linear(1.0), dnn_bw=80.0, reports_bw=True)
    rig.step()
    assert rig.quotas() == [0.1]
    rig.slowdown = lambda share: 1.0  # healthy again, but 80 + 4 -> 8 GB/s would exceed 85%
    rig.run(40)
    assert rig.quotas() == [0.1]
    rig.dnn_bw = 50.0
    rig.run(10)
    assert rig.quotas()[0] > 0.1


def test_stats_and_decisions_are_json():
    rig = Rig([40.0], linear(1.0))
    rig.run(50)
    stats = rig.elim.stats()
    assert set(stats) >= {
        "ticks",
        "throttle_steps",
        "fast_paths",
        "restores",
        "reverts",
        "nodes_throttled_now",
    }
    assert stats["ticks"] == 50
    d = rig.elim.decisions[0]
    assert set(d) == {"time", "node", "action", "jobs", "quotas", "reason"}
    json.dumps([stats, list(rig.elim.decisions)])


def test_held_jobs_go_back_to_full_quota_once_the_bus_stays_below_the_gate_without_them():
    # Throttled past the gate (CPU 30 + training 50 GB/s = 80%); then the training job's
    # own traffic falls to 30 GB/s: at full quota the node would draw 60%, below the gate,
    # where no throttle may start. The held job gets its quota back at once, not after
    # the healthy ticks and back-offs of a restore, even while the drop lasts.
    rig = Rig([30.0], linear(0.5), dnn_bw=50.0, reports_bw=True)
    rig.run(3)
    assert rig.quotas() == [0.75]
    rig.dnn_bw = 30.0
    rig.step()
    assert rig.quotas() == [1.0]
    assert rig.elim.decisions[-1]["action"] == "gate_release"
    assert rig.elim.stats()["gate_releases"] == 1
    rig.run(20)  # the drop goes on, but below the gate it is not the CPU job's doing
    assert rig.quotas() == [1.0] and rig.elim.stats()["gate_releases"] == 1


def test_no_gate_release_while_full_quotas_would_pass_the_gate():
    # CPU 30 + training 46 GB/s: at full quota 76%, just past the gate: held.
    rig = Rig([30.0], linear(0.5), dnn_bw=46.0, reports_bw=True)
    rig.run(3)
    assert rig.quotas() == [0.75]
    rig.run(5)
    assert rig.quotas() == [0.75] and rig.elim.stats()["gate_releases"] == 0


# ------------------------------------------------------------------ solo reference
def contended_reference(rig: Rig) -> float:
    """The reference a job gets when its co-runner came first: measured under it."""
    ref = REF * rig.ratio()
    for j in rig.dnn:
        rig.book.set_reference(j, ref, solo=False)
    return ref


def test_a_co_runner_that_came_first_is_caught_by_a_solo_probe():
    # The hog runs from the start (share 0.5, slowdown 1.125): the reference the
    # allocator took beside it is 88.9, and every sample matches it.
    rig = Rig([50.0], linear(0.25), referenced=False)
    ref = contended_reference(rig)
    rig.step()
    # The first tick probes: every CPU job to the floor, for the job's next samples.
    assert rig.quotas() == [0.1] and rig.elim.decisions[-1]["action"] == "solo_probe"
    rig.run(6)
    ends = [d for d in rig.elim.decisions if d["action"] == "probe_end"]
    assert len(ends) == 1
    # The probe's speed (share 0.05 -> 97.6) is the reference now, a solo one.
    solo = rig.book.reference(rig.dnn[0])
    assert solo == pytest.approx(REF / 1.0125) and solo > ref
    assert rig.book.reference_solo(rig.dnn[0])
    assert rig.book.solo_speed(rig.dnn[0], 4) == solo
    # Judged against it, the hog is throttled (and the probe's quotas went back first).
    rig.run(20)
    assert rig.quotas()[0] < 1.0 and rig.elim.stats()["throttle_steps"] >= 1
    stats = rig.elim.stats()
    assert stats["solo_probes"] == 1 and stats["probe_timeouts"] == 0
    assert 3 <= stats["probe_ticks"] <= rig.cfg.probe_ticks


def test_a_probe_is_bounded_and_runs_once_per_reference():
    rig = Rig([0.0], linear(0.25), referenced=False)
    contended_reference(rig)
    dnn = rig.dnn[0]
    rig.step()
    assert rig.quotas() == [0.1]
    rig.remove(dnn)  # no samples come: the probe ends after probe_ticks ticks
    rig.node.jobs[dnn] = None
    rig.dnn = []
    rig.run(rig.cfg.probe_ticks)
    assert rig.quotas() == [1.0]  # put back
    stats = rig.elim.stats()
    assert stats["probe_ticks"] == rig.cfg.probe_ticks and stats["probe_timeouts"] == 1
    rig.run(20)  # not probed again: its reference is taken as it was
    assert rig.elim.stats()["solo_probes"] == 1 and rig.quotas() == [1.0]


def test_no_probe_for_a_solo_reference_nor_with_probes_off():
    rig = Rig([0.0], linear(0.25))  # its reference was measured alone
    rig.run(10)
    assert rig.elim.stats()["solo_probes"] == 0 and rig.changes == []
    off = Rig([50.0], linear(0.25), referenced=False, config=EliminatorConfig(probe_ticks=0))
    contended_reference(off)
    off.run(20)
    # Without probes the contended reference hides the hog for good: nothing happens.
    assert off.changes == [] and off.elim.stats()["solo_probes"] == 0


def test_no_probe_below_the_bandwidth_gate():
    rig = Rig([10.0], linear(0.25), referenced=False, reports_bw=True)
    contended_reference(rig)
    rig.run(10)
    assert rig.changes == [] and rig.elim.stats()["solo_probes"] == 0
    assert rig.elim.at_rest(rig.node)
    rig.demand[rig.cpu[0]] = 90.0  # above the gate: now it is probed
    rig.run(1)
    assert rig.elim.stats()["solo_probes"] == 1 and not rig.elim.at_rest(rig.node)


def test_probe_config_is_checked():
    with pytest.raises(ValueError, match="probe_ticks"):
        EliminatorConfig(probe_ticks=-1)


# ------------------------------------------------------------------ cost per victim
class Forger:
    """A "training job" whose progress is made up: it claims 30% of its reference
    while the CPU job runs at full quota and full speed while it is throttled (as if
    the throttle helped), so every judgement the eliminator makes passes."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        for j in rig.cpu:
            j.user = "victim"  # another user's CPU job
        rig.slowdown = lambda share: 1.0  # nothing real: the CPU job hurts nobody
        rig.extra = 1.0

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            low = all(j.quota < 1.0 for j in self.rig.cpu)
            self.rig.extra = 1.0 if low else 1 / 0.3
            self.rig.step()


def lost_core_s(rig: Rig) -> float:
    """The CPU job's core-seconds under full quota, from the changes the rig applied."""
    quota, last, lost = 1.0, 0, 0.0
    for tick, _, q in rig.changes + [(rig.tick, "", 1.0)]:
        lost += 4 * (1.0 - quota) * (tick - last) * rig.cfg.period_s
        quota, last = q, tick
    return lost


def test_forged_progress_costs_a_victim_at_most_its_allowance():
    cfg = EliminatorConfig(victim_share=0.25)  # and 60 core-s of grace
    rig = Rig([0.0], config=cfg)
    Forger(rig).run(200)  # 2000 s
    allowed = cfg.victim_share * 4 * 2000 + cfg.victim_grace_core_s
    lost = lost_core_s(rig)
    assert rig.elim.stats()["budget_releases"] >= 1
    # One tick of overshoot at most (a release happens at the tick the allowance is passed).
    assert lost <= allowed + 4 * cfg.period_s
    assert lost >= 0.5 * allowed  # the forger did get throttles: the bound is what held them
    # Without the bound the forger takes far more (its restores relapse, ever slower):
    # as it may from its own user's CPU jobs.
    free = Rig([0.0], config=EliminatorConfig(victim_share=0.25))
    forger = Forger(free)
    free.cpu[0].user = free.dnn[0].user
    forger.run(200)
    assert lost_core_s(free) > 1.5 * lost and free.elim.stats()["budget_releases"] == 0


def test_a_node_with_bandwidth_counters_needs_them_to_agree():
    # Counters below the gate: the forger's claim alone throttles nobody.
    rig = Rig([10.0], reports_bw=True)
    Forger(rig).run(50)
    assert rig.changes == [] and rig.elim.stats()["budget_releases"] == 0


def test_a_node_total_alone_leaves_the_victim_bound_in_force():
    """A node agent's counters give the bus's total only (bw_per_job False), training
    jobs' own traffic in it: the forger is bounded as on a node without counters, and
    the total, below the gate as above, neither stops nor starts a throttle."""
    cfg = EliminatorConfig(victim_share=0.25)
    runs = []
    for used in (10.0, 90.0, None):  # a calm bus, a busy one, no counters
        rig = Rig([used or 0.0], config=cfg, reports_bw=used is not None)
        rig.node.bw_per_job = False
        Forger(rig).run(200)
        runs.append((rig.changes, rig.elim.stats()["budget_releases"]))
    assert runs[0] == runs[1] == runs[2] and runs[0][1] >= 1


def test_a_released_victim_is_throttled_again_once_its_allowance_catches_up():
    cfg = EliminatorConfig(victim_grace_core_s=0.0, victim_share=0.5)
    rig = Rig([0.0], config=cfg)
    Forger(rig).run(300)
    releases = [d for d in rig.elim.decisions if d["action"] == "budget_release"]
    throttles = [d for d in rig.elim.decisions if d["action"] in ("throttle", "fast_path")]
    assert len(releases) >= 2 and throttles[-1]["time"] > releases[0]["time"]
    assert lost_core_s(rig) <= 0.5 * 4 * 3000 + 4 * cfg.period_s


def throttled_blocks(rig: Rig) -> list[tuple[float, float]]:
    """Each unbroken span of the CPU job below full quota: (seconds, core-s lost)."""
    blocks, quota, last, start, lost = [], 1.0, 0, None, 0.0
    for tick, _, q in rig.changes + [(rig.tick, "", 1.0)]:
        lost += 4 * (1.0 - quota) * (tick - last) * rig.cfg.period_s
        if quota < 1.0 and q >= 1.0 and start is not None:
            blocks.append(((tick - start) * rig.cfg.period_s, lost))
            start = None
        if quota >= 1.0 and q < 1.0:
            start, lost = tick, 0.0
        quota, last = q, tick
    return blocks


def test_an_allowance_banked_over_a_quiet_spell_is_not_spent_in_one_block():
    """The forger first reports honestly beside the victim for 2000 s (its allowance
    since first seen grows by 2000 core-s), then forges: no throttle spends that bank
    in one block; each costs at most the grace plus the share of its own length."""
    cfg = EliminatorConfig(victim_share=0.25)  # and 60 core-s of grace
    rig = Rig([0.0], config=cfg)
    forger = Forger(rig)
    rig.run(200)  # honest: nothing to throttle
    assert rig.changes == []
    forger.run(200)
    blocks = throttled_blocks(rig)
    assert blocks and rig.elim.stats()["budget_releases"] >= 1
    for seconds, lost in blocks:
        assert lost <= cfg.victim_grace_core_s + cfg.victim_share * 4 * seconds + 4 * cfg.period_s
    longest = max(b[0] for b in blocks)
    # Lost at up to 4 x 0.9 core-s/s, refilled at 4 x 0.25: the grace lasts ~23 s.
    assert longest <= cfg.victim_grace_core_s / (4 * (0.9 - 0.25)) + 2 * cfg.period_s, blocks


def test_victim_bound_config_is_checked():
    with pytest.raises(ValueError, match="victim_share"):
        EliminatorConfig(victim_share=0.0)
    with pytest.raises(ValueError, match="victim_grace_core_s"):
        EliminatorConfig(victim_grace_core_s=-1.0)


def test_a_reference_retaken_mid_throttle_is_probed_not_stuck():
    # Throttled (a step being judged), then the allocator re-measures the job beside
    # the CPU job: its new reference is not solo. The probe takes over the judgement.
    rig = Rig([50.0], linear(0.25))
    rig.run(2)
    assert rig.quotas() == [0.75]
    contended_reference(rig)
    rig.run(30)
    stats = rig.elim.stats()
    assert stats["solo_probes"] == 1 and rig.book.reference_solo(rig.dnn[0])
    assert any(d["action"] == "probe_end" for d in rig.elim.decisions)


def test_a_probe_leaves_a_job_another_node_holds_alone():
    rig = Rig([50.0], linear(0.25), referenced=False)
    other = Node(1, "g1", 4, 64, 0, 0.0)
    job = rig.cpu[0]
    job.quota = 0.5
    rig.elim._holders[job] = {other}  # held low by g1 (a gang CPU job)
    contended_reference(rig)
    rig.step()
    assert job.quota == 0.5  # not lowered by g0's probe
    rig.run(8)
    assert rig.elim.stats()["solo_probes"] == 1 and job.quota == 0.5


def test_a_victim_is_not_billed_for_time_its_own_users_job_held_it():
    cfg = EliminatorConfig(victim_share=0.25)
    rig = Rig([0.0], config=cfg)
    forger = Forger(rig)
    forger.run(1)  # seen beside another user's training job: its account opens
    rig.cpu[0].user = rig.dnn[0].user  # then only its own user's job: no bill
    forger.run(300)
    assert min(q for _, _, q in rig.changes) < 0.5  # held low meanwhile
    assert rig.elim.stats()["budget_releases"] == 0
    rig.cpu[0].user = "victim"  # now the training job is another user's
    rig.cpu[0].quota = 0.1  # held low when it becomes billable
    rig.step()
    # Billed one tick at most (4 cores x 10 s), not the 3000 s its own user held it.
    assert rig.elim._cost[rig.cpu[0]][1] <= 4 * 0.9 * rig.cfg.period_s + 1e-6
    assert not rig.elim.at_rest(rig.node)  # its allowance must be watched
