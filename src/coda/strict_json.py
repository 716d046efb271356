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


def _depth(value: Any) -> int:
    """How deep objects and lists nest in ``value`` (walked without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            if d > MAX_DEPTH:
                return d
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def loads(text: str) -> Any:
    """``json.loads`` that refuses a key given twice and nesting past ``MAX_DEPTH``
    (StrictJSONError); json's own errors (ValueError, RecursionError) as json raises
    them."""
    value = json.loads(text, object_pairs_hook=_no_key_twice)
    if _depth(value) > MAX_DEPTH:
        raise StrictJSONError(f"nested more than {MAX_DEPTH} deep")
    return value
