"""The declarative form of a program for the ``run_command`` classifier, and the one option parser that reads a
program's words from it.

A :class:`ProgramSpec` says, for one program (or one sub-command of it): its grade with harmless options; which
options take a value (``-o FILE``, ``-oFILE``, ``--output=FILE``, ``--output FILE``); which options change the
verdict, to what and why; which options are known to be harmless; which operands (and option values) name files
the program writes; and its sub-command tables (``git`` -> ``diff``, ``npm`` -> ``run`` -> ``test``). Deny by
default: on a program whose grade would let a resume re-run it on its own, an option the spec does not know
makes the verdict ask. The same spec yields the verdict and the paths the command writes (``write_targets``).

Users declare programs in the same form (a TOML or JSON document, see :func:`specs_from_document`).

Pure: no I/O. The spec tables live in ``command_specs_*``; the walk that applies them in ``command_judge``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import msgspec

from safepoint.errors import ConfigError
from safepoint.records import RiskLevel

__all__ = [
    "GRADE_NAMES",
    "OperandRole",
    "OptionEffect",
    "Parsed",
    "ProgramSpec",
    "Word",
    "derived",
    "effect",
    "filled",
    "is_literal",
    "merge_spec",
    "names",
    "parse_words",
    "spec_options",
    "specs_from_document",
    "subcommand",
]

GRADE_NAMES = ("read_only", "rerunnable", "local_write", "mutation", "destructive", "unknown", "high_risk")

# Which operands a program writes: none ("read"), all of them ("write"), the last when there are two or more
# ("last", cp), all but the first ("after_first", chmod MODE FILE...), the second ("second", uniq IN OUT).
OperandRole = Literal["read", "write", "last", "after_first", "second"]


class OptionEffect(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What an option does to the verdict: a grade and a phrase ("`sort -o` writes a file")."""

    grade: str
    phrase: str
    effects: tuple[str, ...] = ()
    risk: RiskLevel | None = None


class ProgramSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One program, or one sub-command of one (``subcommands``). Hashable: the rules are cache keys, so the
    mappings are sorted tuples of pairs (see :func:`spec_options` for the dict view)."""

    grade: str = "unknown"
    phrase: str | None = None  # the reason's verb phrase; None: the grade's wording ("only reads" ...)
    effects: tuple[str, ...] | None = None  # side-effect tags; None: the grade's
    risk: RiskLevel | None = None  # overrides the grade's risk
    takes_value: frozenset[str] = frozenset()  # options followed by a value: "-o", "--output"
    attached_value: frozenset[str] = frozenset()  # options whose value can only be attached: `sed -i.bak`
    harmless: frozenset[str] = frozenset()  # options known not to change the verdict
    any_option: bool = False  # options are not vetted: the grade already covers what they may do
    negations: bool = False  # every `--no-X` only turns something off
    options: tuple[tuple[str, OptionEffect], ...] = ()  # options that change the verdict
    operands: OperandRole = "read"
    operands_when: frozenset[str] = frozenset()  # operands are written only with one of these (`sed -i`)
    operands_unless: frozenset[str] = frozenset()  # ...or unless one of these is given (`gzip -k`)
    writes_value: frozenset[str] = frozenset()  # options whose value is a file written (`sort -o F`)
    options_end_at_operand: bool = False  # POSIX: the first operand ends the options (`env`, `find`, `xargs`)
    subcommands: tuple[tuple[str, ProgramSpec], ...] = ()
    check: str | None = None  # a named check of the words' contents (a sed script, an awk program ...)
    floor: OptionEffect | None = None  # a user's coarse entry (`high_risk = ["git commit"]`): never laxer than it


class Word(str):
    """A shell word's text (quotes removed) that remembers whether it was free of expansions: only literal words
    are reported as paths a command writes."""

    literal: bool

    def __new__(cls, text: str, literal: bool) -> Word:
        word = super().__new__(cls, text)
        word.literal = literal
        return word


def is_literal(word: str) -> bool:
    return isinstance(word, Word) and word.literal


def derived(parent: str, text: str) -> Word:
    """A piece of ``parent`` (an attached option value, `of=FILE`, a backup name): literal when it is."""
    return Word(text, is_literal(parent))


class Parsed(NamedTuple):
    """A program's words read by its spec: the options (name, value or None, the word as written) in order,
    and the operands (every word after `--` included)."""

    options: list[tuple[str, str | None, str]]
    operands: list[str]

    def has(self, *wanted: str) -> bool:
        return any(name in wanted for name, _, _ in self.options)

    def values(self, *wanted: str) -> list[str]:
        return [value for name, value, _ in self.options if name in wanted and value is not None]


def parse_words(spec: ProgramSpec, args: Sequence[str], *, stop_at_operand: bool | None = None) -> Parsed:
    """GNU-style options (anywhere before `--`, unless the spec ends them at the first operand): clusters
    (`-rf`), `-oVALUE`, `-o VALUE`, `--out=VALUE`, `--out VALUE` for the options the spec says take a value."""
    stop = spec.options_end_at_operand if stop_at_operand is None else stop_at_operand
    options: list[tuple[str, str | None, str]] = []
    operands: list[str] = []
    i = 0
    only_operands = False
    while i < len(args):
        arg = args[i]
        if only_operands or arg == "-" or not arg.startswith("-"):
            operands.append(arg)
            if stop and not only_operands:
                operands.extend(args[i + 1 :])
                break
        elif arg == "--":
            only_operands = True
        elif arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                options.append((name, derived(arg, value), arg))
            elif name in spec.takes_value:
                options.append((name, args[i + 1] if i + 1 < len(args) else None, arg))
                i += 1
            else:
                options.append((name, None, arg))
        else:
            for j, char in enumerate(arg[1:], start=1):
                option = f"-{char}"
                attached: str | None = derived(arg, arg[j + 1 :]) if j < len(arg) - 1 else None
                if option in spec.takes_value:
                    if attached is None and i + 1 < len(args):
                        attached = args[i + 1]
                        i += 1
                    options.append((option, attached, arg))
                    break
                if option in spec.attached_value:
                    options.append((option, attached, arg))
                    break
                options.append((option, None, arg))
        i += 1
    return Parsed(options, operands)


@functools.cache
def spec_options(spec: ProgramSpec) -> dict[str, OptionEffect]:
    return dict(spec.options)


@functools.cache
def spec_subcommands(spec: ProgramSpec) -> dict[str, ProgramSpec]:
    return dict(spec.subcommands)


def subcommand(spec: ProgramSpec, name: str) -> ProgramSpec | None:
    return spec_subcommands(spec).get(name)


# ---- building the tables --------------------------------------------------------------------------------------


def names(text: str) -> frozenset[str]:
    """Options or names separated by spaces, commas or newlines."""
    return frozenset(item for item in re.split(r"[\s,]+", text) if item)


def effect(grade: str, phrase: str, effects: Iterable[str] = (), risk: RiskLevel | None = None) -> OptionEffect:
    return OptionEffect(grade=grade, phrase=phrase, effects=tuple(effects), risk=risk)


# ---- merging a user's spec into the built-in one ----------------------------------------------------------------

_GRADE_ORDER = {name: rank for rank, name in enumerate(GRADE_NAMES)}


def _stricter(a: str, b: str) -> str:
    return a if _GRADE_ORDER.get(a, 99) >= _GRADE_ORDER.get(b, 99) else b


def merge_spec(base: ProgramSpec | None, extra: ProgramSpec) -> ProgramSpec:
    """``extra`` (a user's declaration) over ``base`` (the built-in one). The user may make a program stricter
    (a grade, option effects, written operands) and may vouch for more harmless options, but never loses a
    built-in option effect: an option the built-in spec says runs code keeps saying so."""
    if base is None:
        return extra
    options = dict(base.options)
    for name, change in extra.options:
        old = options.get(name)
        options[name] = change if old is None or _stricter(change.grade, old.grade) == change.grade else old
    subs = dict(base.subcommands)
    for name, sub in extra.subcommands:
        subs[name] = merge_spec(subs.get(name), sub)
    # "": a user's spec that names no grade keeps the grade it extends
    grade = extra.grade or base.grade if not extra.grade or not base.grade else _stricter(extra.grade, base.grade)
    chosen = extra if grade == extra.grade and extra.grade != base.grade else base
    return msgspec.structs.replace(
        base,
        grade=grade,
        phrase=chosen.phrase,
        effects=chosen.effects,
        risk=chosen.risk,
        takes_value=base.takes_value | extra.takes_value,
        attached_value=base.attached_value | extra.attached_value,
        harmless=base.harmless | (extra.harmless - frozenset(options)),
        any_option=base.any_option and extra.any_option,
        options=tuple(sorted(options.items())),
        operands=base.operands if extra.operands == "read" else extra.operands,
        writes_value=base.writes_value | extra.writes_value,
        subcommands=tuple(sorted(subs.items())),
    )


# ---- a user's document (TOML or JSON, already decoded) -------------------------------------------------------


class _ProgramDecl(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    grade: str = ""  # none given: the built-in spec's grade, or unknown for a program with none
    phrase: str | None = None
    effects: list[str] | None = None
    risk: RiskLevel | None = None
    takes_value: list[str] = []
    attached_value: list[str] = []
    harmless: list[str] = []
    any_option: bool = False
    negations: bool = False
    options: dict[str, OptionEffect] = {}
    operands: OperandRole = "read"
    operands_when: list[str] = []
    operands_unless: list[str] = []
    writes_value: list[str] = []
    options_end_at_operand: bool = False
    subcommands: dict[str, _ProgramDecl] = {}


def _to_spec(where: str, decl: _ProgramDecl) -> ProgramSpec:
    if decl.grade and decl.grade not in GRADE_NAMES:
        raise ConfigError(f"{where}: grade {decl.grade!r} is not one of {', '.join(GRADE_NAMES)}")
    for name, change in decl.options.items():
        if change.grade not in GRADE_NAMES:
            raise ConfigError(f"{where}.options.{name}: grade {change.grade!r} is not one of {', '.join(GRADE_NAMES)}")
    for name in [*decl.takes_value, *decl.harmless, *decl.options, *decl.writes_value]:
        if not name.startswith("-") or len(name) < 2 or " " in name:
            raise ConfigError(f"{where}: {name!r} is not an option; write it as -x or --name")
    return ProgramSpec(
        grade=decl.grade,
        phrase=decl.phrase,
        effects=tuple(decl.effects) if decl.effects is not None else None,
        risk=decl.risk,
        takes_value=frozenset(decl.takes_value),
        attached_value=frozenset(decl.attached_value),
        harmless=frozenset(decl.harmless),
        any_option=decl.any_option,
        negations=decl.negations,
        options=tuple(sorted(decl.options.items())),
        operands=decl.operands,
        operands_when=frozenset(decl.operands_when),
        operands_unless=frozenset(decl.operands_unless),
        writes_value=frozenset(decl.writes_value),
        options_end_at_operand=decl.options_end_at_operand,
        subcommands=tuple(sorted((n, _to_spec(f"{where}.subcommands.{n}", s)) for n, s in decl.subcommands.items())),
    )


def filled(spec: ProgramSpec) -> ProgramSpec:
    """``spec`` with the grades a user left out ("") made unknown: what no spec knows is not read-only."""
    subs = tuple((name, filled(sub)) for name, sub in spec.subcommands)
    return msgspec.structs.replace(spec, grade=spec.grade or "unknown", subcommands=subs)


def specs_from_document(document: Mapping[str, Any], source: str) -> dict[str, ProgramSpec]:
    """The ``[programs.NAME]`` tables of a user's rules document, as specs. ``source`` names it in errors."""
    programs = document.get("programs", {})
    if not isinstance(programs, Mapping):
        raise ConfigError(f"{source}: 'programs' must be a table of program name -> spec")
    found: dict[str, ProgramSpec] = {}
    for name, body in programs.items():
        where = f"{source}: programs.{name}"
        if not isinstance(name, str) or not name.strip() or " " in name.strip():
            raise ConfigError(f"{where}: a program name is one word (declare sub-commands under 'subcommands')")
        try:
            decl = msgspec.convert(body, _ProgramDecl)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        found[name.strip()] = _to_spec(where, decl)
    return found
