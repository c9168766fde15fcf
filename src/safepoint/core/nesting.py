"""What untrusted arguments may hold, checked without recursion: tool arguments that nest deeper than anyone writes
by hand, or hold text no encoder can write (a lone surrogate such as ``"\\ud800"``, which JSON decoders let
through), are refused before anything recursive or strict (a decoder, an encoder, a hash) meets them and dies of it.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64  # far beyond any real tool's arguments; far below Python's and msgspec's recursion limits
# Arguments recorded in place of unfit ones (the agent loop logs a model's reply before its calls run): the only
# key, its value why; refused by ``arguments_problem`` as they were, on the first run and on every resume.
UNFIT = "$unfit"


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


def arguments_problem(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Why ``value`` cannot be taken as a call's arguments, in a few words, or None: nested more than ``limit``
    levels, or a text (a value or a key) that is not valid Unicode. One pass, linear in the size of ``value``."""
    if isinstance(value, dict) and set(value) == {UNFIT} and isinstance(why := value[UNFIT], str):
        return why
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return (
                    f"a text holds a character that is not valid Unicode (a lone surrogate) near {item[:40]!r};"
                    " send text as valid UTF-8"
                )
            continue
        if isinstance(item, dict):
            children: list[Any] = [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        if depth + 1 > limit:
            return (
                f"they nest more than {limit} levels deep; give them as flat values (a long text as one string, not"
                " nested lists)"
            )
        stack.extend((child, depth + 1) for child in children)
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
