"""The adaptive allocator's knobs (``--tune allocator.<field>``) and where a job's
search may start."""

from __future__ import annotations

from dataclasses import dataclass, field

from coda.policy.learned_profiles import is_int

START_POINTS = ("learned", "paper", "request")


@dataclass
class AllocatorConfig:
    tolerance: float = 0.05  # "at peak" = throughput >= (1 - tolerance) * peak
    min_windows: int = 2  # windows per probed level before a decision
    max_windows: int = 8  # decide by the mean after this many
    reference_windows: int = 3  # windows to measure the reference at the chosen level
    z: float = 2.0  # decision margin in standard errors
    noise_floor: float = 0.02  # lower bound on the relative std used in decisions
    max_cores: int | None = None  # cap on cores per node when growing (None: node size)
    shift_tolerance: float = 0.15  # persistent change vs reference that triggers a re-tune
    shift_windows: int = 3  # consecutive windows beyond shift_tolerance
    shift_z: float = 3.0  # ... and beyond this many relative stds of the job's noise
    confident_after: int = 3  # converged jobs of a shape before its learned value is trusted
    verify_every: int = 10  # every n-th job of a confident shape still verifies (c-1 / c+1)
    search: bool = True  # False: keep the request, only measure the reference (ablation)
    peak_windows: int = 4  # windows at the best level so far before others are judged by it
    settle_windows: int = 0  # windows discarded after a core change (0: driver cuts at windows)
    cooldown_windows: int = 20  # converged windows before a throughput shift may re-tune
    # Where a job's search starts. "learned": its shape's learned count, capped at its
    # request (ours). "paper": the largest count the same owner's earlier jobs of the
    # model's category settled on, else paper_start[category] (the paper: 3 CV, 5 NLP,
    # 5 speech), else the request; `categories` maps model names to categories.
    # "request": every job is placed with its request and searches from there, and
    # nothing one job settles on carries over to the next (CODA on Slurm, which learns
    # per user and job name, when no two jobs share a name, as in `coda replay`).
    start: str = "learned"
    paper_start: dict[str, int] = field(default_factory=lambda: {"cv": 3, "nlp": 5, "speech": 5})
    categories: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.tolerance < 1.0:
            raise ValueError(f"tolerance must be in (0, 1), got {self.tolerance}")
        if not 1 <= self.min_windows <= self.max_windows:
            raise ValueError("need 1 <= min_windows <= max_windows")
        if not 1 <= self.peak_windows <= self.max_windows:
            raise ValueError("need 1 <= peak_windows <= max_windows")
        if self.reference_windows < 1 or self.shift_windows < 1 or self.verify_every < 1:
            raise ValueError("reference_windows, shift_windows and verify_every must be >= 1")
        if self.max_cores is not None and self.max_cores < 1:
            raise ValueError(f"max_cores must be >= 1, got {self.max_cores}")
        if self.z <= 0 or self.noise_floor < 0 or self.shift_tolerance <= 0 or self.shift_z < 0:
            raise ValueError("z and shift_tolerance must be > 0, noise_floor and shift_z >= 0")
        if self.start not in START_POINTS:
            raise ValueError(f"start must be one of {', '.join(START_POINTS)}, got {self.start!r}")
        if any(not is_int(c) or c < 1 for c in self.paper_start.values()):
            raise ValueError("paper_start core counts must be whole numbers >= 1")
