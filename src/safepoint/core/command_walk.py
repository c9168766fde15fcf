"""The walk over a parsed command line down to its simple commands, with their wrappers peeled off.

Every simple command found anywhere in a line (lists, pipelines, subshells, ``$( … )``, backticks, process
substitution, ``if``/``for``/``while`` bodies, ``bash -c '…'`` and ``eval`` strings, here-documents fed to a
shell) reaches :meth:`Walker.judge` as its words, after leading ``NAME=value`` words and wrappers (``env``,
``nice``, ``timeout N``, ``xargs``, ``sudo``, ``npx``, ``uv run`` …) are peeled, ``python -m mod`` became
``mod`` and ``git``'s global options were dropped. What the walk notices on the way (redirections that write,
programs named at run time, unparsable text) it records as findings.

``judge`` is left to subclasses: the classifier judges replay safety, the write-target finder collects paths.
"""

from __future__ import annotations

import abc
import functools
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from safepoint.core.command_checks import dangerous_variable
from safepoint.core.command_findings import Finding, finding
from safepoint.core.command_judge import Tree, unknown_program
from safepoint.core.command_parse import (
    ASSIGNMENT,
    EXPANSION_KINDS,
    ParseFailure,
    arithmetic_danger,
    children,
    dollar_unquote,
    is_blank,
    looks_dynamic,
    parse,
)
from safepoint.core.command_rules import (
    HARMLESS_TARGETS,
    MAX_CHARS,
    MAX_DEPTH,
    PRIVILEGED,
    RUNNERS,
    WRAPPERS,
    canonical,
)
from safepoint.core.command_spec import ProgramSpec, parse_words
from safepoint.records import RiskLevel

__all__ = ["Walker", "parameter_danger"]

_ARITHMETIC_WORD = re.compile(r"[A-Za-z_]")


def parameter_danger(value: str) -> str | None:
    """Why a parameter expansion can run code: `${x@P}` expands x's value as a prompt (its `$(...)` run);
    `${!x}` names a variable by x's value, and `${a[i]}` / `${x:i}` evaluate i as arithmetic -- a variable
    holding `b[$(cmd)]` runs cmd in both. None for the plain forms (`$x`, `${x:-d}`, `${a[@]}`, `${x:0:3}`)."""
    if value.endswith(("@P", "@A")) or "@P}" in value:
        return "expands a value as a prompt, which runs the command substitutions in it"
    if value.startswith("!") and not value.endswith(("*", "@", "[@]", "[*]")):
        return "names a variable by another's value, whose subscript can run commands"
    name, bracket, rest = value.partition("[")
    if bracket and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.lstrip("#!")):
        subscript = rest.split("]", 1)[0]
        if subscript not in {"@", "*"} and _ARITHMETIC_WORD.search(subscript):
            return "evaluates a subscript as arithmetic on variables, which can run commands"
    head, colon, tail = value.partition(":")
    offset = colon and tail[:1] not in {"-", "=", "?", "+"} and re.fullmatch(r"#?[A-Za-z_][A-Za-z0-9_]*", head)
    if offset and _ARITHMETIC_WORD.search(tail):
        return "evaluates an offset as arithmetic on variables, which can run commands"
    return None


# Shell options that make it read startup files (~/.bashrc, profiles, --rcfile), which run code not in the line.
_STARTUP_OPTIONS = frozenset({"--login", "--rcfile", "--init-file", "--interactive"})


@functools.cache
def _peeler(short_with_value: str, long_with_value: frozenset[str]) -> ProgramSpec:
    """The spec a wrapper's or runner's words are read by: its options end at the command it runs."""
    taking = frozenset(f"-{char}" for char in short_with_value) | long_with_value
    return ProgramSpec(takes_value=taking, options_end_at_operand=True, any_option=True)


