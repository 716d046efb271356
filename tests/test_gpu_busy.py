"""The paper's GPU utilisation: each model's busy curve (Figure 3) in the profile set, and
`gpu_util_busy`, the busy share of the allocated GPUs, integrated by the simulator."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from job_tables import table

from coda.policy import make_policy
from coda.sim.engine import Simulator
from coda.study.config import PAPER_CLUSTER
from coda.workload.cluster import parse_cluster_spec
from coda.workload.generate import PaperParams, generate
from coda.workload.perf import build_workload, load_profile_set
from coda.workload.profile_set import ProfileSet

CODA = load_profile_set("coda")


def _between(x: float, x0: float, y0: float, x1: float, y1: float) -> float:
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def test_figure_3_points_are_on_the_curves():
    # AlexNet 1N1G (docs/paper.md, Figure 3): 28.0% busy at 1 core, speed 1.0 -> 7.66,
    # 90.1% at the speed peak.
    one = CODA.job_perf("AlexNet", 1, 1)
    assert one.busy(1.0) == pytest.approx(0.901)
    assert one.busy(1.0 / 7.65) == pytest.approx(0.28, abs=1e-3)
    assert one.busy(0.0) == 0.0
    # 1N4G: 31.5% -> 83.7%, speed 1.0 -> 12.27.
    four = CODA.job_perf("AlexNet", 4, 1)
    assert four.busy(1.0) == pytest.approx(0.837)
    assert four.busy(1 / 12.27) == pytest.approx(0.315, abs=1e-3)
    # Bi-att-flow 1N1G: speed 1.0 -> 2.19, busy 15.1% -> 22.1%: NLP keeps its GPUs far
    # from busy even when fed.
    bidaf = CODA.job_perf("Bi-att-flow", 1, 1)
    assert bidaf.busy(1.0) == pytest.approx(0.221)
    assert bidaf.busy(1.0 / 2.19) == pytest.approx(0.151, abs=1e-3)
    assert CODA.job_perf("Transformer", 4, 1).busy(1.0) == pytest.approx(0.639)


def test_gpu_counts_between_listed_rows_interpolate_and_beyond_hold():
    two = CODA.job_perf("DeepSpeech", 2, 1)
    assert two.busy(1.0) == pytest.approx(_between(2, 1, 0.967, 4, 0.725))
    assert CODA.job_perf("DeepSpeech", 8, 1).busy(1.0) == pytest.approx(0.725)
    # Several nodes: the curve of its GPUs per node.
    assert CODA.job_perf("DeepSpeech", 1, 2).busy(1.0) == pytest.approx(0.967)


def test_every_model_of_the_paper_set_has_a_curve_with_its_provenance():
    spec = CODA.to_dict()
    for name, model in spec["models"].items():
        note = model["gpu_busy"]["note"]
        assert note.startswith(("read:", "assumption:")), name
    assert "Figure 3" in spec["gpu_busy_note"]


def test_busy_rises_with_speed():
    for model in CODA.models:
        for g in (1, 2, 3, 4, 8):
            perf = CODA.job_perf(model, g, 1)
            ys = [perf.busy(s) for s in np.linspace(0.0, 1.2, 61)]
            assert all(b >= a for a, b in zip(ys, ys[1:], strict=False)), (model, g)
            assert 0.0 <= min(ys) and max(ys) <= 1.0


def _without_busy(ps: ProfileSet) -> ProfileSet:
    spec = ps.to_dict()
    for m in spec["models"].values():
        m.pop("gpu_busy", None)
    return ProfileSet(spec, origin="test")


def test_a_set_without_curves_reads_busy_as_speed():
    plain = _without_busy(CODA)
    perf = plain.job_perf("AlexNet", 1, 1)
    assert perf.busy(0.37) == pytest.approx(0.37)
    synergy = load_profile_set("synergy")
    assert synergy.job_perf(synergy.models[0], 2, 1).busy(0.6) == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"1": [0.0, 0.2, 0.9]}, "speed_low must be in (0, 1)"),
        ({"1": [1.0, 0.2, 0.9]}, "speed_low must be in (0, 1)"),
        ({"1": [0.5, 0.95, 0.9]}, "exceeds busy_full"),
        ({"1": [0.5, 0.2, 1.5]}, "must be finite"),
        ({"1": [0.5, 0.2]}, "must be a list of 3 numbers"),
        ({"x": [0.5, 0.2, 0.9]}, "GPU counts must be whole numbers"),
        ({"note": "only a note"}, "gives no GPU count"),
        ([0.5, 0.2, 0.9], "must be an object"),
    ],
)
def test_a_bad_curve_is_one_error_naming_its_key(row, says):
    spec = copy.deepcopy(CODA.to_dict())
    spec["models"]["AlexNet"]["gpu_busy"] = row
    with pytest.raises(ValueError) as err:
        ProfileSet(spec, origin="bad.json")
    text = str(err.value)
    assert says in text and "bad.json" in text and "models.AlexNet.gpu_busy" in text
    assert "\n" not in text


def test_one_job_at_half_speed_reads_its_curve_over_the_window():
    # AlexNet on one GPU asking 3 of its 6 optimal cores: speed 0.5 all the way (the
    # baseline grants the request). A CPU job arriving at 500 s ends the window there.
    rows = [(0, 1000, 1, 3), (500, 10, 0, 1)]
    wl = build_workload(table(rows), CODA, 0, {"AlexNet": 1.0})
    res = Simulator(wl, parse_cluster_spec("1x1g16c,1x0g4c"), make_policy("static-separate")).run()
    s = res.summary
    busy = _between(0.5, 0.1308, 0.28, 1.0, 0.901)
    assert s["gpu_util_effective"] == pytest.approx(0.5)
    assert s["gpu_util_allocated"] == pytest.approx(1.0)
    assert s["gpu_util_busy"] == pytest.approx(busy, abs=1e-4)
    assert s["paper"]["gpu_util_busy"] == s["gpu_util_busy"]
    # Its split: 90.1% at full speed, the rest lost to too few cores, none to contention.
    assert s["gpu_busy_full"] == pytest.approx(0.901)
    assert s["gpu_busy_lost_cores"] == pytest.approx(0.901 - busy, abs=1e-4)
    assert s["gpu_busy_lost_contention"] == pytest.approx(0.0, abs=1e-12)
    series = res.timeseries["gpu_util_busy"]
    assert np.allclose(series[res.timeseries["t"] < 499], busy, atol=1e-4)


def test_no_gpu_allocated_has_no_busy_share():
    rows = [(0, 100, 0, 1), (50, 10, 0, 1)]
    wl = build_workload(table(rows), CODA, 0, {"AlexNet": 1.0})
    res = Simulator(wl, parse_cluster_spec("1x1g4c,1x0g4c"), make_policy("fifo")).run()
    assert res.summary["gpu_util_busy"] is None
    assert np.isnan(res.timeseries["gpu_util_busy"]).all()


@pytest.mark.parametrize("policy", ["fifo", "coda"])
def test_with_busy_as_speed_the_integral_is_effective_over_allocated(policy):
    # Starts, probes, throttles, contention and finishes all move speeds: with busy =
    # speed the busy integral must track the effective one at every change.
    params = PaperParams(n_jobs=300, days=300 * 30 / 100_000, arrival_scale=2.6)
    work = generate(params, 3)
    plain = _without_busy(CODA)
    wl = build_workload(work, plain, 3, None)
    res = Simulator(wl, parse_cluster_spec(PAPER_CLUSTER), make_policy(policy), seed=3).run()
    s = res.summary
    assert s["gpu_util_allocated"] > 0.1
    assert s["gpu_util_busy"] == pytest.approx(
        s["gpu_util_effective"] / s["gpu_util_allocated"], rel=1e-9
    )
    # The busy split matches the effective one's, per allocated GPU.
    assert s["gpu_busy_full"] == pytest.approx(1.0)
    assert s["gpu_busy_lost_cores"] * s["gpu_util_allocated"] == pytest.approx(
        s["gpu_lost_cores"], rel=1e-9, abs=1e-12
    )
    assert s["gpu_busy_lost_contention"] * s["gpu_util_allocated"] == pytest.approx(
        s["gpu_lost_contention"], rel=1e-9, abs=1e-12
    )
    # And with the paper's curves the busy share is its own quantity, split exactly.
    real = Simulator(
        build_workload(work, CODA, 3, None),
        parse_cluster_spec(PAPER_CLUSTER),
        make_policy(policy),
        seed=3,
    ).run()
    r = real.summary
    assert 0.0 < r["gpu_util_busy"] < 1.0
    assert r["gpu_busy_full"] - r["gpu_busy_lost_cores"] - r["gpu_busy_lost_contention"] == (
        pytest.approx(r["gpu_util_busy"], rel=1e-9)
    )
    assert r["gpu_busy_lost_cores"] >= -1e-12 and r["gpu_busy_lost_contention"] >= -1e-12
    assert real.summary["gpu_util_busy"] != pytest.approx(
        real.summary["gpu_util_effective"] / real.summary["gpu_util_allocated"], rel=1e-3
    )
