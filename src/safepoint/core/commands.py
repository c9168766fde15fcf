"""Classify a shell command line for the built-in ``run_command`` tool: may it be re-run after a crash?

Pure: no I/O, nothing is executed. The line is parsed with ``bashlex``; every simple command found anywhere
in it (lists, pipelines, subshells, ``$( … )``, backticks, process substitution, ``if``/``for``/``while``
bodies, ``bash -c '…'`` and ``eval`` strings) is judged on its own, and the line gets the verdict of its most
dangerous part. Anything the classifier does not understand is treated as having effects: a wrong "safe"
costs a repeated side effect, a wrong "unsafe" costs one question.

How one simple command is judged:

1. Leading ``NAME=value`` words and wrappers (``env``, ``nice``, ``nohup``, ``time``, ``timeout N``,
   ``command``, ``exec``, ``xargs``, ``sudo``, ``npx``, ``uv run`` …) are peeled off; ``python -m mod``
   becomes ``mod``; ``git``'s global options are dropped.
2. The longest entry of the rule tables that is a prefix of the words wins (``git push`` beats ``git``).
3. Programs whose arguments matter (``rm -r``, ``find -delete``, ``sed -i``, ``curl -d``, most of ``git`` …)
   have a built-in check. Its finding replaces the table's only when it is at least as dangerous: the tables
   can make such a program stricter, never laxer.
4. Anything else is unknown: non_idempotent, ask, medium.
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import bashlex
import msgspec

from safepoint.core.command_rules import (
    CATEGORIES,
    CATEGORY_PHRASE,
    DESTRUCTIVE,
    GRADES,
    HARMLESS_TARGETS,
    HIGH_RISK,
    HINTS,
    IDEMPOTENCY_RANK,
    INTERPRETERS,
    LOCAL_WRITE,
    MAX_CHARS,
    MAX_DEPTH,
    POLICY_RANK,
    PRIVILEGED,
    READ_ONLY,
    READ_ONLY_SUBCOMMANDS,
    RERUNNABLE,
    RISK_RANK,
    RUNNERS,
    SHELLS,
    WRAPPERS,
    Category,
    Hint,
    canonical,
    name_set,
)
from safepoint.errors import ConfigError
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel

__all__ = ["DEFAULT_COMMAND_RULES", "CommandRules", "CommandVerdict", "classify_command"]


# ----------------------------------------------------------------------------------------------------------
# Public types
# ----------------------------------------------------------------------------------------------------------


class CommandVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """How a command line may be replayed; ``reasons`` has one sentence per finding, in the line's order."""

    idempotency: Idempotency
    replay_policy: ReplayPolicy
    risk_level: RiskLevel
    side_effects: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


_SET_FIELDS = ("read_only", "rerunnable", "local_write", "destructive", "high_risk")


class CommandRules(msgspec.Struct, frozen=True, kw_only=True):
    """The tables ``classify_command`` judges by. Hashable, so verdicts can be cached per (command, rules).

    ``read_only_subcommands`` is a sorted tuple of ``(program, sub-commands)`` pairs rather than a dict,
    because a dict would make the rules unhashable; a dict given to the constructor or to ``extend`` is
    converted.
    When an entry sits in several tables the most dangerous one counts.
    """

    read_only: frozenset[str] = READ_ONLY
    read_only_subcommands: tuple[tuple[str, frozenset[str]], ...] = tuple(
        sorted((program, name_set(subs)) for program, subs in READ_ONLY_SUBCOMMANDS.items())
    )
    rerunnable: frozenset[str] = RERUNNABLE
    local_write: frozenset[str] = LOCAL_WRITE
    destructive: frozenset[str] = DESTRUCTIVE
    high_risk: frozenset[str] = HIGH_RISK

    def __post_init__(self) -> None:
        # Accept plain sets, lists and a dict from callers and config files; store the hashable forms.
        for name in _SET_FIELDS:
            msgspec.structs.force_setattr(self, name, _as_names(name, getattr(self, name)))
        subs = _merge_subcommands((), self.read_only_subcommands)
        msgspec.structs.force_setattr(self, "read_only_subcommands", subs)

    def extend(self, **more: Iterable[str] | Mapping[str, Iterable[str]]) -> CommandRules:
        """A copy with ``more`` unioned in, e.g. ``extend(read_only=["mytool"], high_risk=["deploy prod"])``.

        ``read_only_subcommands`` takes a mapping (or pairs) of program -> sub-commands, merged per program.
        """
        changes: dict[str, Any] = {}
        for name, extra in more.items():
            if name == "read_only_subcommands":
                changes[name] = _merge_subcommands(self.read_only_subcommands, extra)
            elif name in _SET_FIELDS:
                changes[name] = getattr(self, name) | _as_names(name, extra)
            else:
                known = ", ".join(("read_only_subcommands", *_SET_FIELDS))
                raise ConfigError(f"unknown command rule set {name!r}; use one of: {known}")
        return msgspec.structs.replace(self, **changes)


