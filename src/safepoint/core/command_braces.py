"""Bash's brace expansion of one word as written (``.{git,agent-runtime}`` -> ``.git .agent-runtime``), so that
the paths a line writes are seen whatever the spelling. Pure: no I/O.

Bash expands braces before anything else, on the word as written: a brace inside quotes, after a backslash or in
``${...}`` stays as it is; ``{a,b}`` needs an unquoted comma at its own level, ``{1..3}``/``{a..e..2}`` are
sequences; a brace with neither (``{a}``, ``{}``) stays literal. Results keep their quotes (the caller unquotes).
Bounded: more than ``limit`` words is ``None`` (the caller treats the word as unknown), so ``{a,b}{c,d}...`` in a
hostile line cannot make the classifier build millions of words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["LIMIT", "expand_braces", "has_braces"]

LIMIT = 64
_SEQUENCE = re.compile(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?")


def has_braces(raw: str) -> bool:
    """Whether ``raw`` may hold a brace expansion (cheap: a ``{`` and a ``,`` or ``..`` after it)."""
    start = raw.find("{")
    return start >= 0 and ("," in raw[start:] or ".." in raw[start:])


def _live(raw: str, start: int) -> Iterator[int]:
    """The indexes, from ``start``, of the characters bash reads unquoted: not inside quotes, not escaped."""
    quote = ""
    i = start
    while i < len(raw):
        char = raw[i]
        if char == "\\" and quote != "'":
            i += 2  # an escaped character (inside double quotes too) is text
            continue
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        else:
            yield i
        i += 1


def _groups(raw: str) -> tuple[int, int, list[str]] | None:
    """The first expandable ``{…}`` of ``raw``: its start, end (inclusive) and its comma-separated parts, or None."""
    skip_to = 0
    for i in _live(raw, 0):
        if i < skip_to:
            continue
        if raw.startswith("${", i):
            skip_to = _skip(raw, i + 1)  # a parameter's braces are not a brace expansion
        elif raw[i] == "{" and (found := _close(raw, i)) is not None:
            return found
    return None


def _skip(raw: str, start: int) -> int:
    """The index after the ``}`` closing the brace at ``start`` (nesting counted), or the end of ``raw``."""
    depth = 0
    for i in range(start, len(raw)):
        if raw[i] == "{":
            depth += 1
        elif raw[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(raw)


def _close(raw: str, start: int) -> tuple[int, int, list[str]] | None:
    depth = 0
    parts: list[str] = []
    last = start + 1
    for i in _live(raw, start):
        char = raw[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                parts.append(raw[last:i])
                if len(parts) > 1:
                    return start, i, parts
                sequence = _sequence(parts[0])
                return (start, i, sequence) if sequence is not None else None
        elif char == "," and depth == 1:
            parts.append(raw[last:i])
            last = i + 1
    return None


def _sequence(body: str) -> list[str] | None:
    match = _SEQUENCE.fullmatch(body)
    if match is None:
        return None
    first, last, step_text = match.groups()
    step = abs(int(step_text)) if step_text else 1
    step = step or 1
    if first.lstrip("-").isdigit() != last.lstrip("-").isdigit():
        return None
    if first.lstrip("-").isdigit():
        a, b = int(first), int(last)
        if abs(b - a) // step >= LIMIT:
            return [str(a)] * (LIMIT + 1)  # too many: the caller's bound says so
        width = (
            max(len(first), len(last)) if first.lstrip("-").startswith("0") or last.lstrip("-").startswith("0") else 0
        )
        numbers = range(a, b + (1 if b >= a else -1), step if b >= a else -step)
        return [str(n).zfill(width) for n in numbers]
    a, b = ord(first), ord(last)
    return [chr(c) for c in range(a, b + (1 if b >= a else -1), step if b >= a else -step)]


def expand_braces(raw: str, limit: int = LIMIT) -> list[str] | None:
    """The words bash makes of ``raw`` by brace expansion, in bash's order (``[raw]`` when it has none); None when
    they would be more than ``limit``."""
    pending = [raw]
    done: list[str] = []
    while pending:
        word = pending.pop(0)
        found = _groups(word)
        if found is None:
            done.append(word)
        else:
            start, end, parts = found
            pending[:0] = [word[:start] + part + word[end + 1 :] for part in parts]
        if len(done) + len(pending) > limit:
            return None
    return done
