"""The little languages inside a command's words that can run commands or write files: sed scripts (``e``,
``w``/``W``, ``s///e``, ``s///w``) and awk programs (``system()``, pipes, ``print > file``, ``@load``).

Each scanner answers why a script is not read-only, or None. Deny by default: a script the scanner cannot read
to its end is not read-only either.
"""

from __future__ import annotations

import re

__all__ = ["awk_danger", "sed_danger"]

_SED_SIMPLE = set("=dDgGhHlnNpPqQxzF")  # commands without arguments (l, q, Q take an optional number)
_SED_TO_END = set("aic:btTrRv#")  # commands whose argument runs to the end of the line (`b`, `t`, `:`: to `;`)


def _skip_regex(script: str, i: int, delimiter: str) -> int:
    """Index just past the closing ``delimiter`` of a regex or replacement starting at ``i``; -1 if none."""
    in_class = False
    while i < len(script):
        char = script[i]
        if char == "\\":
            i += 2
            continue
        if char == "[" and delimiter != "[":
            in_class = True
        elif char == "]" and in_class:
            in_class = False
        elif char == delimiter and not in_class:
            return i + 1
        elif char == "\n" and delimiter != "\n":
            return -1
        i += 1
    return -1


def _sed_address(script: str, i: int) -> int:
    """Index past one address (`3`, `$`, `/re/I`, `\\cREc`, `first~step`, `+N`, `~N`); ``i`` if there is none."""
    if i < len(script) and script[i].isdigit():
        while i < len(script) and (script[i].isdigit() or script[i] == "~"):
            i += 1
        return i
    if i < len(script) and script[i] in "+~" and i + 1 < len(script) and script[i + 1].isdigit():
        i += 1
        while i < len(script) and script[i].isdigit():
            i += 1
        return i
    if i < len(script) and script[i] == "$":
        return i + 1
    if i < len(script) and script[i] in "/\\":
        delimiter = "/"
        if script[i] == "\\":
            if i + 1 >= len(script):
                return -1
            delimiter, i = script[i + 1], i + 1
        end = _skip_regex(script, i + 1, delimiter)
        if end < 0:
            return -1
        while end < len(script) and script[end] in "IM":
            end += 1
        return end
    return i


def sed_danger(script: str) -> str | None:
    i = 0
    n = len(script)
    while i < n:
        char = script[i]
        if char in " \t\n;}{":
            i += 1
            continue
        start = i
        i = _sed_address(script, i)
        if i < 0:
            return "could not be read to its end; not analysed"
        if i > start and i < n and script[i] == ",":
            i = _sed_address(script, i + 1)
            if i < 0:
                return "could not be read to its end; not analysed"
        while i < n and script[i] in " \t!":
            i += 1
        if i >= n:
            return None
        command = script[i]
        i += 1
        if command in "{};\n":
            continue
        if command == "e":
            return "runs a shell command (the `e` command)"
        if command in "wW":
            return "writes a file (the `w` command)"
        if command == "s" or command == "y":
            if i >= n or script[i] in "\n\\":
                return "could not be read to its end; not analysed"
            delimiter = script[i]
            i = _skip_regex(script, i + 1, delimiter)
            if i < 0:
                return "could not be read to its end; not analysed"
            i = _skip_regex(script, i, delimiter) if i <= n else -1
            if i < 0:
                return "could not be read to its end; not analysed"
            if command == "y":
                continue
            while i < n and script[i] not in ";\n}":
                flag = script[i]
                if flag == "e":
                    return "runs the pattern space as a command (the `s///e` flag)"
                if flag == "w":
                    return "writes a file (the `s///w` flag)"
                if not (flag.isdigit() or flag in "gpiImM \t"):
                    return f"uses an `s` flag the rules do not know ({flag!r}); not analysed"
                i += 1
            continue
        if command in _SED_SIMPLE:
            while i < n and (script[i].isdigit() or script[i] in " \t"):
                i += 1
            if i < n and script[i] not in ";\n}":
                return f"could not be read to its end at {script[i : i + 10]!r}; not analysed"
            continue
        if command in _SED_TO_END:
            stop = "\n;" if command in ":btT" else "\n"
            while i < n and script[i] not in stop:
                if script[i] == "\\" and command in "aic":
                    i += 1  # a continued line of text
                i += 1
            continue
        return f"uses the command {command!r} that the rules do not know; not analysed"
    return None


_AWK_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_AWK_RUNS = re.compile(r"\bsystem\s*\(|(?<!\|)\|(?!\|)|@load\b|@include\b|\bgetline\b\s*$|\|&")
_AWK_WRITES = re.compile(r"\b(?:print|printf)\b[^;{}\n]*>")


def awk_danger(program: str) -> str | None:
    """Why an awk program may run commands or write files: ``system()``, a pipe (`cmd | getline`, `print |
    "cmd"`), ``print > file``, ``@load``/``@include``. Strings are blanked first: `print "a|b"` is harmless; a
    comparison `$1 > 5` outside print is harmless too."""
    text = _AWK_STRING.sub('""', program)
    if _AWK_RUNS.search(text):
        return "may write files or run commands (system(), a pipe, or a loaded extension)"
    if _AWK_WRITES.search(text):
        return "may write files or run commands (print > file)"
    return None
