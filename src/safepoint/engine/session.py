"""One run, open for writing: the parts that write it, composed, and the conversation state they share.

The parts, each with one job (and each handed only what it uses):

- ``LogWriter`` (``log``): stages records with sequence numbers, group-commits them (its ordering rules are in its
  module), batches the trace;
- ``LedgerMachine`` (``calls``): the tool ledger: plan, start, finish, decisions, probes, attempts;
- ``Content`` (``contents``): blobs and recorded results; ``FileChanges`` (``files``): file versions and patches;
- ``CallRunner`` (``runner``): one tool call, the one generator for sync and async (its module walks a call);
- ``RestartWriter`` (``restart``): the restart checkpoint; ``Heartbeat``: the owner's liveness.

The session itself holds the conversation (history, step, pending calls, model) and its checkpoints. Making one
does no I/O: ``open``/``create`` claim and load the run, then ``start`` is the explicit step that kills what a
crashed owner left running, stages writes in the run's scratch folder, starts the heartbeat thread and starts the
workspace capture.
"""

from __future__ import annotations

import bisect
import os
import uuid
from collections.abc import Iterator, ValuesView
from contextlib import AbstractContextManager
from typing import Any

import msgspec

from safepoint.core.hashing import idempotency_key
from safepoint.core.message_list import MessageList
from safepoint.core.replay import ProbeResult
from safepoint.core.resume import pending_calls
from safepoint.core.retention import lifecycle_records
from safepoint.core.run_summary import SummaryFold
from safepoint.core.run_view import CheckpointAt, RunView
from safepoint.core.trace_events import recovery_events
from safepoint.engine import large_values
from safepoint.engine.call_runner import CallRunner
from safepoint.engine.capture_state import ScratchSeal
from safepoint.engine.command_capture import CommandCapture
from safepoint.engine.content import Content
from safepoint.engine.control_watch import ControlWatch
from safepoint.engine.file_changes import FileChanges
from safepoint.engine.heartbeat import HEARTBEAT_SECONDS, Heartbeat
from safepoint.engine.launcher import LAUNCHER
from safepoint.engine.ledger_machine import LedgerMachine
from safepoint.engine.log_writer import LogWriter, now, provider_key_variables, run_redactor
from safepoint.engine.processes import ProcessNotes, kill_leftovers
from safepoint.engine.progress import Progress
from safepoint.engine.restart_writer import RestartWriter
from safepoint.engine.snapshot_writer import SnapshotWriter, due_position
from safepoint.engine.tools import ToolContext, ToolRegistry
from safepoint.errors import ResumeError, StoreError
from safepoint.protocol import ControlSeen, ExecutionConfig, RecoveryReport
from safepoint.records import (
    Checkpoint,
    CheckpointConflict,
    CheckpointKind,
    Claim,
    FilePatchEntry,
    Message,
    RecoveryIdentity,
    Rewind,
    Role,
    RunEvent,
    RunInfo,
    RunStatus,
    ToolCall,
    ToolLedgerEntry,
)
from safepoint.store import view_index
from safepoint.store.base import Store
from safepoint.workspace.files import Workspace
from safepoint.workspace.head import find_git_dir, read_head

__all__ = ["HEARTBEAT_SECONDS", "RunSession", "holder_id", "load_view", "now"]

_encoder = msgspec.json.Encoder()