def _as_names(field: str, value: object) -> frozenset[str]:
    if isinstance(value, str):
        listed: list[object] = [value]
    elif isinstance(value, Iterable) and not isinstance(value, Mapping):
        listed = list(value)
    else:
        raise ConfigError(f"command rule set {field!r} needs a list of command names, not {value!r}")
    names: set[str] = set()
    for item in listed:
        if not isinstance(item, str) or not item.split():
            raise ConfigError(f"command rule set {field!r} needs non-empty command names, not {item!r}")
        names.add(" ".join(item.split()))
    return frozenset(names)


def _merge_subcommands(
    current: tuple[tuple[str, frozenset[str]], ...], extra: object
) -> tuple[tuple[str, frozenset[str]], ...]:
    merged = dict(current)
    problem = ConfigError(
        f"command rule set 'read_only_subcommands' needs a mapping of program to sub-commands, not {extra!r}"
    )
    if isinstance(extra, Mapping):
        pairs: list[object] = list(extra.items())
    elif isinstance(extra, Iterable) and not isinstance(extra, str):
        pairs = list(extra)
    else:
        raise problem
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise problem
        program, subs = pair
        if not isinstance(program, str) or not program.strip():
            raise problem
        key = canonical(program.strip())
        merged[key] = merged.get(key, frozenset()) | _as_names("read_only_subcommands", subs)
    return tuple(sorted(merged.items()))


DEFAULT_COMMAND_RULES = CommandRules()


def classify_command(command: str, rules: CommandRules = DEFAULT_COMMAND_RULES) -> CommandVerdict:
    """The verdict for a whole command line: the most dangerous of its parts. Never raises."""
    try:
        return _classify_cached(command, rules)
    except Exception as exc:  # a classifier bug must not crash the runtime; refuse to replay instead
        return _verdict([_finding("unparsable", ("unknown",), f"internal error while analysing the command: {exc!r}")])


# ----------------------------------------------------------------------------------------------------------
# Findings and the worst-part rule
# ----------------------------------------------------------------------------------------------------------


class _Finding(NamedTuple):
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    risk_level: RiskLevel
    side_effects: tuple[str, ...]
    reason: str


def _finding(grade: str, effects: Iterable[str], reason: str, risk: RiskLevel | None = None) -> _Finding:
    idempotency, policy, base_risk = GRADES[grade]
    return _Finding(idempotency, policy, risk or base_risk, tuple(effects), reason)


def _danger(findings: Sequence[_Finding]) -> tuple[int, int, int]:
    return (
        max(POLICY_RANK[f.replay_policy] for f in findings),
        max(IDEMPOTENCY_RANK[f.idempotency] for f in findings),
        max(RISK_RANK[f.risk_level] for f in findings),
    )


def _verdict(findings: Sequence[_Finding]) -> CommandVerdict:
    return CommandVerdict(
        idempotency=max((f.idempotency for f in findings), key=IDEMPOTENCY_RANK.__getitem__),
        replay_policy=max((f.replay_policy for f in findings), key=POLICY_RANK.__getitem__),
        risk_level=max((f.risk_level for f in findings), key=RISK_RANK.__getitem__),
        side_effects=tuple(sorted({effect for f in findings for effect in f.side_effects})),
        reasons=tuple(dict.fromkeys(f.reason for f in findings)),
    )


@functools.lru_cache(maxsize=4096)
def _classify_cached(command: str, rules: CommandRules) -> CommandVerdict:
    walker = _Walker(_compile(rules))
    walker.text(command, depth=0)
    return _verdict(walker.findings)


# ----------------------------------------------------------------------------------------------------------
# Compiled tables
# ----------------------------------------------------------------------------------------------------------


class _Compiled(NamedTuple):
    table: dict[tuple[str, ...], Category]  # entry words -> most dangerous category holding it
    longest: dict[str, int]  # program -> words in its longest entry (to name unknown sub-commands)


@functools.lru_cache(maxsize=16)
def _compile(rules: CommandRules) -> _Compiled:
    table: dict[tuple[str, ...], Category] = {}
    longest: dict[str, int] = {}

    def add(entry: str, category: Category) -> None:
        words = entry.split()
        key = (canonical(posixpath.basename(words[0]) or words[0]), *words[1:])
        old = table.get(key)
        if old is None or CATEGORIES.index(category) > CATEGORIES.index(old):
            table[key] = category
        longest[key[0]] = max(longest.get(key[0], 0), len(key))

    for category in CATEGORIES:
        for entry in getattr(rules, category):
            add(entry, category)
    for program, subs in rules.read_only_subcommands:
        for sub in subs:
            add(f"{program} {sub}", "read_only")
    return _Compiled(table, longest)


def _lookup(compiled: _Compiled, argv: Sequence[str]) -> tuple[Category, tuple[str, ...]] | None:
    for size in range(min(len(argv), compiled.longest.get(argv[0], 0)), 0, -1):
        key = tuple(argv[:size])
        category = compiled.table.get(key)
        if category is not None:
            return category, key
    return None


def _table_finding(category: Category, key: tuple[str, ...]) -> _Finding:
    text = " ".join(key)
    phrase, effects = CATEGORY_PHRASE[category]
    hint = HINTS.get(text)
    risk = None
    if hint is not None:
        phrase, effects, risk = hint
    return _finding(category, effects, f"`{text}` {phrase}", risk)


