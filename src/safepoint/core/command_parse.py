"""Shell syntax for the classifier: a command line parsed into trees (tree-sitter-bash, read into the walk's
node shape by :mod:`safepoint.core.command_tree`), and facts about its words.

The parser is imported on the first parse, not with this module: a CLI start-up must not pay for it.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "ASSIGNMENT",
    "EXPANSION_KINDS",
    "ParseFailure",
    "arithmetic_danger",
    "children",
    "dollar_unquote",
    "is_blank",
    "looks_dynamic",
    "parse",
]

ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
EXPANSION_KINDS = frozenset({"parameter", "commandsubstitution", "processsubstitution", "arithmetic"})


class ParseFailure(Exception):
    pass


def parse(text: str) -> tuple[list[Any], frozenset[str], str]:
    """The line's trees (:mod:`safepoint.core.command_tree`), the here-document delimiters that were quoted (their
    bodies are not expanded), and the text the trees' positions refer to. A line that does not parse whole raises
    :class:`ParseFailure`, whose text says why."""
    from safepoint.core.command_tree import TreeError, parse_tree  # tree-sitter loads on the first parse

    try:
        trees, quoted = parse_tree(text)
    except TreeError as failure:
        raise ParseFailure(str(failure)) from None
    return list(trees), quoted, text


_NUMERIC = re.compile(r"[\s0-9+\-*/%()<>=!&|^~?:,;]*")


def arithmetic_danger(text: str) -> str | None:
    """Why an arithmetic text (`$((...))`, `((...))`, a C-style `for`) is not read-only: it evaluates variables,
    whose values are evaluated as expressions again, and an array subscript in one (`a[$(cmd)]`) runs commands.
    None for plain numbers and operators."""
    shown = " ".join(text.split())[:40]
    inner = text.removeprefix("$").removeprefix("((").removesuffix("))")
    if "$(" in inner or "`" in inner:
        return f"arithmetic expansion `{shown}` runs a command substitution; not analysed"
    if not _NUMERIC.fullmatch(inner):
        return f"arithmetic expansion `{shown}` evaluates variables, whose array subscripts can run commands"
    return None


_C_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
              "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}  # fmt: skip


def dollar_unquote(raw: str) -> str | None:
    """A word with ANSI-C (`$'\x2d'`) or locale (`$"..."`) quoting, as bash reads it; None when it holds an
    expansion (`$x`, `` ` ``) or is not a well-formed word, so the caller keeps it as not understood."""
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        char = raw[i]
        if raw.startswith("$'", i):
            i += 2
            while i < n and raw[i] != "'":
                if raw[i] == "\\" and i + 1 < n:
                    i, piece = _c_escape(raw, i + 1)
                    out.append(piece)
                    continue
                out.append(raw[i])
                i += 1
            if i >= n:
                return None
            i += 1
        elif char == "'":
            end = raw.find("'", i + 1)
            if end < 0:
                return None
            out.append(raw[i + 1 : end])
            i = end + 1
        elif char == '"' or raw.startswith('$"', i):
            i += 2 if char == "$" else 1
            while i < n and raw[i] != '"':
                if raw[i] in "$`":
                    return None
                if raw[i] == "\\" and i + 1 < n and raw[i + 1] in '"\\$`':
                    i += 1
                out.append(raw[i])
                i += 1
            if i >= n:
                return None
            i += 1
        elif char in "$`":
            return None
        elif char == "\\" and i + 1 < n:
            out.append(raw[i + 1])
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _c_escape(raw: str, i: int) -> tuple[int, str]:
    """The character an ANSI-C escape at ``raw[i]`` (just after its backslash) stands for, and where it ends."""
    char = raw[i]
    if char in _C_ESCAPES:
        return i + 1, _C_ESCAPES[char]
    for prefix, size, base in (("x", 2, 16), ("u", 4, 16), ("U", 8, 16)):
        if char == prefix:
            digits = re.match(f"[0-9a-fA-F]{{1,{size}}}", raw[i + 1 :])
            if digits:
                return i + 1 + len(digits.group()), chr(int(digits.group(), base))
    digits = re.match("[0-7]{1,3}", raw[i:])
    if digits:
        return i + len(digits.group()), chr(int(digits.group(), 8) & 0xFF)
    if char == "c" and i + 1 < len(raw):
        return i + 2, chr(ord(raw[i + 1]) & 0x1F)
    return i + 1, "\\" + char


def is_blank(text: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())


def children(node: Any) -> list[Any]:
    found: list[Any] = []
    for attr in ("parts", "list", "command", "output", "redirects"):
        value = getattr(node, attr, None)
        if isinstance(value, list):
            found.extend(v for v in value if hasattr(v, "kind"))
        elif hasattr(value, "kind"):
            found.append(value)
    return found


def looks_dynamic(program: str) -> bool:
    # `$CMD`, `$(…)`, and globs (`r?` may expand to `rm`) in the program position.
    return "$" in program or "`" in program or (program not in {"[", "[["} and any(c in program for c in "*?["))
