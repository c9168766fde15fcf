"""Classify a shell command line for the built-in ``run_command`` tool: may it be re-run after a crash?

Pure: no I/O, nothing is executed. The line is parsed with tree-sitter-bash; every simple command found anywhere
in it (lists, pipelines, subshells, ``$( … )``, backticks, process substitution, ``if``/``for``/``while``
bodies, ``bash -c '…'`` and ``eval`` strings) is judged on its own, and the line gets the verdict of its most
dangerous part. Anything the classifier does not understand is treated as having effects: a wrong "safe"
costs a repeated side effect, a wrong "unsafe" costs one question.

How one simple command is judged:

1. Leading ``NAME=value`` words (an assignment to a variable that chooses programs, code or configuration --
   ``PATH``, ``BASH_ENV``, ``GIT_*``, ``PAGER``, ``LD_PRELOAD`` ... -- is not read-only) and wrappers (``env``,
   ``nice``, ``nohup``, ``time``, ``timeout N``, ``command``, ``exec``, ``xargs``, ``sudo``, ``npx``, ``uv run``
   ...) are peeled off; ``python -m mod`` becomes ``mod``.
2. The program's spec (:mod:`safepoint.core.command_spec`) is found, descending its sub-command tables (``git
   diff``, ``npm run test``), and its words are read by it: every option is either harmless, changes the
   verdict (``sort -o``, ``git diff --output``, ``rg --pre``, ``sed -i``), or is unknown -- and an unknown
   option on a program that would be replayed on its own makes the verdict ask (deny by default). A named
   check reads what hides inside words (a sed script's ``e`` command, an awk ``system()``, ``find -exec``).
3. Anything else is unknown: non_idempotent, ask, medium.

Where each part lives: ``command_spec`` (the form of a spec and the one option parser), ``command_specs_text``
and ``command_specs_dev`` (the built-in specs), ``command_rules`` (the coarse name tables, wrappers, grades),
``command_judge`` (one simple command judged by its spec: findings and written paths), ``command_checks``,
``command_git`` and ``command_scripts`` (the checks), ``command_parse`` and ``command_tree`` (tree-sitter-bash,
imported on the first parse), ``command_walk`` (the walk and the peeling of step 1), ``command_findings`` (a
finding and the worst-part rule); this module holds the public types. ``command_targets`` walks the same way
with the same specs to find the paths a line writes.
"""

from __future__ import annotations

import functools
import json
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from safepoint.core.command_findings import Finding, finding
from safepoint.core.command_judge import Tree, builtin_paths, compile_tree, judge
from safepoint.core.command_rules import (
    BUILTIN_TABLES,
    IDEMPOTENCY_RANK,
    POLICY_RANK,
    READ_ONLY_SUBCOMMANDS,
    RISK_RANK,
    SHELLS,
    canonical,
    name_set,
)
from safepoint.core.command_spec import ProgramSpec, merge_spec, specs_from_document
from safepoint.core.command_walk import Walker
from safepoint.errors import ConfigError
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel

__all__ = [
    "DEFAULT_COMMAND_RULES",
    "CommandReport",
    "CommandRules",
    "CommandVerdict",
    "classify_command",
    "compiled_tree",
    "rules_from_bytes",
    "rules_from_document",
]


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


class CommandReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``safepoint classify`` shows: the verdict, the paths the line writes (kept before it runs), and which
    rules judged it."""

    command: str
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    risk_level: RiskLevel
    side_effects: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    write_targets: tuple[str, ...] = ()
    rules: str = "built-in"  # or the user's rules file that extended them


_SET_FIELDS = ("read_only", "rerunnable", "local_write", "destructive", "high_risk")


class CommandRules(msgspec.Struct, frozen=True, kw_only=True):
    """The tables ``classify_command`` judges by. Hashable, so verdicts can be cached per (command, rules).

    Two layers. The coarse tables name programs and program prefixes by category (``read_only``,
    ``high_risk`` ... ``"git push"``); a built-in spec whose grade would be replayed on its own counts only when
    its name is listed, so ``CommandRules(read_only={...})`` replaces the defaults. A name a user adds to a
    coarse table accepts any options; an entry more dangerous than the built-in spec is a floor under it.
    ``specs`` holds a user's programs in the spec form (:class:`~safepoint.core.command_spec.ProgramSpec`),
    merged over the built-in ones: they vet options one by one.

    ``read_only_subcommands`` is a sorted tuple of ``(program, sub-commands)`` pairs rather than a dict,
    because a dict would make the rules unhashable; a dict given to the constructor or to ``extend`` is
    converted, and so is a dict of ``specs``.
    When an entry sits in several tables the most dangerous one counts.
    """

    read_only: frozenset[str] = BUILTIN_TABLES["read_only"] | builtin_paths()["read_only"]
    read_only_subcommands: tuple[tuple[str, frozenset[str]], ...] = tuple(
        sorted((program, name_set(subs)) for program, subs in READ_ONLY_SUBCOMMANDS.items())
    )
    rerunnable: frozenset[str] = BUILTIN_TABLES["rerunnable"] | builtin_paths()["rerunnable"]
    local_write: frozenset[str] = BUILTIN_TABLES["local_write"]
    destructive: frozenset[str] = BUILTIN_TABLES["destructive"]
    high_risk: frozenset[str] = BUILTIN_TABLES["high_risk"]
    specs: tuple[tuple[str, ProgramSpec], ...] = ()

    def __post_init__(self) -> None:
        # Accept plain sets, lists and a dict from callers and config files; store the hashable forms.
        for name in _SET_FIELDS:
            msgspec.structs.force_setattr(self, name, _as_names(name, getattr(self, name)))
        subs = _merge_subcommands((), self.read_only_subcommands)
        msgspec.structs.force_setattr(self, "read_only_subcommands", subs)
        msgspec.structs.force_setattr(self, "specs", _merge_specs((), self.specs))

    def extend(self, **more: Iterable[str] | Mapping[str, Iterable[str]]) -> CommandRules:
        """A copy with ``more`` unioned in, e.g. ``extend(read_only=["mytool"], high_risk=["deploy prod"])``.

        ``read_only_subcommands`` takes a mapping (or pairs) of program -> sub-commands, merged per program;
        ``specs`` a mapping of program -> :class:`~safepoint.core.command_spec.ProgramSpec`, merged per program.
        """
        changes: dict[str, Any] = {}
        for name, extra in more.items():
            if name == "read_only_subcommands":
                changes[name] = _merge_subcommands(self.read_only_subcommands, extra)
            elif name == "specs":
                changes[name] = _merge_specs(self.specs, extra)
            elif name in _SET_FIELDS:
                changes[name] = getattr(self, name) | _as_names(name, extra)
            else:
                known = ", ".join(("read_only_subcommands", "specs", *_SET_FIELDS))
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


def _merge_specs(current: tuple[tuple[str, ProgramSpec], ...], extra: object) -> tuple[tuple[str, ProgramSpec], ...]:
    merged = dict(current)
    if isinstance(extra, Mapping):
        pairs: list[object] = list(extra.items())
    elif isinstance(extra, Iterable) and not isinstance(extra, str):
        pairs = list(extra)
    else:
        raise ConfigError(f"command rule set 'specs' needs a mapping of program to spec, not {extra!r}")
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and isinstance(pair[1], ProgramSpec)):
            raise ConfigError(f"command rule set 'specs' needs a mapping of program to spec, not {extra!r}")
        program, spec = pair
        if not isinstance(program, str) or not program.strip():
            raise ConfigError(f"command rule set 'specs' needs program names, not {program!r}")
        key = canonical(program.strip())
        merged[key] = merge_spec(merged.get(key), spec)
    return tuple(sorted(merged.items()))


_DOCUMENT_KEYS = frozenset({*_SET_FIELDS, "read_only_subcommands", "programs"})


def rules_from_document(document: Mapping[str, Any], source: str, base: CommandRules | None = None) -> CommandRules:
    """``base`` (the defaults) extended by a user's rules document, decoded from TOML or JSON::

        read_only = ["mytool"]               # coarse: the program with any options only reads
        high_risk = ["make release"]
        [read_only_subcommands]
        mycli = ["status", "show"]
        [programs.mytool]                    # a spec: options vetted one by one
        grade = "read_only"
        harmless = ["-v", "--json"]
        takes_value = ["--format"]
        [programs.mytool.options."--apply"]
        grade = "mutation"
        phrase = "applies the plan"

    ``source`` names the document in errors (a :class:`ConfigError`, one line)."""
    unknown = sorted(set(document) - _DOCUMENT_KEYS)
    if unknown:
        known = ", ".join(sorted(_DOCUMENT_KEYS))
        raise ConfigError(f"{source}: unknown key {unknown[0]!r}; use one of: {known}")
    rules = base if base is not None else DEFAULT_COMMAND_RULES
    changes: dict[str, Any] = {
        name: document[name] for name in (*_SET_FIELDS, "read_only_subcommands") if name in document
    }
    try:
        if changes:
            rules = rules.extend(**changes)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    specs = specs_from_document(document, source)
    return rules.extend(specs=specs) if specs else rules


def rules_from_bytes(data: bytes, source: str, *, json_format: bool = False) -> CommandRules:
    """The default rules extended by a rules file's bytes (TOML, or JSON with ``json_format``); see
    :func:`rules_from_document`. A file that does not decode is a :class:`ConfigError` naming ``source``."""
    try:
        document = json.loads(data) if json_format else tomllib.loads(data.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "JSON" if json_format else "TOML"
        raise ConfigError(f"{source}: not valid {kind} ({' '.join(str(exc).split())}); fix the file") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: the document must be a table of rules; fix the file")
    return rules_from_document(document, source)


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
    walker = _Classifier(compiled_tree(rules))
    walker.text(command, depth=0)
    return _verdict(walker.findings)


@functools.lru_cache(maxsize=16)
def compiled_tree(rules: CommandRules) -> Tree:
    """The spec tree the rules make (built-in specs, coarse tables, the user's specs), built once per rules."""
    tables = {name: getattr(rules, name) for name in _SET_FIELDS}
    return compile_tree(tables, rules.read_only_subcommands, rules.specs)


class _Classifier(Walker):
    def judge(self, argv: list[str], depth: int, stdin: str | None) -> None:
        name = argv[0]
        if name in SHELLS:
            self.findings.extend(self.shell(argv, depth, stdin) or [])
            return
        if name == "eval":
            # eval expands its words a second time: what the line shows is not all it runs
            self.add("unknown", ("unknown",), "`eval` runs its words as a new command line, expanded once more")
            self.text(" ".join(argv[1:]), depth + 1)
            return
        judged = judge(self.tree, argv, self, depth)
        if judged.findings is not None:
            self.findings.extend(judged.findings)
        else:
            self.findings.append(self.unknown_program(argv))
