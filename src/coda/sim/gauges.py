"""The cluster's running totals, kept incrementally as jobs start, stop and change
speed: what the meters integrate over the measurement window."""

from __future__ import annotations


class Gauges:
    def __init__(self) -> None:
        self.gpu_eff = 0.0  # sum of GPUs x speed
        self.gpu_base = 0.0  # sum of GPUs x speed from cores alone (no interference)
        self.gpu_busy = 0.0  # sum of GPUs x their busy share (the paper's utilisation)
        self.gpu_busy_base = 0.0  # ... at the speed from cores alone (no interference)
        self.gpu_busy_full = 0.0  # ... at full speed
        self.gpu_alloc = 0
        self.gpu_launching = 0  # GPUs of DNN jobs placed but not working yet
        self.cores_alloc = 0
        self.cores_useful = 0.0
        self.count = {"dnn_running": 0, "cpu_running": 0}
        self.running = 0
