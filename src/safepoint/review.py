"""What a person reviews of runs: the agent's changes as a diff (per run or per call) and the calls waiting for an
approval across runs. Read only; typed results (re-exported by ``safepoint.api``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from safepoint.errors import SafepointError, StoreError, UnknownReferenceError

if TYPE_CHECKING:
    from safepoint.core.progress import ProgressEvent
    from safepoint.engine.session import RunSession
    from safepoint.records import FilePatchEntry
    from safepoint.store.base import Store

DiffKind = Literal["text", "binary", "too_large", "not_kept"]


class FileDiff(msgspec.Struct, frozen=True, kw_only=True):
    """One path: its unified diff from before the agent (or the call) to what it left. ``kind``: ``text`` (the
    diff is in ``diff``), ``binary`` and ``too_large`` (named, not dumped: the same caps as ``conflicts``),
    ``not_kept`` (a version the run recorded by hash only, or never captured: ``why`` says which)."""

    path: str
    op: str  # create, modify, delete (as the last change recorded it) or "changed" for several
    kind: DiffKind
    added: int
    removed: int
    diff: str
    calls: list[str]
    why: str = ""


class RunDiff(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    call_id: str | None
    files: list[FileDiff]


class CallSettled(msgspec.Struct, frozen=True, kw_only=True):
    """``settle``: what a person's finding made of the call (``outcome`` in words)."""

    run_id: str
    call_id: str
    happened: bool
    status: str
    outcome: str


class PendingApproval(msgspec.Struct, frozen=True, kw_only=True):
    """A call that waits for a person's approval, with the commands that answer it."""

    run_id: str
    call_id: str
    tool: str
    risk_level: str
    target: str
    waiting_since: str  # ISO time the wait began
    seconds_left: float
    attended: bool  # a live process waits on it now (else `safepoint resume` or a daemon continues the wait)
    approve: str
    deny: str


def run_diff(session: RunSession, call_id: str | None) -> RunDiff:
    """The net change per path: from the before-state of the first change in scope to the after-state of the
    last (``call_id``: that call's changes only). Linear in the changes recorded."""
    run_id = session.info.run_id
    patches = [p for p in session.files.patches if p.after_hash or p.op == "delete"]  # else: never finished
    if call_id is not None:
        if call_id not in session.ledger and not any(p.tool_call_id == call_id for p in patches):
            raise UnknownReferenceError(f"call {call_id!r} is not in run {run_id!r}; see `safepoint ledger {run_id}`")
        patches = [p for p in patches if p.tool_call_id == call_id]
    return RunDiff(run_id=run_id, call_id=call_id, files=file_diffs(session, patches))


def file_diffs(session: RunSession, patches: list[FilePatchEntry]) -> list[FileDiff]:
    """The net change per path of these finished patches (in log order): one diff per path, linear in them."""
    from safepoint.core.patches import unified_diff
    from safepoint.core.rollback import ABSENT

    first: dict[str, FilePatchEntry] = {}
    last: dict[str, FilePatchEntry] = {}
    calls: dict[str, list[str]] = {}
    for patch in patches:
        first.setdefault(patch.path, patch)
        last[patch.path] = patch
        seen = calls.setdefault(patch.path, [])
        if patch.tool_call_id not in seen:
            seen.append(patch.tool_call_id)
    files: list[FileDiff] = []
    for path in sorted(first):
        start, end = first[path], last[path]
        if start.before_hash == end.after_hash:
            continue  # changed and changed back: nothing to show
        op = end.op if start is end else _net_op(start, end)
        before, why_before = _version(session, start.path, start.before_hash, start.before_ref)
        after, why_after = _version(session, end.path, end.after_hash, None)
        if before is None or after is None:
            why = why_before or why_after
            files.append(
                FileDiff(path=path, op=op, kind="not_kept", added=0, removed=0, diff="", calls=calls[path], why=why)
            )
            continue
        text = unified_diff(before, after, path)
        if text.startswith("--- a/"):  # a file created or removed: its missing side is /dev/null, as git says
            head, rest = text.split("\n", 1)
            second, body = rest.split("\n", 1)
            if start.before_hash == ABSENT:
                head = "--- /dev/null"
            if end.after_hash == ABSENT:
                second = "+++ /dev/null"
            text = f"{head}\n{second}\n{body}"
        kind: DiffKind = "text"
        if text.startswith("Binary file "):
            kind = "binary"
        elif text.startswith("File ") and "too large to show" in text:
            kind = "too_large"
        added = removed = 0
        if kind == "text":
            for line in text.split("\n")[2:]:  # a diff's lines end at "\n" only (splitlines forged "-" lines)
                if line.startswith("+"):
                    added += 1
                elif line.startswith("-"):
                    removed += 1
        files.append(FileDiff(path=path, op=op, kind=kind, added=added, removed=removed, diff=text, calls=calls[path]))
    return files


