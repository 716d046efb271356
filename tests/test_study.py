"""coda.study: a run's setup (RunConfig with its policy and simulation options nested,
each checked once where it is built), light to import, and flat in a run's summary."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest

from coda.policy import PolicyOptions
from coda.study.config import (
    DEFAULT_POLICY,
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_WARMUP,
    RunConfig,
    SimulationOptions,
)


def test_the_config_module_loads_no_numpy() -> None:
    code = "import json, sys, coda.study.config; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = {m.split(".")[0] for m in json.loads(out.stdout)}
    assert "coda" in loaded and not loaded & {"numpy", "matplotlib"}


def test_the_warmup_default_is_the_scalings() -> None:
    from coda.workload.scaling import DEFAULT_WARMUP as SCALING_WARMUP

    assert DEFAULT_WARMUP == SCALING_WARMUP == RunConfig().warmup


def test_a_simulation_plans_a_job_without_a_limit_with_a_day() -> None:
    assert RunConfig().policy == DEFAULT_POLICY
    assert DEFAULT_POLICY.default_time_limit_s == DEFAULT_TIME_LIMIT_S == 86400.0
    assert dataclasses.replace(DEFAULT_POLICY, estimates="time-limits").default_time_limit_s == (
        DEFAULT_TIME_LIMIT_S
    )


def test_the_summary_config_is_flat_in_its_old_order() -> None:
    config = RunConfig(
        seed=3,
        policy=dataclasses.replace(DEFAULT_POLICY, estimates="time-limits", reclaim="requeue"),
        simulation=SimulationOptions(horizon=10.0, grants="fixed", cycle_period_s=1.0),
    )
    flat = config.as_dict()
    assert list(flat) == [
        "trace", "format", "cluster", "load", "seed", "profiles", "mix", "skip_bad_rows",
        "fractional", "censored", "horizon", "warmup", "samples", "noise", "perturb",
        "estimates", "default_time_limit_s", "order", "gpu_subarrays", "allocator_start",
        "start_delay_s", "control_period_s", "cycle_period_s", "reclaim", "grants",
        "settle_windows", "cpu_checkpoint_share",
    ]  # fmt: skip
    assert flat["seed"] == 3 and flat["horizon"] == 10.0 and flat["grants"] == "fixed"
    assert flat["estimates"] == "time-limits" and flat["reclaim"] == "requeue"
    assert json.loads(json.dumps(flat)) == flat
    tuned = config.varied(policy={"tune": {"eliminator.step_down": "0.5"}})
    assert tuned.as_dict()["tune"] == {"eliminator.step_down": "0.5"}


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf, True, "0.5"])
def test_the_checkpoint_share_is_checked(bad) -> None:
    with pytest.raises(ValueError, match="cpu_checkpoint_share"):
        RunConfig(cpu_checkpoint_share=bad)


def test_varied_replaces_nested_knobs_at_once_and_checks_the_result() -> None:
    base = RunConfig()
    # Fixed grants and requeue given together: neither alone would be a valid step.
    both = base.varied(
        seed=5, policy={"reclaim": "requeue"}, simulation={"grants": "fixed", "noise": 0.0}
    )
    assert (both.seed, both.policy.reclaim, both.simulation.grants) == (5, "requeue", "fixed")
    assert both.simulation.noise == 0.0 and base.simulation.noise == 0.05
    with pytest.raises(ValueError, match="fixed grants need reclaim 'requeue'"):
        base.varied(simulation={"grants": "fixed"})
    with pytest.raises(ValueError, match="unknown queue order"):
        base.varied(policy={"order": "lifo"})


def test_the_nested_options_must_be_options() -> None:
    with pytest.raises(ValueError, match="policy must be PolicyOptions"):
        RunConfig(policy={"order": "fifo"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="simulation must be SimulationOptions"):
        RunConfig(simulation={"noise": 0.0})  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunConfig().seed = 1  # type: ignore[misc]
    assert isinstance(RunConfig(policy=PolicyOptions(reclaim="requeue")).policy, PolicyOptions)


@pytest.mark.parametrize(
    ("knob", "value", "says"),
    [
        ("gpu_subarrays", 1, "gpu_subarrays must be true or false"),
        ("default_time_limit_s", "5", "default time limit must be > 0 s"),
        ("default_time_limit_s", True, "default time limit must be > 0 s"),
        ("default_time_limit_s", float("nan"), "default time limit must be > 0 s"),
        ("default_time_limit_s", 0, "default time limit must be > 0 s"),
        ("settle_windows", 11, "settle windows must be a whole number in 0..10"),
    ],
)
def test_a_policy_knob_is_refused_where_the_options_are_built(
    knob: str, value: object, says: str
) -> None:
    """Checked once, in PolicyOptions: a config built past the CLI gets the same refusal."""
    with pytest.raises(ValueError, match=says):
        PolicyOptions(**{knob: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=says):
        RunConfig().varied(policy={knob: value})
