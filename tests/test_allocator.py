"""The adaptive CPU allocator against an emulated driver: no simulator.

Each window the driver computes a job's true throughput from a synthetic curve,
``rate * min(1, c / c_opt)`` times ``1 + noise * N(0, 1)``, hands it to the
allocator and applies the ``SetCores`` it gets back the way the engine does:
growth only into free cores, refused otherwise.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from coda.policy.allocator import (
    AdaptiveAllocator,
    AllocatorConfig,
    LearnedProfiles,
    free_room,
)
from coda.policy.feedback import ThroughputHistory
from coda.policy.framework import JobControl, SetCores
from coda.policy.state import Job, Node

TOL = 0.05
# At 10% noise per window an at-peak level is only half a window's std above the
# threshold (tolerance 5%): calling it right ~95% of the time takes ~30 windows,
# so the default max_windows=8 (meant for the few % of real meters) is too few.
NOISY = AllocatorConfig(max_windows=48, peak_windows=24)
MID = AllocatorConfig(max_windows=16, peak_windows=8)  # for the simulator's default 5%


def answer(c_opt: float) -> int:
    """The smallest core count within tolerance of peak on the synthetic curve."""
    return next(c for c in range(1, 1000) if min(1.0, c / c_opt) >= 1 - TOL)


class Driver:
    """One running DNN job on its node(s); one call of ``window`` = one sample."""

    def __init__(
        self,
        alloc: AdaptiveAllocator,
        c_opt: float,
        request: int,
        *,
        seed: int = 0,
        noise: float = 0.1,
        node_cores: int = 32,
        gpus: int = 1,
        nodes: int = 1,
        model: str = "ResNet50",
        refuse_growth: bool = False,
        greedy_neighbour: bool = False,
    ) -> None:
        self.alloc, self.c_opt, self.rate, self.noise = alloc, c_opt, 100.0, noise
        self.rng = np.random.default_rng(seed)
        self.nodes = [Node(i, f"n{i}", 4, node_cores, 0, 100.0) for i in range(nodes)]
        self.job = Job(0, "j0", 0.0, gpus * nodes, request * nodes, 0, nodes, 1e9, model=model)
        self.refuse_growth = refuse_growth
        self.greedy_neighbour = greedy_neighbour  # takes every core the job gives up
        self.t = 0.0
        self.set_cores = 0  # SetCores applied or refused
        self.grow_asks = 0
        self.refused = 0
        self.max_asked = 0
        cores = alloc.cores_per_node(self.job)
        self.job.placement = list(self.nodes)
        self.job.cores_pn = cores
        for n in self.nodes:
            n.free_cores -= cores
            n.jobs[self.job] = None
        self.apply(alloc.on_start(self.job, self.t))

    def apply(self, actions: list) -> None:
        for a in actions:
            assert isinstance(a, SetCores) and a.job is self.job
            self.set_cores += 1
            self.max_asked = max(self.max_asked, a.cores_pn)
            delta = a.cores_pn - self.job.cores_pn
            if delta > 0:
                self.grow_asks += 1
                if self.refuse_growth or any(n.free_cores < delta for n in self.nodes):
                    self.refused += 1
                    continue
            for n in self.nodes:
                n.free_cores -= delta
                if self.greedy_neighbour:
                    n.free_cores = 0
            self.job.cores_pn = a.cores_pn

    def window(self) -> None:
        self.t += 10.0
        speed = min(1.0, self.job.cores_pn / self.c_opt)
        x = self.rate * speed * (1.0 + self.noise * self.rng.standard_normal())
        self.apply(self.alloc.on_sample(self.job, self.t, x))

    def converge(self, limit: int = 2000) -> int:
        """Run windows until the allocator is done; returns the windows it took."""
        for w in range(limit):
            if self.alloc.state(self.job) == "converged":
                return w
            self.window()
        raise AssertionError(f"no convergence in {limit} windows: {self.alloc.state(self.job)}")

    def run(self, n: int) -> None:
        for _ in range(n):
            self.window()


def search_once(cfg: AllocatorConfig, c_opt: float, request: int, seed: int, noise: float):
    alloc = AdaptiveAllocator(ThroughputHistory(), cfg)
    d = Driver(alloc, c_opt, request, seed=seed, noise=noise)
    d.converge()
    return d.job.cores_pn, alloc.stats()


def probe_bound(c_opt: float, request: int) -> int:
    return 2 * math.ceil(math.log2(max(request, c_opt, 2))) + 3


def window_bound(cfg: AllocatorConfig, probes: int) -> int:
    return cfg.peak_windows + probes * cfg.max_windows + cfg.reference_windows


# (c_opt, request): slimming, growth (request < c_opt), c_opt = 1, large c_opt.
PAIRS = [(2, 8), (6, 4), (1, 4), (12, 16), (12, 4)]


@pytest.mark.parametrize(("c_opt", "req"), PAIRS)
@pytest.mark.parametrize(
    ("cfg", "noise", "seeds"),
    [(NOISY, 0.10, 200), (MID, 0.05, 100), (AllocatorConfig(), 0.03, 100)],
    ids=["noise10", "noise5", "noise3-defaults"],
)
def test_converges_exactly_in_90pct_and_within_one_always_probes_le_2log2_plus_3(
    c_opt: int, req: int, cfg: AllocatorConfig, noise: float, seeds: int
) -> None:
    """Final cores: exact in >= 90% of seeds, within +-1 in all. Cost per search:
    probes <= 2 * ceil(log2(max(request, c_opt))) + 3 and
    windows <= peak_windows + probes * max_windows + reference_windows."""
    best = answer(c_opt)
    finals = []
    for seed in range(seeds):
        cores, st = search_once(cfg, c_opt, req, seed, noise)
        finals.append(cores)
        assert st["converged"] == 1 and st["searches"] == 1
        assert st["probes"] <= probe_bound(c_opt, req), (seed, st)
        assert st["windows"] <= window_bound(cfg, st["probes"]), (seed, st)
    finals = np.array(finals)
    assert np.all(np.abs(finals - best) <= 1), sorted(set(finals.tolist()))
    assert np.mean(finals == best) >= 0.9, np.mean(finals == best)


@pytest.mark.parametrize(("cfg", "noise"), [(NOISY, 0.10), (AllocatorConfig(), 0.03)])
def test_no_core_changes_after_convergence(cfg: AllocatorConfig, noise: float) -> None:
    for seed in range(20):
        alloc = AdaptiveAllocator(ThroughputHistory(), cfg)
        d = Driver(alloc, 3, 8, seed=seed, noise=noise)
        d.converge()
        before = d.set_cores
        assert not alloc.wants_samples(d.job)
        d.run(500)
        assert d.set_cores == before and alloc.state(d.job) == "converged"
        assert alloc.stats()["retunes"] == 0


def test_reference_is_measured_at_the_chosen_level() -> None:
    book = ThroughputHistory()
    alloc = AdaptiveAllocator(book)
    d = Driver(alloc, 4, 8, noise=0.02)
    d.converge()
    assert d.job.cores_pn == 4
    assert book.reference(d.job) == pytest.approx(100.0, rel=0.05)
    assert alloc.stats()["learned"] == {"ResNet50/1g/1n": [4, 1]}


def test_learned_shapes_start_at_the_learned_count_and_skip_probing() -> None:
    cfg = AllocatorConfig(verify_every=4)
    alloc = AdaptiveAllocator(ThroughputHistory(), cfg)
    probes = []
    for i in range(12):
        before = alloc.stats()["probes"]
        job_start = alloc.cores_per_node(Job(i, f"j{i}", 0.0, 1, 8, 0, 1, 1.0, model="VGG16"))
        d = Driver(alloc, 3, 8, seed=i, noise=0.03, model="VGG16")
        assert d.job.cores_pn == job_start
        d.converge()
        assert d.job.cores_pn == 3
        probes.append(alloc.stats()["probes"] - before)
        alloc.on_finish(d.job, d.t)
    # Job 0 searches from the request; jobs 1-2 verify around the learned value
    # (c-1, c+1); from job 3 on the shape is trusted: start at 3, no probes,
    # except every 4th trusted start (jobs 6 and 10), which verifies.
    assert all(p > 0 for p in probes[:3])
    assert [i for i, p in enumerate(probes) if p > 0] == [0, 1, 2, 6, 10]
    assert all(p <= 2 for p in probes[1:])
    st = alloc.stats()
    assert st["verifications"] == 4 and st["reference_only"] == 7
    assert st["learned"]["VGG16/1g/1n"] == [3, 5]  # trusted jobs add nothing; verifiers do
    assert alloc.state(d.job) == "idle" and json.loads(json.dumps(st)) == st


@pytest.mark.parametrize("learned", [5, 2])
def test_verification_corrects_a_wrong_learned_value(learned: int) -> None:
    """Learned too high: c-1 is still at peak, so it searches down. Learned too low:
    c-1 is short and c+1 beats c by more than the tolerance, so it searches up."""
    lp = LearnedProfiles()
    for _ in range(3):
        lp.record(("ResNet50", 1, 1), learned)
    alloc = AdaptiveAllocator(ThroughputHistory(), AllocatorConfig(verify_every=1), lp)
    d = Driver(alloc, 3, 8, noise=0.03)
    assert d.job.cores_pn == learned and alloc.state(d.job) == "measuring"
    d.run(4)
    assert alloc.state(d.job) == "verifying-down"
    d.converge()
    assert d.job.cores_pn == 3 and alloc.stats()["verifications"] == 1
    assert lp.count(("ResNet50", 1, 1)) == 4


def test_cores_changed_behind_its_back_restart_the_search() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 3, 8, noise=0.03)
    d.converge()
    d.job.cores_pn = 10  # someone else resized the job
    d.nodes[0].free_cores -= 7
    d.window()
    assert alloc.state(d.job) == "measuring" and alloc.stats()["external"] == 1
    d.converge()
    assert d.job.cores_pn == 3


def test_a_learned_count_moves_only_when_a_majority_has_moved() -> None:
    """Jobs of one shape settling on 1 and 2 cores in turn (a noisy machine) do not
    flip the count granted to the next job; a majority elsewhere moves it."""
    lp = LearnedProfiles()
    key = ("tiny", 1, 1)
    granted = []
    for c in (1, 2, 1, 2, 1, 2):
        lp.record(key, c)
        granted.append(lp.cores(key))
    assert granted == [1, 1, 1, 1, 1, 1]  # the upper median alone: 1, 2, 1, 2, 1, 2
    for c in (3,) * 7:
        lp.record(key, c)
        granted.append(lp.cores(key))
    # One 3 more and 1 is no median; 2 stays until 3 is the median of all of them.
    assert granted[6:] == [2, 2, 2, 2, 2, 2, 3]
    lp.record(key, 2)  # 2 is a median again, but 3 stays (it still is one)
    back = LearnedProfiles.from_dict(json.loads(json.dumps(lp.to_dict())))
    assert lp.cores(key) == back.cores(key) == 3  # the granted count is kept on disk
    # A granted count no job settled on (a file edited by hand) is not taken.
    made_up = {
        "schema": "coda-learned-profiles/1",
        "profiles": [
            {"model": "m", "gpus_per_node": 1, "nodes": 1, "cores": [[1, 1], [4, 1]], "granted": 3}
        ],
    }
    assert LearnedProfiles.from_dict(made_up).cores(("m", 1, 1)) == 4  # fmt: skip


def test_only_what_loads_again_is_recorded() -> None:
    from coda.policy.learned_profiles import MAX_CORES

    lp = LearnedProfiles()
    for bad in (0, MAX_CORES + 1, 10**20):
        with pytest.raises(ValueError, match="cores must be"):
            lp.record(("m", 1, 1), bad)
    lp.record(("m", 1, 1), MAX_CORES)
    assert (
        LearnedProfiles.from_dict(json.loads(json.dumps(lp.to_dict()))).cores(("m", 1, 1))
        == MAX_CORES
    )


def test_learned_profiles_round_trip_and_median() -> None:
    lp = LearnedProfiles(confident_after=2)
    for c in (3, 5, 4, 4):
        lp.record(("AlexNet", 2, 1), c)
    lp.record(("VGG16", 1, 2), 2)
    assert lp.cores(("AlexNet", 2, 1)) == 4 and lp.cores(("nope", 1, 1)) is None
    assert lp.confident(("AlexNet", 2, 1)) and not lp.confident(("VGG16", 1, 2))
    lp.record(("VGG16", 1, 2), 6)
    assert lp.cores(("VGG16", 1, 2)) == 2  # [2, 6]: 2 is still a median, it stays
    d = json.loads(json.dumps(lp.to_dict()))
    assert d["schema"] == "coda-learned-profiles/1"
    back = LearnedProfiles.from_dict(d)
    assert back.to_dict() == lp.to_dict() and back.shapes() == lp.shapes()
    alloc = AdaptiveAllocator(ThroughputHistory(), learned=back)
    job = Job(0, "a", 0.0, 2, 16, 0, 1, 1.0, model="AlexNet")
    assert alloc.cores_per_node(job) == 4


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        {"schema": "coda-learned-profiles/2", "profiles": []},
        {"schema": "coda-learned-profiles/1"},
        {"schema": "coda-learned-profiles/1", "profiles": [{"model": "X"}]},
        {"schema": "coda-learned-profiles/1", "confident_after": 0, "profiles": []},
        {
            "schema": "coda-learned-profiles/1",
            "profiles": [{"model": "X", "gpus_per_node": 1, "nodes": 1, "cores": [[0, 1]]}],
        },
        # No counts, a count twice, a count no machine has, a shape twice.
        {
            "schema": "coda-learned-profiles/1",
            "profiles": [{"model": "X", "gpus_per_node": 1, "nodes": 1, "cores": []}],
        },
        {
            "schema": "coda-learned-profiles/1",
            "profiles": [{"model": "X", "gpus_per_node": 1, "nodes": 1, "cores": [[2, 1], [2, 3]]}],
        },
        {
            "schema": "coda-learned-profiles/1",
            "profiles": [{"model": "X", "gpus_per_node": 1, "nodes": 1, "cores": [[10**30, 1]]}],
        },
        {
            "schema": "coda-learned-profiles/1",
            "profiles": [
                {"model": "X", "gpus_per_node": 1, "nodes": 1, "cores": [[2, 1]]},
                {"model": "X", "gpus_per_node": 1, "nodes": 1, "cores": [[3, 1]]},
            ],
        },  # fmt: skip
        {
            "schema": "coda-learned-profiles/1",
            "profiles": [{"model": "X", "gpus_per_node": 1, "nodes": 1, "cores": [[2, True]]}],
        },
        {
            "schema": "coda-learned-profiles/1",
            "profiles": [{"model": 3, "gpus_per_node": 1, "nodes": 1, "cores": [[2, 1]]}],
        },
        {
            "schema": "coda-learned-profiles/1",
            "profiles": [{"model": "X", "gpus_per_node": 1, "nodes": 1, "cores": "2"}],
        },
    ],
)
def test_malformed_learned_profiles_raise_value_error(bad) -> None:
    with pytest.raises(ValueError, match="learned profiles"):
        LearnedProfiles.from_dict(bad)


def test_persistent_drop_retunes_to_the_new_optimum() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 3, 8, noise=0.03)
    d.converge()
    assert d.job.cores_pn == 3
    d.run(30)  # past the cool-down
    d.c_opt = 6  # the job now needs twice the cores: throughput halves at 3
    d.window()
    assert alloc.state(d.job) == "converged"  # one window is not a shift
    d.run(5)
    assert alloc.state(d.job) != "converged" and alloc.wants_samples(d.job)
    d.converge()
    assert d.job.cores_pn == 6
    assert alloc.stats()["retunes"] == 1
    assert alloc.book.reference(d.job) == pytest.approx(100.0, rel=0.05)
    before = d.set_cores
    d.run(300)
    assert d.set_cores == before


def test_rise_retunes_downward() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 6, 8, noise=0.03)
    d.converge()
    assert d.job.cores_pn == 6
    d.run(30)
    d.rate, d.c_opt = 150.0, 3  # faster, and needs fewer cores
    d.run(5)
    assert alloc.state(d.job) != "converged"
    d.converge()
    assert d.job.cores_pn == 3 and alloc.stats()["retunes"] == 1


def test_drop_with_a_cpu_job_on_the_node_does_not_retune() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 3, 8, noise=0.03)
    d.converge()
    cpu = Job(1, "cpu", 0.0, 0, 4, 0, 1, 1.0)
    d.nodes[0].jobs[cpu] = None
    d.run(30)
    before = d.set_cores
    d.c_opt = 6
    d.run(200)
    assert d.set_cores == before and alloc.state(d.job) == "converged"
    st = alloc.stats()
    assert st["retunes"] == 0 and st["shifts_ignored"] > 0


def test_cooldown_delays_a_retune() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory(), AllocatorConfig(cooldown_windows=20))
    d = Driver(alloc, 3, 8, noise=0.03)
    d.converge()
    d.c_opt = 6
    d.run(10)
    assert alloc.state(d.job) == "converged"
    d.run(15)
    assert alloc.state(d.job) != "converged"


def test_resize_retunes_from_the_current_cores() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 3, 8, noise=0.03)
    d.converge()
    # The job gets a second GPU: it now needs 6 cores.
    d.job.gpus, d.job.gpus_pn, d.c_opt = 2, 2, 6
    assert alloc.on_resize(d.job, d.t) == []
    assert alloc.state(d.job) == "measuring"
    d.converge()
    assert d.job.cores_pn == 6
    st = alloc.stats()
    assert st["retunes"] == 1 and st["learned"]["ResNet50/2g/1n"] == [6, 1]


def test_no_free_cores_means_no_growth_beyond_what_it_holds() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 6, 2, noise=0.03)
    d.nodes[0].free_cores = 0  # someone took the rest of the node
    d.converge()
    d.run(300)
    assert d.max_asked <= 2 and d.refused == 0 and d.job.cores_pn == 2
    assert alloc.stats()["learned"] == {}  # held back by the node: nothing learned


def test_cores_cpu_jobs_hold_are_no_room_to_grow() -> None:
    # Same node, but the 6 missing cores are a CPU job's: they are reclaimed for a
    # DNN job's start only, so the allocator never probes into them.
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 6, 2, noise=0.03)
    d.nodes[0].free_cores = 0
    d.nodes[0].cpu_job_cores = 6
    d.converge()
    d.run(300)
    assert d.max_asked <= 2 and d.refused == 0 and d.job.cores_pn == 2
    assert alloc.stats()["learned"] == {}  # capped by the node, not the shape's answer


def test_free_room_counts_free_cores_only() -> None:
    a, b = Node(0, "a", 1, 16, 0, 0.0), Node(1, "b", 1, 16, 0, 0.0)
    a.free_cores, a.cpu_job_cores = 3, 10
    b.free_cores, b.cpu_job_cores = 5, 0
    assert free_room([a, b]) == 3
    assert free_room([]) == 0


def test_cores_taken_by_a_neighbour_hold_the_job_until_they_come_back() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 6, 8, noise=0.03, greedy_neighbour=True)
    d.nodes[0].free_cores = 0
    d.converge()
    d.run(200)
    assert d.refused == 0  # it never asks for cores the node does not have
    assert d.job.cores_pn < 6 and alloc.state(d.job) == "converged"
    assert alloc.wants_samples(d.job)  # held short: it keeps counting windows to retry
    d.greedy_neighbour = False
    d.nodes[0].free_cores = 32 - d.job.cores_pn  # the neighbour leaves
    d.run(300)  # the next back-off retry resumes the search
    assert d.job.cores_pn == 6 and alloc.state(d.job) == "converged" and d.refused == 0
    assert not alloc.wants_samples(d.job)


def test_refused_growth_does_not_loop_and_recovers_when_allowed() -> None:
    """A driver that refuses every growth (its free cores go to others first): the
    job converges at what it holds; asks to climb back are rare (doubling back-off);
    once growth is allowed again it climbs back to the answer."""
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 6, 8, noise=0.03, refuse_growth=True)
    d.converge()
    converged_asks = d.grow_asks
    assert alloc.state(d.job) == "converged" and d.job.cores_pn < 6
    assert 1 <= converged_asks <= 2 and d.refused == d.grow_asks
    d.run(600)  # back-off: retries after 20, 40, 80, 160, 320 windows
    assert d.grow_asks - converged_asks <= 5 and d.refused == d.grow_asks
    assert alloc.stats()["refused"] == d.refused and alloc.stats()["learned"] == {}
    d.refuse_growth = False
    d.run(700)
    assert d.job.cores_pn == 6 and alloc.state(d.job) == "converged"
    assert alloc.stats()["learned"] == {}  # the search itself was held back


def test_growth_is_capped_by_max_cores_and_the_emptiest_node() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory(), AllocatorConfig(max_cores=5))
    d = Driver(alloc, 12, 4, noise=0.03, nodes=2)
    d.converge()
    assert d.job.cores_pn == 5 and d.refused == 0
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 12, 4, noise=0.03, nodes=2)
    d.nodes[1].free_cores = 3  # the second node has room for 3 more
    d.converge()
    assert d.job.cores_pn == 7 and d.refused == 0


def test_multi_node_jobs_converge_per_node() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory())
    d = Driver(alloc, 5, 8, noise=0.03, gpus=2, nodes=2)
    d.converge()
    assert d.job.cores_pn == 5
    assert all(n.free_cores == 32 - 5 for n in d.nodes)
    assert alloc.stats()["learned"] == {"ResNet50/2g/2n": [5, 1]}


def test_group_key_contract() -> None:
    lp = LearnedProfiles()
    lp.record(("ResNet50", 1, 1), 3)
    lp.record(("VGG16", 2, 1), 2)
    alloc = AdaptiveAllocator(ThroughputHistory(), learned=lp)
    control: JobControl = alloc  # the type checker holds it to the Protocol
    assert callable(control.waiting_for_room) and callable(alloc.cores_per_node)
    jobs = [
        Job(i, f"j{i}", 0.0, g, c, 0, n, 1.0, model=m)
        for i, (m, g, c, n) in enumerate(
            (m, g, c, n)
            for m in ("ResNet50", "VGG16", None)
            for g in (0, 1, 2, 4)
            for c in (1, 4, 8)
            for n in (1, 2)
        )
    ]
    seen: dict[tuple, int] = {}
    for j in jobs:
        k = (j.gpus_pn, j.nodes, alloc.group_key(j))
        assert seen.setdefault(k, alloc.cores_per_node(j)) == alloc.cores_per_node(j)
    assert alloc.cores_per_node(Job(0, "a", 0.0, 1, 8, 0, 1, 1.0, model="ResNet50")) == 3
    assert alloc.cores_per_node(Job(0, "b", 0.0, 0, 8, 0, 1, 1.0, model="ResNet50")) == 8


def test_cpu_jobs_are_ignored() -> None:
    book = ThroughputHistory()
    alloc = AdaptiveAllocator(book)
    cpu = Job(0, "c", 0.0, 0, 4, 0, 1, 1.0)
    cpu.placement, cpu.cores_pn = [Node(0, "n", 0, 8, 0, 10.0)], 4
    assert alloc.on_start(cpu, 0.0) == [] and alloc.on_sample(cpu, 10.0, 5.0) == []
    assert alloc.on_resize(cpu, 10.0) == [] and not alloc.wants_samples(cpu)
    assert len(book) == 0 and alloc.stats()["searches"] == 0


def test_search_off_keeps_the_request_and_sets_a_reference() -> None:
    book = ThroughputHistory()
    alloc = AdaptiveAllocator(book, AllocatorConfig(search=False))
    d = Driver(alloc, 3, 8, noise=0.03)
    assert alloc.wants_samples(d.job)
    d.converge()
    assert d.set_cores == 0 and d.job.cores_pn == 8
    assert book.reference(d.job) == pytest.approx(100.0, rel=0.05)
    assert alloc.stats()["learned"] == {} and alloc.stats()["probes"] == 0
    assert alloc.cores_per_node(Job(1, "k", 0.0, 1, 8, 0, 1, 1.0, model="ResNet50")) == 8


def test_samples_go_to_the_book_and_are_cleared_on_core_changes() -> None:
    book = ThroughputHistory()
    alloc = AdaptiveAllocator(book)
    d = Driver(alloc, 2, 8, noise=0.03)
    for _ in range(50):
        level = d.job.cores_pn
        d.window()
        if d.job.cores_pn != level:
            assert book.samples(d.job) == []
        else:
            assert book.samples(d.job)
    alloc.on_finish(d.job, d.t)
    assert book.samples(d.job) == [] and book.reference(d.job) is None


def test_settle_windows_are_discarded() -> None:
    alloc = AdaptiveAllocator(ThroughputHistory(), AllocatorConfig(settle_windows=1))
    d = Driver(alloc, 2, 8, noise=0.03)
    d.converge()
    assert d.job.cores_pn == 2


@pytest.mark.parametrize(
    "kw",
    [
        {"tolerance": 0},
        {"min_windows": 9},
        {"peak_windows": 20},
        {"verify_every": 0},
        {"max_cores": 0},
    ],
)
def test_config_validation(kw: dict) -> None:
    with pytest.raises(ValueError):
        AllocatorConfig(**kw)


def test_two_allocators_driving_one_job_keep_their_own_searches() -> None:
    """A job's track lives on the job (``Job.control_state``) for the first allocator
    to start it; a second allocator driving the same job keeps its own, apart, and
    each search goes on as it would alone. Finishing clears what each one held."""
    alone = AdaptiveAllocator(ThroughputHistory(), MID)
    first = AdaptiveAllocator(ThroughputHistory(), MID)
    second = AdaptiveAllocator(ThroughputHistory(), AllocatorConfig(start="request"))
    d_alone = Driver(alone, 2, 8, seed=3, noise=0.05)
    d = Driver(first, 2, 8, seed=3, noise=0.05)
    assert d.job.control_state is not None
    assert second.on_start(d.job, 0.0) == []  # its slot is taken: kept apart
    assert second.explain(d.job)["search"] == "full"
    assert d.converge() == d_alone.converge()  # the second one changed nothing
    assert d.job.cores_pn == d_alone.job.cores_pn
    assert first.state(d.job) == "converged"
    assert second.state(d.job) == "measuring"
    first.on_finish(d.job, d.t)
    assert d.job.control_state is None and first.state(d.job) == "idle"
    assert second.state(d.job) == "measuring"
    second.on_finish(d.job, d.t)
    assert second.state(d.job) == "idle"
    again = second.on_start(d.job, d.t)  # restarted: the free slot is its now
    assert again == [] and d.job.control_state is not None
    assert first.state(d.job) == "idle" and second.state(d.job) == "measuring"


def test_a_reference_taken_beside_a_cpu_job_is_not_solo_until_known() -> None:
    book = ThroughputHistory()
    alloc = AdaptiveAllocator(book)
    d = Driver(alloc, 4, 8, noise=0.02)
    d.converge()
    assert book.reference_solo(d.job)  # measured alone: the eliminator may judge by it
    alone = book.reference(d.job)
    assert book.solo_speed(d.job, 4) == alone
    # A CPU job arrives, then the job is resized and re-measured beside it at 4 cores.
    d.nodes[0].jobs[Job(1, "cpu", 0.0, 0, 4, 0, 1, 1.0)] = None
    d.rate = 80.0  # the CPU job slows it
    alloc.on_resize(d.job, d.t)
    assert book.reference(d.job) is None
    d.converge()
    assert d.job.cores_pn == 4
    # Its own solo speed at 4 cores is known: that is the reference, not the slow one.
    assert book.reference_solo(d.job) and book.reference(d.job) == alone
    # At a count it was never measured alone at, the reference waits for a probe.
    fresh = ThroughputHistory()
    other = AdaptiveAllocator(fresh)
    e = Driver(other, 4, 8, noise=0.02)
    e.nodes[0].jobs[Job(1, "cpu", 0.0, 0, 4, 0, 1, 1.0)] = None
    e.converge()
    assert fresh.reference(e.job) is not None and not fresh.reference_solo(e.job)
    assert fresh.solo_speed(e.job, e.job.cores_pn) is None