def _net_op(start: FilePatchEntry, end: FilePatchEntry) -> str:
    if not start.before_hash and end.after_hash:
        return "create"
    return "delete" if end.op == "delete" else "modify"


def _version(session: RunSession, path: str, digest: str, ref: str | None) -> tuple[bytes | None, str]:
    """A recorded version's bytes; None with why when the run cannot reproduce it."""
    from safepoint.core.rollback import ABSENT, UNKNOWN

    if digest == ABSENT:
        return b"", ""
    if digest == UNKNOWN:
        return None, "its content before the agent's change was never captured"
    try:
        return session.files.version(path, digest, ref), ""
    except SafepointError:
        return None, "a version of it was recorded by its hash only (too large to keep)"


def pending_approvals(store: Store, run_ids: list[str]) -> list[PendingApproval]:
    """The calls waiting for approval in these runs: a run whose restart checkpoint is an approval wait, for a
    call the ledger still has ``planned`` with the same input, that nobody answered yet."""
    import time

    from safepoint.core.progress import answer_command, main_argument
    from safepoint.protocol import Approval, RuntimeRestartCheckpoint, RuntimeRestartToolApprovalWait
    from safepoint.report import load_view
    from safepoint.restart.control import owner_is_live
    from safepoint.restart.judge import controls

    found: list[PendingApproval] = []
    for run_id in run_ids:
        try:
            stored = store.read_restart_checkpoint(run_id)
        except StoreError:
            continue  # one run that cannot be read (listed "unreadable") never hides the others' waits
        if stored is None or not stored.intact:
            continue
        checkpoint = msgspec.json.decode(stored.data, type=RuntimeRestartCheckpoint)
        if checkpoint.mode != "tool_approval_wait" or not checkpoint.payload_json:
            continue
        wait = msgspec.json.decode(checkpoint.payload_json, type=RuntimeRestartToolApprovalWait)
        view = load_view(store, run_id)
        entry = view.ledger.get(wait.call_id)
        if view.status in ("closed", "cancelled") or entry is None or entry.status != "planned":
            continue
        if entry.input_hash != wait.input_hash:
            continue
        answered = any(
            isinstance(r, Approval) and r.call_id == wait.call_id and r.input_hash == entry.input_hash
            for _, r in controls(store, run_id)
        )
        if answered:
            continue
        attended = owner_is_live(store, run_id)
        left_ms = wait.timeout_remaining_ms
        if attended:  # the owner refreshes the time left every second: count from its last refresh
            left_ms = max(0, left_ms - max(0, int(time.time() * 1000) - checkpoint.updated_at))
        found.append(
            PendingApproval(
                run_id=run_id,
                call_id=wait.call_id,
                tool=entry.tool_name,
                risk_level=entry.risk_level,
                target=main_argument(entry.input),
                waiting_since=_iso(wait.wait_started_at_ms),
                seconds_left=round(left_ms / 1000, 1),
                attended=attended,
                approve=answer_command("approve", run_id, wait.call_id),
                deny=answer_command("deny", run_id, wait.call_id),
            )
        )
    return found


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


# following a run live (``safepoint watch``) ---------------------------------------------------------------------------
ENDED = ("completed", "failed", "closed", "cancelled")
REREAD_SECONDS = 2.0  # a backend with no cheap change mark is read whole this often at most


