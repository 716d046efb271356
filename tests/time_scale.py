"""How much slower than CI's host the tests run here, from the environment (the cgroup
v2 guest sets both: it is emulated).

``WORK_SCALE`` (CODA_TEST_TIME_SCALE) stretches what the tests' jobs do (a sleep, a
training step), a fixed factor so that their models see the same shape everywhere;
``WAIT_SCALE`` (CODA_TEST_WAIT_SCALE, at least WORK_SCALE) stretches how long a test
waits for something before it fails, as measured on the machine at hand (the guest
times a Python start inside against one on its host). A wait returns as soon as what
it waits for holds: a larger one costs time only when a test fails."""

from __future__ import annotations

import math
import os


def _factor(name: str) -> float:
    text = os.environ.get(name) or "1"
    try:
        value = float(text)
    except ValueError:
        raise SystemExit(f"{name}={text!r} is not a number") from None
    return value if math.isfinite(value) and value >= 1 else 1.0


WORK_SCALE = _factor("CODA_TEST_TIME_SCALE")
WAIT_SCALE = max(WORK_SCALE, _factor("CODA_TEST_WAIT_SCALE"))
