"""Which paths a shell command line may change, so that a runtime can save them before it runs.

Pure: no I/O, nothing is executed. Reuses the walk of :mod:`safepoint.core.command_walk`; see the
comment above ``_raw_is_literal`` for what is reported and what is skipped.
"""

from __future__ import annotations

import functools
import posixpath
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from safepoint.core.command_braces import expand_braces, has_braces
from safepoint.core.command_findings import Finding
from safepoint.core.command_judge import judge
from safepoint.core.command_parse import ASSIGNMENT, EXPANSION_KINDS, children
from safepoint.core.command_rules import HARMLESS_TARGETS, SHELLS, WRAPPERS
from safepoint.core.command_spec import Parsed, ProgramSpec, Word, is_literal, parse_words
from safepoint.core.command_walk import Walker
from safepoint.core.commands import DEFAULT_COMMAND_RULES, CommandRules, compiled_tree

__all__ = ["TargetWalker", "write_targets"]


# ----------------------------------------------------------------------------------------------------------
# Write targets: which paths a command line may change, so that a runtime can save them first
# ----------------------------------------------------------------------------------------------------------
#
# ``write_targets`` reuses the classifier's parsing and walking (``command_parse.parse``, ``command_walk.Walker``:
# wrappers such as env/sudo/xargs/timeout/`uv run` are peeled, `bash -c`/`eval`/`env -S` strings and
# here-documents fed to a shell are parsed and walked, substitutions are entered) and swaps the judging of
# each simple command for a table of per-program "which operands does it write" functions.
#
# Words carry whether they are literal (``_Word``): a word with a parameter, a command substitution, a
# leading ``~`` or arithmetic is skipped; a brace expansion is expanded (``command_braces``, bounded: past the
# bound the word is skipped); a glob (``*``, ``?``, ``[…]``) is kept as written, quotes removed, for the caller
# to expand.
#
# Working directory (best effort): ``cd DIR`` / ``pushd DIR`` with a literal DIR prefixes the relative
# targets that follow (``(cd sub && rm a)`` -> ``sub/a``); an absolute DIR makes them absolute. Subshells
# (``( … )``, pipeline members, ``&`` jobs, ``$( … )``, ``bash -c``, function bodies) keep their ``cd`` to
# themselves. After a ``cd`` whose directory is not a literal (``cd "$D"``, ``cd``, ``cd -``, ``popd``)
# relative targets cannot be placed and are skipped; absolute ones are still returned. ``git -C DIR`` and
# ``patch -d DIR`` prefix their own paths the same way. ``cd`` is assumed to succeed and CDPATH is ignored.
#
# Reported: redirections (`>`, `>>`, `>|`, `&>`, `&>>`, `>&FILE`, `<>`, `N>`; not fd duplication), and the
# operands that rm, rmdir, unlink, shred, touch, truncate, tee, mv (sources and destination), cp/install/ln
# (the destination, or `-t DIR`), chmod/chown/chgrp, `sed -i`/`perl -i` (the files, and the `-i.bak` backup
# copies), `dd of=`, `git checkout/restore/rm/mv`, patch (FILE, `-o`, `-r`), `sort -o`, `uniq IN OUT`,
# `curl -o`, `wget -O`, `tar -c/-r/-u -f ARCHIVE` and gzip/bzip2/xz (the replaced input) change.
#
# Not reported (the set is not known from the line, or nothing on disk is replaced): ``tar -x``, ``unzip``,
# ``find -delete``/``-exec``, ``rsync``, ``git reset/clean/stash/switch/merge…``, ``python -c``/scripts and other
# interpreters, ``make``, package managers, ``mkdir``, ``xargs`` operands that come from standard input or
# ``-I`` replacement strings, and paths under /dev, /proc and /sys.


