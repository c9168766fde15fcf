"""Whether a command line reaches safepoint's store or a repository's ``.git``: such a call is held for a person.

Pure: no I/O. The agent's own tools refuse those folders (``workspace/files.py``); a command cannot be confined
the same way, so one that names them is held before it runs, whatever the approval mode: ``rm -rf .agent-runtime``
deletes the run's ledger and every undo, ``echo … >> .git/hooks/pre-commit`` or ``git config core.fsmonitor …``
plants code the user's next git command runs. Three ways a line reaches them:

- a path it writes (:func:`safepoint.core.command_targets.write_targets`: redirections, ``rm``, ``mv``,
  ``chmod -R`` …) with a part named ``.git`` or the store's folder, case-folded (a case-insensitive filesystem);
  or, wherever the store really is (``--store PATH``, another folder name inside the workspace, outside it), a
  path that, taken from the command's folder, is that folder or inside it (``Protected.folders``);
- a glob part that starts with a dot and matches one of those names (``rm -rf .[a-z]*``, ``.*``); a glob that
  starts otherwise does not match a dot-folder in bash (no ``dotglob``), so ``rm -rf *`` is not held for this;
- ``git clean -x``/``-X`` (it deletes ignored files, and the store ignores itself) and ``git config`` writing a key
  that runs a program (``core.fsmonitor``, ``core.hooksPath``, ``alias.*``, filters, any ``*cmd``/``*command``/
  ``*program``/``*.path`` key, signing …): found by the git checks
  (:mod:`safepoint.core.command_git`), marked with the same effect.

What is not seen (a path built at run time, ``rm -rf "$D"``, a script that deletes the store) runs; the engine
then finds its store gone and stops in one line instead of going on without a ledger.
"""

from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass

from safepoint.core.command_findings import PROTECTED_EFFECT, finding
from safepoint.core.command_reach_walk import (
    ANCESTOR,
    CONFIGURATION,
    DOT_ENTRIES,
    DYNAMIC,
    GIT_CONFIGURATION,
    reach_beyond,
)
from safepoint.core.command_rules import IDEMPOTENCY_RANK, POLICY_RANK, RISK_RANK
from safepoint.core.command_targets import write_targets
from safepoint.core.commands import DEFAULT_COMMAND_RULES, CommandRules, CommandVerdict, classify_command

__all__ = [
    "DEFAULT_PROTECTED",
    "DEFAULT_STORE_NAME",
    "PROTECTED_EFFECT",
    "Protected",
    "classify_with_reach",
    "held_for",
    "protected_for",
    "reached",
]

DEFAULT_STORE_NAME = ".agent-runtime"
_GLOB = frozenset("*?[")
_REACHED = {
    ".git": "a repository's .git folder",
    CONFIGURATION: "safepoint's own configuration (.safepoint)",
    ANCESTOR: "the workspace itself or a folder above it (the store and .git with it)",
    DOT_ENTRIES: "every entry a glob or brace expansion makes, .git and the store among them",
    GIT_CONFIGURATION: "git's configuration outside the repository (it chooses programs git runs)",
    DYNAMIC: "a path built when it runs, from words that could spell .git or the store",
}


@dataclass(frozen=True)
class Protected:
    """What a command must not write: folder ``names`` (any part of a written path, case-folded; dot-globs
    too) and absolute ``folders`` (a written path inside one, taken from ``cwd``, the folder commands run in)."""

    names: tuple[str, ...] = (".git", DEFAULT_STORE_NAME)
    folders: tuple[str, ...] = ()
    cwd: str | None = None


DEFAULT_PROTECTED = Protected()  # no store location known: its default name


def protected_for(store_dir: str | None, cwd: str) -> Protected:
    """What commands run in ``cwd`` must not write when the run's store keeps its files in ``store_dir`` (None:
    a store with no folder here, PostgreSQL). Its folder is protected wherever it is; its name too when it is a
    dot-folder (reached by a name a ``cd`` hides from ``cwd``, or a dot-glob). Both are absolute and resolved by
    the caller (symlinks followed), so a path compares as the folder it is."""
    if store_dir is None:
        return Protected(names=(".git",), cwd=cwd)
    name = posixpath.basename(posixpath.normpath(store_dir))
    names = (".git", name.casefold()) if name.startswith(".") else (".git",)
    return Protected(names=names, folders=(posixpath.normpath(store_dir),), cwd=cwd)


def _in_folder(target: str, protected: Protected) -> str | None:
    """The protected folder a written path is, or is inside of (compared case-folded), or None."""
    if not protected.folders or (protected.cwd is None and not target.startswith("/")):
        return None
    path = posixpath.normpath(posixpath.join(protected.cwd or "/", target)).casefold()
    for folder in protected.folders:
        folded = folder.casefold()
        if path == folded or path.startswith(folded.rstrip("/") + "/"):
            return folder
    return None


def reached(target: str, protected: tuple[str, ...]) -> str | None:
    """The protected folder name a written path reaches, or None."""
    for part in posixpath.normpath(target).split("/"):
        folded = part.casefold()
        if folded in protected:
            return folded
        if folded.startswith(".") and _GLOB & set(folded):
            for name in protected:
                if fnmatch.fnmatchcase(name, folded):
                    return name
    return None


def classify_with_reach(
    command: str, rules: CommandRules = DEFAULT_COMMAND_RULES, protected: Protected = DEFAULT_PROTECTED
) -> CommandVerdict:
    """The classifier's verdict, made high risk and marked ``PROTECTED_EFFECT`` (held for a decision) when the
    line writes into the store or a ``.git``. Never raises, like the classifier."""
    verdict = classify_command(command, rules)
    names = tuple(sorted({name.casefold() for name in protected.names}))
    found: set[str] = set()
    for target in write_targets(command, rules):
        name = reached(target, names)
        if name is not None:
            found.add(".git" if name == ".git" else "store")
        elif _in_folder(target, protected) is not None:
            found.add("store")
    # the other spellings (globs, braces, target folders, ancestors, git's own configuration): command_reach_walk
    found |= {name if name in _REACHED else "store" for name in reach_beyond(command, rules, names, protected.cwd)}
    if not found:
        return verdict
    what = " and ".join(_REACHED.get(name, "safepoint's store") for name in sorted(found))
    return held_for(verdict, f"the command writes into {what}")


def held_for(verdict: CommandVerdict, why: str) -> CommandVerdict:
    """``verdict`` made high risk and marked ``PROTECTED_EFFECT``: held for a person, saying ``why``."""
    held = finding("mutation", (PROTECTED_EFFECT,), f"{why}; a person decides", "high")
    return CommandVerdict(
        idempotency=max(verdict.idempotency, held.idempotency, key=IDEMPOTENCY_RANK.__getitem__),
        replay_policy=max(verdict.replay_policy, held.replay_policy, key=POLICY_RANK.__getitem__),
        risk_level=max(verdict.risk_level, held.risk_level, key=RISK_RANK.__getitem__),
        side_effects=tuple(sorted({*verdict.side_effects, PROTECTED_EFFECT})),
        reasons=(*verdict.reasons, held.reason),
    )
