"""Shell syntax for the classifier: a command line parsed into bashlex's trees, and facts about its words.

bashlex is imported on the first parse, not with this module: building its parser tables costs a few hundred
milliseconds, which every CLI start-up would pay although most commands never classify a line.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "ASSIGNMENT",
    "EXPANSION_KINDS",
    "ParseFailure",
    "children",
    "dollar_unquote",
    "is_blank",
    "looks_dynamic",
    "parse",
    "replace_arithmetic",
]

ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
EXPANSION_KINDS = frozenset({"parameter", "commandsubstitution", "processsubstitution"})


class ParseFailure(Exception):
    pass


_QUOTED_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^'\n]+)'|\"([^\"\n]+)\"|\\(\w+))")
_TIME_KEYWORD = re.compile(r"(^|[;&|(){}\n!]|\b(?:then|do|else))([ \t]*)time(?=[ \t]|$)", re.MULTILINE)
_ARITHMETIC_TEST = re.compile(r"\[\[(?:(?!\]\]).)*-(?:eq|ne|lt|le|gt|ge)\b(?:(?!\]\]).)*\]\]", re.DOTALL)
_DOUBLE_BRACKETS = re.compile(r"(^|(?<=[\s;&|(]))\[\[(?=\s)|(?<=\s)\]\](?=$|[\s;&|)])", re.MULTILINE)


def parse(text: str) -> tuple[list[Any], frozenset[str], str]:
    """bashlex's trees, the here-document delimiters that were quoted (their bodies are not expanded), and the
    text the trees' positions refer to.

    bashlex rejects a few common constructs; on failure the line is rewritten once into an equivalent it does
    accept (or one that is judged at least as dangerously) and parsed again.
    """
    import bashlex  # on first use, not at import: see the module docstring

    try:
        return list(bashlex.parse(text)), frozenset(), text
    except Exception as first:  # bashlex raises ParsingError, NotImplementedError, AttributeError, …
        quoted: set[str] = set()

        def unquote(match: re.Match[str]) -> str:
            delimiter = match.group(2) or match.group(3) or match.group(4)
            quoted.add(delimiter)
            return f"<<{match.group(1)}{delimiter}"

        # `cat <<'EOF'` -> `cat <<EOF` (quoted delimiters are unsupported); `$((1+2))` -> `0` (unless it
        # hides a substitution); `time cmd` -> `\time cmd` (the keyword is unsupported); `[[ … ]]` -> `[ … ]`
        # (unsupported; the rewrite only ever adds findings).
        rewritten = replace_arithmetic(_QUOTED_HEREDOC.sub(unquote, text), numbers_only=True)
        rewritten = _TIME_KEYWORD.sub(r"\1\2\\time", rewritten)
        if not _ARITHMETIC_TEST.search(rewritten):  # `[[ $x -eq 1 ]]` evaluates x's value: no `[` stands for it
            rewritten = _DOUBLE_BRACKETS.sub(lambda m: m.group(0).replace("[[", "[").replace("]]", "]"), rewritten)
        if rewritten != text:
            try:
                return list(bashlex.parse(rewritten)), frozenset(quoted), rewritten
            except Exception:
                pass
        raise ParseFailure(_describe_parse_error(first)) from None


_NUMERIC = re.compile(r"[\s0-9+\-*/%()<>=!&|^~?:,]*")


def replace_arithmetic(text: str, *, numbers_only: bool = False) -> str:
    """`$(( … ))` -> `0`; left alone when it contains a command substitution, which must not vanish, and with
    ``numbers_only`` when it names a variable: arithmetic evaluates a variable's value as an expression, and an
    array subscript in it (`a[$(cmd)]`) runs commands, so such a line stays unparsed and asks."""
    out: list[str] = []
    i = 0
    while (start := text.find("$((", i)) >= 0:
        depth, j, inner_end = 0, start + 1, -1
        while j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 1 and inner_end < 0 and j > start + 2:
                inner_end = j  # where the second `(` closed
            if depth == 0:
                break
            j += 1
        inner = text[start + 3 : j - 1]
        # Only a true `$(( … ))`: otherwise bash reads `$( ( … ) … )`, a command substitution.
        dynamic = "$(" in inner or "`" in inner or (numbers_only and not _NUMERIC.fullmatch(inner))
        if j >= len(text) or inner_end != j - 1 or dynamic:
            out.append(text[i : start + 3])
            i = start + 3
            continue
        out.append(text[i:start] + "0")
        i = j + 1
    out.append(text[i:])
    return "".join(out)


def _describe_parse_error(exc: Exception) -> str:
    import bashlex  # already loaded by parse(), which is the only caller

    message = " ".join(str(exc).split())[:120]
    if isinstance(exc, NotImplementedError):
        return f"uses shell syntax the parser does not support ({message})"
    if isinstance(exc, bashlex.errors.ParsingError):
        return f"is not valid shell ({message})"
    return f"could not be parsed ({type(exc).__name__}: {message})" if message else "could not be parsed"


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
    return "$" in program or "`" in program or (program != "[" and any(c in program for c in "*?["))
