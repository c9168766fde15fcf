"""Large values out of the log: the rule, with no I/O (values in, values out; the caller stores and reads blobs).

A string in a recorded value (a ledger entry's input, a tool call's arguments in a history message) longer than
``LARGE_BYTES`` encoded is kept as a content-addressed blob, and the record holds a reference in its place::

    {"$large": "blob:sha256:<hex>", "size": <bytes>}                      # the value's UTF-8 bytes are the blob
    {"$large": "blob:sha256:<hex>", "size": <bytes>, "lost": "[REDACTED:secret]"}

The blob holds the value as the record would have held it inline: redacted where the field is redacted (``lost``
then says so, so a check for redacted arguments, ``redacted_arguments``, still sees it without reading the blob).
A value that already has that shape (or ``{"$literal": ...}``'s) is the caller's own, perhaps hostile (a model
naming a blob of another run): it is kept as ``{"$literal": value}`` and given back as it was, never read as a
blob. ``resolve`` puts the values back, exactly where a reader needs them (a replay, an input shown, a hash checked).
A log written before holds its values inline: there is nothing to resolve and it reads as before. The ``blob:``
form is what ``core.retention`` already finds in a ledger entry, so gc keeps what an input references.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LARGE_BYTES = 4096  # a string over this many UTF-8 bytes leaves the record (the size of a blob's own reference)
MARK = "$large"
LITERAL = "$literal"  # a value of the input's own that looks like a reference, kept as it was given
# How the recovery note and the doubt begin the list of lost content (the note says it apart from log damage).
LOST_CONTENT = "the store no longer has content those records kept"
_KEYS = (frozenset({MARK, "size"}), frozenset({MARK, "size", "lost"}))


def is_reference(item: object) -> bool:
    """``{"$large": "blob:sha256:...", "size": N[, "lost": ...]}``: a value kept as a blob."""
    return (
        isinstance(item, dict)
        and frozenset(item) in _KEYS
        and isinstance(item[MARK], str)
        and item[MARK].startswith("blob:sha256:")
        and isinstance(item["size"], int)
    )


def externalize(value: Any, put: Callable[[str], tuple[str, str]]) -> Any:
    """A copy of the JSON-like ``value`` with every large string replaced by a reference (``value`` itself when
    it holds none). ``put(text)`` stores what the record would have held of ``text`` and returns the digest and
    that text (the redacted text where the field is redacted). Walked without recursion (inputs are untrusted)."""
    if not _needs_change(value):
        return value
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        parent, key, item = stack.pop()
        if _looks_kept(item):
            parent[key] = {LITERAL: item}
        elif isinstance(item, str):
            if len(item) * 4 > LARGE_BYTES and len(encoded := item.encode(errors="surrogatepass")) > LARGE_BYTES:
                digest, kept = put(item)
                reference: dict[str, Any] = {MARK: f"blob:{digest}", "size": len(encoded)}
                if kept != item:
                    reference["lost"] = _lost(kept)
                parent[key] = reference
        elif isinstance(item, dict):
            copy = dict(item)
            parent[key] = copy
            stack.extend((copy, k, v) for k, v in item.items())
        elif isinstance(item, list | tuple):
            listed = list(item)
            parent[key] = listed
            stack.extend((listed, i, v) for i, v in enumerate(listed))
    return root[0]


def resolve(value: Any, get: Callable[[str], str]) -> Any:
    """``value`` with every reference replaced by its text (``get(digest)``); ``value`` itself when it holds none."""
    if not has_references(value):
        return value
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        parent, key, item = stack.pop()
        if is_reference(item):
            parent[key] = get(str(item[MARK]).removeprefix("blob:"))
        elif isinstance(item, dict) and set(item) == {LITERAL}:
            parent[key] = item[LITERAL]
        elif isinstance(item, dict):
            copy = dict(item)
            parent[key] = copy
            stack.extend((copy, k, v) for k, v in item.items())
        elif isinstance(item, list):
            listed = list(item)
            parent[key] = listed
            stack.extend((listed, i, v) for i, v in enumerate(listed))
    return root[0]


def references(value: Any) -> list[str]:
    """The digests of the blobs ``value``'s references name, in no particular order."""
    found: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if is_reference(item):
            found.append(str(item[MARK]).removeprefix("blob:"))
        elif isinstance(item, dict) and set(item) == {LITERAL}:
            continue  # the caller's own value: nothing in it is ours
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def contains(value: Any, text: str) -> bool:
    """Whether ``text`` is ``value`` or one of the strings nested in it."""
    return _any(value, lambda item: item == text)


def has_references(value: Any) -> bool:
    """Whether ``value`` holds anything ``resolve`` changes (a reference, or a literal kept as it was)."""
    return _any(value, _looks_kept)


def _looks_kept(item: object) -> bool:
    return is_reference(item) or (isinstance(item, dict) and set(item) == {LITERAL})


def _needs_change(value: Any) -> bool:
    return _any(value, lambda item: _looks_kept(item) or _is_large(item))


def _is_large(item: object) -> bool:
    # The length bounds the encoded size from below (at most 4 bytes a character): most strings skip the encode.
    return (
        isinstance(item, str) and len(item) * 4 > LARGE_BYTES and len(item.encode(errors="surrogatepass")) > LARGE_BYTES
    )


def _any(value: Any, found: Callable[[object], bool]) -> bool:
    """Whether ``found`` holds for ``value`` or anything nested in it (dicts' values, lists, tuples), without
    recursion (a hostile argument may nest deeper than Python's stack)."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if found(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def _lost(kept: str) -> str:
    """What redaction left of the value, as the record says it (the marks it put in; the first one suffices)."""
    at = kept.find("[REDACTED:")
    if at < 0:
        return "[REDACTED:changed]"
    end = kept.find("]", at)
    return kept[at : end + 1] if 0 < end - at < 80 else "[REDACTED:secret]"
