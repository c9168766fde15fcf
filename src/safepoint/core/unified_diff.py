"""Unified diffs as a patch tool receives them: parse, apply, reverse, tell whether one is applied.

No I/O: content goes in and out as bytes. Lines are split on ``\\n`` only, so a ``\\r`` before it (CRLF
files) is ordinary line content, both in the file and at the end of a diff line. Content is decoded as UTF-8
with ``surrogateescape``, so any bytes round-trip unchanged.

Applying is strict like ``git apply``: every context and removed line must match exactly (no fuzz), but a
hunk may sit at an offset from its stated line; the nearest match wins, forward before backward, like
``patch``. The ``\\ No newline at end of file`` marker is honoured on both sides.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from safepoint.errors import ToolFailure

__all__ = [
    "FileDiff",
    "Hunk",
    "apply_file_diff",
    "check_applied",
    "parse_unified_diff",
    "reverse_file_diff",
    "touched_paths",
]


class Hunk(msgspec.Struct, frozen=True, kw_only=True):
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple[str, ...]  # each starts with ' ', '-' or '+'; the text after the marker, without its newline
    old_no_newline: bool = False  # the last old-side line has no newline (it ends the old file)
    new_no_newline: bool = False  # the last new-side line has no newline (it ends the new file)


class FileDiff(msgspec.Struct, frozen=True, kw_only=True):
    old_path: str | None  # None: /dev/null, the diff creates the file
    new_path: str | None  # None: /dev/null, the diff deletes the file
    hunks: tuple[Hunk, ...]


_HUNK_RE = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_REGENERATE = "re-read the file and regenerate the diff against its current content"


# ---------------------------------------------------------------------------------------------------- parsing


def _malformed(lineno: int, what: str) -> ToolFailure:
    return ToolFailure(
        f"malformed diff at line {lineno}: {what}; send a unified diff ('--- old', '+++ new', '@@ hunks')"
    )


def _snippet(line: str) -> str:
    return repr(line if len(line) <= 60 else line[:57] + "...")


def _split_diff_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _unquote(quoted: str, lineno: int) -> str:
    """A git C-style quoted path (``"a/t\\303\\251st"``), up to its closing quote."""
    out = bytearray()
    j = 1
    while j < len(quoted):
        c = quoted[j]
        if c == '"':
            return bytes(out).decode("utf-8", "surrogateescape")
        if c != "\\":
            out += c.encode("utf-8", "surrogateescape")
            j += 1
            continue
        escape = quoted[j + 1 : j + 2]
        if escape and escape in "01234567":
            digits = quoted[j + 1 : j + 4]
            if len(digits) != 3 or any(d not in "01234567" for d in digits) or int(digits, 8) > 255:
                raise _malformed(lineno, f"bad octal escape in quoted path {_snippet(quoted)}")
            out.append(int(digits, 8))
            j += 4
        elif escape in _C_ESCAPES:
            out.append(_C_ESCAPES[escape])
            j += 2
        else:
            raise _malformed(lineno, f"bad escape in quoted path {_snippet(quoted)}")
    raise _malformed(lineno, f"unterminated quoted path {_snippet(quoted)}")


def _parse_path(rest: str, lineno: int) -> str | None:
    path = _unquote(rest, lineno) if rest.startswith('"') else rest.split("\t", 1)[0].rstrip()
    if not path:
        raise _malformed(lineno, "file header without a path")
    return None if path == "/dev/null" else path


def _strip_prefixes(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    """Drop git's ``a/`` and ``b/`` when both sides carry them (or are /dev/null); plain paths stay."""
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        return (None if old is None else old[2:]), (None if new is None else new[2:])
    return old, new