# ----------------------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------------------


class _ParseFailure(Exception):
    pass


_QUOTED_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^'\n]+)'|\"([^\"\n]+)\"|\\(\w+))")
_TIME_KEYWORD = re.compile(r"(^|[;&|(){}\n!]|\b(?:then|do|else))([ \t]*)time(?=[ \t]|$)", re.MULTILINE)
_DOUBLE_BRACKETS = re.compile(r"(^|(?<=[\s;&|(]))\[\[(?=\s)|(?<=\s)\]\](?=$|[\s;&|)])", re.MULTILINE)


def _parse(text: str) -> tuple[list[Any], frozenset[str], str]:
    """bashlex's trees, the here-document delimiters that were quoted (their bodies are not expanded), and the
    text the trees' positions refer to.

    bashlex rejects a few common constructs; on failure the line is rewritten once into an equivalent it does
    accept (or one that is judged at least as dangerously) and parsed again.
    """
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
        rewritten = _replace_arithmetic(_QUOTED_HEREDOC.sub(unquote, text))
        rewritten = _TIME_KEYWORD.sub(r"\1\2\\time", rewritten)
        rewritten = _DOUBLE_BRACKETS.sub(lambda m: m.group(0).replace("[[", "[").replace("]]", "]"), rewritten)
        if rewritten != text:
            try:
                return list(bashlex.parse(rewritten)), frozenset(quoted), rewritten
            except Exception:
                pass
        raise _ParseFailure(_describe_parse_error(first)) from None


def _replace_arithmetic(text: str) -> str:
    """`$(( … ))` -> `0`; left alone when it contains a command substitution, which must not vanish."""
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
        if j >= len(text) or inner_end != j - 1 or "$(" in inner or "`" in inner:
            out.append(text[i : start + 3])
            i = start + 3
            continue
        out.append(text[i:start] + "0")
        i = j + 1
    out.append(text[i:])
    return "".join(out)


def _describe_parse_error(exc: Exception) -> str:
    message = " ".join(str(exc).split())[:120]
    if isinstance(exc, NotImplementedError):
        return f"uses shell syntax the parser does not support ({message})"
    if isinstance(exc, bashlex.errors.ParsingError):
        return f"is not valid shell ({message})"
    return f"could not be parsed ({type(exc).__name__}: {message})" if message else "could not be parsed"


def _is_blank(text: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())


# ----------------------------------------------------------------------------------------------------------
# The walk
# ----------------------------------------------------------------------------------------------------------

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_EXPANSION_KINDS = frozenset({"parameter", "commandsubstitution", "processsubstitution"})

_Handler = Callable[["_Walker", list[str], int], "list[_Finding] | None"]


