"""`coda replay --repeat`: every repetition's figures and their spread (no Slurm: the
replay itself is stood in for by a function returning what replay.json holds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from coda.cli import main
from coda.replay.repeats import replay_repeated, spread
from coda.replay.run import ReplayConfig


def fake_result(gain: float, lost: int = 0) -> dict[str, Any]:
    return {
        "setting": {"jobs": 36, "seed": 0, "cluster": "2x5g28c", "speed": 300.0, "load": 0.9,
                    "faults": True},
        "gain_real": gain, "gain_sim": 0.2,
        "plain": {"gpu_util_effective": 0.5, "cpu_queue_delay_mean_s": 30.0,
                  "jct_rel_error_median": 0.05},
        "coda": {"gpu_util_effective": 0.5 * (1 + gain), "cpu_queue_delay_mean_s": None,
                 "jct_rel_error_median": 0.08},
        "sim": {"coda": {"cpu_queue_delay_mean_s": 40.0}},
        "cpu_stretch_real": {"stretch_p99": 1.2, "stretch_max": 1.3,
                             "stretch_over_1_5x_share": 0.0, "stretch_over_2x_share": 0.0},
        "cpu_stretch_sim": {"jobs": 0},
        "jobs_lost": {"plain": 0, "coda": lost}, "jobs_started_twice": {"plain": 0, "coda": 0},
    }  # fmt: skip


def test_each_repetition_runs_into_its_own_folder_and_the_spread_is_reported(tmp_path):
    gains = iter([0.10, 0.30, 0.20])
    seen: list[Path] = []

    def run(cfg: ReplayConfig, log) -> dict[str, Any]:
        seen.append(cfg.out)
        return fake_result(next(gains), lost=1 if len(seen) == 2 else 0)

    summary = replay_repeated(ReplayConfig(out=tmp_path), 3, run, log=lambda m: None)
    assert seen == [tmp_path / f"rep-{k}" for k in (1, 2, 3)]
    rows = {r["key"]: r for r in summary["spread"]}
    gain = rows["gain_real"]
    assert gain["values"] == [0.10, 0.30, 0.20]
    assert (gain["min"], gain["median"], gain["max"]) == (0.10, 0.20, 0.30)
    # A figure missing in some repetitions is "—" there, its spread over the rest.
    delay = rows["coda.cpu_queue_delay_mean_s"]
    assert delay["values"] == [None, None, None] and delay["median"] is None
    assert rows["cpu_stretch_sim.stretch_p99"]["values"] == [None] * 3
    assert rows["lost_or_twice"]["values"] == [0.0, 1.0, 0.0]
    assert summary["jobs_lost"] == {"plain": 0, "coda": 1}
    saved = json.loads((tmp_path / "replay.json").read_text())
    assert saved["repetitions"] == 3 and len(saved["spread"]) == len(summary["spread"])
    page = (tmp_path / "report.md").read_text()
    assert "| CODA's gain, real | +10.0% | +30.0% | +20.0% | +10.0% | +20.0% | +30.0% |" in page
    assert "| CODA: CPU queue delay mean s, real | — | — | — | — | — | — |" in page


def test_spread_of_one_repetition_is_that_repetition():
    rows = spread([fake_result(0.25)])
    gain = next(r for r in rows if r["key"] == "gain_real")
    assert gain["min"] == gain["median"] == gain["max"] == 0.25


@pytest.mark.parametrize("bad", [0, 21])
def test_a_repeat_count_out_of_range_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="--repeat"):
        replay_repeated(ReplayConfig(out=tmp_path), bad, lambda c, log: {}, log=lambda m: None)
    res = CliRunner().invoke(main, ["replay", "--repeat", str(bad), "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--repeat" in res.output