def _is_file_header(lines: list[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


class _HunkBuilder:
    def __init__(self, header_lineno: int, old_len: int, new_len: int) -> None:
        self.header_lineno = header_lineno
        self.old_left = old_len
        self.new_left = new_len
        self.lines: list[str] = []
        self.old_no_newline = False
        self.new_no_newline = False
        self.last: str | None = None  # marker of the previous body line, for a following '\' line

    def add(self, raw: str, lineno: int) -> None:
        marker, text = (raw[0], raw[1:]) if raw else (" ", "")  # an empty line is an empty context line
        if marker == "\\":
            self._no_newline(lineno)
            return
        if marker not in " -+":
            raise _malformed(
                lineno,
                f"expected a hunk line starting with ' ', '-' or '+' but got {_snippet(raw)}; "
                f"the hunk at line {self.header_lineno} has fewer lines than its header counts",
            )
        if marker in " -":
            if self.old_left == 0:
                raise _malformed(lineno, f"the hunk at line {self.header_lineno} has more old lines than its header")
            if self.old_no_newline:
                raise _malformed(lineno, "an old line follows the old side's '\\ No newline at end of file'")
            self.old_left -= 1
        if marker in " +":
            if self.new_left == 0:
                raise _malformed(lineno, f"the hunk at line {self.header_lineno} has more new lines than its header")
            if self.new_no_newline:
                raise _malformed(lineno, "a new line follows the new side's '\\ No newline at end of file'")
            self.new_left -= 1
        self.lines.append(marker + text)
        self.last = marker

    def _no_newline(self, lineno: int) -> None:
        if self.last is None:
            raise _malformed(lineno, "'\\ No newline at end of file' does not follow a hunk line")
        if self.last in " -":
            self.old_no_newline = True
        if self.last in " +":
            self.new_no_newline = True
        self.last = None


def _parse_hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    header = lines[i]
    match = _HUNK_RE.match(header)
    if match is None:
        raise _malformed(i + 1, f"bad hunk header {_snippet(header)}, expected '@@ -start,len +start,len @@'")
    old_start, new_start = int(match[1]), int(match[3])
    old_len = 1 if match[2] is None else int(match[2])
    new_len = 1 if match[4] is None else int(match[4])
    if (old_len and not old_start) or (new_len and not new_start):
        raise _malformed(i + 1, f"hunk header {_snippet(header)} starts a non-empty range at line 0")
    if not old_len and not new_len:
        raise _malformed(i + 1, f"hunk header {_snippet(header)} describes an empty hunk")
    builder = _HunkBuilder(i + 1, old_len, new_len)
    i += 1
    while builder.old_left or builder.new_left:
        if i >= len(lines):
            raise _malformed(i + 1, f"the diff ends inside the hunk at line {builder.header_lineno}")
        builder.add(lines[i], i + 1)
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):
        builder.add(lines[i], i + 1)
        i += 1
    hunk = Hunk(
        old_start=old_start,
        old_len=old_len,
        new_start=new_start,
        new_len=new_len,
        lines=tuple(builder.lines),
        old_no_newline=builder.old_no_newline,
        new_no_newline=builder.new_no_newline,
    )
    return hunk, i


def _old_index(hunk: Hunk) -> int:
    """0-based index of the first old line; an empty range names the line before it, as diff does."""
    return hunk.old_start - 1 if hunk.old_len else hunk.old_start


def _parse_file(lines: list[str], i: int) -> tuple[FileDiff, int]:
    old = _parse_path(lines[i][4:], i + 1)
    new = _parse_path(lines[i + 1][4:], i + 2)
    if old is None and new is None:
        raise _malformed(i + 1, "both sides of the file header are /dev/null")
    old, new = _strip_prefixes(old, new)
    i += 2
    if i >= len(lines) or not lines[i].startswith("@@"):
        raise _malformed(i + 1, "expected a hunk header '@@ -start,len +start,len @@' after the file header")
    hunks: list[Hunk] = []
    previous_end = 0
    while i < len(lines) and lines[i].startswith("@@"):
        header_lineno = i + 1
        hunk, i = _parse_hunk(lines, i)
        if old is None and hunk.old_len:
            raise _malformed(header_lineno, "a hunk of a diff from /dev/null has old lines")
        if new is None and hunk.new_len:
            raise _malformed(header_lineno, "a hunk of a diff to /dev/null has new lines")
        if _old_index(hunk) < previous_end:
            raise _malformed(header_lineno, "hunks overlap or are out of order")
        previous_end = _old_index(hunk) + hunk.old_len
        hunks.append(hunk)
        if (
            i < len(lines)
            and lines[i][:1] in (" ", "-", "+")
            and not _is_file_header(lines, i)
            and lines[i] not in ("--", "-- ")  # the signature separator of git format-patch
        ):
            raise _malformed(
                i + 1, f"hunk line after the end of the hunk at line {header_lineno}: its header undercounts"
            )
    return FileDiff(old_path=old, new_path=new, hunks=tuple(hunks)), i


def parse_unified_diff(text: str) -> list[FileDiff]:
    """Every file in a unified diff, in order.

    Text between files (``diff --git``, ``index``, mode lines, a commit message) is skipped; a hunk header
    outside a file, or any malformed header or hunk, raises ``ToolFailure``.
    """
    lines = _split_diff_lines(text)
    files: list[FileDiff] = []
    i = 0
    while i < len(lines):
        if _is_file_header(lines, i):
            file_diff, i = _parse_file(lines, i)
            files.append(file_diff)
        elif _HUNK_RE.match(lines[i]):
            raise _malformed(i + 1, "hunk header without a '--- old' / '+++ new' file header before it")
        else:
            i += 1
    return files


def touched_paths(text: str) -> list[str]:
    """Every path the diff writes or deletes, deduplicated, in order; [] for a malformed diff.

    Each file contributes its new path, then its old path when that differs (a rename deletes the old one).
    """
    try:
        files = parse_unified_diff(text)
    except ToolFailure:
        return []
    seen: dict[str, None] = {}
    for file_diff in files:
        for path in (file_diff.new_path, file_diff.old_path):
            if path is not None:
                seen.setdefault(path, None)
    return list(seen)


# --------------------------------------------------------------------------------------------------- applying


def _split_lines(content: str) -> list[str]:
    """Lines with their ``\\n`` (only the last may lack it); ``\\r`` is content."""
    parts = content.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _sides(hunk: Hunk, path: str) -> tuple[list[str], list[str]]:
    old: list[str] = []
    new: list[str] = []
    for line in hunk.lines:
        marker, text = line[:1], line[1:] + "\n"
        if marker not in (" ", "-", "+"):
            raise ToolFailure(f"patch for {path} has a hunk line {_snippet(line)} without ' ', '-' or '+'")
        if marker != "+":
            old.append(text)
        if marker != "-":
            new.append(text)
    if hunk.old_no_newline and old:
        old[-1] = old[-1][:-1]
    if hunk.new_no_newline and new:
        new[-1] = new[-1][:-1]
    return old, new


def _locate(lines: list[str], want: list[str], expected: int, lowest: int, at_end: bool) -> int | None:
    """The position nearest ``expected`` (forward first), not before ``lowest``, where ``want`` matches."""
    size = len(want)
    highest = len(lines) - size
    if at_end:
        lowest = max(lowest, highest)
    if lowest > highest:
        return None
    if size == 0:  # nothing to match against: only the stated place will do
        return expected if lowest <= expected <= highest else None
    for offset in range(max(highest - expected, expected - lowest) + 1):
        for pos in (expected + offset, expected - offset) if offset else (expected,):
            if lowest <= pos <= highest and lines[pos] == want[0] and lines[pos : pos + size] == want:
                return pos
    return None


def _at_stated(lines: list[str], want: list[str], pos: int, lowest: int, at_end: bool) -> int | None:
    """``pos`` when ``want`` matches there exactly (and ends the file when it must), else None."""
    if pos < lowest or lines[pos : pos + len(want)] != want or (at_end and pos + len(want) != len(lines)):
        return None
    return pos


def _display_path(diff: FileDiff) -> str:
    return diff.new_path or diff.old_path or "/dev/null"


def _hunk_label(hunk: Hunk, number: int, total: int) -> str:
    return f"hunk {number} of {total} (@@ -{hunk.old_start},{hunk.old_len} +{hunk.new_start},{hunk.new_len} @@)"


def apply_file_diff(diff: FileDiff, before: bytes | None) -> bytes | None:
    """The content after applying ``diff`` to ``before`` (None: file absent); None when the diff deletes it.

    Raises ``ToolFailure`` when the diff does not apply: the file's presence is wrong, or a hunk's context and
    removed lines are not in the file.
    """
    path = _display_path(diff)
    if diff.old_path is None:
        if before is not None:
            raise ToolFailure(
                f"patch does not apply to {path}: the diff creates it but it already exists; {_REGENERATE}"
            )
        lines: list[str] = []
    else:
        if before is None:
            raise ToolFailure(f"patch does not apply to {path}: the file does not exist; {_REGENERATE}")
        lines = _split_lines(before.decode("utf-8", "surrogateescape"))
    out: list[str] = []
    cursor = 0  # lines before this are consumed; hunks apply in order and never overlap
    drift = 0  # where the previous hunk matched relative to its header, carried to the next like `patch` does
    for number, hunk in enumerate(diff.hunks, 1):
        old, new = _sides(hunk, path)
        stated = (hunk.old_start - 1 if old else hunk.old_start) if lines else 0
        at_end = hunk.new_no_newline and not hunk.old_no_newline  # a line without newline must end the file
        if old and not any(line[:1] == " " for line in hunk.lines):
            # No context lines (a `diff -U0` hunk): nothing tells two identical lines apart, so only the stated line
            # will do (`git apply` refuses such hunks without --unidiff-zero; `patch` guesses, and may guess wrong).
            pos = _at_stated(lines, old, stated + drift, cursor, at_end)
            if pos is None:
                label = _hunk_label(hunk, number, len(diff.hunks))
                raise ToolFailure(
                    f"patch does not apply to {path}: {label} has no context lines and its removed lines are not at "
                    f"line {stated + drift + 1}; regenerate the diff with context (diff -U3)"
                )
        else:
            pos = _locate(lines, old, stated + drift, cursor, at_end)
        if pos is None:
            label = _hunk_label(hunk, number, len(diff.hunks))
            raise ToolFailure(f"patch does not apply to {path}: {label} does not match the file's lines; {_REGENERATE}")
        drift = pos - stated
        out += lines[cursor:pos]
        out += new
        cursor = pos + len(old)
    out += lines[cursor:]
    if diff.new_path is None:
        if out:
            raise ToolFailure(
                f"patch does not apply to {path}: the diff deletes it but the file has lines the diff "
                f"does not remove; {_REGENERATE}"
            )
        return None
    try:
        return "".join(out).encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise ToolFailure(f"patch for {path} holds text that cannot be written as UTF-8: {exc.reason}") from None


def _reverse_hunk(hunk: Hunk) -> Hunk:
    lines: list[str] = []
    removed: list[str] = []
    added: list[str] = []
    for line in (*hunk.lines, None):
        if line is not None and line[:1] in ("-", "+"):
            (added if line[:1] == "-" else removed).append(("+" if line[:1] == "-" else "-") + line[1:])
            continue
        lines += removed + added  # keep the usual order within a change: removed lines first
        removed.clear()
        added.clear()
        if line is not None:
            lines.append(line)
    return Hunk(
        old_start=hunk.new_start,
        old_len=hunk.new_len,
        new_start=hunk.old_start,
        new_len=hunk.old_len,
        lines=tuple(lines),
        old_no_newline=hunk.new_no_newline,
        new_no_newline=hunk.old_no_newline,
    )


def reverse_file_diff(diff: FileDiff) -> FileDiff:
    """The diff that undoes ``diff``: ``apply(reverse(d), apply(d, x)) == x``."""
    return FileDiff(
        old_path=diff.new_path,
        new_path=diff.old_path,
        hunks=tuple(_reverse_hunk(hunk) for hunk in diff.hunks),
    )


def _applies(diff: FileDiff, content: bytes | None) -> bool:
    try:
        apply_file_diff(diff, content)
    except ToolFailure:
        return False
    return True


def check_applied(diff: FileDiff, current: bytes | None) -> Literal["applies", "applied", "neither"]:
    """Like ``git apply --check`` then ``git apply --reverse --check``: "applies" if the diff applies to
    ``current``, else "applied" if its reverse does (``current`` already holds the result), else "neither"."""
    if _applies(diff, current):
        return "applies"
    if _applies(reverse_file_diff(diff), current):
        return "applied"
    return "neither"