def _rawis_literal(raw: str) -> bool:
    """Whether a word, as written in the source, is free of expansions other than globbing."""
    if raw.startswith("~"):
        return False
    quote = ""
    braces = 0
    separated = False
    i = 0
    while i < len(raw):
        char = raw[i]
        if quote == "'":
            if char == "'":
                quote = ""
        elif char == "\\":
            i += 2
            continue
        elif char in "$`":
            return False
        elif quote == '"':
            if char == '"':
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "{":
            braces += 1
        elif braces and (char == "," or raw.startswith("..", i)):
            separated = True
        elif char == "}" and braces:
            if separated:
                return False  # `{a,b}` / `{1..3}`
            braces -= 1
        i += 1
    return True


def _split_args(
    args: Sequence[str], short_with_value: str = "", long_with_value: Iterable[str] = (), short_optional: str = ""
) -> Parsed:
    """The words of a wrapper or ``cd`` (not a program with a spec) read by the one option parser."""
    spec = ProgramSpec(
        takes_value=frozenset(f"-{c}" for c in short_with_value) | frozenset(long_with_value),
        attached_value=frozenset(f"-{c}" for c in short_optional),
    )
    return parse_words(spec, args)


def _join_dir(directory: str | None, path: str) -> str | None:
    """``path`` placed under ``directory`` ("" = the command's working directory, None = unknown)."""
    if path.startswith("/"):
        return path
    if directory is None:
        return None
    return posixpath.join(directory, path) if directory else path


def _change_dir(directory: str | None, target: str) -> str | None:
    """The working directory after `cd target` (normalised; "" for the starting one)."""
    if not is_literal(target) or target in {"", "-"} or any(c in target for c in "*?["):
        return None
    joined = _join_dir(directory, target)
    if joined is None:
        return None
    normal = posixpath.normpath(joined)
    return "" if normal == "." else normal


