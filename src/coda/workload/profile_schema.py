"""The profile-set JSON schema (`coda-profile-set/1`): a reader whose every error names
the file and the dotted key, and the per-model part of a set, parsed and checked."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from coda.text import clip, shown
from coda.workload import limits

SCHEMA = "coda-profile-set/1"
TABLE_COLUMNS = ("1N1G", "1N2G", "1N4G", "2N2G")


class SpecReader:
    """Reads a profile-set dict; every error names the file and the dotted key."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, key: str, message: str) -> ValueError:
        return ValueError(f"profile set {self.origin}: key {key!r}: {message}")

    def get(self, d: dict[str, Any], key: str, where: str) -> Any:
        full = f"{where}.{key}" if where else key
        if not isinstance(d, dict):
            raise self.fail(where or "<root>", "must be an object")
        if key not in d:
            raise self.fail(full, "missing")
        return d[key]

    def number(
        self,
        value: Any,
        key: str,
        *,
        positive: bool = False,
        minimum: float = 0.0,
        kind: str | None = None,
    ) -> float:
        """A finite number >= minimum (> 0 if positive), at most limits.PROFILE[kind].hi."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, got {clip(value)}")
        try:
            v = float(value)
        except OverflowError:  # an int beyond float range
            v = math.inf
        top = limits.PROFILE[kind].hi if kind else math.inf
        if not math.isfinite(v) or v < minimum or (positive and v <= 0) or v > top:
            bound = "> 0" if positive else f">= {minimum:g}"
            if kind:
                bound += f" and <= {top:g} ({limits.PROFILE[kind].unit})"
            raise self.fail(key, f"must be finite and {bound}, got {clip(value)}")
        return v

    def numbers(self, value: Any, key: str, n: int | None = None, **kw: Any) -> tuple[float, ...]:
        if not isinstance(value, list) or (n is not None and len(value) != n):
            raise self.fail(key, f"must be a list of {n if n is not None else 'some'} numbers")
        return tuple(self.number(v, f"{key}[{i}]", **kw) for i, v in enumerate(value))

    def table(self, d: Any, key: str, kind: str) -> dict[str, float]:
        if not isinstance(d, dict):
            raise self.fail(key, "must be an object with columns " + ", ".join(TABLE_COLUMNS))
        return {
            c: self.number(self.get(d, c, key), f"{key}.{c}", positive=True, kind=kind)
            for c in TABLE_COLUMNS
        }


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    kind: str  # "table" (CODA optimal cores) or "curve" (Synergy throughput curve)
    cores_table: dict[str, float] | None
    curve_x: tuple[float, ...]  # per GPU, with (0,0) added, cut at saturation
    curve_y: tuple[float, ...]  # normalised to max 1.0
    bw_table: dict[str, float]
    excess: tuple[float, ...]  # slowdown - 1 at the set's pressures (1 GPU)
    pcie_heavy: bool
    # GPU busy share against speed, per GPU count: (speed_low, busy_low, busy_full);
    # None where the set gives none (busy share = speed).
    busy: dict[int, tuple[float, float, float]] | None = None


def parse_model(r: SpecReader, name: str, m: Any, batch: str, n_press: int) -> ModelSpec:
    where = f"models.{name}"
    cores = r.get(m, "cores", where)
    kind = r.get(cores, "kind", f"{where}.cores")
    cores_table = None
    cx: tuple[float, ...] = ()
    cy: tuple[float, ...] = ()
    if kind == "table":
        cores_table = r.table(
            r.get(cores, batch, f"{where}.cores"), f"{where}.cores.{batch}", "cores"
        )
        for col, v in cores_table.items():
            if v < 1:
                raise r.fail(f"{where}.cores.{batch}.{col}", "optimal cores must be >= 1")
    elif kind == "curve":
        xk, yk = f"{where}.cores.cpus_per_gpu", f"{where}.cores.throughput"
        xs = r.numbers(
            r.get(cores, "cpus_per_gpu", f"{where}.cores"), xk, positive=True, kind="cores"
        )
        ys = r.numbers(
            r.get(cores, "throughput", f"{where}.cores"), yk, n=len(xs), kind="throughput"
        )
        if not xs or any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
            raise r.fail(xk, "must be a nonempty ascending list")
        if any(b < a for a, b in zip(ys, ys[1:], strict=False)) or max(ys) <= 0:
            raise r.fail(yk, "must be nondecreasing with a positive maximum")
        # Saturation = first point at the maximum; the flat tail adds nothing.
        top = max(ys)
        k = ys.index(top)
        cx = (0.0, *xs[: k + 1])
        cy = (0.0, *(y / top for y in ys[:k]), 1.0)
    else:
        raise r.fail(f"{where}.cores.kind", f"must be 'table' or 'curve', got {clip(kind)}")
    bw = r.get(m, "bw_gbps", where)
    bw_table = r.table(r.get(bw, batch, f"{where}.bw_gbps"), f"{where}.bw_gbps.{batch}", "bw_gbps")
    sd = r.numbers(
        r.get(m, "slowdown", where), f"{where}.slowdown", n=n_press, minimum=1.0, kind="slowdown"
    )
    pcie = r.get(m, "pcie", where)
    if pcie not in ("heavy", "light"):
        raise r.fail(f"{where}.pcie", f"must be 'heavy' or 'light', got {clip(pcie)}")
    busy = _parse_busy(r, f"{where}.gpu_busy", m["gpu_busy"]) if "gpu_busy" in m else None
    return ModelSpec(
        name=name,
        kind=kind,
        cores_table=cores_table,
        curve_x=cx,
        curve_y=cy,
        bw_table=bw_table,
        excess=tuple(s - 1.0 for s in sd),
        pcie_heavy=pcie == "heavy",
        busy=busy,
    )


def _parse_busy(r: SpecReader, where: str, raw: Any) -> dict[int, tuple[float, float, float]]:
    """A model's `gpu_busy`: GPU count -> [speed_low, busy_low, busy_full] (a point of
    the busy curve below full speed, and the busy share at full speed); `note` and
    `source` keys are its provenance, `derived` names the rule its rows follow where
    they are not read (coda.workload.busy_derivation)."""
    if not isinstance(raw, dict):
        raise r.fail(where, "must be an object: GPU count -> [speed_low, busy_low, busy_full]")
    rows: dict[int, tuple[float, float, float]] = {}
    top = limits.PROFILE["floor_gpus"].hi
    for k, row in raw.items():
        if k in ("note", "source"):
            continue
        if k == "derived":
            if row != "pipelined":
                raise r.fail(f"{where}.derived", f"must be 'pipelined', got {clip(row)}")
            continue
        key = f"{where}.{shown(k, 20)}"
        if not (k.isascii() and k.isdigit() and len(k) <= 6 and 1 <= int(k) <= top):
            raise r.fail(key, f"GPU counts must be whole numbers in [1, {top:g}]")
        s_low, b_low, b_full = r.numbers(row, key, n=3, kind="busy")
        if not 0.0 < s_low < 1.0:
            raise r.fail(f"{key}[0]", f"speed_low must be in (0, 1), got {s_low:g}")
        if b_low > b_full:
            raise r.fail(key, f"busy_low {b_low:g} exceeds busy_full {b_full:g}")
        rows[int(k)] = (s_low, b_low, b_full)
    if not rows:
        raise r.fail(where, "gives no GPU count")
    return dict(sorted(rows.items()))
