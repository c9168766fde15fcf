"""One simple command judged by its spec: the findings (the verdict's parts) and the paths it writes, from one
reading of its words.

The spec tree (program -> sub-commands) is compiled once per :class:`~safepoint.core.commands.CommandRules`
from three layers: the built-in specs (``command_specs_*``), the coarse name tables of the rules (``read_only``,
``high_risk`` ... entries such as ``git push``), and a user's own specs. See :func:`compile_tree`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import msgspec

from safepoint.core.command_checks import CHECKS, Call, Nested
from safepoint.core.command_findings import Finding, danger, finding
from safepoint.core.command_rules import (
    BUILTIN_TABLES,
    CATEGORIES,
    CATEGORY_PHRASE,
    HINTS,
    INTERPRETERS,
    canonical,
)
from safepoint.core.command_spec import (
    GRADE_NAMES,
    OptionEffect,
    ProgramSpec,
    filled,
    merge_spec,
    parse_words,
    spec_options,
    subcommand,
)
from safepoint.core.command_specs_dev import DEV_SPECS
from safepoint.core.command_specs_text import TEXT_SPECS

__all__ = ["BUILTIN_SPECS", "Judged", "Tree", "builtin_paths", "compile_tree", "judge", "spec_paths", "unknown_program"]

BUILTIN_SPECS: dict[str, ProgramSpec] = {**TEXT_SPECS, **DEV_SPECS}
AUTO = frozenset({"read_only", "rerunnable"})
_RANK = {name: rank for rank, name in enumerate(GRADE_NAMES)}
_PHRASES = {
    **CATEGORY_PHRASE,
    "mutation": ("changes state; a re-run repeats the change", ("unknown",)),
    "unknown": ("is not a known command; treated as having effects", ("unknown",)),
}


class Tree(NamedTuple):
    programs: dict[str, ProgramSpec]
    depth: dict[str, int]  # program -> words in its longest path (how much of a command a reason shows)


class Judged(NamedTuple):
    findings: list[Finding] | None  # None: no spec knows the program
    targets: list[str]


def spec_paths(specs: Mapping[str, ProgramSpec]) -> Iterable[tuple[tuple[str, ...], ProgramSpec]]:
    stack: list[tuple[tuple[str, ...], ProgramSpec]] = [((name,), spec) for name, spec in specs.items()]
    while stack:
        path, spec = stack.pop()
        yield path, spec
        stack.extend(((*path, name), sub) for name, sub in spec.subcommands)


@functools.lru_cache(maxsize=1)
def builtin_paths() -> dict[str, frozenset[str]]:
    """The built-in specs' paths by grade, for the coarse tables of the default rules (`git status` ->
    read_only)."""
    found: dict[str, set[str]] = {category: set() for category in CATEGORIES}
    for path, spec in spec_paths(BUILTIN_SPECS):
        if spec.grade in found:
            found[spec.grade].add(" ".join(path))
    return {category: frozenset(paths) for category, paths in found.items()}


def _coarse(category: str, entry: str, builtin: bool) -> ProgramSpec:
    phrase, effects = CATEGORY_PHRASE[category]
    risk = None
    hint = HINTS.get(entry)
    if hint is not None:
        phrase, effects, risk = hint
    # A built-in entry without a spec of its own takes no options it does not know; a user's entry is the user's
    # word that the program (with any options) is what they say.
    # A re-runnable step (a build, a test run) runs the project's own code by design; its options cannot make
    # it do more than that, so they are not vetted.
    vetted = builtin and category == "read_only"
    return ProgramSpec(grade=category, phrase=phrase, effects=effects, risk=risk, any_option=not vetted)


def _put(programs: dict[str, ProgramSpec], path: Sequence[str], coarse: ProgramSpec, builtin: bool) -> None:
    def place(node: ProgramSpec | None, rest: Sequence[str]) -> ProgramSpec:
        if not rest:
            if node is None or (node.grade in {"", "unknown"} and not node.options):
                # no opinion yet: the entry decides (a check of the program still finds its written paths)
                subs = node.subcommands if node else ()
                return msgspec.structs.replace(coarse, subcommands=subs, check=node.check if node else None)
            if builtin:
                return merge_spec(node, msgspec.structs.replace(coarse, any_option=node.any_option))
            if _RANK[coarse.grade] > _RANK.get(node.grade, 0):
                # a user's stricter entry is a floor under whatever the spec and its check find
                floor = OptionEffect(
                    grade=coarse.grade, phrase=coarse.phrase or "", effects=coarse.effects or (), risk=coarse.risk
                )
                return msgspec.structs.replace(node, floor=floor)
            return node
        parent = node or ProgramSpec(grade="")  # a placeholder for its sub-commands: no opinion of its own
        child = place(subcommand(parent, rest[0]), rest[1:])
        children = dict(parent.subcommands)
        children[rest[0]] = child
        return msgspec.structs.replace(parent, subcommands=tuple(sorted(children.items())))

    programs[path[0]] = place(programs.get(path[0]), path[1:])


def _silence(spec: ProgramSpec, path: tuple[str, ...], listed: Mapping[str, frozenset[str]]) -> ProgramSpec:
    """A built-in spec whose grade would be replayed on its own counts only where the rules' tables list it
    (``CommandRules(read_only={"a"})`` replaces the defaults, it does not extend them)."""
    grade = spec.grade
    if grade in AUTO and " ".join(path) not in listed.get(grade, frozenset()):
        grade = "unknown"
    subs = tuple((name, _silence(sub, (*path, name), listed)) for name, sub in spec.subcommands)
    return msgspec.structs.replace(spec, grade=grade, subcommands=subs)


def compile_tree(
    tables: Mapping[str, frozenset[str]],
    read_only_subcommands: Iterable[tuple[str, frozenset[str]]],
    user_specs: Iterable[tuple[str, ProgramSpec]],
) -> Tree:
    listed = {category: set(tables.get(category, frozenset())) for category in CATEGORIES}
    for program, subs in read_only_subcommands:
        listed["read_only"].update(f"{program} {sub}" for sub in subs)
    frozen = {category: frozenset(paths) for category, paths in listed.items()}
    programs = {name: _silence(spec, (name,), frozen) for name, spec in BUILTIN_SPECS.items()}
    builtin = builtin_paths()
    for category in CATEGORIES:
        for entry in sorted(listed[category]):
            words = entry.split()
            words[0] = canonical(words[0])
            known = entry in BUILTIN_TABLES[category] or entry in builtin[category]
            _put(programs, words, _coarse(category, entry, known), known)
    for name, spec in user_specs:
        programs[canonical(name)] = merge_spec(programs.get(canonical(name)), spec)
    programs = {name: filled(spec) for name, spec in programs.items()}
    depth: dict[str, int] = {}
    for path, _ in spec_paths(programs):
        depth[path[0]] = max(depth.get(path[0], 0), len(path))
    return Tree(programs, depth)


def _display(tree: Tree, argv: Sequence[str]) -> str:
    shown = [argv[0]]
    for word in argv[1 : tree.depth.get(argv[0], 1)]:
        if word.startswith("-"):
            break
        shown.append(word)
    return " ".join(shown)


def unknown_program(tree: Tree, argv: Sequence[str]) -> Finding:
    if argv[0] in INTERPRETERS:
        return finding("unknown", ("unknown",), f"`{_display(tree, argv)}` runs code that is not analysed")
    return finding(
        "unknown", ("unknown",), f"`{_display(tree, argv)}` is not a known command; treated as having effects"
    )


def _base(spec: ProgramSpec, shown: str) -> Finding:
    phrase, effects = _PHRASES.get(spec.grade, _PHRASES["unknown"])
    return finding(
        spec.grade,
        spec.effects if spec.effects is not None else effects,
        f"`{shown}` {spec.phrase or phrase}",
        spec.risk,
    )


def _vet(spec: ProgramSpec, shown: str, options: Iterable[tuple[str, str | None, str]]) -> list[Finding]:
    """Findings for the options: those that change the verdict, and (deny by default) those the spec does not
    know, unless its grade already covers whatever they may do."""
    found: list[Finding] = []
    effects = spec_options(spec)
    for name, _, word in options:
        change = effects.get(name)
        if change is not None:
            written = word if not word.startswith("--") and "=" not in word else name
            found.append(finding(change.grade, change.effects, f"`{shown} {written}` {change.phrase}", change.risk))
        elif (
            spec.any_option
            or name in spec.harmless
            or name in spec.takes_value
            or (spec.negations and name.startswith("--no-"))
        ):
            continue
        else:
            reason = f"`{shown} {name}` is an option the rules do not know; treated as having effects"
            found.append(finding("unknown", ("unknown",), reason))
    return found


def _written_operands(spec: ProgramSpec, operands: list[str], has_target_option: bool) -> list[str]:
    role = spec.operands
    if role == "write":
        return [path for path in operands if path != "-"]
    if role == "last":
        return [] if has_target_option or len(operands) < 2 else operands[-1:]
    if role == "after_first":
        return operands[1:]
    if role == "second":
        return [path for path in operands[1:2] if path != "-"]
    return []


def judge(tree: Tree, argv: list[str], walk: Nested, depth: int) -> Judged:
    """The findings and written paths of one simple command (wrappers already peeled, ``argv[0]`` canonical)."""
    spec = tree.programs.get(argv[0])
    if spec is None:
        return Judged(None, [])
    path = [argv[0]]
    rest = list(argv[1:])
    levels = []
    found: list[Finding] = []
    while rest and spec.subcommands:
        sub = subcommand(spec, rest[0])  # an exact word first: `python --version`, `crontab -l`
        if sub is not None:
            levels.append((spec, parse_words(spec, [])))
            path.append(rest[0])
            spec, rest = sub, rest[1:]
            continue
        head = parse_words(spec, rest, stop_at_operand=True)
        if not head.operands:
            break
        word = head.operands[0]
        sub = subcommand(spec, word)
        if sub is None:
            # `crontab FILE`, `git stash drop`, a user's `git lfs ls-files`, `go env GOPATH` (its only sub-command
            # is the option word `-w`): the program's own grade or check judges the words
            words_are_its_own = spec.grade != "unknown" and (
                spec.any_option or not any(not name.startswith("-") for name, _ in spec.subcommands)
            )
            if spec.grade == "high_risk" or spec.check is not None or words_are_its_own:
                break
            findings = _vet(spec, " ".join(path), head.options)
            findings.append(unknown_program(tree, [*path, *head.operands]))
            return Judged(findings, [])
        found.extend(_vet(spec, " ".join(path), head.options))
        levels.append((spec, head))
        path.append(word)
        spec, rest = sub, rest[len(rest) - len(head.operands) + 1 :]
    shown = " ".join(path)
    parsed = parse_words(spec, rest)
    found.extend(_vet(spec, shown, parsed.options))
    call = Call(walk, depth, path, spec, rest, parsed, levels)
    call.found = found
    operands_written = (not spec.operands_when or parsed.has(*spec.operands_when)) and not parsed.has(
        *spec.operands_unless
    )
    value_targets = [v for v in parsed.values(*spec.writes_value) if v != "-"]
    operand_targets = _written_operands(spec, parsed.operands, bool(value_targets)) if operands_written else []
    if spec.check is not None:
        CHECKS[spec.check](call)
    targets = call.targets if call.targets is not None else [*value_targets, *operand_targets]
    base = call.base if call.base is not None else [_base(spec, shown)]
    if spec.floor is not None:
        floor = finding(spec.floor.grade, spec.floor.effects, f"`{shown}` {spec.floor.phrase}", spec.floor.risk)
        if danger([floor]) > danger(base):
            base = [floor]
    if spec.grade in AUTO and call.base is None and operand_targets:
        named = " ".join(operand_targets)
        call.add("local_write", ("filesystem_write",), f"`{shown}` writes the file it names ({named})")
    extra = call.found
    if extra and danger(extra) >= danger(base):
        return Judged(extra, targets)  # the options say more than the program's own grade
    return Judged([*base, *extra], targets)
