"""What ``commit`` takes of a run's changes, and the real reason for each path it leaves out.

A path is committed only when the file holds exactly what the agent last left there and the agent started from
HEAD's version of it, so the commit holds nothing of the user's. Every other path the agent changed is left out
with the first reason that applies, in the order below (the one a user must act on first).
"""

from __future__ import annotations

from safepoint.core.hashing import content_hash
from safepoint.core.rollback import ABSENT
from safepoint.engine.session import RunSession
from safepoint.records import FilePatchEntry
from safepoint.results import LeftOut
from safepoint.workspace.git import GitState
from safepoint.workspace.scan import IgnoreRules


def sort_changes(session: RunSession, head: dict[str, str], git: GitState) -> tuple[list[str], list[LeftOut]]:
    """(paths to commit, paths left out with their reason), sorted. ``head``: path -> blob id at HEAD. Outside
    git (``agent_changes`` without ``require_git``) only the files the agent created count as its own."""
    first: dict[str, FilePatchEntry] = {}
    last: dict[str, FilePatchEntry] = {}
    uncertain: set[str] = set()
    for patch in session.patches:
        first.setdefault(patch.path, patch)
        last[patch.path] = patch
        if patch.author_uncertain:
            uncertain.add(patch.path)
    rules = IgnoreRules.for_workspace(session.workspace.root, store_dir=session.store.local_dir())
    nested = tuple(git.nested_repos) + tuple(git.submodules)
    ours: list[str] = []
    left: list[LeftOut] = []
    for path in sorted(last):
        reason = _reason(
            session, path, first[path], last[path], head, rules if git.is_repo else None, nested, path in uncertain
        )
        if reason is None:
            ours.append(path)
        else:
            left.append(reason)
    return ours, left


def _reason(
    session: RunSession,
    path: str,
    first: FilePatchEntry,
    last: FilePatchEntry,
    head: dict[str, str],
    rules: IgnoreRules | None,
    nested: tuple[str, ...],
    uncertain: bool,
) -> LeftOut | None:
    link = session.workspace.link_parent(path)
    if any(path == folder or path.startswith(folder + "/") for folder in nested):
        return LeftOut(
            path=path,
            reason="outside_repository",
            why="it is inside a nested repository or submodule; commit it there yourself",
        )
    if rules is not None and path not in head and rules.excluded(path, is_dir=False):
        return LeftOut(
            path=path,
            reason="ignored_by_git",
            why="git ignores it (.gitignore) and it is not tracked; `git add -f` it yourself if it belongs in git",
        )
    now = session.files.state(path) if link is None else None
    if now is None or now.hash != last.after_hash or (last.after_mode is not None and now.mode != last.after_mode):
        where = f" (its folder {link} is a symlink now)" if link is not None else ""
        return LeftOut(
            path=path,
            reason="changed_since",
            why=f"it changed after the agent's last write to it{where}, by you or another program",
        )
    if uncertain:
        return LeftOut(
            path=path,
            reason="author_uncertain",
            why="it changed while a command ran and the platform could not tell who wrote it",
        )
    if rules is None and first.before_hash != ABSENT:
        return LeftOut(
            path=path,
            reason="outside_repository",
            why="the workspace is not in a git repository, and the file was there before the agent changed it",
        )
    if not _matches_head(session, first, head.get(path)):
        if last.after_hash == ABSENT:
            what = "held your uncommitted work" if path in head else "was not in git"
            back = (
                f"`safepoint rollback {session.info.run_id} --to CKPT` with a checkpoint before "
                f"{first.tool_call_id} (`safepoint checkpoints {session.info.run_id}`) brings it back"
                if first.before_ref is not None
                else "its content was never kept, so rollback cannot bring it back"
            )
            return LeftOut(
                path=path,
                reason="deleted_user_file",
                why=f"the agent deleted it while it {what}: there is no change of the agent's to commit ({back})",
            )
        return LeftOut(
            path=path,
            reason="user_work_before",
            why="it held your uncommitted work before the agent changed it; committing it would commit that too",
        )
    if last.after_hash == first.before_hash and last.after_mode == first.before_mode:
        return LeftOut(
            path=path,
            reason="no_change",
            why="it matches HEAD again (the agent's change was rolled back or undone)",
        )
    return None


def _matches_head(session: RunSession, first: FilePatchEntry, head_blob: str | None) -> bool:
    """Did the agent start from HEAD's version of the path (so a commit of it holds nothing of the user's)?"""
    if head_blob is None:
        return first.before_hash == ABSENT
    if first.before_ref == f"git:{head_blob}":
        return True
    data = session.files.git_blob(head_blob)
    return data is not None and content_hash(data) == first.before_hash
