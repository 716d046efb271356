"""Busy curves for the models the paper's Figure 3 does not show (VGG16, Inception3,
ResNet50, WaveNet), derived from what the paper says of each (docs/paper.md, "Models
without a Figure 3 curve"), never borrowed from a neighbour whose CPU need differs.

Rule, per GPU count g (1 and 4, the rows Figure 3 gives):

- The model's data preparation is pipelined with GPU compute, as CV's is, and speech's
  is "similar to CV jobs" (Section IV-A/B): below its optimum its speed falls in
  proportion to its cores, so its speed at 1 core is ``1 / c_opt(g)`` (Figure 5's
  optimum, the set's own cores table at g).
- Fed (at its optimum) its GPUs are as busy as those of Figure 3's measured pipelined
  models at g, AlexNet (CV) and DeepSpeech (speech): their busy share at the speed
  peak. The reading takes their mean ("mid"), the lower ("low") or the higher ("high").
- Starved, a measured pipelined model's GPUs read busier than its speed alone: busy /
  busy at the peak = a + (1 - a) x speed, where ``a`` is each measured curve's floor at
  1 core. The reading takes the floors' mean ("mid"), none ("low": busy in proportion
  to speed) or the largest ("high").

Where one core already feeds the model (VGG16 at 1 GPU), the row's low point sits at
half speed on the same line. The shipped set holds the "mid" rows
(tests/test_busy_derivation.py recomputes them); `with_reading` gives a copy of a set's
spec with every derived model at another reading, for the sensitivity runs.
"""

from __future__ import annotations

import copy
from typing import Any

# Figure 3's measured models whose data preparation is pipelined with GPU compute.
PIPELINED_MEASURED = ("AlexNet", "DeepSpeech")
DERIVED_MARK = "pipelined"  # gpu_busy.derived of a model whose rows this module derives
READINGS = ("mid", "low", "high")
DEFAULT_READING = "mid"
ROWS = ("1", "4")  # the GPU counts Figure 3 gives (1N1G, 1N4G)
_COLUMN = {"1": "1N1G", "4": "1N4G"}
_HALF = 0.5  # where a model fed by one core puts its row's low point


def _pick(values: list[float], reading: str) -> float:
    if reading == "low":
        return min(values)
    if reading == "high":
        return max(values)
    return sum(values) / len(values)


def measured_terms(spec: dict[str, Any], g: str) -> tuple[list[float], list[float]]:
    """(busy at the speed peak, floor a) of each measured pipelined model at g GPUs."""
    fed, floors = [], []
    for name in PIPELINED_MEASURED:
        s_low, b_low, b_full = spec["models"][name]["gpu_busy"][g]
        fed.append(float(b_full))
        ratio = b_low / b_full
        floors.append((ratio - s_low) / (1.0 - s_low))
    return fed, floors


def derived_rows(spec: dict[str, Any], model: str, reading: str) -> dict[str, list[float]]:
    """The gpu_busy rows of `model` (one with a Figure 5 cores table) at `reading`."""
    if reading not in READINGS:
        raise ValueError(f"busy reading must be one of {', '.join(READINGS)}, got {reading!r}")
    m = spec["models"][model]
    batch = spec.get("batch", "default")
    rows: dict[str, list[float]] = {}
    for g in ROWS:
        fed, floors = measured_terms(spec, g)
        busy_full = _pick(fed, reading)
        floor = 0.0 if reading == "low" else _pick(floors, reading)
        c_opt = float(m["cores"][batch][_COLUMN[g]])
        s_low = 1.0 / c_opt if c_opt > 1.0 else _HALF
        busy_low = busy_full * (floor + (1.0 - floor) * s_low)
        rows[g] = [round(s_low, 4), round(busy_low, 4), round(busy_full, 4)]
    return rows


def derived_models(spec: dict[str, Any]) -> list[str]:
    """The models whose busy rows are derived, not read."""
    return [
        name
        for name, m in spec["models"].items()
        if isinstance(m, dict) and isinstance(m.get("gpu_busy"), dict)
        and m["gpu_busy"].get("derived") == DERIVED_MARK
    ]  # fmt: skip


def with_reading(spec: dict[str, Any], reading: str) -> dict[str, Any]:
    """A copy of `spec` with every derived model's rows at `reading` (named after it)."""
    out = copy.deepcopy(spec)
    for name in derived_models(out):
        out["models"][name]["gpu_busy"].update(derived_rows(out, name, reading))
    if reading != DEFAULT_READING:
        out["name"] = f"{spec.get('name', 'set')}~busy-{reading}"
    return out
