"""Changes a command makes inside the workspace, attributed to its call and recorded like tool writes (§8.4).

Excluded: ``.git``, the store, paths ignored by ``.gitignore`` files, and patterns in ``.safepointignore``.
Cost grows with the changes, not the workspace: on Linux an inotify journal names the touched paths (a stat scan
with the same exclusions is the fallback, and the first baseline), and only those are read and hashed.

Before a command runs, every change since the last capture (the user's edits, the agent's tool writes) is
settled first: its content is learnt, and stored if the run cannot reproduce it yet, in the group that becomes
durable with ``started``. So the command's own changes are told apart from the user's, and a file the command
changes can be put back. The content before a command of a file the run has never seen change comes from git
(the HEAD blob of a clean tracked file; the user's uncommitted files are kept when the capture starts). Without
git, content that predates the run and that nothing of the run touched is recorded by hash only, and rollback
says it cannot restore it.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
import time
from collections.abc import Sequence

import msgspec

from safepoint.core.hashing import content_hash
from safepoint.core.rollback import UNKNOWN
from safepoint.durable import atomic_write
from safepoint.engine.file_changes import FileBefore, FileChanges, Records
from safepoint.engine.log_writer import now as timestamp
from safepoint.records import FilePatchEntry, WorkspaceState
from safepoint.workspace.git import git_state, head_blob_ids
from safepoint.workspace.scan import ChangeWatcher, FileStat, IgnoreRules, scan

LARGE_FILE_BYTES = 64 * 1024 * 1024  # larger files are recorded by hash only (with a warning), never stored
STATE_FILE = "capture-state.msgpack"
HINT_LIMIT = 10_000  # paths a command line may name for saving ahead (a glob over a huge tree stops here)
WINDOW_SLACK_NS = 50_000_000  # file times come from a coarse clock: only clearly older changes predate a command
SAVE_SECONDS = 10.0  # a crashed session loses at most this much of what its capture learnt (it is re-learnt)


class _SavedState(msgspec.Struct):
    stats: dict[str, FileStat]
    known: dict[str, tuple[str, int | None]]


_state_encoder = msgspec.msgpack.Encoder()
_state_decoder = msgspec.msgpack.Decoder(_SavedState)


class CommandCapture:
    """Starts watching when made (its baseline scan and the inotify watch): a run starts it as an explicit step
    (``RunSession.start``), or at the first call that needs it. ``state_dir``: the run's scratch folder, where what
    the capture learnt is kept for the next session (None for a reader); ``store_dir``: the store's own folder,
    never looked at."""

    def __init__(
        self,
        files: FileChanges,
        records: Records,
        *,
        store_dir: str | None,
        state_dir: str | None,
        exclude: tuple[str, ...] = (),
    ) -> None:
        self.files = files
        self.records = records
        self.workspace = files.workspace
        root = files.workspace.root
        extra = (*_safepointignore(root), *exclude)
        store_dir = os.path.realpath(store_dir) if store_dir else None  # the root is a realpath too
        self.rules = IgnoreRules.for_workspace(root, store_dir=store_dir, extra=extra)
        self.watcher = ChangeWatcher.start(root, self.rules)  # before the baseline scan: no change falls between
        self.stats: dict[str, FileStat] = scan(root, self.rules)
        self.known: dict[str, tuple[str, int | None]] = {}  # path -> (content hash, mode) last seen
        self.warnings: list[str] = []
        # Files the run already wrote are known if they still hold what it wrote (the run's own edits, so O(edits)).
        last = {patch.path: patch.after_hash for patch in files.patches}
        for path, after in last.items():
            if path in self.stats and after:
                data, mode = files.workspace.snapshot(path)
                if data is not None and content_hash(data) == after:
                    self.known[path] = (after, mode)
        state = git_state(root)
        records.add(
            WorkspaceState(
                at=timestamp(),
                is_repo=state.is_repo,
                head=state.head,
                branch=state.branch,
                dirty=state.dirty,
                nested_repos=state.nested_repos,
                submodules=state.submodules,
                is_worktree=state.is_worktree,
            )
        )
        self.git_clean: dict[str, str] = {}
        if state.is_repo:
            dirty = set(state.dirty)
            self.git_clean = {path: blob for path, blob in head_blob_ids(root).items() if path not in dirty}
            # The user's uncommitted work is what git cannot give back: keep it now (O(dirty), not O(workspace)).
            for path in dirty:
                if path in self.stats and path not in self.known:
                    self._learn(path)
        self._state_path = None
        if state_dir is not None:
            self._state_path = os.path.join(state_dir, STATE_FILE)
            self._catch_up()
        self._saved_at = time.monotonic()
        self._window_start = time.time_ns()
        self._patches_at_start = len(files.patches)

    def _catch_up(self) -> None:
        """Learn what changed while no capture of this run was watching (between sessions, after a crash):
        those changes are the user's, and their content is kept before any command can overwrite it."""
        assert self._state_path is not None
        try:
            with open(self._state_path, "rb") as handle:
                saved = _state_decoder.decode(handle.read())
        except (FileNotFoundError, msgspec.DecodeError):
            return  # the first capture of the run: what is there is the baseline
        for path, (digest, mode) in saved.known.items():
            if path not in self.known and self.stats.get(path) == saved.stats.get(path):
                self.known[path] = (digest, mode)
        for path in saved.stats.keys() | self.stats.keys():
            if saved.stats.get(path) != self.stats.get(path):
                self._learn(path)

    def save(self) -> None:
        """Keep the stat cache and what is known of each file for the next session (a cache: no fsync)."""
        if self._state_path is not None:
            data = _state_encoder.encode(_SavedState(stats=self.stats, known=self.known))
            atomic_write(self._state_path, data, durable=False)
            self._saved_at = time.monotonic()

    def close(self) -> None:
        self.save()
        if self.watcher is not None:
            self.watcher.close()

    # what changed ---------------------------------------------------------------------------------------------
    def _changed(self) -> dict[str, FileStat | None]:
        """Paths whose stat differs from what this capture last saw, each with its previous stat (None: it did
        not exist); the stat cache is brought up to date."""
        drained = self.watcher.drain() if self.watcher is not None else None
        if drained is None:
            current = scan(self.workspace.root, self.rules)
            differ = current.keys() | self.stats.keys()
            scanned = {p: self.stats.get(p) for p in differ if current.get(p) != self.stats.get(p)}
            self.stats = current
            return scanned
        candidates: set[str] = set()
        for item in drained:
            if item.endswith("/"):
                candidates.update(p for p in self.stats if p.startswith(item))
            else:
                candidates.add(item)
        changed: dict[str, FileStat | None] = {}
        for path in candidates:
            now = _stat(os.path.join(self.workspace.root, path))
            old = self.stats.get(path)
            if now != old:
                changed[path] = old
                if now is None:
                    del self.stats[path]
                else:
                    self.stats[path] = now
        return changed

    # before and after a command -------------------------------------------------------------------------------
    def before_command(self, hints: Sequence[str] = ()) -> None:
        """Settle what changed since the last capture: those changes are not the command's. ``hints`` are paths
        the command line names as written to or removed: their content is kept now if it is known nowhere else,
        so even a file nothing of the run has seen yet can be put back after ``sed -i`` or ``rm``."""
        for path in self._changed():
            self._learn(path)
        self._window_start = time.time_ns()
        self._patches_at_start = len(self.files.patches)
        for path in self._expand(hints):
            if path not in self.known and path not in self.git_clean:
                self._learn(path)

    def _expand(self, hints: Sequence[str]) -> list[str]:
        """Workspace-relative files the hints name (globs expanded, folders walked, outside paths dropped)."""
        root = self.workspace.root
        found: list[str] = []
        for hint in hints:
            pattern = hint if os.path.isabs(hint) else os.path.join(root, hint)
            matches = glob.glob(pattern)[:HINT_LIMIT] if glob.has_magic(hint) else [pattern]
            for match in matches:
                rel = os.path.relpath(os.path.realpath(os.path.dirname(match)), root)
                if rel.startswith(".."):
                    continue  # outside the workspace: not ours to capture
                rel = os.path.normpath(os.path.join(rel, os.path.basename(match))).removeprefix("./")
                if rel in self.stats:
                    found.append(rel)
                else:
                    prefix = rel.rstrip("/") + "/"
                    found.extend(p for p in self.stats if p.startswith(prefix))
        return found[:HINT_LIMIT]

    def after_command(self, call_id: str) -> list[FilePatchEntry]:
        recorded = []
        # Paths another call of this run recorded while the command ran (an async tool alongside it) are theirs.
        others = {p.path for p in self.files.patches[self._patches_at_start :] if p.tool_call_id != call_id}
        for path, old in sorted(self._changed().items()):
            info = self.stats.get(path)
            stale = old is None and info is not None and info.ctime_ns < self._window_start - WINDOW_SLACK_NS
            if stale or path in others:
                # Not the command's: merely visible now (its ignore rule went away), or written by another call.
                self._learn(path)
                continue
            before = self._before(path, old)
            entry: FilePatchEntry | None
            if self._large(path):
                entry = self.files.record_large(call_id, before, self._hash_large(path), self._mode(path))
                self.warnings.append(f"{path}: larger than {LARGE_FILE_BYTES} bytes, recorded by hash only")
            else:
                data, mode = self.workspace.snapshot(path)
                entry = self.files.record(call_id, before, data, mode)
            if entry is not None:
                recorded.append(entry)
            self._learn(path, store=False)  # its new content is reproducible from the patch just recorded
        if time.monotonic() - self._saved_at > SAVE_SECONDS:
            self.save()
        return recorded

    def _learn(self, path: str, *, store: bool = True) -> None:
        if self._large(path):
            self.known[path] = (self._hash_large(path), self._mode(path))
            return
        data, mode = self.workspace.snapshot(path)
        if data is None:
            self.known.pop(path, None)
            return
        if store:
            self.files.describe(path, data, mode)  # stores the content unless the run can reproduce it
        self.known[path] = (content_hash(data), mode)

    def _before(self, path: str, old: FileStat | None) -> FileBefore:
        if old is None:
            return FileBefore(path, "", None)  # the command created it
        if path in self.known:
            digest, mode = self.known[path]
            content = self.files.version(path, digest) if self.files.can_reproduce(digest) else None
            return FileBefore(path, digest, mode, content, f"blob:{digest}" if content is not None else None)
        blob = self.git_clean.get(path)
        if blob is not None:
            data = self.files.git_blob(blob)
            if data is not None:
                mode = None if stat.S_ISLNK(old.mode) else old.mode & 0o7777
                return FileBefore(path, content_hash(data), mode, data, f"git:{blob}")
        return FileBefore(path, UNKNOWN, None)

    # helpers ------------------------------------------------------------------------------------------------
    def _large(self, path: str) -> bool:
        info = self.stats.get(path)
        return info is not None and info.size > LARGE_FILE_BYTES and not stat.S_ISLNK(info.mode)

    def _hash_large(self, path: str) -> str:
        digest = hashlib.sha256()
        with open(os.path.join(self.workspace.root, path), "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        return "sha256:" + digest.hexdigest()

    def _mode(self, path: str) -> int | None:
        info = self.stats.get(path)
        return None if info is None or stat.S_ISLNK(info.mode) else info.mode & 0o7777


def _safepointignore(root: str) -> list[str]:
    """Extra exclusions a user keeps in WORKSPACE/.safepointignore (gitignore syntax), on top of .gitignore."""
    try:
        with open(os.path.join(root, ".safepointignore"), encoding="utf-8") as handle:
            return [line.rstrip("\n") for line in handle if line.strip() and not line.startswith("#")]
    except FileNotFoundError:
        return []


def _stat(path: str) -> FileStat | None:
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        return None
    return FileStat(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode)
