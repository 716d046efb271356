"""JSON as a person wrote it, read strictly: an object naming a key twice is refused
(``json`` keeps the last copy silently), and so is nesting deeper than any file of
ours needs (a copy of a deep tree would recurse past Python's limit later on)."""

from __future__ import annotations

import json
from typing import Any

from coda.text import clip

MAX_DEPTH = 32  # objects and lists within one another


class StrictJSONError(ValueError):
    """A key given twice, or nesting too deep (the message says which)."""


def _no_key_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise StrictJSONError(f"key {clip(key, 40)} is given twice")
        seen.add(key)
    return dict(pairs)


def _too_deep(value: Any) -> bool:
    """Objects and lists nested past ``MAX_DEPTH`` in ``value`` (walked without
    recursion, stopping at the first too deep)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            if d > MAX_DEPTH:
                return True
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def loads(text: str) -> Any:
    """``json.loads`` that refuses a key given twice and nesting past ``MAX_DEPTH``
    (StrictJSONError); json's own errors (ValueError, RecursionError) as json raises
    them."""
    value = json.loads(text, object_pairs_hook=_no_key_twice)
    if _too_deep(value):
        raise StrictJSONError(f"nested more than {MAX_DEPTH} deep")
    return value