class TargetWalker(Walker):
    """The classifier's walk, collecting the paths each simple command may change instead of verdicts."""

    # Brace expansions are expanded (bounded: ``command_braces``): ``rm a.{txt,md}`` writes two files, and the
    # copies kept before the command must hold both (skipping them lost an untracked file to a rollback).
    braces = True

    def __init__(self, rules: CommandRules) -> None:
        super().__init__(compiled_tree(rules))
        self.targets: list[str] = []
        self.cwd: str | None = ""  # relative to the command's working directory; None once unknown
        self.words: list[str] = []  # the current simple command's words, peeled wrappers and options included

    # ---- walking -----------------------------------------------------------------------------------------

    def nested_command(self, words: Sequence[str], depth: int) -> list[Finding]:
        # `find -exec rm {} ;` writes files the line does not name: nothing to keep ahead
        found: list[Finding] = []
        self.capture(lambda: found.extend(super(TargetWalker, self).nested_command(words, depth)))
        return found

    def capture(self, run: Callable[[], None]) -> list[str]:
        before = len(self.targets)
        run()
        found = self.targets[before:]
        del self.targets[before:]
        return found

    def subshell(self, run: Callable[[], None]) -> None:
        saved = self.cwd
        try:
            run()
        finally:
            self.cwd = saved

    def node(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        kind = getattr(node, "kind", None)
        if kind in {"commandsubstitution", "processsubstitution", "function"}:
            self.subshell(lambda: super(TargetWalker, self).node(node, depth, quoted))
        elif kind == "compound":
            # Redirections apply before (and outside) the body; a `( … )` body keeps its `cd` to itself.
            redirects = [r for r in getattr(node, "redirects", []) if getattr(r, "kind", None) == "redirect"]
            body = [part for part in getattr(node, "list", []) if hasattr(part, "kind")]

            def redirections() -> None:
                for redirect in redirects:
                    self.redirect(redirect, depth, quoted)

            def walk() -> None:
                for part in body:
                    self.node(part, depth, quoted)

            outer = self.capture(redirections)
            first = body[0] if body else None
            if getattr(first, "kind", None) == "reservedword" and getattr(first, "word", "") == "(":
                self.subshell(walk)
            else:
                walk()
            self.targets.extend(outer)
        elif kind == "pipeline":
            skipped = {"pipe", "reservedword"}
            members = [p for p in getattr(node, "parts", []) if getattr(p, "kind", None) not in skipped]
            for member in members:
                if len(members) > 1:  # every member of a pipeline runs in a subshell
                    self.subshell(lambda: self.node(member, depth, quoted))  # noqa: B023 (called at once)
                else:
                    self.node(member, depth, quoted)
        elif kind == "list":
            parts = list(getattr(node, "parts", []))
            for i, part in enumerate(parts):
                following = parts[i + 1] if i + 1 < len(parts) else None
                if getattr(following, "kind", None) == "operator" and getattr(following, "op", "") == "&":
                    self.subshell(lambda: self.node(part, depth, quoted))  # noqa: B023 (called at once)
                else:
                    self.node(part, depth, quoted)
        else:
            super().node(node, depth, quoted)

    def literal(self, node: Any) -> bool:
        if any(getattr(c, "kind", None) in EXPANSION_KINDS | {"tilde"} for c in children(node)):
            return False
        pos = getattr(node, "pos", None)
        if not (isinstance(pos, tuple) and len(pos) == 2):
            return False
        return _rawis_literal(self.source[pos[0] : pos[1]])

    def expanded(self, node: Any, text: str) -> list[Word]:
        """A word after the program's name as bash's brace expansion makes it (``rm a.{txt,md}`` removes two
        files); one word that is not literal when the expansion is over its bound or holds other expansions."""
        pos = getattr(node, "pos", None)
        raw = self.source[pos[0] : pos[1]] if isinstance(pos, tuple) and len(pos) == 2 else ""
        if (
            not self.braces
            or not has_braces(raw)
            or any(getattr(c, "kind", None) in EXPANSION_KINDS for c in children(node))
        ):
            return [Word(text, self.literal(node))]
        pieces = expand_braces(raw)
        if pieces is None:
            self.too_many_braces(text)
            return [Word(text, False)]
        words: list[Word] = []
        for piece in pieces:
            try:
                split = shlex.split(piece)
            except ValueError:
                split = []
            words.extend(Word(word, _rawis_literal(piece)) for word in split[:1])
        return words

    def too_many_braces(self, text: str) -> None:
        """A brace expansion past its bound: its paths are not known (a subclass may hold such a line)."""

    def simple_command(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        parts = list(getattr(node, "parts", []))
        words: list[str] = []
        first_pos = 0
        stdin: str | None = None
        for part in parts:
            kind = getattr(part, "kind", None)
            if kind == "word":
                text = self.word(part)
                if not words and ASSIGNMENT.match(text):
                    continue
                if not words:
                    first_pos = part.pos[0] if isinstance(getattr(part, "pos", None), tuple) else 0
                    words.append(Word(text, self.literal(part)))
                else:
                    words.extend(self.expanded(part, text))
            elif kind == "redirect":
                stdin = self.stdin_text(part) if stdin is None else stdin
        # Redirections and substitutions first: they use the working directory from before a `cd` here.
        chunks: list[tuple[int, list[str]]] = []
        for part in parts:
            pos = getattr(part, "pos", (0, 0))
            start = pos[0] if isinstance(pos, tuple) else 0
            if getattr(part, "kind", None) == "redirect":
                chunks.append((start, self.capture(lambda: self.redirect(part, depth, quoted))))  # noqa: B023
            else:
                chunks.append((start, self.capture(lambda: self.nested(part, depth, quoted))))  # noqa: B023
        if words and is_literal(words[0]):
            outer, self.words = self.words, words
            try:
                chunks.append((first_pos, self.capture(lambda: self.argv(words, depth, stdin))))
            finally:
                self.words = outer
        for _, found in sorted(chunks, key=lambda chunk: chunk[0]):
            self.targets.extend(found)

    def redirect(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        output = getattr(node, "output", None)
        if getattr(node, "heredoc", None) is not None or output is None or isinstance(output, int | str):
            return  # here-documents, and to or from a file descriptor (`2>&1`, `>&2`, `>&-`)
        self.nested(output, depth, quoted)  # `> >(tee log)`
        if str(getattr(node, "type", "")) in {">", ">>", ">|", "&>", "&>>", ">&", "<>"}:
            target = Word(self.word(output), self.literal(output))
            if not target.isdigit() and target != "-":
                self.emit([target])

    def emit(self, paths: Iterable[str]) -> None:
        for path in paths:
            if not is_literal(path) or not path or path in HARMLESS_TARGETS:
                continue
            if path.startswith(("/dev/", "/proc/", "/sys/")):
                continue
            placed = _join_dir(self.cwd, path)
            if placed is not None:
                self.targets.append(str(placed))

    # ---- one simple command, wrappers peeled ---------------------------------------------------------------

    def judge(self, argv: list[str], depth: int, stdin: str | None) -> None:
        name = argv[0]
        if name in SHELLS:
            saved = self.cwd
            self.shell(argv, depth, stdin)
            self.cwd = saved
        elif name == "eval":
            self.text(" ".join(argv[1:]), depth + 1)
        elif name in {"cd", "pushd", "popd"}:
            operands = _split_args(argv[1:]).operands
            if name == "popd" or len(operands) != 1:
                self.cwd = None  # `cd` alone goes home; `popd`, `pushd` alone: the directory stack
            else:
                self.cwd = _change_dir(self.cwd, operands[0])
        else:
            judged = judge(self.tree, argv, self, depth)
            self.emit(self.drop_placeholders(argv, judged.targets))

    def before(self, argv: Sequence[str]) -> list[str]:
        """The words of the simple command that came before ``argv[1]``: the peeled wrappers and options."""
        if len(argv) > 1:
            for i, word in enumerate(self.words):
                if word is argv[1]:
                    return self.words[:i]
        return []

    def drop_placeholders(self, argv: Sequence[str], paths: list[str]) -> list[str]:
        """Under `xargs -I R` / `-i` the words holding R are templates for standard input, not paths."""
        peeled = self.before(argv)
        if not any(posixpath.basename(word) == "xargs" for word in peeled):
            return paths
        start = max(i for i, word in enumerate(peeled) if posixpath.basename(word) == "xargs")
        parsed = _split_args(peeled[start + 1 :], "adEILnPs", WRAPPERS["xargs"][1], "iel")
        marks = parsed.values("-I", "-i", "--replace")
        if parsed.has("-i", "--replace") and not any(parsed.values("-i", "--replace")):
            marks.append("{}")
        return [path for path in paths if not any(mark and mark in path for mark in marks)]


def write_targets(command: str, rules: CommandRules = DEFAULT_COMMAND_RULES) -> tuple[str, ...]:
    """Paths (as written in the command, relative to the command's working directory, or absolute) that the
    command line may write, truncate, delete, move or change the mode of — so that a runtime can save their
    content just before the command runs. They come from the same specs as the verdict (``rules``): the
    operands and option values a program's spec marks written, and redirections. Literal words only; a word
    with a glob (*, ?, [..]) is returned as written (the caller expands it); a word with a variable, command
    substitution, ~ or other expansion is skipped. Never raises; returns () for an unparsable line. Order of
    first appearance, deduplicated.

    Quotes are removed (``rm "a b"`` -> ``a b``). A ``cd DIR`` with a literal DIR prefixes the relative paths
    after it until its subshell ends (``(cd sub && rm a)`` -> ``sub/a``); after a ``cd`` to a directory that
    is not literal, relative paths are skipped. See the comment above ``_raw_is_literal`` for what is handled
    and what is skipped.
    """
    try:
        return _write_targets_cached(command, rules)
    except Exception:  # a bug here must not crash the runtime; it only loses the pre-command copies
        return ()


@functools.lru_cache(maxsize=4096)
def _write_targets_cached(command: str, rules: CommandRules = DEFAULT_COMMAND_RULES) -> tuple[str, ...]:
    walker = TargetWalker(rules)
    walker.text(command, depth=0)
    return tuple(dict.fromkeys(walker.targets))
