"""File patch records (§8.4): the before-state of every path a call changes, kept durably before the change, the
after-state after it, and any recorded version reproduced exactly.

Storage grows with the edits, not the files: a path's content is stored whole once (the first time the run sees
it), and every later version is a small patch from the one before. Binary content is stored whole, compressed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from safepoint.core.hashing import content_hash
from safepoint.core.patches import apply_patch, make_patch
from safepoint.core.rollback import ABSENT, UNKNOWN, FileState
from safepoint.engine.log_writer import now
from safepoint.errors import StoreError, ToolFailure
from safepoint.records import FileBeforeState, FilePatchEntry, PatchOp
from safepoint.workspace.files import Workspace
from safepoint.workspace.git import BlobReader
from safepoint.workspace.names import quote_path, real_path


@dataclass
class FileBefore:
    path: str  # workspace-relative
    hash: str
    mode: int | None
    content: bytes | None = field(repr=False, default=None)
    ref: str | None = None


DIRECTORY = "directory"  # the state of a path that is now a folder (a file's rollback must not touch it)
NOT_KEPT = "none:too-large"  # the patch_ref of a change recorded by hash only
CACHE_BYTES = 64 * 1024 * 1024  # rebuilt versions kept in memory (oldest dropped first)


class Records(Protocol):
    """Where file records go: staged in the run's next durable group (the log writer)."""

    def add(self, body: msgspec.Struct) -> int: ...

    def trace(self, event: str, **data: Any) -> None: ...


class ContentStore(Protocol):
    """The run's content-addressed blobs."""

    def __contains__(self, digest: str) -> bool: ...

    def put(self, data: bytes, digest: str | None = None) -> str: ...

    def get(self, digest: str) -> bytes: ...

    def intact(self, digest: str, keep: Callable[[str, bytes], None] | None = None) -> bool: ...