def python_module(argv: Sequence[str]) -> list[str] | None:
    """`python -m mod args` -> [mod, args]; [] when there is no -m; None for `python -c`."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            return [argv[i + 1], *argv[i + 2 :]]
        if arg.startswith("-m") and len(arg) > 2:
            return [arg[2:], *argv[i + 1 :]]
        if arg == "-c" or (arg.startswith("-") and not arg.startswith("--") and arg.endswith("c")):
            return None
        if not arg.startswith("-") or arg == "-":
            return []
        i += 2 if arg in {"-W", "-X", "-Q"} else 1
    return []


class Walker(abc.ABC):
    def __init__(self, tree: Tree) -> None:
        self.tree = tree  # the specs the rules make
        self.findings: list[Finding] = []
        self.source = ""  # the text being walked: word positions point into it

    def unknown_program(self, argv: Sequence[str]) -> Finding:
        return unknown_program(self.tree, argv)

    def word(self, node: Any) -> str:
        """A word's text without quotes, re-read from the source as bash reads it (shlex, or the ANSI-C and locale
        quoting shlex does not know); the parser's text is kept when that fails."""
        text = str(getattr(node, "word", ""))
        pos = getattr(node, "pos", None)
        if not (isinstance(pos, tuple) and len(pos) == 2):
            return text
        raw = self.source[pos[0] : pos[1]]
        if "$'" in raw or '$"' in raw:
            # `$'\x2d\x2dpre'` is `--pre`: kept quoted, a word read as an operand would let an
            # option through unvetted
            decoded = dollar_unquote(raw)
            return decoded if decoded is not None else text
        if not any(q in raw for q in "'\"\\") or "`" in raw:
            return text
        try:
            split = shlex.split(raw)
        except ValueError:
            return text
        return split[0] if len(split) == 1 else text

    def add(self, grade: str, effects: Iterable[str], reason: str, risk: RiskLevel | None = None) -> None:
        self.findings.append(finding(grade, effects, reason, risk))

    # ---- text -> trees -----------------------------------------------------------------------------------

    def text(self, text: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.add(
                "unparsable",
                ("unknown",),
                f"shell strings nested deeper than {MAX_DEPTH} levels; not analysed",
            )
            return
        if is_blank(text):
            self.add("read_only", (), "empty command")
            return
        if len(text) > MAX_CHARS:
            self.add("unparsable", ("unknown",), f"command longer than {MAX_CHARS} characters; not analysed")
            return
        try:
            trees, quoted, source = parse(text)
        except ParseFailure as failure:
            self.add("unparsable", ("unknown",), f"the command {failure}; treated as dangerous")
            return
        before = len(self.findings)
        outer, self.source = self.source, source
        try:
            for tree in trees:
                self.node(tree, depth, quoted)
        finally:
            self.source = outer
        if len(self.findings) == before:  # the tree held nothing this walk recognises: do not call it safe
            self.add("unknown", ("unknown",), "no command found in the parsed line; treated as having effects")

    def collect(self, run: Callable[[], None]) -> list[Finding]:
        """The findings ``run`` records, taken out of the line's list so a caller can weigh them first."""
        before = len(self.findings)
        run()
        found = self.findings[before:]
        del self.findings[before:]
        return found

    def nested_command(self, words: Sequence[str], depth: int) -> list[Finding]:
        return self.collect(lambda: self.argv(words, depth))

    def node(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        kind = getattr(node, "kind", None)
        if kind == "command":
            self.simple_command(node, depth, quoted)
            return
        if kind == "parameter":
            value = str(getattr(node, "value", ""))
            if "$(" in value or "`" in value:  # a substitution inside ${…} runs only in some cases: not analysed
                self.add("unknown", ("unknown",), f"command substitution inside `${{{value}}}` is not analysed")
            elif (why := parameter_danger(value)) is not None:
                self.add("unknown", ("unknown",), f"`${{{value}}}` {why}")
            return
        if kind == "redirect":
            self.redirect(node, depth, quoted)
            return
        if kind == "arithmetic":
            why = arithmetic_danger(str(getattr(node, "value", "")))
            if why is not None:
                self.add("unparsable", ("unknown",), why)
        for child in children(node):
            self.node(child, depth, quoted)

    def simple_command(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        parts = list(getattr(node, "parts", []))
        words: list[str] = []
        dynamic_program = False
        assignments: list[str] = []
        stdin: str | None = None
        for part in parts:
            kind = getattr(part, "kind", None)
            if kind == "assignment":
                if not words:
                    assignments.append(self.word(part))
            elif kind == "word":
                text = self.word(part)
                if not words and ASSIGNMENT.match(text):
                    assignments.append(text)
                    continue
                if not words:
                    dynamic_program = any(getattr(p, "kind", None) in EXPANSION_KINDS for p in children(part))
                words.append(text)
            elif kind == "redirect":
                stdin = self.stdin_text(part) if stdin is None else stdin
        for assignment in assignments:
            why = dangerous_variable(assignment)
            if why is not None:
                shown = assignment if len(assignment) <= 40 else assignment[:37] + "..."
                self.add("unknown", ("unknown",), f"`{shown}`: {why}")
        if words:
            if dynamic_program or looks_dynamic(words[0]):
                self.add(
                    "unknown",
                    ("unknown",),
                    f"program name `{words[0]}` is decided at run time; treated as having effects",
                )
            else:
                self.argv(words, depth, stdin)
        elif assignments:
            variable = re.split(r"[\[+=]", assignments[0], maxsplit=1)[0]
            self.add("read_only", (), f"assignment to `{variable}` only sets a shell variable")
        # Redirections and substitutions nested in the words, in the line's order.
        for part in parts:
            if getattr(part, "kind", None) == "redirect":
                self.redirect(part, depth, quoted)
            else:
                self.nested(part, depth, quoted)

    def nested(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        for child in children(node):
            self.node(child, depth, quoted)

    def stdin_text(self, redirect: Any) -> str | None:
        """What a here-document or here-string feeds the command, for `bash <<EOF … EOF`."""
        if getattr(redirect, "type", "") == "<<<":
            return self.word(getattr(redirect, "output", None))
        heredoc = getattr(redirect, "heredoc", None)
        if heredoc is not None:
            lines = str(getattr(heredoc, "value", "")).split("\n")
            if lines and lines[-1].strip() == self.word(getattr(redirect, "output", None)):
                lines = lines[:-1]  # a body that kept its closing delimiter line
            return "\n".join(lines)
        return None

    def redirect(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        rtype = str(getattr(node, "type", ""))
        output = getattr(node, "output", None)
        heredoc = getattr(node, "heredoc", None)
        if heredoc is not None:
            delimiter = self.word(output)
            body = str(getattr(heredoc, "value", ""))
            if delimiter not in quoted and ("$(" in body or "`" in body):
                self.add(
                    "unknown",
                    ("unknown",),
                    "a here-document runs a command substitution that is not analysed",
                )
            return
        if output is None or isinstance(output, int | str):
            return  # to or from a file descriptor (`2>&1`, `>&-`)
        target = self.word(output)
        self.nested(output, depth, quoted)
        shown = f"`{getattr(node, 'input', None) or ''}{rtype} {target}`"
        if rtype in {">", ">|", "&>", ">&", "<>"}:
            if target not in HARMLESS_TARGETS and not target.isdigit():
                self.add("local_write", ("filesystem_write",), f"redirection {shown} writes a file")
        elif rtype in {">>", "&>>"} and target not in HARMLESS_TARGETS:
            self.add(
                "mutation",
                ("filesystem_write",),
                f"redirection {shown} appends to a file; a re-run duplicates data",
            )

    # ---- one simple command's words ----------------------------------------------------------------------

    def argv(self, words: Sequence[str], depth: int, stdin: str | None = None) -> None:
        argv = list(words)
        while argv:
            if looks_dynamic(argv[0]):
                self.add(
                    "unknown",
                    ("unknown",),
                    f"program name `{argv[0]}` is decided at run time; treated as having effects",
                )
                return
            name = canonical(posixpath.basename(argv[0]) or argv[0])
            argv[0] = name
            if name in WRAPPERS:
                rest = self.unwrap(name, argv, depth)
                if rest is None:
                    return
                if not rest:
                    if name not in PRIVILEGED:
                        self.add("read_only", (), f"`{'echo' if name == 'xargs' else name}` only reads")
                    return
                argv = rest
                continue
            runner = next((key for key in RUNNERS if tuple(argv[: len(key)]) == key), None)
            if runner is not None and len(argv) > len(runner):
                short, long = RUNNERS[runner]
                rest = argv[len(runner) :]
                if rest[0] in {"-c", "--call"} and runner in {("npx",), ("npm", "exec")} and len(rest) > 1:
                    self.text(rest[1], depth + 1)
                    return
                command = parse_words(_peeler(short, long), rest).operands
                if command:
                    argv = command
                    continue
            if name == "python":
                module = python_module(argv)
                if module is None:
                    self.add("unknown", ("unknown",), "`python -c` runs inline code that is not analysed")
                    return
                if module:
                    argv = module
                    continue
            break
        if not argv:
            return
        self.judge(argv, depth, stdin)

    def unwrap(self, name: str, argv: list[str], depth: int) -> list[str] | None:
        """The wrapped command's words, or None when the wrapper itself settled the verdict."""
        short, long = WRAPPERS[name]
        args = argv[1:]
        if name in PRIVILEGED:
            self.add("high_risk", ("privilege",), f"`{name}` runs the command with elevated privileges")
        if name == "command" and any(a in {"-v", "-V"} for a in args[:2]):
            self.add("read_only", (), "`command -v` only looks a command up")
            return None
        parsed = parse_words(_peeler(short, long), args)
        rest = parsed.operands
        for option, value, _word in parsed.options:
            if name == "env" and option in {"-S", "--split-string"}:
                # `env -S 'cmd args'` splits the string into a command line
                self.text(" ".join([value or "", *rest]), depth + 1)
                return None
            if name == "time" and option in {"-o", "--output"}:
                self.add("local_write", ("filesystem_write",), f"`time -o {value}` writes a file")
        if name == "timeout" and rest:
            rest = rest[1:]  # the duration
        if name == "env":
            while rest and ASSIGNMENT.match(rest[0]):
                why = dangerous_variable(rest[0])
                if why is not None:
                    self.add("unknown", ("unknown",), f"`env {rest[0]}`: {why}")
                rest = rest[1:]
        if name == "xargs" and rest:
            # the words xargs reads from standard input join the command: they may be options (`--pre=x`)
            self.add("unknown", ("unknown",), "`xargs` adds words from standard input that are not analysed")
        return rest

    @abc.abstractmethod
    def judge(self, argv: list[str], depth: int, stdin: str | None) -> None:
        """Handle one simple command: ``argv`` with wrappers peeled, ``stdin`` what a here-document feeds it."""

    def shell(self, argv: list[str], depth: int, stdin: str | None) -> list[Finding] | None:
        args = argv[1:]
        startup: list[Finding] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                i += 1
                break
            short = arg.startswith("-") and not arg.startswith("--")
            if arg in _STARTUP_OPTIONS or (short and set(arg[1:]) & {"i", "l"}):
                reason = f"`{argv[0]} {arg}` reads startup files that run code not in the line"
                startup.append(finding("unknown", ("unknown",), reason))
            if arg in {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}:
                i += 2
                continue
            if arg.startswith(("-", "+")) and len(arg) > 1:
                if short and "c" in arg[1:]:
                    script = args[i + 1] if i + 1 < len(args) else ""
                    return [*startup, *self.collect(lambda: self.text(script, depth + 1))]  # noqa: B023
                i += 1
                continue
            break
        if i < len(args):
            reason = f"`{argv[0]} {args[i]}` runs a script that is not analysed"
            return [*startup, finding("unknown", ("unknown",), reason)]
        if stdin is not None:
            return [*startup, *self.collect(lambda: self.text(stdin, depth + 1))]
        reason = f"`{argv[0]}` runs commands from standard input that are not analysed"
        return [*startup, finding("unknown", ("unknown",), reason, "high")]