class Follower:
    """A run as it moves, told as the same events ``Run.on_event`` gives, from what the store holds: new model
    turns, calls that started or settled, status changes, an approval wait. ``poll`` reads the log again only
    when a cheap mark moved (the checkpoint index's tail, the owner record, the restart checkpoint's time) or
    every ``REREAD_SECONDS``: watching costs nothing while the run is idle."""

    def __init__(self, store: Store, run_id: str) -> None:
        from safepoint.report import load_view

        self.store = store
        self.run_id = run_id
        self.view = load_view(store, run_id)  # an unknown run: RunNotFoundError now
        self._mark: object = None
        self._read_at = 0.0
        self._messages: set[int] = set()
        self._calls: dict[str, str] = {}
        self._events = 0
        self._waits: set[str] = set()
        self._inputs: dict[str, dict[str, object]] = {}
        self.status = self.view.status
        self.first = True

    def ended(self) -> bool:
        """The run stopped: ended for good, or nobody runs it any more (waiting for a decision, interrupted,
        crashed). A run waiting for an approval with its owner alive goes on."""
        from safepoint.restart.control import owner_is_live

        return self.status in ENDED or not owner_is_live(self.store, self.run_id)

    def final_status(self) -> str:
        """The status as ``safepoint status`` says it (``interrupted`` for a run whose process died)."""
        from safepoint.report import status_rows

        return status_rows(self.store, self.run_id)[0].status

    def poll(self) -> list[ProgressEvent]:
        import time

        from safepoint.report import load_view

        mark = self._cheap_mark()
        if not self.first and mark == self._mark and time.monotonic() - self._read_at < REREAD_SECONDS:
            return []
        self._mark, self._read_at = mark, time.monotonic()
        self.view = load_view(self.store, self.run_id)
        events = self._news()
        self.first = False
        return events

    def _cheap_mark(self) -> object:
        owner = self.store.owner(self.run_id)
        stored = self.store.read_restart_checkpoint(self.run_id)
        return (
            self.store.log_mark(self.run_id),
            None if owner is None else (owner.generation, owner.released, owner.terminal_at),
            None if stored is None else stored.data,
        )

    def _news(self) -> list[ProgressEvent]:
        from safepoint.core.progress import CallFinished, CallStarted, ModelTurn, StatusChanged, main_argument
        from safepoint.engine import large_values

        view, run_id = self.view, self.run_id
        step_of = {f"step_{m.turn + 1}": m.turn + 1 for m in view.history if m.turn is not None}
        ordered: list[tuple[int, int, ProgressEvent]] = []  # (step, 0 its turn / 1 its calls, event)
        for seq, message in sorted(view.message_records.items()):
            if seq in self._messages:
                continue
            self._messages.add(seq)
            if message.role == "assistant" and not self.first:
                if message.content_ref is not None:  # a long text kept as a blob (``core.large_values``)
                    message = large_values.resolve_message(message, large_values.reader(self.store, view))
                step = (message.turn or 0) + 1
                turn = ModelTurn(
                    run_id=run_id, step=step, text=message.content, streamed=False, calls=len(message.tool_calls)
                )
                ordered.append((step, 0, turn))
        for entry in view.ledger_entries:
            if entry.input:
                self._inputs[entry.call_id] = entry.input  # later records of a call may leave its input out
            if self._calls.get(entry.call_id) == entry.status:
                continue
            self._calls[entry.call_id] = entry.status
            if self.first:
                continue
            step = step_of.get(entry.step_id, 0)
            target = main_argument(self._inputs.get(entry.call_id, {}))
            if entry.status == "started":
                started = CallStarted(
                    run_id=run_id, step=step, call_id=entry.call_id, tool=entry.tool_name, target=target
                )
                ordered.append((step, 1, started))
            elif entry.status in ("succeeded", "failed", "uncertain"):
                finished = CallFinished(
                    run_id=run_id,
                    step=step,
                    call_id=entry.call_id,
                    tool=entry.tool_name,
                    target=target,
                    status=entry.status,
                    ran=entry.started_at is not None,
                    duration_s=_duration(entry.started_at, entry.finished_at),
                    detail=entry.error or "",
                )
                ordered.append((step, 1, finished))
        out = [event for _, _, event in sorted(ordered, key=lambda item: item[:2])]
        for event in view.events[self._events :]:
            self.status = event.status
            if not self.first or event is view.events[-1]:
                out.append(StatusChanged(run_id=run_id, status=event.status, detail=event.detail))
        self._events = len(view.events)
        return out + self._approval_waits()

    def _approval_waits(self) -> list[ProgressEvent]:
        from safepoint.core.progress import ApprovalWait

        out: list[ProgressEvent] = []
        for wait in pending_approvals(self.store, [self.run_id]):
            if wait.call_id not in self._waits:
                self._waits.add(wait.call_id)
                out.append(
                    ApprovalWait(
                        run_id=wait.run_id,
                        call_id=wait.call_id,
                        tool=wait.tool,
                        target=wait.target,
                        risk_level=wait.risk_level,
                        approve=wait.approve,
                        deny=wait.deny,
                    )
                )
        return out


def _duration(started: str | None, finished: str | None) -> float | None:
    from datetime import datetime

    if not started or not finished:
        return None
    return round((datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds(), 3)