class FileChanges:
    def __init__(
        self,
        run_id: str,
        workspace: Workspace,
        content: ContentStore,
        records: Records,
        patches: list[FilePatchEntry],
        befores: dict[str, list[FileBeforeState]],
        blobs: Iterable[str],
        pruned: Callable[[], frozenset[str]] | None = None,
    ) -> None:
        self.run_id = run_id
        self.workspace = workspace
        self.content = content
        self._git: BlobReader | None = None  # one `git cat-file --batch` for the session, started at its first read
        self.records = records
        self.patches = patches  # every file patch of the run, in log order (appended to here)
        self.befores = befores  # call id -> the before-states recorded when it started
        # Content this run can reproduce: its blobs, and every patch's after-state (before + patch) when the
        # before-state was itself reproducible or absent. Worked out at first use (``_reproducible``).
        self._blobs_at_open = blobs
        self._reproducible_set: set[str] | None = None
        # The digests ``safepoint gc`` freed of this run (its control channel: ``core.retention.PrunedRecord``),
        # read at first use; of those, the ones still gone (``_gone``) are neither a base nor a patch to rebuild
        # from. Without this, a run continued after gc (restored, then resumed) took a version whose chain gc
        # freed for reproducible, kept a later change as a patch against it, and could never put it back.
        self._pruned = pruned
        self._gone_set: set[str] | None = None
        self._producers: dict[str, list[int]] = {}  # after-hash -> indexes of the patches that produced it
        self._cache: dict[str, bytes] = {}
        self._patches: dict[tuple[str, str], str] = {}  # (before, after) hashes -> stored patch
        self._cache_bytes = 0
        self._last_digest: tuple[bytes, str] | None = None  # the last content hashed, and its hash (``_digest``)
        for index, patch in enumerate(patches):
            self._producers.setdefault(patch.after_hash, []).append(index)

    @property
    def _reproducible(self) -> set[str]:
        found = self._reproducible_set
        if found is None:
            gone = self._gone()
            found = self._reproducible_set = set(self._blobs_at_open) - gone
            for patch in self.patches:
                if patch.after_hash and self._kept(patch) and self._base_known(patch):
                    found.add(patch.after_hash)
        return found

    def _gone(self) -> set[str]:
        """The digests gc freed of this run that the store does not hold again (a later write stores a version
        again: then it is read as any other)."""
        if self._gone_set is None:
            pruned = self._pruned() if self._pruned is not None else frozenset()
            self._gone_set = {digest for digest in pruned if not self.content.intact(digest)}
        return self._gone_set

    def _kept(self, patch: FilePatchEntry) -> bool:
        """The patch itself is there to apply (recorded, and not freed by gc)."""
        return patch.patch_ref != NOT_KEPT and patch.patch_ref.removeprefix("blob:") not in self._gone()

    def state(self, path: str) -> FileState:
        folder = os.path.join(self.workspace.root, os.path.dirname(real_path(path)))
        if os.path.realpath(folder) != os.path.normpath(folder):
            # Its folder is a link now (`rm -rf src && ln -s /elsewhere src`): what is there is not this path's
            # file, and reading it would follow the link out. The path holds nothing (rollback may recreate it).
            return FileState(hash=ABSENT, mode=None)
        data, mode = self.workspace.snapshot(path)
        if data is None and os.path.isdir(self.workspace.locate(path)):
            return FileState(hash=DIRECTORY, mode=None)  # a folder where a file was: never the agent's state
        return FileState(hash=ABSENT if data is None else content_hash(data), mode=mode)

    def before(self, call_id: str, paths: Iterable[str], *, ran: bool = False) -> list[FileBefore]:
        """The before-state of the paths a call may change, recorded (with any content the run cannot reproduce
        yet) in the group that becomes durable with ``started``. A re-run after a crash reuses what was recorded
        for the first attempt, so changes that attempt made before dying are not mistaken for the starting point.
        ``ran``: an earlier attempt started (and may have written); otherwise the call only waited (for an
        approval) and a change since is someone else's."""
        recorded = self.befores.get(call_id)
        if recorded:
            # From the call's last recorded change of each path (an earlier re-run's, killed too), not from the
            # first attempt's note: recording from the note again took the change once more, as certain.
            last = self._last_changes(call_id, {state.path for state in recorded})
            return [self._again(call_id, self._since(state, last), ran=ran) for state in recorded]
        states = []
        for path in dict.fromkeys(paths):
            try:
                # The file a write lands in: through a symlink inside the workspace, that is the link's target.
                rel = quote_path(self.workspace.relative(path))  # recorded form: any file name round-trips
                data, mode = self.workspace.snapshot(rel)
            except ToolFailure:
                continue  # the tool itself refuses such a path; nothing will be written there
            state = self.describe(rel, data, mode)
            record = FileBeforeState(
                tool_call_id=call_id, path=rel, before_hash=state.hash, before_ref=state.ref, before_mode=state.mode
            )
            self.befores.setdefault(call_id, []).append(record)
            self.records.add(record)
            states.append(state)
        return states

    def _again(self, call_id: str, state: FileBeforeState, *, ran: bool = False) -> FileBefore:
        """The before-state for a re-run after a crash. The file as it is now decides: unchanged, the recorded
        state; changed to content the run knows (the interrupted attempt's own work), that change is recorded as
        the call's and the re-run starts from it; changed to anything else, those bytes are kept and the re-run
        starts from them, so nothing they wrote is lost. When an attempt ran (``ran``), they may be its own
        work (a new file it created): the change is recorded as the call's with its author uncertain, so a
        rollback asks about it instead of never seeing it (rejected: reading them as the user's, which left an
        agent's file behind every rollback)."""
        data, mode = self.workspace.snapshot(state.path)
        digest = ABSENT if data is None else content_hash(data)
        if digest == state.before_hash and mode == state.before_mode:
            if data is not None and digest not in self._reproducible:
                # Its recorded content is gone (fsck quarantined it): the file, proven by its hash, gives it back.
                return self.describe(state.path, data, mode)
            return self._recalled(state)
        if digest == ABSENT or digest in self._reproducible:
            try:
                recalled = self._recalled(state)
            except StoreError:  # the before-content is lost: the re-run starts from the file as it is, kept
                return self.describe(state.path, data, mode)
            self.record(call_id, recalled, data, mode)
            return FileBefore(state.path, digest, mode, data, None if data is None else f"blob:{digest}")
        now = self.describe(state.path, data, mode)
        if ran:
            self._uncertain_since(call_id, state, data, mode)
        return now

    def _uncertain_since(self, call_id: str, state: FileBeforeState, data: bytes | None, mode: int | None) -> None:
        try:
            recalled = self._recalled(state)
        except StoreError:  # its before-content is lost: the change is recorded, and rollback says it cannot undo it
            recalled = FileBefore(state.path, UNKNOWN, None)
        self.record(call_id, recalled, data, mode, author_uncertain=True)

    def settle(self, call_id: str, *, certain: bool) -> list[FilePatchEntry]:
        """A call settled without running again and without its after-state recorded (its probe found the effect
        in place, a person settled it, it was skipped or reported uncertain after a crash): what each path it
        noted before it ran holds now, if changed, is recorded as its change, from the state durably noted before
        it ran (or from its last recorded change of the path). ``certain``: the files hold what the call was to
        make (its probe says so); otherwise the change is recorded with its author uncertain, and rollback lists
        it and asks before reverting it (the user may have written it meanwhile). Rejected: taking the file as it
        is now for the before-state, which recorded nothing and left the call's new file out of every rollback."""
        last = self._last_changes(call_id, {state.path for state in self.befores.get(call_id, ())})
        recorded: list[FilePatchEntry] = []
        for state in self.befores.get(call_id, ()):
            data, mode = self.workspace.snapshot(state.path)
            digest = ABSENT if data is None else self._digest(data)
            base = self._since(state, last)
            if digest == base.before_hash and mode == base.before_mode:
                continue
            try:
                before = self._recalled(base)
            except StoreError:  # its before-content is lost: the change is recorded, rollback says it cannot undo it
                before = FileBefore(state.path, UNKNOWN, None)
            entry = self.record(call_id, before, data, mode, author_uncertain=not certain)
            if entry is not None:
                recorded.append(entry)
        if recorded:
            self.records.trace("settled_changes", call_id=call_id, paths=len(recorded), certain=certain)
        return recorded

    def _last_changes(self, call_id: str, noted: set[str]) -> dict[str, FilePatchEntry]:
        """The call's last recorded change of each noted path (one pass, at a resume's re-run or settling only)."""
        last: dict[str, FilePatchEntry] = {}
        if noted:
            for patch in self.patches:
                if patch.tool_call_id == call_id and patch.path in noted:
                    last[patch.path] = patch
        return last

    @staticmethod
    def _since(state: FileBeforeState, last: dict[str, FilePatchEntry]) -> FileBeforeState:
        """Where the call left ``state.path`` as far as the log knows: its last recorded change, else the note."""
        previous = last.get(state.path)
        if previous is None:
            return state
        return FileBeforeState(
            tool_call_id=state.tool_call_id,
            path=state.path,
            before_hash=previous.after_hash,
            before_ref=None,
            before_mode=previous.after_mode,
        )

    def _recalled(self, state: FileBeforeState) -> FileBefore:
        content = None
        if state.before_hash != ABSENT:
            content = self.version(state.path, state.before_hash, state.before_ref)
        return FileBefore(state.path, state.before_hash, state.before_mode, content, state.before_ref)

    def describe(self, rel: str, data: bytes | None, mode: int | None, *, ref: str | None = None) -> FileBefore:
        """The before-state of ``rel`` holding ``data``; stores the content unless the run can reproduce it."""
        if data is None:
            return FileBefore(rel, ABSENT, None)
        digest = self._digest(data)  # often the content the run's last write left: compared, not hashed again
        if ref is None and digest not in self._reproducible:
            self.content.put(data, digest)  # a version gc freed is stored again: no longer gone
            self._gone().discard(digest)
            self._reproducible.add(digest)
        return FileBefore(rel, digest, mode, data, ref or f"blob:{digest}")

    def kept_known(self, path: str, digest: str, mode: int | None, data: bytes | None = None) -> tuple[str, int | None]:
        """``(digest, mode)`` of a file the capture knows by hash (the run wrote it, or an earlier session saw
        it), with its content stored now when the run can no longer reproduce it (gc freed its chain): a command
        that changes it next has its before-state (rejected: leaving it, which recorded the change's before-state
        as never captured, so rollback could not put it back). A large file kept by hash only stays so."""
        if self.can_reproduce(digest) or any(
            self.patches[i].patch_ref == NOT_KEPT for i in self._producers.get(digest, ())
        ):
            return digest, mode
        if data is None:
            data = self.workspace.snapshot(path)[0]
        if data is not None and self._digest(data) == digest:
            self.describe(path, data, mode)
        return digest, mode

    def after(self, call_id: str, befores: Iterable[FileBefore]) -> list[FilePatchEntry]:
        recorded = []
        for before in befores:
            data, mode = self.workspace.snapshot(before.path)
            entry = self.record(call_id, before, data, mode)
            if entry is not None:
                recorded.append(entry)
        return recorded

    def record(
        self,
        call_id: str,
        before: FileBefore,
        data: bytes | None,
        mode: int | None,
        *,
        author_uncertain: bool = False,
    ) -> FilePatchEntry | None:
        """Append the patch from ``before`` to the given after-state (nothing when nothing changed)."""
        after_hash = ABSENT if data is None else self._digest(data)
        if after_hash == before.hash and mode == before.mode:
            return None
        patch_ref = "blob:" + self.patch(before, data or b"", after_hash)
        entry = self._append(call_id, before, after_hash, mode, patch_ref, author_uncertain)
        if data is not None:
            self._remember(after_hash, data)
        if after_hash and self._base_known(entry):
            self._reproducible.add(after_hash)
        return entry

    def patch(self, before: FileBefore, data: bytes, after_hash: str | None = None) -> str:
        """The stored patch from ``before`` to ``data`` (computed once per pair: a writer's logged input and its
        file patch are the same diff)."""
        key = (before.hash, after_hash or self._digest(data))
        digest = self._patches.get(key)
        if digest is None:
            digest = self.content.put(make_patch(before.content or b"", data))
            if len(self._patches) > 1024:  # only the pair of one call matters: keep the memo small
                self._patches.clear()
            self._patches[key] = digest
        return digest

    def _digest(self, data: bytes) -> str:
        """``content_hash(data)``, hashed once per content: a writer's new content is hashed when its input is
        logged as a patch, and the same bytes read back from the file after the write are compared (``==`` is a
        memcmp, several times faster than SHA-256), not hashed again. Only the last content is kept."""
        last = self._last_digest
        if last is not None and len(last[0]) == len(data) and last[0] == data:
            return last[1]
        digest = content_hash(data)
        self._last_digest = (data, digest)
        return digest

    def record_large(
        self, call_id: str, before: FileBefore, after_hash: str, mode: int | None, *, author_uncertain: bool = False
    ) -> FilePatchEntry:
        """A file too large to keep: its change is recorded by hash only (it can be detected, not put back)."""
        return self._append(call_id, before, after_hash, mode, NOT_KEPT, author_uncertain)

    def _append(
        self,
        call_id: str,
        before: FileBefore,
        after_hash: str,
        mode: int | None,
        patch_ref: str,
        author_uncertain: bool = False,
    ) -> FilePatchEntry:
        if before.hash == ABSENT:
            op: PatchOp = "create"
        elif after_hash == ABSENT:
            op = "delete"
        else:
            op = "modify" if after_hash != before.hash else "chmod"
        entry = FilePatchEntry(
            path=before.path,
            before_hash=before.hash,
            after_hash=after_hash,
            patch_ref=patch_ref,
            tool_call_id=call_id,
            created_at=now(),
            op=op,
            before_ref=before.ref,
            before_mode=before.mode,
            after_mode=mode,
            author_uncertain=author_uncertain,
        )
        self.patches.append(entry)
        self._producers.setdefault(after_hash, []).append(len(self.patches) - 1)
        self.records.add(entry)
        self.records.trace("file_patch", path=before.path, call_id=call_id, op=op)
        return entry

    def git_blob(self, blob_id: str) -> bytes | None:
        """A blob of the workspace's repository, read through one git process for the whole session (a rollback or
        a command that touches 500 tracked files starts one process, not 500)."""
        if self._git is None:
            self._git = BlobReader(self.workspace.root)
        return self._git.read(blob_id)

    def close(self) -> None:
        if self._git is not None:
            self._git.close()
            self._git = None

    # versions ---------------------------------------------------------------------------------------------
    def can_reproduce(self, digest: str) -> bool:
        return digest in self._reproducible

    def restorable(self, patch: FilePatchEntry) -> bool:
        """Can the content before ``patch`` be reproduced? (absent always can: it means remove)"""
        # A before-state kept as a store blob that is gone or damaged is not (``Content.intact``: read once,
        # into the cache the rollback then reads it from).
        return (
            patch.before_hash != UNKNOWN
            and self._base_known(patch)
            and (patch.before_hash in self._cache or self.content.intact(patch.before_hash, self._remember))
        )

    def version(self, path: str, digest: str, ref: str | None = None) -> bytes:
        """Reproduce content this run recorded, verified by its hash."""
        return self._version(path, digest, ref, len(self.patches))

    def _version(self, path: str, digest: str, ref: str | None, before_index: int) -> bytes:
        """Rebuild content iteratively: walk back along the patches that produced it to something stored (a blob,
        git, nothing), then apply forward. Rebuilt versions are cached, so a long chain of edits costs once."""
        chain: list[FilePatchEntry] = []
        base: bytes | None = None
        while True:
            cached = self._cache.get(digest)
            if cached is not None:
                base = cached
                break
            if digest in self.content and digest not in self._gone():
                base = self.content.get(digest)
                self._remember(digest, base)  # a batched rollback reads each version twice: stage, then check
                break
            if ref is not None and ref.startswith("git:"):
                data = self.git_blob(ref[4:])
                if data is not None and content_hash(data) == digest:
                    base = data
                    self._remember(digest, base)
                    break
            index = self._producer(digest, before_index)
            if index is None:
                raise StoreError(f"content {digest} of {path} is not recorded in run {self.run_id!r}")
            patch = self.patches[index]
            chain.append(patch)
            if patch.before_hash in (ABSENT, UNKNOWN):
                base = b""  # a patch from an absent or never-captured before-state was made against nothing
                break
            digest, ref, before_index = patch.before_hash, patch.before_ref, index
        data = base
        for patch in reversed(chain):
            data = apply_patch(data, self.content.get(patch.patch_ref.removeprefix("blob:")))
            if content_hash(data) != patch.after_hash:
                raise StoreError(f"the patch for {patch.path} does not reproduce its result; its record is damaged")
            self._remember(patch.after_hash, data)
        return data

    def _producer(self, digest: str, before_index: int) -> int | None:
        """The oldest patch before ``before_index`` that produced ``digest`` (it depends only on earlier ones)."""
        for index in self._producers.get(digest, ()):
            if index < before_index and self._kept(self.patches[index]):
                return index
        return None

    def _remember(self, digest: str, data: bytes) -> None:
        self._cache[digest] = data
        self._cache_bytes += len(data)
        while self._cache_bytes > CACHE_BYTES and self._cache:
            oldest = next(iter(self._cache))
            self._cache_bytes -= len(self._cache.pop(oldest))

    def _base_known(self, patch: FilePatchEntry) -> bool:
        """A patch reproduces its after-state only from a before-state that is itself known (or from nothing)."""
        return (
            patch.before_hash in (ABSENT, UNKNOWN)
            or patch.before_hash in self._reproducible
            or _in_git(patch.before_ref)
        )


def _in_git(ref: str | None) -> bool:
    return ref is not None and ref.startswith("git:")
