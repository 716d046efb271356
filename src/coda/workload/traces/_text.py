"""Values cut short for one-line error messages (trace loaders, the cluster and profile
readers): a message names the bad value but never grows with it."""

from __future__ import annotations


def clip(value: object, n: int = 60) -> str:
    """repr() of a value cut to n characters: messages stay one short line."""
    r = repr(value)
    return r if len(r) <= n else r[: n - 3] + "..."


def shown(value: object, n: int = 40) -> str:
    """str() of a value (a time stamp, say) cut to n characters, for messages."""
    t = str(value)
    return t if len(t) <= n else t[: n - 3] + "..."
