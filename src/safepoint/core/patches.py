"""File patches: the exact change from one content to the next, small for small edits (§8.4).

Text is diffed by lines and the patch holds only the replaced ranges, so 100 one-line edits of a 100 KB file cost
100 small patches, not 100 copies. Binary content (a NUL byte or invalid UTF-8) is never text-diffed: its patch is
the whole new content. ``apply`` reproduces the new content byte for byte; callers verify it by hash.
"""

from __future__ import annotations

import difflib

import msgspec


class LineEdit(msgspec.Struct, array_like=True, frozen=True):
    start: int  # first replaced line of the old content
    end: int  # one past the last replaced line
    text: str  # the new lines, joined, with their line endings


class Patch(msgspec.Struct, frozen=True, kw_only=True):
    format: str  # "lines" or "whole"
    edits: list[LineEdit] = msgspec.field(default_factory=list)
    whole: bytes = b""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Patch)


def is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def make_patch(before: bytes, after: bytes) -> bytes:
    if not (is_text(before) and is_text(after)):
        return _encoder.encode(Patch(format="whole", whole=after))
    old = before.decode().splitlines(keepends=True)
    new = after.decode().splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    edits = [LineEdit(i1, i2, "".join(new[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]
    return _encoder.encode(Patch(format="lines", edits=edits))


def apply_patch(before: bytes, patch: bytes) -> bytes:
    decoded = _decoder.decode(patch)
    if decoded.format == "whole":
        return decoded.whole
    old = before.decode().splitlines(keepends=True)
    out: list[str] = []
    position = 0
    for edit in decoded.edits:
        out.extend(old[position : edit.start])
        out.append(edit.text)
        position = edit.end
    out.extend(old[position:])
    return "".join(out).encode()


def unified_diff(before: bytes, after: bytes, path: str) -> str:
    """For people: a unified diff (binary files are named, not dumped)."""
    if not (is_text(before) and is_text(after)):
        return f"Binary file {path} changed ({len(before)} -> {len(after)} bytes)\n"
    return "".join(
        difflib.unified_diff(
            before.decode().splitlines(keepends=True),
            after.decode().splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )
