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

Where each part lives: ``command_rules`` (the tables), ``command_parse`` (bashlex, imported on the first
parse), ``command_walk`` (the walk and the peeling of step 1), ``command_options`` (reading options),
``command_programs`` (the checks of step 3), ``command_findings`` (a finding and the worst-part rule); this
module holds the public types and steps 2 and 4. ``command_targets`` reuses the walk to find written paths.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from safepoint.core.command_findings import Finding, danger, finding
from safepoint.core.command_programs import HANDLERS
from safepoint.core.command_rules import (
    CATEGORIES,
    CATEGORY_PHRASE,
    DESTRUCTIVE,
    HIGH_RISK,
    HINTS,
    IDEMPOTENCY_RANK,
    INTERPRETERS,
    LOCAL_WRITE,
    POLICY_RANK,
    READ_ONLY,
    READ_ONLY_SUBCOMMANDS,
    RERUNNABLE,
    RISK_RANK,
    SHELLS,
    Category,
    canonical,
    name_set,
)
from safepoint.core.command_walk import Walker
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
        return _verdict([finding("unparsable", ("unknown",), f"internal error while analysing the command: {exc!r}")])


def _verdict(findings: Sequence[Finding]) -> CommandVerdict:
    return CommandVerdict(
        idempotency=max((f.idempotency for f in findings), key=IDEMPOTENCY_RANK.__getitem__),
        replay_policy=max((f.replay_policy for f in findings), key=POLICY_RANK.__getitem__),
        risk_level=max((f.risk_level for f in findings), key=RISK_RANK.__getitem__),
        side_effects=tuple(sorted({effect for f in findings for effect in f.side_effects})),
        reasons=tuple(dict.fromkeys(f.reason for f in findings)),
    )


@functools.lru_cache(maxsize=4096)
def _classify_cached(command: str, rules: CommandRules) -> CommandVerdict:
    walker = _Classifier(_compile(rules))
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


def _table_finding(category: Category, key: tuple[str, ...]) -> Finding:
    text = " ".join(key)
    phrase, effects = CATEGORY_PHRASE[category]
    hint = HINTS.get(text)
    risk = None
    if hint is not None:
        phrase, effects, risk = hint
    return finding(category, effects, f"`{text}` {phrase}", risk)


# ----------------------------------------------------------------------------------------------------------
# The classifier's judgement of one simple command
# ----------------------------------------------------------------------------------------------------------


class _Classifier(Walker):
    def __init__(self, compiled: _Compiled) -> None:
        super().__init__()
        self.compiled = compiled

    def judge(self, argv: list[str], depth: int, stdin: str | None) -> None:
        name = argv[0]
        handler = HANDLERS.get(name)
        found: list[Finding] | None = None
        if name in SHELLS:
            found = self.shell(argv, depth, stdin)
        elif name == "eval":
            found = self.collect(lambda: self.text(" ".join(argv[1:]), depth + 1))
        elif handler is not None:
            found = handler(self, argv, depth)
        match = _lookup(self.compiled, argv)
        table = [_table_finding(*match)] if match is not None else None
        if found and (table is None or danger(found) >= danger(table)):
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