class RunSession:
    """The single writer of one run (it holds the run's claim), or with generation 0 a reader of it."""

    def __init__(self, store: Store, claim: Claim, view: RunView, workspace: Workspace, registry: ToolRegistry) -> None:
        self.store = store
        self.claim = claim
        self.info: RunInfo = view.info
        self.view = view
        self.registry = registry
        self.base_workspace = workspace
        self.workspace = workspace  # staging in the run's scratch folder once started
        self.processes = ProcessNotes(None)
        self.closed = False
        # the conversation ------------------------------------------------------------------------------------
        # The history (by reference: its seqs, not its messages) is set once its blobs can be read back, below.
        self._history_seqs = [0] * len(view.history)  # the log record of each message (0: loaded, durable)
        # Where the run stands, from its latest complete checkpoint: a session that only rolls back or resolves
        # writes checkpoints too, and they must not move the run back to its first step.
        latest = view.latest_complete_checkpoint()
        self.step = latest.checkpoint.step if latest else 0
        self.next_turn = latest.checkpoint.next_turn if latest else 0
        self.pending: list[ToolCall] = (
            pending_calls(latest.history, latest.checkpoint.pending_tool_calls) if latest is not None else []
        )
        self.model = latest.checkpoint.model if latest else view.info.model
        self.model_config = dict(latest.checkpoint.model_config if latest else view.info.model_config)
        # Every checkpoint by id, built when first asked (a rollback): a resume never asks (``PastView``).
        self._checkpoints: dict[str, Checkpoint] | None = None
        self._new_checkpoints: dict[str, Checkpoint] = {}
        # The last checkpoint this session wrote, while nothing rewound the history since: a checkpoint that would
        # say the same again is not written (``checkpoint``). None at open: a resumed run's first one is written.
        self._last_checkpoint: Checkpoint | None = None
        self.conflicts: dict[str, CheckpointConflict] = dict(view.conflicts)
        self.abandoned: dict[str, int] = dict(view.abandoned)
        self.restores = len(view.restores)
        self.control_seen: dict[int, ControlSeen] = dict(view.control_seen)
        self.git_dir = find_git_dir(workspace.root)
        # the parts ---------------------------------------------------------------------------------------------
        self.log = LogWriter(
            store,
            claim,
            view.last_seq,
            run_redactor(workspace.root, withhold=provider_key_variables(view.info.provider), store=store),
        )
        self.log.summary = SummaryFold.from_view(view)  # from the open state: not every entry
        # The view snapshot written while the run goes on (``store.view_index.due_after``), not only at close: a
        # run killed at call 50,000 is resumed from a snapshot of most of it, not by reading its whole log.
        self._snapshot_due = 0
        self._snapshots: SnapshotWriter | None = None  # written off the call's path (``engine.snapshot_writer``)
        if not self.read_only:
            try:
                covered = store.view_snapshot_seq(view.info.run_id) if view.last_seq else None
            except (StoreError, OSError):  # a cache: unknown, so one is written at the first due point
                covered = None
            self._snapshot_due = view_index.due_after(covered or 0)
            self._snapshots = SnapshotWriter(store, claim, view.info)
            self.log.after_commit = self._after_commit
        self.pass_env: tuple[str, ...] = ()  # the credential variables the user hands to commands by name
        self.contents = Content(
            view.info.run_id,
            dict(view.blobs),
            view.message_records.copy(),  # a copy of the references, not of the messages (packed ones stay packed)
            self.log.add,
            store,
            self.log.stage_blob,
            self.log.staged_blob,
        )
        # What the log kept of large values as blobs, read back: the model is sent the conversation as it was.
        self.history: MessageList = large_values.resolve_branch(view.history, view.ref_messages, self.contents)
        self.pending = [large_values.resolve_call(call, self.contents) for call in self.pending]
        self.calls = LedgerMachine(
            view.info.run_id,
            view.ledger,
            view.attempt_counts.copy(),  # a snapshot's ColumnMap copies what changed only
            dict(view.decisions),
            self.log.add,
            open_calls=view.unsettled,
        )
        self.files = FileChanges(
            view.info.run_id,
            workspace,
            self.contents,
            self.log,
            list(view.patches),
            {k: list(v) for k, v in view.befores.items()},
            view.blobs,
            lambda: lifecycle_records(store.read_control(view.info.run_id))[1],  # what gc freed, read if needed
        )
        self.heartbeat = Heartbeat(store, claim)
        self.progress = Progress(view.info.run_id, self.log.redactor, self.log.trace)  # what observers are told
        self.restart = RestartWriter(
            store,
            claim,
            view.info,
            self.execution_config,
            self.log.trace,
            self.log.redactor.value,
            fenced=self.log.fenced,
        )
        self._capture: CommandCapture | None = None
        self.runner = CallRunner(
            registry=registry,
            ledger=self.calls,
            log=self.log,
            files=self.files,
            content=self.contents,
            conversation=self,
            restart=self.restart,
            capture=self.capture,
            approval_mode=view.info.approval,
            progress=self.progress,
            settle_start=self._settle_capture_start,
        )

    @property
    def checkpoints(self) -> dict[str, Checkpoint]:
        """Every checkpoint of the run by id (the view's, read when first asked, and this session's)."""
        if self._checkpoints is None:
            found = {at.checkpoint.checkpoint_id: at.checkpoint for at in self.view.checkpoints}
            self._checkpoints = {**found, **self._new_checkpoints}
        return self._checkpoints

    # opening and closing ----------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls, store: Store, info: RunInfo, workspace: Workspace, registry: ToolRegistry, *, holder: str = ""
    ) -> RunSession:
        # The header holds the task and a scenario's script (model text): redacted like every record.
        redactor = run_redactor(workspace.root, withhold=provider_key_variables(info.provider), store=store)
        header = _encoder.encode(redactor.record(info))
        identity = RecoveryIdentity(
            recovery_class=info.recovery_class,
            owner_id=info.owner_id,
            agent_id=info.run_id,
            message_id=f"{info.parent_run_id}#{info.parent_call_id}" if info.parent_call_id else None,
        )
        # The run and its first claim: one commit where the store can (PostgreSQL).
        claim = store.create_claimed_run(info.run_id, header, holder or holder_id(), identity=identity)
        session = cls(store, claim, RunView(info=info), workspace, registry)
        session.log.trace("run_claimed", takeover=False, holder=claim.holder)
        session.start()
        session.event("running", "started")
        return session

    @classmethod
    def open(
        cls,
        store: Store,
        run_id: str,
        workspace: Workspace,
        registry: ToolRegistry,
        *,
        holder: str = "",
        takeover: bool = False,
        read_only: bool = False,
        watch: bool = True,
        claim: Claim | None = None,
        reopen: bool = False,
        view: RunView | None = None,
    ) -> RunSession:
        """Claim the run (its only writer from now on), or with ``read_only`` just read it: a read-only session
        holds generation 0, so any write it attempted would be refused, and it leaves the run's scratch alone.
        ``watch=False`` skips the workspace watch for a session that runs no commands (a rollback, a resolve).
        ``claim``: one restart recovery already took (it judged the run before claiming it); ``view``: the run as
        that recovery read it under the claim (not read again)."""
        if read_only:
            view = view or load_view(store, run_id)
            return cls(store, Claim(run_id=run_id, holder="reader", generation=0), view, workspace, registry)
        if claim is None:
            claim = store.claim(run_id, holder or holder_id(), takeover=takeover, reopen=reopen)
        try:
            session = cls(store, claim, view or load_view(store, run_id), workspace, registry)
        except BaseException:
            store.release(claim)
            raise
        session.log.trace("run_claimed", takeover=takeover, holder=claim.holder)
        session.start(watch=watch)
        return session

    def start(self, *, watch: bool = True) -> None:
        """The steps of opening a run for writing, in order: a crashed owner's commands die before anything is
        decided about their calls; writes are staged in the run's own scratch folder (claiming swept it); the
        heartbeat starts; and, when a tool captures the workspace, the capture starts watching now, so the user's
        edits before the first command are learnt, not blamed on it."""
        if self.read_only:
            return
        scratch = self.store.scratch_dir(self.info.run_id)
        if scratch is not None and (killed := kill_leftovers(scratch)):
            self.log.trace("leftovers_killed", pids=killed)
        self.workspace = self.files.workspace = self.base_workspace.for_run(scratch)
        # The running commands (for the next owner's cleanup), and the control channel watched across each: what a
        # command writes there is not taken for a person's word (engine/control_watch.py).
        self.processes = ControlWatch(scratch, self.info.run_id, self, self._running_calls, LAUNCHER.sweep)
        self.heartbeat.start()
        captures = any(self.registry.get(n).captures_workspace for n in self.registry.names())
        if CommandCapture.has_journal(scratch):
            # A command may have been running when the last owner died (its leftovers were killed just above):
            # its changes are recorded as its call's and made durable now, before anything else runs.
            capture = self.capture()
            if capture.recovered:
                self.log.commit()
                capture.recovery_settled()
        elif watch and captures:
            self.capture(background=True)  # watches and baseline on a thread; the first command waits for them

    @property
    def read_only(self) -> bool:
        return self.claim.generation == 0

    def capture(self, *, background: bool = False) -> CommandCapture:
        """The workspace change capture, started at the first call that needs it (its baseline scan costs), or
        with the session, in the ``background``."""
        if self._capture is None:
            self._capture = CommandCapture(
                self.files,
                self.log,
                store_dir=self.store.local_dir(),
                state_dir=None if self.read_only else self.store.scratch_dir(self.info.run_id),
                exclude=self.base_workspace.exclude,
                in_flight=self._in_flight,
                background=background,
                seal=ScratchSeal.of(self.store, self.info.run_id),
            )
        return self._capture

    def _settle_capture_start(self) -> None:
        if self._capture is not None:
            self._capture.finish_start()  # its records go with the next commit (the call's `started`)

    def _running_calls(self) -> list[str]:
        entries = self.calls.entries  # the open calls only: a finished one is never running
        return [call_id for call_id in self.calls.open if entries[call_id].status == "started"]

    def _in_flight(self, call_id: str) -> bool:
        entry = self.calls.entries.get(call_id)
        return entry is not None and entry.status == "started"

    @property
    def capture_started(self) -> CommandCapture | None:
        return self._capture

    def close(self) -> None:
        self.heartbeat.stop()
        if self._capture is not None:
            # A capture started in the background and never used: its records (the workspace's state at the start,
            # what it learnt) become durable now, or it keeps nothing for the next session.
            kept = not self.log.refused  # a process fenced off writes nothing more, not even this
            if self._capture.finish_start() and kept and not self.read_only:
                try:
                    self.log.commit()
                except StoreError:
                    kept = False  # the store refused (taken over, full): the close goes on, the next session learns
            self._capture.close(save=kept)
            self._capture = None
        self.files.close()
        if not self.closed:
            self.closed = True
            if not self.read_only:
                # A write in flight is waited for (bounded) or abandoned: the release below fences it off.
                idle = self._snapshots is None or self._snapshots.close()
                self._trace_snapshot_error()
                if not self.log.refused:  # a fenced-off process releases nothing (its release is a no-op)
                    if idle:
                        view_index.refresh(self.store, self.claim, self.view.info)  # the next open reads less
                    self.log.trace("run_released")
                self.log.flush_trace()
                self.store.release(self.claim)
        # its worker thread (async calls' bookkeeping) ends with the session; not waited for here, as a close may
        # be made under the run's lock, which a piece still queued there waits for (the run's close waits after)
        self.runner.bookkeeper.close(wait=False)

    def _after_commit(self) -> None:
        """A group is durable: the view snapshot when due, handed to the background writer (the call does not
        wait for it; a cache: a failure to write one fails nothing)."""
        self._trace_snapshot_error()
        if self.log.durable_seq < self._snapshot_due or self.closed or self._snapshots is None:
            return
        try:  # under the run's lock, right after the commit: the log ends at this group (one tail read)
            position = due_position(self.store, self.info.run_id, self.log.durable_seq)
        except (StoreError, OSError):
            position = None
        if position is not None:
            self._snapshots.due(position)
        self._snapshot_due = view_index.due_after(self.log.durable_seq)  # written or not: not retried every group

    def _trace_snapshot_error(self) -> None:
        error = self._snapshots.take_error() if self._snapshots is not None else None
        if error is not None:
            self.log.trace("snapshot_write_failed", error=error)

    # records ------------------------------------------------------------------------------------------------
    @property
    def durable_history_len(self) -> int:
        """How much of the history is durable: what a restart checkpoint may point into."""
        return bisect.bisect_right(self._history_seqs, self.log.durable_seq)

    @property
    def bookkeeping(self) -> AbstractContextManager[Any]:
        """The run's lock (``Bookkeeper.lock``, held by every bookkeeping piece): a writer on another thread (an
        approval wait, the control watch told on a tool's thread that the last call ended) takes it around each
        of its writes, so none lands inside a piece's group or commits half of it; never while it sleeps, polls or
        samples the tool count (``TOOLS`` calls the watch under its own lock: that order is the only one)."""
        return self.runner.bookkeeper.lock

    def commit(self) -> None:
        if self._capture is not None:
            self._capture.poll()  # a start in the background is recorded with the first group after it is done
        self.log.commit()

    def add_record(self, body: msgspec.Struct) -> int:
        """Append a record to the pending group (made durable by the next ``commit``)."""
        if isinstance(body, ControlSeen):
            self.control_seen[body.position] = body
        if isinstance(body, RecoveryReport):
            for event, data in recovery_events(body):
                self.log.trace(event, **data)
        return self.log.add(body)

    def trace(self, event: str, **data: Any) -> None:
        self.log.trace(event, **data)

    def event(self, status: RunStatus, detail: str = "") -> None:
        self.log.add(RunEvent(status=status, at=now(), detail=detail, generation=self.claim.generation))
        self.log.trace(f"run_{status}", detail=detail)
        self.log.commit()
        self.progress.status(status, detail)  # told once durable

    @property
    def ledger(self) -> dict[str, ToolLedgerEntry]:
        """The current entry of every call (read it; the ledger machine changes it)."""
        return self.calls.entries

    @property
    def patches(self) -> list[FilePatchEntry]:
        return self.files.patches

    @property
    def lifetime_messages(self) -> ValuesView[Message]:
        """Every message the run's log holds, over every branch it had, oldest first (a view: no copy per turn)."""
        return self.contents.message_records.values()

    def lifetime_said(self) -> Iterator[Message]:
        """``lifetime_messages`` as they were said: a content or argument the log keeps as a blob read back."""
        return (large_values.resolve_message(m, self.contents) for m in self.contents.message_records.values())

    def probe(self, entry: ToolLedgerEntry) -> ProbeResult | None:
        return self.calls.probe(entry, self.runner.probe)

    # the conversation (what the call runner needs of it: ``call_runner.Conversation``) ---------------------------
    def add_message(self, role: Role, content: str, **fields: Any) -> Message:
        message = Message(seq=len(self.history), role=role, content=content, **fields)
        # The log keeps a large content or argument as a blob (``core.large_values``); the session keeps it whole.
        # Logged first: a message the log refuses (``core.history_codec``) is not in the history.
        seq = self.log.add(large_values.externalize_message(message, self.contents, self.log.redact_bytes))
        self.history.append(message)
        self._history_seqs.append(seq)
        self.contents.message_records[seq] = message
        return message

    def tool_message(self, call: ToolCall, text: str) -> tuple[Message, str]:
        message = self.add_message("tool", text, tool_call_id=call.call_id, name=call.tool)
        return message, f"log:{self.log.seq}"

    def on_branch(self, call_id: str) -> Message | None:
        """The call's result on the current branch: looked for from the end back to the message that asked for the
        call (a result follows its request), so a resume's pending calls read the last turn, not every message."""
        for message in reversed(self.history):
            if message.role == "tool" and message.tool_call_id == call_id:
                return message
            if any(call.call_id == call_id for call in message.tool_calls):
                return None
        return None

    def leave_pending(self, call_id: str) -> None:
        self.pending = [p for p in self.pending if p.call_id != call_id]

    def context_for(self, call: ToolCall, step_id: str, attempt: int) -> ToolContext:
        return ToolContext(
            run_id=self.info.run_id,
            call_id=call.call_id,
            step_id=step_id,
            idempotency_key=idempotency_key(self.info.run_id, call.call_id),
            workspace=self.workspace,
            save_artifact=self.save_artifact,
            processes=self.processes,
            before_hashes={state.path: state.before_hash for state in self.files.befores.get(call.call_id, ())},
            attempt=max(attempt, 1),
            pass_env=self.pass_env,
            redact=self.log.redact_bytes,
            withhold_env=tuple(str(v) for v in [(self.info.provider or {}).get("api_key_env")] if v),
        )

    def save_artifact(self, name: str, data: bytes) -> str:
        return self.store.put_artifact(self.claim, name, self.log.redact_bytes(data))

    def rewind(self, history_len: int, checkpoint_id: str, reason: str, abandoned: tuple[str, ...] = ()) -> None:
        self._last_checkpoint = None  # the branch changes: the next checkpoint is always written
        self.history = self.history[:history_len]
        self._history_seqs = self._history_seqs[:history_len]
        self.log.add(
            Rewind(history_len=history_len, checkpoint_id=checkpoint_id, reason=reason, at=now(), abandoned=abandoned)
        )
        if reason == "restore_session":
            self.restores += 1  # the branch number: the calls repeated on it get new ids
            for call_id in abandoned:
                self.abandoned.setdefault(call_id, self.restores)

    def return_to(self, at: CheckpointAt, history: MessageList | None = None) -> None:
        """The conversation and step state as ``at`` recorded them (after a ``rewind`` that logs the branch);
        ``history``: its messages already read back (``large_values.resolve_messages``), when the caller has them."""
        checkpoint = at.checkpoint
        if history is None:
            history = MessageList.of(large_values.resolve_messages(at.history, self.contents))
        self.history = history
        self._history_seqs = [0] * len(self.history)  # as the log held it when the run was opened
        self.step, self.next_turn = checkpoint.step, checkpoint.next_turn
        self.pending = [
            large_values.resolve_call(call, self.contents)
            for call in pending_calls(at.history, checkpoint.pending_tool_calls)
        ]
        if len(self.pending) != len(checkpoint.pending_tool_calls):
            raise ResumeError(
                f"checkpoint {checkpoint.checkpoint_id} names pending calls its history lacks; the run's log is damaged"
            )
        self.model, self.model_config = checkpoint.model, dict(checkpoint.model_config)

    def start_over(self) -> None:
        """No complete checkpoint to go back to: the run starts again from its task."""
        if self.history:
            self.rewind(0, "", "no complete checkpoint")
        self.add_message("user", self.info.task)  # the model needs its task first
        self.step, self.next_turn, self.pending = 0, 0, []

    def begin_turn(self, turn: int) -> None:
        """A model turn starts (agent loop): its step, no call pending yet, the before-step checkpoint staged."""
        self.step = turn + 1
        self.pending = []
        self.checkpoint("before_step")
        self.progress.step = self.step  # streamed text is told as this step's

    def answered(self, text: str, calls: list[ToolCall], turn: int) -> None:
        """The model's reply for ``turn``: its message, and its calls pending until each is settled."""
        self.add_message("assistant", text, tool_calls=tuple(calls), turn=turn)
        self.next_turn = turn + 1
        self.pending = list(calls)
        self.progress.turn(self.step, text, len(calls))

    def next_step(self) -> int:
        """Start the next step of an own loop (a model turn): the before-step checkpoint, durable on return."""
        self.step += 1
        self.next_turn = self.step
        self.checkpoint("before_step")
        self.log.commit()
        return self.step

    def checkpoint(self, kind: CheckpointKind) -> Checkpoint:
        """Stage a checkpoint of the run's state; returns it. A ``before_step`` right after the previous step's
        ``after_step``, or a ``tool_start`` right after the previous call's ``tool_end`` (or any checkpoint right
        after one of its own kind), that would record the same state is not written: the one before restores
        exactly what it would (history, pending calls, files, model, git HEAD, next turn), so a step of one call
        writes three checkpoint records, not four, and each further call of a step one, not two (issue 10 §5).
        The returned checkpoint is then that earlier one. Rejected: dropping the ``tool_end`` checkpoint (the
        ``checkpoints`` listing names it, a user rolls back to it) or the ``tool_start`` one (a restart would ask
        the model again for a turn whose calls already started)."""
        git_head = read_head(self.git_dir) if self.git_dir else None
        last = self._last_checkpoint
        if last is not None and self._says_again(last, kind, git_head):
            # Still said in the trace, naming the checkpoint that holds this state (a step's span starts here).
            self.log.trace("checkpoint", checkpoint_id=last.checkpoint_id, kind=kind, step=self.step)
            return last
        checkpoint = Checkpoint(
            # Named by its place in the log: unique even when damaged checkpoints could not be counted.
            checkpoint_id=f"ckpt_{self.log.seq + 1:06d}",
            run_id=self.info.run_id,
            step=self.step,
            kind=kind,
            created_at=now(),
            history_len=len(self.history),
            ledger_seq=self.log.seq,
            model=self.model,
            model_config=self.model_config,
            pending_tool_calls=tuple(call.call_id for call in self.pending),
            next_turn=self.next_turn,
            patches_len=len(self.files.patches),
            git_head=git_head,
        )
        self.log.add(checkpoint)
        self._last_checkpoint = checkpoint
        (self._checkpoints if self._checkpoints is not None else self._new_checkpoints)[checkpoint.checkpoint_id] = (
            checkpoint
        )
        self.log.trace("checkpoint", checkpoint_id=checkpoint.checkpoint_id, kind=kind, step=self.step)
        return checkpoint

    def _says_again(self, last: Checkpoint, kind: CheckpointKind, git_head: str | None) -> bool:
        """Whether a ``kind`` checkpoint now would restore exactly what ``last`` restores."""
        if kind == "after_step":  # `step:N` names the after_step checkpoint: each is written
            return False
        if last.kind == kind:
            same_step = last.step == self.step
        elif (last.kind, kind) in _FOLLOWS:
            same_step = last.step + (kind == "before_step") == self.step  # a before_step opens the next step
        else:
            return False
        return (
            same_step
            and last.history_len == len(self.history)
            and last.pending_tool_calls == tuple(call.call_id for call in self.pending)
            and last.next_turn == self.next_turn
            and last.patches_len == len(self.files.patches)
            and last.model == self.model
            and last.model_config == self.model_config
            and last.git_head == git_head
        )

    def execution_config(self) -> ExecutionConfig:
        info = self.info
        return ExecutionConfig(
            generation=self.claim.generation,
            model=self.model,
            context_epoch=self.view.context_epoch,
            history_len=self.durable_history_len,
            parent_run_id=info.parent_run_id,
            parent_call_id=info.parent_call_id,
            tools_allowed=info.tools_allowed,
            grant_expires_at_ms=info.grant_expires_at_ms,
        )


# (previous kind, kind) pairs whose second says nothing the first did not when the state is unchanged
_FOLLOWS = frozenset({("after_step", "before_step"), ("tool_end", "tool_start")})


def load_view(store: Store, run_id: str) -> RunView:
    return view_index.read_view(store, view_index.header_info(store, run_id))  # its snapshot, then the log after


def holder_id() -> str:
    return f"pid{os.getpid()}-{uuid.uuid4().hex[:8]}"