class _Walker:
    def __init__(self, compiled: _Compiled) -> None:
        self.compiled = compiled
        self.findings: list[_Finding] = []
        self.source = ""  # the text being walked: word positions point into it

    def word(self, node: Any) -> str:
        """A word's text without quotes. bashlex mangles adjacent quoted parts (`'it'\\''s'` stays as is), so
        words with quotes are re-read from the source with shlex; bashlex's text is kept when that fails."""
        text = str(getattr(node, "word", ""))
        pos = getattr(node, "pos", None)
        if not (isinstance(pos, tuple) and len(pos) == 2):
            return text
        raw = self.source[pos[0] : pos[1]]
        if not any(q in raw for q in "'\"\\") or "`" in raw:
            return text
        try:
            split = shlex.split(raw)
        except ValueError:
            return text
        return split[0] if len(split) == 1 else text

    def add(self, grade: str, effects: Iterable[str], reason: str, risk: RiskLevel | None = None) -> None:
        self.findings.append(_finding(grade, effects, reason, risk))

    # ---- text -> trees -----------------------------------------------------------------------------------

    def text(self, text: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.add(
                "unparsable",
                ("unknown",),
                f"shell strings nested deeper than {MAX_DEPTH} levels; not analysed",
            )
            return
        if _is_blank(text):
            self.add("read_only", (), "empty command")
            return
        if len(text) > MAX_CHARS:
            self.add("unparsable", ("unknown",), f"command longer than {MAX_CHARS} characters; not analysed")
            return
        try:
            trees, quoted, source = _parse(text)
        except _ParseFailure as failure:
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

    def collect(self, run: Callable[[], None]) -> list[_Finding]:
        """The findings ``run`` records, taken out of the line's list so a caller can weigh them first."""
        before = len(self.findings)
        run()
        found = self.findings[before:]
        del self.findings[before:]
        return found

    def node(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        kind = getattr(node, "kind", None)
        if kind == "command":
            self.simple_command(node, depth, quoted)
            return
        if kind == "parameter":
            value = str(getattr(node, "value", ""))
            if "$(" in value or "`" in value:  # bashlex leaves substitutions inside ${…} unparsed
                self.add("unknown", ("unknown",), f"command substitution inside `${{{value}}}` is not analysed")
            return
        if kind == "redirect":
            self.redirect(node, depth, quoted)
            return
        for child in _children(node):
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
                if not words and _ASSIGNMENT.match(text):
                    assignments.append(text)
                    continue
                if not words:
                    dynamic_program = any(getattr(p, "kind", None) in _EXPANSION_KINDS for p in _children(part))
                words.append(text)
            elif kind == "redirect":
                stdin = self.stdin_text(part) if stdin is None else stdin
        if words:
            if dynamic_program or _looks_dynamic(words[0]):
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
        for child in _children(node):
            self.node(child, depth, quoted)

    def stdin_text(self, redirect: Any) -> str | None:
        """What a here-document or here-string feeds the command, for `bash <<EOF … EOF`."""
        if getattr(redirect, "type", "") == "<<<":
            return self.word(getattr(redirect, "output", None))
        heredoc = getattr(redirect, "heredoc", None)
        if heredoc is not None:
            lines = str(getattr(heredoc, "value", "")).split("\n")
            if lines and lines[-1].strip() == self.word(getattr(redirect, "output", None)):
                lines = lines[:-1]  # bashlex keeps the closing delimiter line
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
            if _looks_dynamic(argv[0]):
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
                start = _skip_options(rest, short, long)
                if start < len(rest):
                    argv = rest[start:]
                    continue
            if name == "python":
                module = _python_module(argv)
                if module is None:
                    self.add("unknown", ("unknown",), "`python -c` runs inline code that is not analysed")
                    return
                if module:
                    argv = module
                    continue
            break
        if not argv:
            return
        if argv[0] == "git":
            argv = _strip_git_options(argv)
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
        start = _skip_options(args, short, long)
        rest = args[start:]
        for option, value in _option_pairs(args[:start], short, long):
            if name == "env" and option in {"-S", "--split-string"}:
                # `env -S 'cmd args'` splits the string into a command line
                self.text(" ".join([value or "", *rest]), depth + 1)
                return None
            if name == "time" and option in {"-o", "--output"}:
                self.add("local_write", ("filesystem_write",), f"`time -o {value}` writes a file")
        if name == "timeout" and rest:
            rest = rest[1:]  # the duration
        if name == "env":
            while rest and _ASSIGNMENT.match(rest[0]):
                rest = rest[1:]
        return rest

    def judge(self, argv: list[str], depth: int, stdin: str | None) -> None:
        name = argv[0]
        handler = _HANDLERS.get(name)
        found: list[_Finding] | None = None
        if name in SHELLS:
            found = self.shell(argv, depth, stdin)
        elif name == "eval":
            found = self.collect(lambda: self.text(" ".join(argv[1:]), depth + 1))
        elif handler is not None:
            found = handler(self, argv, depth)
        match = _lookup(self.compiled, argv)
        table = [_table_finding(*match)] if match is not None else None
        if found and (table is None or _danger(found) >= _danger(table)):
            self.findings.extend(found)
        elif table:
            self.findings.extend(table)
        elif name in INTERPRETERS:
            self.add("unknown", ("unknown",), f"`{self.display(argv)}` runs code that is not analysed")
        else:
            reason = f"`{self.display(argv)}` is not a known command; treated as having effects"
            self.add("unknown", ("unknown",), reason)

    def display(self, argv: Sequence[str]) -> str:
        shown = [argv[0]]
        for word in argv[1 : self.compiled.longest.get(argv[0], 1)]:
            if word.startswith("-"):
                break
            shown.append(word)
        return " ".join(shown)

    def shell(self, argv: list[str], depth: int, stdin: str | None) -> list[_Finding] | None:
        args = argv[1:]
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                i += 1
                break
            if arg in {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}:
                i += 2
                continue
            if arg.startswith(("-", "+")) and len(arg) > 1:
                if not arg.startswith("--") and "c" in arg[1:]:
                    script = args[i + 1] if i + 1 < len(args) else ""
                    return self.collect(lambda: self.text(script, depth + 1))  # noqa: B023 (called at once)
                i += 1
                continue
            break
        if i < len(args):
            reason = f"`{argv[0]} {args[i]}` runs a script that is not analysed"
            return [_finding("unknown", ("unknown",), reason)]
        if stdin is not None:
            return self.collect(lambda: self.text(stdin, depth + 1))
        reason = f"`{argv[0]}` runs commands from standard input that are not analysed"
        return [_finding("unknown", ("unknown",), reason, "high")]


def _children(node: Any) -> list[Any]:
    found: list[Any] = []
    for attr in ("parts", "list", "command", "output", "redirects"):
        value = getattr(node, attr, None)
        if isinstance(value, list):
            found.extend(v for v in value if hasattr(v, "kind"))
        elif hasattr(value, "kind"):
            found.append(value)
    return found


def _looks_dynamic(program: str) -> bool:
    # `$CMD`, `$(…)`, and globs (`r?` may expand to `rm`) in the program position.
    return "$" in program or "`" in program or (program != "[" and any(c in program for c in "*?["))


def _skip_options(args: Sequence[str], short_with_value: str, long_with_value: frozenset[str]) -> int:
    """Index of the first word after a program's options (and after a `--`)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return i + 1
        if arg.startswith("--"):
            i += 2 if "=" not in arg and arg in long_with_value else 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            for j, char in enumerate(arg[1:], start=1):
                if char in short_with_value:
                    if j == len(arg) - 1:
                        i += 1  # the value is the next word
                    break
            i += 1
            continue
        return i
    return i


def _python_module(argv: Sequence[str]) -> list[str] | None:
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


_GIT_OPTIONS_WITH_VALUE = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)


def _strip_git_options(argv: list[str]) -> list[str]:
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in _GIT_OPTIONS_WITH_VALUE else 1
    return ["git", *argv[i:]]


def _short_flags(args: Iterable[str]) -> set[str]:
    """Single letters of `-abc` clusters plus whole `--long` options, up to a `--`."""
    flags: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--"):
            flags.add(arg.split("=", 1)[0])
        elif arg.startswith("-") and len(arg) > 1:
            flags.update(arg[1:])
    return flags


def _positionals(args: Iterable[str]) -> list[str]:
    return [arg for arg in args if not arg.startswith("-")]


# ----------------------------------------------------------------------------------------------------------
# Programs whose arguments decide the verdict
# ----------------------------------------------------------------------------------------------------------


def _h_recursive(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    name = argv[0]
    flags = _short_flags(argv[1:])
    recursive = "--recursive" in flags or "R" in flags or (name == "rm" and "r" in flags)
    if not recursive:
        return None
    shown = next((a for a in argv[1:] if a.startswith("-") and ("r" in a.lower())), "-r")
    hint = HINTS.get(name, Hint("changes files", ("filesystem_write",)))
    return [_finding("destructive", hint.effects, f"`{name} {shown}` {hint.phrase} recursively", "high")]


def _h_find(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    found: list[_Finding] = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-delete":
            found.append(_finding("destructive", ("filesystem_delete",), "`find -delete` deletes files"))
        elif arg in {"-fprint", "-fprint0", "-fprintf", "-fls"}:
            found.append(_finding("local_write", ("filesystem_write",), f"`find {arg}` writes a file"))
        elif arg in {"-exec", "-execdir", "-ok", "-okdir"}:
            end = i + 1
            while end < len(argv) and argv[end] not in {";", "+"}:
                end += 1
            if end > i + 1:
                command = argv[i + 1 : end]
                found.extend(walker.collect(lambda: walker.argv(command, depth)))  # noqa: B023 (called at once)
            i = end
        i += 1
    return found or None


def _h_fd(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    for i, arg in enumerate(argv[1:], start=1):
        if arg in {"-x", "--exec", "-X", "--exec-batch"} and i + 1 < len(argv):
            command = argv[i + 1 :]
            return walker.collect(lambda: walker.argv(command, depth))  # noqa: B023 (called at once)
    return None


def _h_sed(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    for arg in argv[1:]:
        if arg == "--":
            break
        if arg == "--in-place" or arg.startswith("--in-place="):
            return [_finding("local_write", ("filesystem_write",), "`sed --in-place` edits files in place")]
        if arg.startswith("-") and not arg.startswith("--"):
            for char in arg[1:]:
                if char == "i":
                    return [_finding("local_write", ("filesystem_write",), "`sed -i` edits files in place")]
                if char in "efl":  # takes a value: the rest is not flags
                    break
    return None


def _h_tee(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    flags = _short_flags(argv[1:])
    if ("a" in flags or "--append" in flags) and _positionals(argv[1:]):
        return [_finding("mutation", ("filesystem_write",), "`tee -a` appends to files; a re-run duplicates data")]
    return None


def _h_sort(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if any(a in {"-o", "--output"} or a.startswith(("--output=", "-o")) for a in argv[1:]):
        return [_finding("local_write", ("filesystem_write",), "`sort -o` writes a file")]
    return None


def _h_uniq(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if len(_positionals(argv[1:])) >= 2:
        return [_finding("local_write", ("filesystem_write",), "`uniq INPUT OUTPUT` writes a file")]
    return None


def _h_yq(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if any(a in {"-i", "--inplace"} for a in argv[1:]):
        return [_finding("local_write", ("filesystem_write",), "`yq -i` edits files in place")]
    return None


def _h_awk(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    # awk can write files (`print > f`), run commands (`system()`, `| getline`) and edit in place.
    program = " ".join(argv[1:])
    if any(a == "-f" or a.startswith("-f") for a in argv[1:]) or any(s in program for s in ("system", ">", "|")):
        return [_finding("unknown", ("unknown",), f"`{argv[0]}` program may write files or run commands")]
    if "inplace" in program:
        return [_finding("local_write", ("filesystem_write",), f"`{argv[0]} -i inplace` edits files in place")]
    return None


_MAKE_RISKY_TARGET = re.compile(r"deploy|publish|release|upload|push|install")


def _h_make(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    start = 1
    targets: list[str] = []
    while start < len(argv):
        arg = argv[start]
        if arg in {"-C", "-f", "-I", "-o", "-W", "--directory", "--file", "--makefile"}:
            start += 2
            continue
        if not arg.startswith("-") and "=" not in arg:
            targets.append(arg)
        start += 1
    risky = [t for t in targets if _MAKE_RISKY_TARGET.search(t)]
    if risky:
        reason = f"`make {risky[0]}` runs a target that may have effects beyond a build; treated as unknown"
        return [_finding("unknown", ("unknown",), reason)]
    return None


def _h_tar(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    args = argv[1:]
    letters: set[str] = set()
    longs: set[str] = set()
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            longs.add(arg.split("=", 1)[0])
        elif (arg.startswith("-") and len(arg) > 1) or (i == 0 and arg and not arg.startswith("-")):
            letters.update(arg.lstrip("-"))
    if "--delete" in longs:
        return [_finding("destructive", ("filesystem_delete",), "`tar --delete` removes members from an archive")]
    if letters & set("cruA") or longs & {"--create", "--append", "--update", "--concatenate", "--catenate"}:
        return [_finding("local_write", ("filesystem_write",), "`tar` writes an archive")]
    if "x" in letters or longs & {"--extract", "--get"}:
        return [_finding("local_write", ("filesystem_write",), "`tar -x` extracts files")]
    if letters & set("td") or longs & {"--list", "--diff", "--compare", "--version", "--help"}:
        return [_finding("read_only", (), "`tar -t` only reads")]
    return None


def _h_js(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if argv[0] == "yarn" and len(argv) == 1:
        return [_finding("local_write", ("filesystem_write", "network"), "`yarn` installs packages")]
    if len(argv) == 2 and argv[1] in {"run", "run-script"}:
        return [_finding("read_only", (), f"`{argv[0]} run` only lists scripts")]
    return None


_CURL_SHORT_WITH_VALUE = "AbcCdDeEFHKmoPQrtTuUwxXyYz"
_CURL_LONG_WITH_VALUE = name_set(
    """
    --request, --data, --data-raw, --data-binary, --data-urlencode, --data-ascii, --json, --form,
    --form-string, --upload-file, --output, --output-dir, --cookie-jar, --dump-header, --config, --header,
    --user, --user-agent, --referer, --cookie, --url, --proxy, --max-time, --connect-timeout, --retry,
    --write-out, --cert, --key, --cacert, --range, --resolve, --connect-to, --interface, --limit-rate,
    --oauth2-bearer, --variable, --expand-url
    """
)
_DATA_OPTIONS = name_set("-d, --data, --data-raw, --data-binary, --data-urlencode, --data-ascii, --json")
_UPLOAD_OPTIONS = name_set("-F, --form, --form-string, -T, --upload-file")
_CURL_FILE_OUTPUTS = name_set("-o, --output, -c, --cookie-jar, -D, --dump-header")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _option_pairs(
    args: Sequence[str], short_with_value: str, long_with_value: frozenset[str]
) -> list[tuple[str, str | None]]:
    """(option, value) for each option, in the `-oFILE`, `-o FILE`, `--out=F`, `--out F`, `-sSLo F` forms."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                pairs.append((name, value))
            elif name in long_with_value:
                pairs.append((name, args[i + 1] if i + 1 < len(args) else ""))
                i += 1
            else:
                pairs.append((name, None))
        elif arg.startswith("-") and len(arg) > 1:
            for j, char in enumerate(arg[1:], start=1):
                if char in short_with_value:
                    if j < len(arg) - 1:
                        pairs.append((f"-{char}", arg[j + 1 :]))
                    else:
                        pairs.append((f"-{char}", args[i + 1] if i + 1 < len(args) else ""))
                        i += 1
                    break
                pairs.append((f"-{char}", None))
        i += 1
    return pairs


def _h_curl(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    pairs = _option_pairs(argv[1:], _CURL_SHORT_WITH_VALUE, _CURL_LONG_WITH_VALUE)
    names = {name for name, _ in pairs}
    method = next((str(v).upper() for n, v in reversed(pairs) if n in {"-X", "--request"}), None)
    found: list[_Finding] = []
    if "-K" in names or "--config" in names:
        found.append(_finding("unknown", ("network", "unknown"), "`curl -K` reads options from a file; not analysed"))
    trigger = None
    if method is not None and method not in _SAFE_METHODS:
        trigger = f"-X {method}"
    elif method is None:
        upload = next((n for n in names if n in _UPLOAD_OPTIONS), None)
        data = next((n for n in names if n in _DATA_OPTIONS), None)
        if upload is not None:
            trigger = upload
        elif data is not None and not names & {"-G", "--get"}:
            trigger = data
    if trigger is not None:
        found.append(
            _finding("high_risk", ("network",), f"`curl {trigger}` sends a request that can change remote state")
        )
    else:
        found.append(_finding("read_only", ("network",), "`curl` fetches a URL (GET)"))
    for name, value in pairs:
        if name in _CURL_FILE_OUTPUTS and value not in {"-", None}:
            found.append(_finding("local_write", ("filesystem_write",), f"`curl {name} {value}` writes a file"))
        elif name in {"-O", "--remote-name", "--remote-name-all"}:
            found.append(_finding("local_write", ("filesystem_write",), f"`curl {name}` writes a file"))
    return found


_WGET_SHORT_WITH_VALUE = "OoaPiUtTwQlARDIXe"
_WGET_LONG_WITH_VALUE = name_set(
    """
    --output-document, --output-file, --append-output, --directory-prefix, --input-file, --execute,
    --user-agent, --header, --post-data, --post-file, --method, --body-data, --body-file, --tries, --timeout,
    --wait, --quota, --level, --user, --password
    """
)
_WGET_POSTS = name_set("--post-data, --post-file, --body-data, --body-file")


def _h_wget(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    args = [a for a in argv[1:] if a not in {"-nc", "-nd", "-nH", "-np", "-nv"}]
    pairs = _option_pairs(args, _WGET_SHORT_WITH_VALUE, _WGET_LONG_WITH_VALUE)
    values = {name: value for name, value in pairs}
    method = str(values.get("--method") or "GET").upper()
    posts = next((n for n in values if n in _WGET_POSTS), None)
    found: list[_Finding] = []
    if "-e" in values or "--execute" in values:
        found.append(_finding("unknown", ("network", "unknown"), "`wget -e` runs wgetrc commands; not analysed"))
    if posts is not None or method not in _SAFE_METHODS:
        shown = posts or f"--method={method}"
        found.append(
            _finding("high_risk", ("network",), f"`wget {shown}` sends a request that can change remote state")
        )
    else:
        found.append(_finding("read_only", ("network",), "`wget` fetches a URL"))
    document = values.get("-O", values.get("--output-document"))
    if "--spider" not in values and document != "-":
        shown = f"`wget -O {document}`" if document else "`wget`"
        found.append(_finding("local_write", ("filesystem_write",), f"{shown} saves the download to a file"))
    for option in ("-o", "--output-file", "-a", "--append-output"):
        if values.get(option) not in {None, "-"}:
            found.append(_finding("local_write", ("filesystem_write",), f"`wget {option}` writes a log file"))
    return found


_GIT_MUTATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "commit": ("records a new commit", ("vcs_local",)),
    "merge": ("merges into the current branch", ("filesystem_write", "vcs_local")),
    "rebase": ("rewrites commits", ("filesystem_write", "vcs_local")),
    "cherry-pick": ("applies commits", ("filesystem_write", "vcs_local")),
    "revert": ("adds revert commits", ("filesystem_write", "vcs_local")),
    "am": ("applies patches as commits", ("filesystem_write", "vcs_local")),
    "apply": ("applies a patch to files", ("filesystem_write",)),
    "pull": ("fetches and merges from a remote", ("filesystem_write", "network", "vcs_local")),
    "mv": ("moves files", ("filesystem_write", "vcs_local")),
    "update-ref": ("changes refs", ("vcs_local",)),
    "notes": ("changes notes", ("vcs_local",)),
}
_GIT_CONDITIONAL: dict[str, tuple[str, tuple[str, ...]]] = {
    "add": ("stages files", ("vcs_local",)),
    "init": ("creates a repository", ("filesystem_write",)),
    "clone": ("clones a repository", ("filesystem_write", "network")),
    "submodule": ("updates submodules", ("filesystem_write", "network")),
    "sparse-checkout": ("changes the checked-out paths", ("filesystem_write",)),
}


_GIT_BRANCH_CHANGES = name_set(
    "m, M, c, C, f, u, --force, --move, --copy, --set-upstream-to, --unset-upstream, --edit-description"
)
_GIT_BRANCH_LISTING = name_set(
    """l, a, r, --list, --all, --remotes, --contains, --no-contains, --merged, --no-merged, --points-at,
    --show-current, --format, --sort, --column"""
)
_GIT_CONFIG_WRITES = name_set(
    "e, --edit, --unset, --unset-all, --add, --replace-all, --rename-section, --remove-section"
)


def _h_git(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if len(argv) == 1:
        return [_finding("read_only", (), "`git` only reads")]
    sub, rest = argv[1], argv[2:]
    flags = _short_flags(rest)
    pos = _positionals(rest)

    def grade(g: str, phrase: str, effects: tuple[str, ...], risk: RiskLevel | None = None) -> list[_Finding]:
        # "--hard|discards …" puts the flag inside the quoted command: "`git reset --hard` discards …"
        extra, _, text = phrase.rpartition("|")
        return [_finding(g, effects, f"`{' '.join(['git', sub, *extra.split()])}` {text}", risk)]

    if sub in _GIT_MUTATIONS:
        phrase, effects = _GIT_MUTATIONS[sub]
        return grade("mutation", phrase, effects)
    if sub in _GIT_CONDITIONAL:
        phrase, effects = _GIT_CONDITIONAL[sub]
        return grade("local_write", phrase, effects)
    if sub == "fetch":
        return grade("rerunnable", "downloads from a remote; safe to re-run", ("network",))
    if sub in {"gc", "prune"}:
        return grade("destructive", "deletes unreachable objects", ("filesystem_delete",))
    if sub in {"filter-branch", "filter-repo"}:
        return grade("destructive", "rewrites history", ("filesystem_delete", "vcs_local"), "high")
    if sub == "rm":
        if "--cached" in flags:
            return grade("local_write", "--cached|unstages files", ("vcs_local",))
        return grade(
            "destructive",
            "deletes files",
            ("filesystem_delete", "vcs_local"),
            "high" if "r" in flags else None,
        )
    if sub == "reset":
        if flags & {"--hard", "--merge", "--keep"}:
            mode = next(m for m in ("--hard", "--merge", "--keep") if m in flags)
            return grade(
                "destructive",
                f"{mode}|discards uncommitted changes",
                ("filesystem_delete", "vcs_local"),
                "high",
            )
        if pos or "--soft" in flags:
            return grade("mutation", "moves the branch or unstages files", ("vcs_local",))
        return grade("local_write", "unstages files", ("vcs_local",))
    if sub == "clean":
        if "n" in flags or "--dry-run" in flags:
            return grade("read_only", "--dry-run|only reads", ())
        return grade("destructive", "deletes untracked files", ("filesystem_delete",), "high")
    if sub == "checkout":
        if flags & {"b", "B", "--orphan"}:
            return grade("local_write", "-b|creates a branch", ("filesystem_write", "vcs_local"))
        if "--" in rest or "." in pos or flags & {"f", "--force", "p", "--patch"} or len(pos) >= 2:
            return grade("destructive", "discards uncommitted changes to files", ("filesystem_delete",), "high")
        return grade("mutation", "switches branches or overwrites files", ("filesystem_write", "vcs_local"))
    if sub == "switch":
        if flags & {"--discard-changes", "f", "--force"}:
            return grade("destructive", "discards uncommitted changes", ("filesystem_delete",), "high")
        if "-" in rest:
            return grade("mutation", "-|toggles to the previous branch", ("filesystem_write", "vcs_local"))
        return grade("local_write", "switches branches", ("filesystem_write", "vcs_local"))
    if sub == "restore":
        if flags & {"S", "--staged"} and not flags & {"W", "--worktree"}:
            return grade("local_write", "--staged|unstages files", ("vcs_local",))
        return grade("destructive", "discards uncommitted changes to files", ("filesystem_delete",), "high")
    if sub == "stash":
        action = pos[0] if pos else "push"
        if action in {"list", "show"}:
            return grade("read_only", f"{action}|only reads", ())
        if action in {"drop", "clear"}:
            return grade("destructive", f"{action}|discards stashed changes", ("filesystem_delete",), "high")
        return grade("mutation", "changes the working tree and the stash", ("filesystem_write", "vcs_local"))
    if sub == "branch":
        if "D" in flags or (flags & {"d", "--delete"} and flags & {"f", "--force"}):
            return grade("destructive", "-D|deletes a branch", ("vcs_local",), "high")
        if flags & {"d", "--delete"}:
            return grade("destructive", "-d|deletes a branch", ("vcs_local",))
        if flags & _GIT_BRANCH_CHANGES:
            return grade("mutation", "changes branches", ("vcs_local",))
        if pos and not flags & _GIT_BRANCH_LISTING:
            return grade("local_write", "creates a branch", ("vcs_local",))
        return None
    if sub == "tag":
        if flags & {"d", "--delete"}:
            return grade("destructive", "-d|deletes a tag", ("vcs_local",))
        if not pos or flags & {"l", "--list", "--contains", "--points-at", "--merged", "--no-merged"}:
            return grade("read_only", "only lists tags", ())
        return grade("mutation" if flags & {"f", "--force"} else "local_write", "creates a tag", ("vcs_local",))
    if sub == "config":
        if pos and pos[0] in {"get", "list"}:
            return grade("read_only", "only reads settings", ())
        if flags & _GIT_CONFIG_WRITES or (
            pos and pos[0] in {"set", "unset", "rename-section", "remove-section", "edit"}
        ):
            return grade("local_write", "changes settings", ("vcs_local",))
        if flags & {"--get", "--get-all", "--get-regexp", "--list", "l", "--get-urlmatch"} or len(pos) <= 1:
            return grade("read_only", "only reads settings", ())
        return grade("local_write", "changes settings", ("vcs_local",))
    if sub == "remote":
        if not pos or pos[0] in {"show", "get-url"}:
            return grade("read_only", "only reads remotes", ())
        return grade("local_write", f"{pos[0]}|changes remotes", ("vcs_local",))
    if sub == "worktree":
        if pos and pos[0] == "list":
            return grade("read_only", "list|only reads", ())
        if pos and pos[0] in {"remove", "prune"}:
            return grade("destructive", f"{pos[0]}|deletes a worktree", ("filesystem_delete",))
        return grade("local_write", "changes worktrees", ("filesystem_write",))
    if sub == "reflog" and pos and pos[0] in {"expire", "delete"}:
        return grade("destructive", f"{pos[0]}|deletes reflog entries", ("vcs_local",), "high")
    return None


_HANDLERS: dict[str, _Handler] = {
    "rm": _h_recursive,
    "chmod": _h_recursive,
    "chown": _h_recursive,
    "chgrp": _h_recursive,
    "find": _h_find,
    "fd": _h_fd,
    "sed": _h_sed,
    "tee": _h_tee,
    "sort": _h_sort,
    "uniq": _h_uniq,
    "yq": _h_yq,
    "awk": _h_awk,
    "gawk": _h_awk,
    "mawk": _h_awk,
    "make": _h_make,
    "tar": _h_tar,
    "npm": _h_js,
    "pnpm": _h_js,
    "yarn": _h_js,
    "bun": _h_js,
    "curl": _h_curl,
    "wget": _h_wget,
    "git": _h_git,
}
