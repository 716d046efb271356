"""The learned-profile book: per job shape (model, GPUs per node, nodes), the core
counts converged jobs settled on, the count granted from them (a median with
hysteresis), and its JSON form."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SCHEMA = "coda-learned-profiles/1"
MAX_CORES = 1 << 20  # per node: far above any machine (a larger count is not a count)
Shape = tuple[str, int, int]  # (model, GPUs per node, nodes)


class LearnedProfiles:
    """(model, gpus_per_node, nodes) -> core counts converged jobs settled on.

    The count a shape is granted is a median of what its jobs settled on, with
    hysteresis: it stays where it is while it is still a median (between the lower and
    the upper median of the recorded values) and moves to the upper median only when
    a majority has moved away from it. Noisy measurements that settle one job on 1 core
    and the next on 2 do not flip the count back and forth."""

    def __init__(self, confident_after: int = 3) -> None:
        self.confident_after = confident_after
        self._seen: dict[Shape, dict[int, int]] = {}  # shape -> {cores: jobs}
        self._now: dict[Shape, int] = {}  # the count granted now (asked at every placement)

    def record(self, key: Shape, cores: int) -> None:
        """One converged job's count; ValueError outside 1..MAX_CORES (what is recorded
        must load again: ``from_dict`` takes no other)."""
        if not 1 <= int(cores) <= MAX_CORES:
            raise ValueError(f"cores must be 1..{MAX_CORES}, got {cores}")
        key = shape_key(key)
        seen = self._seen.setdefault(key, {})
        seen[int(cores)] = seen.get(int(cores), 0) + 1
        low, high = _medians(seen)
        now = self._now.get(key)
        if now is None or not low <= now <= high:
            self._now[key] = high

    def count(self, key: Shape) -> int:
        return sum(self._seen.get(shape_key(key), {}).values())

    def cores(self, key: Shape) -> int | None:
        """The count granted now (see the class); None if the shape is unknown."""
        return self._now.get(shape_key(key))

    def confident(self, key: Shape) -> bool:
        return self.count(key) >= self.confident_after

    def shapes(self) -> dict[Shape, tuple[int, int]]:
        """shape -> (cores, converged jobs)."""
        return {k: (self.cores(k), self.count(k)) for k in self._seen}  # type: ignore[misc]

    def to_dict(self) -> dict[str, Any]:
        profiles = [
            {"model": m, "gpus_per_node": g, "nodes": n, "cores": sorted(seen.items()),
             "granted": self._now[(m, g, n)]}
            for (m, g, n), seen in sorted(self._seen.items())
        ]  # fmt: skip
        return {"schema": SCHEMA, "confident_after": self.confident_after, "profiles": profiles}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LearnedProfiles:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"learned profiles: expected schema {SCHEMA!r}, got {got!r}")
        after = d.get("confident_after", 3)
        profiles = d.get("profiles")
        if not is_int(after) or after < 1 or not isinstance(profiles, list):
            raise ValueError("learned profiles: need an int confident_after >= 1 and a list")
        out = cls(after)
        for i, p in enumerate(profiles):
            try:
                model, g, n, cores = p["model"], p["gpus_per_node"], p["nodes"], p["cores"]
                ok = isinstance(model, str) and is_int(g) and is_int(n) and g >= 0 and n >= 1
                pairs = [(c, k) for c, k in cores]
                ok = ok and bool(pairs) and len({c for c, _ in pairs}) == len(pairs)
                ok = ok and all(
                    is_int(c) and is_int(k) and 1 <= c <= MAX_CORES and k >= 1 for c, k in pairs
                )
                ok = ok and (model, g, n) not in out._seen
            except (KeyError, TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"learned profiles: malformed entry {i}: {p!r}")
            seen = out._seen[(model, g, n)] = dict(pairs)
            low, high = _medians(seen)
            # The granted count, if the file has it, some job settled on it and it is
            # still a median (a file written before it was kept, or edited: the upper
            # median).
            granted = p.get("granted")
            ok = is_int(granted) and granted in seen and low <= granted <= high
            out._now[(model, g, n)] = granted if ok else high
        return out


def _medians(seen: dict[int, int]) -> tuple[int, int]:
    """The lower and the upper median of the values ``seen`` holds (value: times)."""
    n = sum(seen.values())
    out = []
    for i in ((n - 1) // 2, n // 2):
        for c in sorted(seen):
            if i < seen[c]:
                out.append(c)
                break
            i -= seen[c]
    return out[0], out[1]


def is_int(x: Any) -> bool:
    """A whole number (a bool is not one)."""
    return isinstance(x, int) and not isinstance(x, bool)


def shape_key(key: Sequence[Any]) -> Shape:
    """A shape key as a tuple (a JSON round trip makes lists of them)."""
    model, gpus, nodes = key
    return (str(model), int(gpus), int(nodes))
