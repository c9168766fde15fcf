"""How deep a JSON value nests, measured without recursion: tool arguments that nest deeper than anyone writes by
hand are refused before anything recursive (a decoder, an encoder, a hash) meets them and dies of it."""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64  # far beyond any real tool's arguments; far below Python's and msgspec's recursion limits


def deeper_than(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (dicts, lists, tuples and scalars) nests more than ``limit`` levels."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
