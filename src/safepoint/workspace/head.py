"""HEAD without running git: a checkpoint records it, and a subprocess per checkpoint would cost milliseconds."""

from __future__ import annotations

import os


def find_git_dir(path: str) -> str | None:
    """The git directory of the repository containing ``path`` (a ``.git`` folder, or the one a ``.git`` file names)."""
    current = os.path.abspath(path)
    while True:
        dot_git = os.path.join(current, ".git")
        if os.path.isdir(dot_git):
            return dot_git
        if os.path.isfile(dot_git):
            with open(dot_git, encoding="utf-8", errors="replace") as handle:
                line = handle.readline().strip()
            if line.startswith("gitdir:"):
                target = line[len("gitdir:") :].strip()
                return os.path.normpath(os.path.join(current, target))
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def read_head(git_dir: str) -> str | None:
    """The commit HEAD points at (None for an unborn branch or an unreadable repository)."""
    try:
        with open(os.path.join(git_dir, "HEAD"), encoding="utf-8") as handle:
            head = handle.read().strip()
    except OSError:
        return None
    if not head.startswith("ref:"):
        return head or None
    ref = head[len("ref:") :].strip()
    common = git_dir
    commondir_file = os.path.join(git_dir, "commondir")  # a linked worktree keeps its refs in the common dir
    if os.path.isfile(commondir_file):
        with open(commondir_file, encoding="utf-8") as handle:
            common = os.path.normpath(os.path.join(git_dir, handle.read().strip()))
    for base in (git_dir, common):
        try:
            with open(os.path.join(base, ref), encoding="utf-8") as handle:
                return handle.read().strip() or None
        except OSError:
            continue
    try:
        with open(os.path.join(common, "packed-refs"), encoding="utf-8") as handle:
            for line in handle:
                sha, _, name = line.strip().partition(" ")
                if name == ref:
                    return sha
    except OSError:
        pass
    return None
