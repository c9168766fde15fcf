"""git's sub-commands whose verdict depends on their words: `git checkout main` switches branches, `git checkout
-- f` discards changes; `git branch` lists, `git branch x` creates. Used by the ``git`` checks of
:mod:`safepoint.core.command_checks`; the read-only sub-commands and their options are specs in
:mod:`safepoint.core.command_specs_dev`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from safepoint.core.command_findings import PROTECTED_EFFECT, Finding, finding
from safepoint.core.command_spec import names
from safepoint.records import RiskLevel

__all__ = ["git_finding"]


def short_flags(args: Iterable[str]) -> set[str]:
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


def positionals(args: Iterable[str]) -> list[str]:
    return [arg for arg in args if not arg.startswith("-")]


name_set = names


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
# Settings under which git runs a program of the repository's choosing: written by the agent, they run its code
# the next time the user runs git (an fsmonitor runs on `git status`). By rule, per git-config(1): a last part that
# names a command or the program's path (`*cmd`, `*command`, `*program`, `*.path`, `*hook`, `*editor`, `*tunnel`,
# `*browser`, `*viewer`: `sendemail.sendmailCmd`, `gpg.ssh.defaultKeyCommand`, `imap.tunnel`, `man.viewer`); then
# by section the settings that choose or turn on signing (git runs `gpg.program` on the next commit, `git log`)
# and `git send-email` (its `smtpServer` may be a program); then the named rest. A list alone missed the family.
_GIT_CODE_KEYS = re.compile(
    r""".*\.[^.]*(cmd|command|program|hook|editor|tunnel|browser|viewer)|.*\.path
    |gpg\..*|.*\.gpgsign|.*\.verifysignatures|log\.showsignature|user\.signingkey|sendemail\..*
    |core\.(fsmonitor|hookspath|pager|sshcommand|askpass|gitproxy|attributesfile)
    |init\.templatedir|interactive\.difffilter|protocol\.(.*\.)?allow
    |.*\.textconv|.*\.driver|.*\.clean|.*\.smudge|.*\.process|diff\.external
    |alias\..*|include\.path|includeif\..*|credential\..*|uploadpack\..*
    |receive\..*|remote\..*\.(uploadpack|receivepack|vcs)|submodule\..*\.update|pager\..*""",
    re.IGNORECASE | re.VERBOSE,
)
_GIT_CONFIG_WRITES = name_set(
    "e, --edit, --unset, --unset-all, --add, --replace-all, --rename-section, --remove-section"
)
_GIT_READS = frozenset({"--get", "--get-all", "--get-regexp", "--list", "l", "--get-urlmatch"})


def git_finding(sub: str, rest: list[str]) -> Finding | None:
    """The verdict of `git SUB REST...` where it depends on the words, or None where the spec decides."""
    flags = short_flags(rest)
    pos = positionals(rest)

    def grade(g: str, phrase: str, effects: tuple[str, ...], risk: RiskLevel | None = None) -> Finding:
        # "--hard|discards …" puts the flag inside the quoted command: "`git reset --hard` discards …"
        extra, _, text = phrase.rpartition("|")
        return finding(g, effects, f"`{' '.join(['git', sub, *extra.split()])}` {text}", risk)

    if sub in _GIT_MUTATIONS:
        phrase, effects = _GIT_MUTATIONS[sub]
        return grade("mutation", phrase, effects)
    if sub in {"init", "clone"} and any(a == "--template" or a.startswith("--template=") for a in rest):
        # the template's hooks are copied into the new (or re-initialised) .git/hooks: code the user's git runs
        effects = (*_GIT_CONDITIONAL[sub][1], PROTECTED_EFFECT)
        return grade("mutation", "--template|copies the template's hooks into .git", effects, "high")
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
        if flags & {"x", "X"}:
            # Ignored files go too: safepoint's store ignores itself, and the user's `.env` is ignored.
            x = "-x" if "x" in flags else "-X"
            return grade(
                "destructive",
                f"deletes untracked files and, with {x}, ignored ones: safepoint's store among them",
                ("filesystem_delete", PROTECTED_EFFECT),
                "high",
            )
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
        if action in {"push", "save"} and flags & {"a", "--all", "u", "--include-untracked"}:
            # Like `git clean -x` (held): untracked files go, and with --all the ignored ones, the store among
            # them (it ignores itself); untracked, .safepoint/ goes with -u.
            every = bool(flags & {"a", "--all"})
            return grade(
                "destructive",
                f"{'--all' if every else '--include-untracked'}|removes untracked "
                + (
                    "and ignored files from the working tree: safepoint's store among them"
                    if every
                    else "files from the working tree: safepoint's configuration among them"
                ),
                ("filesystem_delete", "vcs_local", PROTECTED_EFFECT),
                "high",
            )
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
        if flags & {"e", "--edit"} or (pos and pos[0] == "edit"):
            return grade("mutation", "--edit|opens the settings in an editor", ("vcs_local", PROTECTED_EFFECT), "high")
        # A value after the key (`--file F` puts F among the positionals too, so any of them may be the key).
        sets = bool(flags & {"--add", "--replace-all"}) or len([p for p in pos if p != "set"]) >= 2
        key = next((p for p in pos if _GIT_CODE_KEYS.fullmatch(p)), None)
        if (
            key
            and sets
            and not (pos[0] in {"get", "list", "unset"} or flags & (_GIT_READS | {"--unset", "--unset-all"}))
        ):
            return grade("mutation", f"{key}|sets a program git runs", ("vcs_local", PROTECTED_EFFECT), "high")
        if pos and pos[0] in {"get", "list"}:
            return grade("read_only", "only reads settings", ())
        if flags & _GIT_CONFIG_WRITES or (
            pos and pos[0] in {"set", "unset", "rename-section", "remove-section", "edit"}
        ):
            return grade("local_write", "changes settings", ("vcs_local",))
        if flags & _GIT_READS or len(pos) <= 1:
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
