"""Changes a command makes inside the workspace, attributed to its call and recorded like tool writes (§8.4).

Excluded: ``.git``, the store, paths ignored by ``.gitignore`` files, and patterns in ``.safepointignore``.
Cost grows with the changes, not the workspace: on Linux an inotify journal names the touched paths (a stat scan
with the same exclusions is the first baseline; without a journal, ``TreeScan``'s find per pass), and only those
are read and hashed.

Before a command runs, every change since the last capture (the user's edits, the agent's tool writes) is
settled first: its content is learnt, and stored if the run cannot reproduce it yet, in the group that becomes
durable with ``started``. So the command's own changes are told apart from the user's, and a file the command
changes can be put back. The content before a command of a file the run has never seen change comes from git
(the HEAD blob of a clean tracked file; the user's uncommitted files are kept when the capture starts). Without
git, content that predates the run and that nothing of the run touched is recorded by hash only, and rollback
says it cannot restore it. Files the command line names are kept too when ``.gitignore`` hides them (``rm .env``).

Who made a change: where the platform tells (``workspace/writers.py``: fanotify and fork events), a change only
other processes made while the command ran is theirs (learnt, not recorded), one both made is recorded with
``author_uncertain``; elsewhere every change made during the command is (rollback asks before reverting those).

A crash while a command runs: before it starts, a journal (the capture's state as a delta on the last saved state,
O(what changed since)) is durable with its ``started``; the next owner, finding the call still ``started``, records
every change since as that call's (author uncertain) before anything else runs.

Paths are in recorded form (``workspace/names.py``): any byte string survives a record.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import hashlib
import itertools
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence

from safepoint.core.hashing import content_hash
from safepoint.core.rollback import UNKNOWN
from safepoint.engine.capture_state import CaptureStateFiles, Journal, Known, SavedState, ScratchSeal
from safepoint.engine.file_changes import FileBefore, FileChanges, Records
from safepoint.engine.launcher import LAUNCHER
from safepoint.engine.log_writer import now as timestamp
from safepoint.errors import ToolFailure
from safepoint.records import FilePatchEntry, WorkspaceState
from safepoint.workspace.git import GitState, git_state, head_blob_ids
from safepoint.workspace.head import find_git_dir, read_head
from safepoint.workspace.ignore import IgnoreRules, Pins
from safepoint.workspace.names import quote_path, real_path
from safepoint.workspace.scan import ChangeWatcher, FileStat, scan
from safepoint.workspace.scan import recorded_stat as _stat
from safepoint.workspace.scan import safepointignore as _safepointignore
from safepoint.workspace.tree_scan import TreeScan
from safepoint.workspace.writers import WriterWatch

LARGE_FILE_BYTES = 64 * 1024 * 1024  # larger files are recorded by hash only (with a warning), never stored
HINT_LIMIT = 10_000  # paths a command line may name for saving ahead (a glob over a huge tree stops here)
HINT_BYTES = 64 * 1024 * 1024  # content of ignored files a command line names, kept ahead at most per command
WINDOW_SLACK_NS = 50_000_000  # file times come from a coarse clock: only clearly older changes predate a command
SAVE_SECONDS = 10.0  # a crashed session loses at most this much of what its capture learnt (it is re-learnt)


class CommandCapture:
    """Starts watching when made (its baseline scan and the inotify watch): a run starts it as an explicit step
    (``RunSession.start``), or at the first call that needs it. ``state_dir``: the run's scratch folder, where what
    the capture learnt is kept for the next session (None for a reader); ``store_dir``: the store's own folder,
    never looked at. ``in_flight``: whether a call's outcome is still unknown (its ledger entry says ``started``);
    ``attribute=False`` tells no writer apart (the fallback where fanotify is missing, forced)."""

    def __init__(
        self,
        files: FileChanges,
        records: Records,
        *,
        store_dir: str | None,
        state_dir: str | None,
        exclude: tuple[str, ...] = (),
        in_flight: Callable[[str], bool] = lambda call_id: False,
        attribute: bool = True,
        background: bool = False,
        seal: ScratchSeal | None = None,
    ) -> None:
        self.files = files
        self.records = records
        self.workspace = files.workspace
        root = files.workspace.root
        self._extra = (*_safepointignore(root), *exclude)
        self._store_dir = os.path.realpath(store_dir) if store_dir else None  # the root is a realpath too
        self.pins = Pins()  # watched once, watched for good: the run may edit ignore files (``Pins``)
        self.rules = IgnoreRules.for_workspace(root, store_dir=self._store_dir, extra=self._extra, pins=self.pins)
        self._attribute = attribute
        self._in_flight = in_flight
        self.known: dict[str, Known] = {}  # path -> (content hash, mode) last seen
        self.warnings: list[str] = []
        self._touched: set[str] = set()  # paths whose stat or content changed since the last save
        self._named: dict[str, FileStat | None] = {}  # ignored files the command line names -> their stat before
        self._special: dict[str, int] = {}  # FIFOs, sockets, devices the command line names -> their inode
        self._command: str | None = None  # the call whose command runs (between before_command and settled)
        self._arrived: set[str] = set()  # folders ('d2/') a command made or moved in, that held no file before
        self.recovered: list[FilePatchEntry] = []  # changes of a command whose outcome a crash lost
        self._state_dir = state_dir
        # ``background`` (a session's start, no crashed command to recover): the watches, the baseline scan and
        # git's view cost O(workspace) (0.4 s at 50,000 files), so a thread makes them, in the same order, and the
        # first use waits (``_ready``); a file changed after the start is learnt, not taken for the baseline
        # (``_observed``). Rejected: watching at the first command (an edit before it could not be put back).
        self.watcher: ChangeWatcher | None = None
        self._tree: TreeScan | None = None  # no journal: the scan fallback, kept between passes
        self.writers: WriterWatch | None = None
        self.stats: dict[str, FileStat] = {}
        self._git: GitState | None = None
        self._head_blobs: dict[str, str] = {}
        self.git_clean: dict[str, str] = {}
        self._git_dir: str | None = None
        self._state = CaptureStateFiles(state_dir, seal) if state_dir is not None else None
        self._saved: SavedState | None = None  # what the last session saved (read before the baseline scan)
        self._saved_once = True  # nothing to save for a reader
        self._saved_at = time.monotonic()
        self._window_start = self._since = time.time_ns()
        self._patches_at_start = len(files.patches)
        self._starting: threading.Thread | None = None
        self._start_failed: BaseException | None = None
        if background:
            self._starting = threading.Thread(target=self._observe_quietly, name="safepoint-capture", daemon=True)
            self._starting.start()
        else:
            self._observe()
            self._observed()

    def _observe(self) -> None:
        """What the workspace holds, with no record written (so it may run on a thread): the watches, then the
        baseline scan (watching first: no change falls between the two), git's view, what was saved before."""
        root = self.workspace.root
        # What was watched before (the last session's state) and what git tracks stay watched, whatever the ignore
        # files say now (a previous session of the run may have rewritten them): pinned before anything looks.
        self._head_blobs = head_blob_ids(root)
        self.pins.update(self._head_blobs)
        if self._state is not None:
            self._saved = self._state.read_saved()
            if self._saved is not None:
                self.pins.update(self._saved.stats)
        self.watcher = ChangeWatcher.start(root, self.rules)  # before the baseline scan: no change falls between
        self.writers = WriterWatch.start(
            root, IgnoreRules.for_workspace(root, store_dir=self._store_dir, extra=self._extra, pins=self.pins)
        )
        if not self._attribute and self.writers is not None:
            self.writers.close()
            self.writers = None
        if self.watcher is None:
            self._tree = TreeScan.start(root, self.rules)  # None without GNU find: a scan every time
        self.stats = self._tree.stats if self._tree is not None else scan(root, self.rules)  # the tree's own
        self.pins.update(self.stats)
        self._git = git_state(root)
        if not self._git.is_repo:
            self._head_blobs = {}

    def _observe_quietly(self) -> None:
        try:
            self._observe()
        except BaseException as exc:  # raised where the capture is first used, as if it had started there
            self._start_failed = exc

    def _ready(self) -> None:
        """Wait for a start in the background, then settle it (on the caller's thread: it writes records). A start
        that failed fails every use, as a capture that could not be made did."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
            if self._start_failed is None:
                self._observed()
        if self._start_failed is not None:
            raise self._start_failed

    def _observed(self) -> None:
        files, records, root, state = self.files, self.records, self.workspace.root, self._git
        assert state is not None  # observed
        # Files the run already wrote are known if they still hold what it wrote (the run's own edits, so O(edits)).
        last = {patch.path: patch.after_hash for patch in files.patches}
        for path, after in last.items():
            if path in self.stats and after:
                data, mode = self._snapshot(path)
                if data is not None and content_hash(data) == after:
                    self.known[path] = files.kept_known(path, after, mode, data)
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
        self._git_dir = find_git_dir(root) if state.is_repo else None
        if state.is_repo:
            dirty = set(state.dirty)
            self.git_clean = {path: blob for path, blob in self._head_blobs.items() if path not in dirty}
            # The user's uncommitted work is what git cannot give back: keep it now (O(dirty), not O(workspace)).
            for path in dirty:
                if path in self.stats and path not in self.known:
                    self._learn(path)
        if self._state is not None:
            self._saved_once = self._state.saved_exists()
            self._catch_up()
        # Changed after the start, before the scan saw it: what a watch set at once would have reported (ctime moves
        # with every change, no tool sets it back). A change in the first clock tick may be stamped a little early
        # by a coarse clock and stay the baseline's (the synchronous start lost those for all 0.4 s of watching).
        for path, info in self.stats.items():
            if info.ctime_ns >= self._since and path not in self.known:
                self._learn(path)
        self._saved_at = time.monotonic()
        self._window_start = time.time_ns()
        self._patches_at_start = len(files.patches)

    @staticmethod
    def has_journal(state_dir: str | None) -> bool:
        """Whether a command may have been running when the run's last owner stopped (see ``_catch_up``)."""
        return CaptureStateFiles.has_journal(state_dir)

    def _catch_up(self) -> None:
        """Learn what changed while no capture of this run was watching (between sessions, after a crash): those
        changes are the user's, and their content is kept before any command can overwrite it. Unless a command was
        running when the last owner died (its journal names a call still ``started``): then every change since the
        command started is recorded as that call's, of uncertain author (nothing tells the command's changes from
        the user's in a window nobody watched), so ``rollback`` can put it back."""
        assert self._state is not None
        saved, self._saved = self._saved, None  # None: the first capture of the run: what is there is the baseline
        journal = self._state.read_journal()
        if journal is not None and (
            saved is None or not self._in_flight(journal.call_id) or self._recovered_already(journal)
        ):
            journal = None
        if saved is None:
            return
        if journal is not None:
            for path, info in journal.stats.items():
                if info is None:
                    saved.stats.pop(path, None)
                else:
                    saved.stats[path] = info
            for path, known in journal.known.items():
                if known is None:
                    saved.known.pop(path, None)
                else:
                    saved.known[path] = known
        for path, (digest, mode) in saved.known.items():
            if path not in self.known and self.stats.get(path) == saved.stats.get(path):
                self.known[path] = (digest, mode) if self._large(path) else self.files.kept_known(path, digest, mode)
        changed = [p for p in saved.stats.keys() | self.stats.keys() if saved.stats.get(p) != self.stats.get(p)]
        if journal is None:
            for path in changed:
                self._learn(path)
            return
        call_id = journal.call_id
        head_stayed = journal.head == (read_head(self._git_dir) if self._git_dir else None)
        for path in sorted(changed, key=lambda p: self._removals_first((p, None))):
            old = saved.stats.get(path)
            if path in saved.known:
                self.known[path] = saved.known[path]  # the before-state, kept with `started`
            else:
                self.known.pop(path, None)  # learnt just now: the command's result, not what it started from
                if head_stayed and path in self._head_blobs:
                    self.git_clean[path] = self._head_blobs[path]  # clean then (else the capture had kept it)
            self._record(call_id, path, old, author_uncertain=True, into=self.recovered)
        for path, old in sorted(journal.named.items()):
            if _stat(self.workspace.root, path, {}) != old:
                self._record(call_id, path, old, author_uncertain=True, into=self.recovered)
        if self.recovered:
            self.records.trace("command_changes_recovered", call_id=call_id, paths=len(self.recovered))

    def _recovered_already(self, journal: Journal) -> bool:
        """Whether this attempt's changes are recorded (a crash came after its recovery was durable, before the
        journal was spent): a change of the call recorded since the attempt began. Rejected: any change of the
        call, which took a re-run's journal for recovered when an earlier attempt, killed too, had been (the
        re-run's own changes were then learnt as the user's: rollback never undid them)."""
        patches = self.files.patches
        start = journal.patches_at if journal.patches_at is not None and journal.patches_at <= len(patches) else 0
        return any(patch.tool_call_id == journal.call_id for patch in itertools.islice(patches, start, None))

    def recovery_settled(self) -> None:
        """The recovered changes are durable: the journal is spent, and the state saved is the new baseline."""
        self._ready()
        self.recovered = []
        self.save()

    def save(self) -> None:
        """Keep the stat cache and what is known of each file for the next session. Not while
        a command runs: its changes are recorded with its outcome, and a saved state must not run ahead of that."""
        self._ready()
        if self._state is None or self._command is not None:
            return
        self._state.save(SavedState(stats=self.stats, known=self.known))
        self._saved_at = time.monotonic()
        self._saved_once = True
        self._touched.clear()
        self._state.clear_journal()

    def poll(self) -> None:
        """Settle a start in the background if its thread is done (never waits; a failed start is left for the
        first use to raise)."""
        if self._starting is not None and not self._starting.is_alive() and self._start_failed is None:
            self._ready()

    def finish_start(self) -> bool:
        """Wait for a start in the background and settle it; True when that staged its records just now (the
        workspace's state, what was learnt), for the caller to commit."""
        if self._starting is None:
            return False
        self._starting.join()
        if self._start_failed is not None:
            self._starting = None
            return False
        self._ready()
        return True

    def close(self, *, save: bool = True) -> None:
        """``save=False``: what was learnt is not kept for the next session (its records did not become durable),
        which then catches up from the state saved before."""
        if self._starting is not None:
            self._starting.join()  # closed before its start was settled: dropped
            self._starting = None
        elif save and self._start_failed is None:
            self.save()
        if self.watcher is not None:
            self.watcher.close()
        if self.writers is not None:
            self.writers.close()
            self.writers = None

    # what changed ---------------------------------------------------------------------------------------------
    def _changed(self) -> dict[str, FileStat | None]:
        """Paths whose stat differs from what this capture last saw, each with its previous stat (None: it did
        not exist); the stat cache is brought up to date."""
        drained = self.watcher.drain() if self.watcher is not None else None
        self._arrived = set()
        root = self.workspace.root
        if drained is None:
            before = self.stats
            if self._tree is not None:  # no journal at all: one find, then O(changes) (``workspace/tree_scan.py``)
                scanned = self._tree.rescan()  # brings ``self.stats`` (the tree's) up to date in place
                current = self.stats
                if self._tree.arrived is None and any(old is None for old in scanned.values()):  # (see below)
                    before = dict(current)
                    for path, old in scanned.items():
                        if old is None:
                            before.pop(path, None)
                        else:
                            before[path] = old
            else:
                current, previous = scan(root, self.rules), self.stats.get
                # One pass over what is there, then what went: a third of a pass over their union (0.1 s at 50,000).
                scanned = {p: old for p, now in current.items() if (old := previous(p)) != now}
                scanned.update((p, self.stats[p]) for p in self.stats.keys() - current.keys())
            arrived = seen.arrived if (seen := self.watcher or self._tree) is not None else None
            if arrived is not None:  # the journal (or the fallback's passes) saw every folder arrive
                self._arrived = {f for f in arrived if os.path.isdir(os.path.join(root, real_path(f.rstrip("/"))))}
            elif any(old is None for old in scanned.values()):
                # No journal, or it lost events: told by ctime. A folder un-ignored and written into by the same
                # command would be taken for one moved in; rare beside folder moves, which this catches.
                self._arrived = self._folders_arrived(scanned, current, before)
            self.stats = current
            self.pins.update(p for p, old in scanned.items() if old is None)
            self._touched.update(scanned)
            return scanned
        candidates: set[str] = set()
        for item in drained:
            if item.endswith("/"):
                candidates.update(p for p in self.stats if p.startswith(item))
                if os.path.isdir(os.path.join(self.workspace.root, real_path(item.rstrip("/")))):
                    # The folder itself was made, moved in or replaced (only those report it) and is there: every
                    # file below it is new here, whatever its ctime (`mv d d2` leaves those of d's files as they were).
                    self._arrived.add(item)
            else:
                candidates.add(item)
        changed: dict[str, FileStat | None] = {}
        folders: dict[str, bool] = {}
        for path in candidates:
            now = _stat(self.workspace.root, path, folders)
            old = self.stats.get(path)
            if now != old:
                changed[path] = old
                if now is None:
                    del self.stats[path]
                else:
                    self.stats[path] = now
                    if old is None:
                        self.pins.add(path)
            elif now is not None and self._rewritten(path):
                changed[path] = old  # written in the tick of its last change: the same stat, not the same content
        self._touched.update(changed)
        return changed

    def _rewritten(self, path: str) -> bool:
        """A file the journal names with its stat unchanged: whether its content differs from what was learnt of
        it (a same-size write in the same timestamp tick keeps the stat; only the journal tells it was written,
        so this costs a read of what was written). A file never learnt has nothing to compare with."""
        known = self.known.get(path)
        if known is None or self._large(path):
            return False
        data, mode = self._snapshot(path)
        return data is not None and (content_hash(data), mode) != known

    def _folders_arrived(
        self, scanned: dict[str, FileStat | None], current: dict[str, FileStat], stats: dict[str, FileStat]
    ) -> set[str]:
        """After a full scan: the folders (recorded form plus '/') that hold new files, keep none of the files they
        held (a folder moved in, or over one that was there), and were themselves made or renamed during the command
        (their ctime; a rename sets the moved folder's). A folder that merely became visible (its ignore rule went
        away) has an old ctime and is not one. ``stats``: what the capture saw before this pass."""
        before: set[str] = set()  # folders still holding a file they held (the same file: its inode)
        for path, info in stats.items():  # a full scan was O(workspace) already
            now = current.get(path)
            if now is not None and now.ino == info.ino:
                parts = path.split("/")
                before.update("/".join(parts[:end]) + "/" for end in range(1, len(parts)))
        arrived: set[str] = set()
        looked: set[str] = set()
        for path, old in scanned.items():
            if old is not None or path not in current:
                continue
            parts = path.split("/")
            for end in range(1, len(parts)):
                folder = "/".join(parts[:end]) + "/"
                if folder in before or folder in looked:
                    continue
                looked.add(folder)  # each folder is looked at once
                with contextlib.suppress(OSError):
                    made = os.lstat(os.path.join(self.workspace.root, real_path(folder.rstrip("/")))).st_ctime_ns
                    if made >= self._window_start - WINDOW_SLACK_NS:
                        arrived.add(folder)
        return arrived

    def _arrived_with_folder(self, path: str) -> bool:
        """Whether ``path`` came with a folder made or moved in during the command (see ``_changed``)."""
        parts = path.split("/")
        return any("/".join(parts[:end]) + "/" in self._arrived for end in range(1, len(parts)))

    # before and after a command -------------------------------------------------------------------------------
    def before_command(self, hints: Sequence[str] = (), call_id: str | None = None) -> None:
        """Settle what changed since the last capture: those changes are not the command's. ``hints`` are paths
        the command line names as written to or removed: their content is kept now if it is known nowhere else,
        so even a file nothing of the run has seen yet can be put back after ``sed -i`` or ``rm`` -- ignored
        files too (``rm .env``), which no scan looks at. With ``call_id``, what the command starts from is kept
        durably (a journal) before it runs, so a crash while it runs loses none of its changes."""
        self._ready()
        if time.monotonic() - self._saved_at > SAVE_SECONDS or not self._saved_once:
            self.save()  # the journal below is a delta on a saved state: the run's first command saves one
        settle = self._changed()
        self._hard_links(settle)  # an edit of yours through one name changed the others: learnt with it
        for path in settle:
            self._learn(path)
        if self.watcher is not None:
            # Ignored files removed and folder modes changed before the command are not its doing.
            self.watcher.ignored_gone()
            self.watcher.folder_modes()
        self._named = {}
        self._special = {}
        tracked, ignored = self._expand(hints)
        for path in tracked:
            if path not in self.known and path not in self.git_clean:
                self._learn(path)
        budget = HINT_BYTES
        for path in ignored:
            info = _stat(self.workspace.root, path, {})
            if info is None:
                continue  # an ignored file the command creates stays ignored (a build output): nothing to keep
            self._named[path] = info
            if path in self.known:
                continue
            if info.size > budget and not stat.S_ISLNK(info.mode):
                self.warnings.append(
                    f"{path}: ignored by git and named by the command, but not kept ({info.size} bytes, over what"
                    " a command may keep ahead): rollback cannot put it back"
                )
                continue
            budget -= info.size
            self._learn(path)
        if call_id is not None and self._state is not None:
            journal = Journal(
                call_id=call_id,
                stats={p: self.stats.get(p) for p in self._touched},
                known={p: self.known.get(p) for p in self._touched | self._named.keys()},
                named=self._named,
                head=read_head(self._git_dir) if self._git_dir else None,
                patches_at=len(self.files.patches),
            )
            self._state.write_journal(journal)
        self._command = call_id
        if self.writers is not None:
            self.writers.begin()
        self._window_start = time.time_ns()
        self._patches_at_start = len(self.files.patches)

    def _expand(self, hints: Sequence[str]) -> tuple[list[str], list[str]]:
        """The files the hints name (globs expanded, folders walked, outside paths dropped): those the capture
        watches, and the others (ignored by git or .safepointignore) with their recorded paths."""
        root = self.workspace.root
        tracked: list[str] = []
        ignored: list[str] = []
        for hint in hints:
            pattern = hint if os.path.isabs(hint) else os.path.join(root, hint)
            if "/**" in pattern:  # what a deleting `find` selects: ROOT/**/NAME, ROOT/** (core.command_reach_walk)
                matches = self._selected(*pattern.split("/**", 1))
            else:
                matches = glob.glob(pattern)[:HINT_LIMIT] if glob.has_magic(hint) else [pattern]
            for match in matches:
                folder = os.path.realpath(os.path.dirname(match))
                if folder != root and not folder.startswith(root + os.sep):
                    continue  # outside the workspace (or through a link leading out): not ours to capture
                rel = os.path.normpath(os.path.join(os.path.relpath(folder, root), os.path.basename(match)))
                rel = rel.removeprefix("./")
                if rel in (".", "..") or rel.startswith("../"):
                    continue
                key = quote_path(rel)
                if key in self.stats:
                    tracked.append(key)
                    continue
                prefix = key.rstrip("/") + "/"
                inside = [p for p in self.stats if p.startswith(prefix)]
                tracked.extend(inside)
                ignored.extend(self._ignored_below(rel, set(inside)))
        return tracked[:HINT_LIMIT], ignored[:HINT_LIMIT]

    def _selected(self, top: str, name: str) -> list[str]:
        """Entries below ``top`` whose name matches ``name`` (``/PATTERN``; empty: every file), as ``find`` walks:
        links not followed, ``.git`` and the store never entered; at most ``HINT_LIMIT``."""
        pattern = name.lstrip("/")
        found: list[str] = []
        for folder, dirs, files in os.walk(top):
            dirs[:] = [
                d
                for d in dirs
                if d != ".git"
                and not (self._store_dir and os.path.realpath(os.path.join(folder, d)) == self._store_dir)
            ]
            for entry in (*dirs, *files) if pattern else files:
                if not pattern or fnmatch.fnmatchcase(entry, pattern):
                    found.append(os.path.join(folder, entry))
            if len(found) >= HINT_LIMIT:
                break
        return found[:HINT_LIMIT]

    def _ignored_below(self, rel: str, seen: set[str]) -> list[str]:
        """``rel`` and the files below it that no scan looks at (never following a link, never into .git or the
        store)."""
        found: list[str] = []
        stack = [rel]
        while stack and len(found) < HINT_LIMIT:
            here = stack.pop()
            path = os.path.join(self.workspace.root, here)
            if os.path.basename(here) == ".git" or (self._store_dir and os.path.realpath(path) == self._store_dir):
                continue
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                with contextlib.suppress(OSError):
                    stack.extend(os.path.join(here, name) for name in os.listdir(path))
            elif quote_path(here) not in seen:
                if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
                    self._special[quote_path(here)] = info.st_ino
                    self.warnings.append(
                        f"{quote_path(here)}: named by the command but not a regular file; rollback cannot put it back"
                    )
                    continue
                found.append(quote_path(here))
        if stack:
            self.warnings.append(
                f"{quote_path(rel)}: more than {HINT_LIMIT} ignored files named by the command; those past the first"
                f" {HINT_LIMIT} were not kept: rollback cannot put them back"
            )
        return found

    def after_command(self, call_id: str) -> list[FilePatchEntry]:
        """Record the command's changes. Each one is the command's where the platform saw only the command's
        processes make it; one that only others made is theirs (learnt, not recorded); any other change made
        while the command ran is recorded with ``author_uncertain`` (rollback asks before reverting it)."""
        self._ready()
        authors = None
        if self.writers is not None:
            # The command's processes are those this process, or its command server, started meanwhile (the tool's
            # own in-process writes count too); the user's editor or another run's agent descends from neither.
            server = LAUNCHER.server_pid()
            authors = self.writers.end([os.getpid()] if server is None else [os.getpid(), server])
        recorded: list[FilePatchEntry] = []
        # Paths another call of this run recorded while the command ran (an async tool alongside it) are theirs.
        others = {p.path for p in self.files.patches[self._patches_at_start :] if p.tool_call_id != call_id}
        changed = self._changed()
        folders: dict[str, bool] = {}
        for path, old in self._named.items():
            if path not in changed and _stat(self.workspace.root, path, folders) != old:
                changed[path] = old
        through = self._hard_links(changed)
        for path, old in sorted(changed.items(), key=self._removals_first):
            info = self.stats.get(path)
            # A new path with an old ctime predates the command (its ignore rule went away), unless a folder the
            # command made or moved in brought it: a rename keeps the ctimes of the files below the folder.
            stale = (
                old is None
                and info is not None
                and info.ctime_ns < self._window_start - WINDOW_SLACK_NS
                and not self._arrived_with_folder(path)
            )
            writers = authors.of(through.get(path, path)) if authors is not None else set()
            if stale or path in others or writers == {"other"}:
                # Not the command's: merely visible now (its ignore rule went away), written by another call, or
                # by a process outside the command's tree (the user, another run).
                self._learn(path)
                continue
            self._record(call_id, path, old, author_uncertain=writers != {"command"}, into=recorded)
            if path in through and recorded and recorded[-1].path == path and recorded[-1].before_hash == UNKNOWN:
                self.warnings.append(
                    f"{path}: changed through its hard link {through[path]}; its content before was not kept,"
                    " so rollback cannot put it back"
                )
        recorded.extend(self._ignored_lost(call_id, authors is None))
        for folder, (was, now) in sorted(self.watcher.folder_modes().items() if self.watcher is not None else ()):
            # No record holds a folder's mode (a file patch of a folder would reach every reader of patches):
            # said, with the command that undoes it, rather than lost in silence.
            name = folder or "."
            self.warnings.append(
                f"{name}/: the command changed this folder's mode from {was:04o} to {now:04o}; rollback does not put"
                f" a folder's mode back (undo it with: chmod {was:04o} {name})"
            )
        for path, ino in sorted(self._special.items()):
            try:
                gone = os.lstat(os.path.join(self.workspace.root, real_path(path))).st_ino != ino
            except OSError:
                gone = True
            if gone:  # recorded with an unknown before-state, so `rollback` names it as what it cannot put back
                data, mode = self._snapshot(path)
                unknown = FileBefore(path, UNKNOWN, None)
                entry = self.files.record(call_id, unknown, data, mode, author_uncertain=authors is None)
                if entry is not None:
                    recorded.append(entry)
        self._named = {}
        self._special = {}
        return recorded

    def _hard_links(self, changed: dict[str, FileStat | None]) -> dict[str, str]:
        """A write through one name of a file changes all its names (``ln f g; echo x >> g`` changes f), yet the
        journal names only the one written through. A changed file with more than one link (only the changed
        files are looked at) has its other names in the workspace added to ``changed`` (each with the name that
        led to it, returned); names outside what the capture watches are said. Finding them takes a walk of the
        workspace: hard links are rare in a source tree, and the alternative, an inode index kept up to date on
        every call, would cost every command for the rare one."""
        linked: dict[tuple[int, int], tuple[str, int]] = {}  # (device, inode) -> (a changed name, links)
        for path in changed:
            with contextlib.suppress(OSError):
                full = os.lstat(os.path.join(self.workspace.root, real_path(path)))
                if stat.S_ISREG(full.st_mode) and full.st_nlink > 1:
                    linked.setdefault((full.st_dev, full.st_ino), (path, full.st_nlink))
        if not linked:
            return {}
        device = os.lstat(self.workspace.root).st_dev
        names: dict[tuple[int, int], list[str]] = {}
        for path, info in scan(self.workspace.root, self.rules).items():
            if (device, info.ino) in linked:
                names.setdefault((device, info.ino), []).append(path)
        through: dict[str, str] = {}
        for key, (via, links) in linked.items():
            found = names.get(key, [])
            for other in found:
                now = _stat(self.workspace.root, other, {})
                old = self.stats.get(other)
                if other in changed or now is None or now == old:
                    continue
                changed[other] = old
                self.stats[other] = now
                via_old = changed.get(via)
                if other not in self.known and via in self.known and old and via_old and old.ino == via_old.ino:
                    self.known[other] = self.known[via]  # one file under two names already: the same content before
                self._touched.add(other)
                through[other] = via
            if links > len(found):
                self.warnings.append(
                    f"{via}: a file with {links} names, {links - len(found)} of them outside what safepoint watches"
                    " (ignored, or outside the workspace): a change through it changed those too, and rollback"
                    " cannot put them back"
                )
        return through

    def _ignored_lost(self, call_id: str, uncertain: bool) -> list[FilePatchEntry]:
        """Ignored files the command removed without the command line naming them (``find . -name '.env*'
        -delete``, a ``for`` loop, ``xargs rm``): no scan looks at them, nothing kept them, but the journal saw
        them go. Each is said in the call's result and recorded with an unknown before-state, so ``rollback``
        names it too: never lost in silence. O(what the command removed)."""
        gone = self.watcher.ignored_gone() if self.watcher is not None else set()
        kept = self._named.keys()
        recorded: list[FilePatchEntry] = []
        for item in sorted(gone):
            path = item.rstrip("/")
            if path in kept or (item.endswith("/") and any(k.startswith(item) for k in kept)):
                continue  # kept ahead (the command line named it): recorded with its content already
            if _stat(self.workspace.root, path, {}) is not None or os.path.lexists(
                os.path.join(self.workspace.root, real_path(path))
            ):
                continue  # replaced in place (an editor's save, a tool's atomic rename): still there
            what = "folder" if item.endswith("/") else "file"
            self.warnings.append(
                f"{path}: an ignored {what} the command deleted without naming it; it was not kept, so rollback"
                " cannot put it back"
            )
            entry = self.files.record(call_id, FileBefore(path, UNKNOWN, None), None, None, author_uncertain=uncertain)
            if entry is not None:
                recorded.append(entry)
        return recorded

    def _removals_first(self, item: tuple[str, FileStat | None]) -> tuple[bool, str]:
        """Record what a command removed before what it made: ``rm -rf src && ln -s x src`` removed src/keep.txt
        before it made the link src, and rollback, undoing the newest first, removes the link before it puts
        src/keep.txt back."""
        return _stat(self.workspace.root, item[0], {}) is not None, item[0]

    def settled(self) -> None:
        """The command's outcome (and the changes recorded with it) is durable: the journal is spent (the next
        command writes its own, holding everything since the last save)."""
        self._ready()
        self._command = None
        if self._state is not None:
            self._state.clear_journal()
        if time.monotonic() - self._saved_at > SAVE_SECONDS:
            self.save()

    def _record(
        self, call_id: str, path: str, old: FileStat | None, *, author_uncertain: bool, into: list[FilePatchEntry]
    ) -> None:
        before = self._before(path, old)
        entry: FilePatchEntry | None
        info = _stat(self.workspace.root, path, {})
        if info is not None and info.size > LARGE_FILE_BYTES and not stat.S_ISLNK(info.mode):
            entry = self.files.record_large(
                call_id, before, self._hash_large(path), info.mode & 0o7777, author_uncertain=author_uncertain
            )
            self.warnings.append(f"{path}: larger than {LARGE_FILE_BYTES} bytes, recorded by hash only")
        else:
            data, mode = self._snapshot(path)
            entry = self.files.record(call_id, before, data, mode, author_uncertain=author_uncertain)
        if entry is not None:
            into.append(entry)
        self._learn(path, store=False)  # its new content is reproducible from the patch just recorded

    def _learn(self, path: str, *, store: bool = True) -> None:
        self._touched.add(path)
        if self._large(path):
            self.known[path] = (self._hash_large(path), self._mode(path))
            return
        data, mode = self._snapshot(path)
        if data is None:
            self.known.pop(path, None)
            return
        if store:
            self.files.describe(path, data, mode)  # stores the content unless the run can reproduce it
        self.known[path] = (content_hash(data), mode)

    def _snapshot(self, path: str) -> tuple[bytes | None, int | None]:
        """A path's recorded form; a path whose folder is now a link (out of the workspace or elsewhere in it) or
        that cannot be read counts as absent: what is there is not this path's."""
        if _stat(self.workspace.root, path, {}) is None:
            return None, None
        try:
            return self.workspace.snapshot(path)
        except ToolFailure:
            return None, None

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
        info = self.stats.get(path) or _stat(self.workspace.root, path, {})
        return info is not None and info.size > LARGE_FILE_BYTES and not stat.S_ISLNK(info.mode)

    def _hash_large(self, path: str) -> str:
        digest = hashlib.sha256()
        with open(os.path.join(self.workspace.root, real_path(path)), "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        return "sha256:" + digest.hexdigest()

    def _mode(self, path: str) -> int | None:
        info = self.stats.get(path)
        return None if info is None or stat.S_ISLNK(info.mode) else info.mode & 0o7777
