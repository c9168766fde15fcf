"""One run, open for writing: the records it appends, and one tool call carried through the ledger.

Write ordering for one call (promise 1): the planned entry, the before-state of every file the call will write,
the ``started`` entry and the tool-start checkpoint go to the log in ONE durable append; only then does the tool
run. Its after-state, outcome, tool message and tool-end checkpoint are the second durable append.

The call is driven by a generator that yields when it needs the tool run, so the same code serves the sync and
the asyncio entry points (no hand-copied twins): ``execute`` and ``aexecute`` only differ in how they call the tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from safepoint.core.blobs import make_blob, open_blob
from safepoint.core.hashing import content_hash, idempotency_key, input_hash
from safepoint.core.ledger import attempts, check_transition, settle_after_crash
from safepoint.core.patches import apply_patch
from safepoint.core.replay import ProbeResult, ReplayDecision, decide_replay
from safepoint.core.resume import pending_calls
from safepoint.core.run_view import RunView, build_view
from safepoint.engine import failpoints
from safepoint.engine.file_changes import FileBefore, FileChanges
from safepoint.engine.processes import ProcessNotes, kill_leftovers
from safepoint.engine.tools import Tool, ToolContext, ToolRegistry
from safepoint.errors import (
    DecisionNeeded,
    Interrupted,
    ResumeError,
    SafepointError,
    StaleGenerationError,
    StoreError,
    ToolFailure,
)
from safepoint.protocol import ControlSeen
from safepoint.records import (
    RECORD_KINDS,
    Blob,
    CallDecision,
    Checkpoint,
    CheckpointConflict,
    CheckpointKind,
    Claim,
    FileBeforeState,
    FilePatchEntry,
    LedgerStatus,
    LogRecord,
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
from safepoint.restart.approvals import ApprovalOutcome, AwaitApproval, needs_approval, wait_for_approval
from safepoint.restart.checkpoint import RestartState
from safepoint.store.base import Store
from safepoint.workspace.files import Workspace
from safepoint.workspace.head import find_git_dir, read_head

if TYPE_CHECKING:
    from safepoint.engine.command_capture import CommandCapture

_encoder = msgspec.json.Encoder()
# How often an owner renews its heartbeat (a supervisor presumes it dead after its lease, 30 s by default).
# SAFEPOINT_HEARTBEAT_SECONDS changes it, for tests of the reaper that must not wait half a minute.
HEARTBEAT_SECONDS = float(os.environ.get("SAFEPOINT_HEARTBEAT_SECONDS", "10"))
TRACE_BATCH = 64  # trace events are written in batches: they are observability, not recovery
COMPACT_BYTES = 1024  # a file writer's content argument at least this long is logged as a patch


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Invocation:
    """A request, from the call driver, to run a tool now."""

    tool: Tool
    ctx: ToolContext
    args: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    ok: bool
    text: str


def _render_result(value: Any) -> str:
    if value is None:
        return "ok"
    if isinstance(value, str):
        return value
    return _encoder.encode(value).decode()


@functools.cache
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)


def _bad_arguments(invocation: Invocation) -> Outcome | None:
    try:
        _signature(invocation.tool.fn).bind(invocation.ctx, **invocation.args)
    except TypeError as exc:
        return Outcome(False, f"bad arguments for {invocation.tool.name}: {exc}")
    return None


def _failure(exc: Exception) -> Outcome:
    """A tool that raised has ended: its outcome is known (failed), unlike one whose process died."""
    return Outcome(False, str(exc) if isinstance(exc, ToolFailure) else f"{type(exc).__name__}: {exc}")


def run_tool_sync(invocation: Invocation) -> Outcome:
    if (refused := _bad_arguments(invocation)) is not None:
        return refused
    try:
        if invocation.tool.is_async:  # no loop runs here (Run.call refuses that case before `started`)
            return Outcome(True, _render_result(asyncio.run(invocation.tool.fn(invocation.ctx, **invocation.args))))
        return Outcome(True, _render_result(invocation.tool.fn(invocation.ctx, **invocation.args)))
    except (Interrupted, DecisionNeeded):
        raise  # a subagent stopped, or waits for a person: no outcome is recorded, so a restart resumes the call
    except Exception as exc:
        return _failure(exc)


async def run_tool_async(invocation: Invocation) -> Outcome:
    if not invocation.tool.is_async:
        return await asyncio.to_thread(run_tool_sync, invocation)  # a blocking tool must not stall the loop
    if (refused := _bad_arguments(invocation)) is not None:
        return refused
    try:
        return Outcome(True, _render_result(await invocation.tool.fn(invocation.ctx, **invocation.args)))
    except (Interrupted, DecisionNeeded):
        raise
    except Exception as exc:
        return _failure(exc)


CallDriver = Generator[Invocation | AwaitApproval, Outcome | ApprovalOutcome, Message]


class RunSession:
    """The single writer of one run (it holds the run's claim)."""

    def __init__(
        self,
        store: Store,
        claim: Claim,
        view: RunView,
        workspace: Workspace,
        registry: ToolRegistry,
        *,
        watch: bool = True,
    ) -> None:
        self.store = store
        self.claim = claim
        self.info: RunInfo = view.info
        self.view = view
        # Writes are staged in the run's own scratch folder; claiming the run sweeps what a crash left there.
        scratch = None if claim.generation == 0 else store.scratch_dir(view.info.run_id)
        # A crashed owner's commands die before anything is decided about their calls.
        self.killed_leftovers = kill_leftovers(scratch) if scratch is not None else []
        self.workspace = workspace.for_run(scratch)
        self.processes = ProcessNotes(scratch)
        self.registry = registry
        self.history: list[Message] = list(view.history)
        self.ledger: dict[str, ToolLedgerEntry] = dict(view.ledger)
        self.patches: list[FilePatchEntry] = list(view.patches)
        self.blobs: dict[str, Blob] = dict(view.blobs)
        self.decisions: dict[str, CallDecision] = dict(view.decisions)
        self.probes: dict[str, ProbeResult] = {}
        self._attempts = attempts(view.ledger_entries)
        self.message_records: dict[int, Message] = dict(view.message_records)
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
        self._seq = view.last_seq
        self._buffer: list[LogRecord] = []
        self.files = FileChanges(self)
        self.conflicts: dict[str, CheckpointConflict] = dict(view.conflicts)
        self.befores: dict[str, list[FileBeforeState]] = {k: list(v) for k, v in view.befores.items()}
        self.abandoned: dict[str, int] = dict(view.abandoned)
        self.restores = len(view.restores)
        self.checkpoints: dict[str, Checkpoint] = {
            at.checkpoint.checkpoint_id: at.checkpoint for at in view.checkpoints
        }
        self.git_dir = find_git_dir(self.workspace.root)
        self._trace: list[bytes] = []
        self._capture: CommandCapture | None = None
        self._capture_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self.capture_exclude: tuple[str, ...] = workspace.exclude  # patterns a capture never looks at
        self.closed = False
        self.restart = RestartState(self)
        self._beater: threading.Thread | None = None
        self._busy = 0
        self._stop_beating = threading.Event()
        self._start_heartbeat()
        self.durable_history_len = len(self.history)  # what a restart checkpoint may point into
        self.control_seen: dict[int, ControlSeen] = dict(view.control_seen)
        if watch and not self.read_only and any(registry.get(n).captures_workspace for n in registry.names()):
            # Watch from the start, so the user's edits before the first command are learnt, not blamed on it.
            self.capture()

    # opening ----------------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls, store: Store, info: RunInfo, workspace: Workspace, registry: ToolRegistry, *, holder: str = ""
    ) -> RunSession:
        store.create_run(info.run_id, _encoder.encode(info))
        identity = RecoveryIdentity(
            recovery_class=info.recovery_class,
            owner_id=info.owner_id,
            agent_id=info.run_id,
            message_id=f"{info.parent_run_id}#{info.parent_call_id}" if info.parent_call_id else None,
        )
        claim = store.claim(info.run_id, holder or holder_id(), identity=identity)
        session = cls(store, claim, RunView(info=info), workspace, registry)
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
    ) -> RunSession:
        """Claim the run (its only writer from now on), or with ``read_only`` just read it: a read-only session
        holds generation 0, so any write it attempted would be refused, and it leaves the run's scratch alone.
        ``watch=False`` skips the workspace watch for a session that runs no commands (a rollback, a resolve).
        ``claim``: one restart recovery already took (it judged the run before claiming it)."""
        if read_only:
            view = load_view(store, run_id)
            return cls(store, Claim(run_id=run_id, holder="reader", generation=0), view, workspace, registry)
        if claim is None:
            claim = store.claim(run_id, holder or holder_id(), takeover=takeover, reopen=reopen)
        try:
            view = load_view(store, run_id)
        except BaseException:
            store.release(claim)
            raise
        return cls(store, claim, view, workspace, registry, watch=watch)

    @property
    def read_only(self) -> bool:
        return self.claim.generation == 0

    def capture(self) -> CommandCapture:
        """The workspace change capture, started at the first call that needs it (its baseline scan costs)."""
        if self._capture is None:
            from safepoint.engine.command_capture import CommandCapture

            self._capture = CommandCapture(self, exclude=self.capture_exclude)
        return self._capture

    def close(self) -> None:
        self._stop_beating.set()
        if self._capture is not None:
            self._capture.close()
            self._capture = None
        if not self.closed:
            self.closed = True
            if not self.read_only:
                self.flush_trace()
                self.store.release(self.claim)

    # records ----------------------------------------------------------------------------------------------
    def _add(self, body: msgspec.Struct) -> int:
        self._seq += 1
        self._buffer.append(
            LogRecord(
                kind=RECORD_KINDS[type(body)],
                body=msgspec.Raw(_encoder.encode(body)),
                seq=self._seq,
                gen=self.claim.generation,
            )
        )
        return self._seq

    def commit(self, *, durable: bool = True) -> None:
        if not self._buffer:
            return
        records, self._buffer = self._buffer, []
        try:
            self.store.append(self.claim, records, durable=durable)
        except StoreError:
            self._seq -= len(records)
            raise
        if durable:
            self.durable_history_len = len(self.history)
        if len(self._trace) >= TRACE_BATCH:
            self.flush_trace()

    @contextlib.contextmanager
    def heartbeats(self) -> Iterator[None]:
        """Marks a stretch of work (a tool, a model call). The heartbeat itself comes from one thread per open
        session, every ``HEARTBEAT_SECONDS``, busy or not: an own loop thinking between two calls is as alive as
        one running a tool, and a supervisor's reaper must not take either for dead."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    def _start_heartbeat(self) -> None:
        if self.read_only or self._beater is not None:
            return
        self._beater = threading.Thread(target=self._beat, name=f"heartbeat-{self.info.run_id}", daemon=True)
        self._beater.start()

    def _beat(self) -> None:
        while not self._stop_beating.wait(HEARTBEAT_SECONDS):
            if self.closed:
                return
            try:
                self.store.heartbeat(self.claim)
            except StaleGenerationError:
                return  # fenced off: the next write says so, in the thread that can act on it
            except Exception:
                continue

    def trace(self, event: str, **data: Any) -> None:
        self._trace.append(_encoder.encode({"event": event, "at": now(), "run_id": self.info.run_id, "data": data}))

    def flush_trace(self) -> None:
        if self._trace:
            lines, self._trace = self._trace, []
            self.store.trace(self.info.run_id, lines)

    def event(self, status: RunStatus, detail: str = "") -> None:
        self._add(RunEvent(status=status, at=now(), detail=detail, generation=self.claim.generation))
        self.trace(f"run_{status}", detail=detail)
        self.commit()

    def decide(self, call_id: str, decision: str, by: str = "user") -> None:
        record = CallDecision(
            call_id=call_id,
            decision=decision,  # type: ignore[arg-type]
            at=now(),
            by=by,
            attempt=self.attempts(call_id),
        )
        self.decisions[call_id] = record
        self._add(record)

    def add_message(self, role: Role, content: str, **fields: Any) -> Message:
        message = Message(seq=len(self.history), role=role, content=content, **fields)
        self.history.append(message)
        self.message_records[self._add(message)] = message
        return message

    def rewind(self, history_len: int, checkpoint_id: str, reason: str, abandoned: tuple[str, ...] = ()) -> None:
        self.history = self.history[:history_len]
        self._add(
            Rewind(history_len=history_len, checkpoint_id=checkpoint_id, reason=reason, at=now(), abandoned=abandoned)
        )
        if reason == "restore_session":
            self.restores += 1  # the branch number: the calls repeated on it get new ids
            for call_id in abandoned:
                self.abandoned.setdefault(call_id, self.restores)

    def checkpoint(self, kind: CheckpointKind) -> Checkpoint:
        checkpoint = Checkpoint(
            # Named by its place in the log: unique even when damaged checkpoints could not be counted.
            checkpoint_id=f"ckpt_{self._seq + 1:06d}",
            run_id=self.info.run_id,
            step=self.step,
            kind=kind,
            created_at=now(),
            history_len=len(self.history),
            ledger_seq=self._seq,
            model=self.model,
            model_config=self.model_config,
            pending_tool_calls=tuple(call.call_id for call in self.pending),
            next_turn=self.next_turn,
            patches_len=len(self.patches),
            git_head=read_head(self.git_dir) if self.git_dir else None,
        )
        self._add(checkpoint)
        self.checkpoints[checkpoint.checkpoint_id] = checkpoint
        self.trace("checkpoint", checkpoint_id=checkpoint.checkpoint_id, kind=kind, step=self.step)
        return checkpoint

    # content ----------------------------------------------------------------------------------------------
    def put_content(self, data: bytes, digest: str | None = None) -> str:
        digest = digest or content_hash(data)
        if digest not in self.blobs:
            blob = make_blob(data, digest)
            self.blobs[digest] = blob
            self._add(blob)
        return digest

    def add_record(self, body: msgspec.Struct) -> int:
        """Append a record to the pending group (made durable by the next ``commit``)."""
        if isinstance(body, ControlSeen):
            self.control_seen[body.position] = body
        return self._add(body)

    @staticmethod
    def clock() -> str:
        return now()

    def registry_internal(self, tool: Tool) -> None:
        self.registry.put(tool)

    def content(self, digest: str) -> bytes:
        blob = self.blobs.get(digest)
        if blob is None:
            raise StoreError(f"content {digest} is not stored in run {self.info.run_id!r}")
        return open_blob(blob)

    def save_artifact(self, name: str, data: bytes) -> str:
        return self.store.put_artifact(self.claim, name, data)

    def load_result(self, ref: str | None) -> str:
        if ref and ref.startswith("blob:") and ref[5:] in self.blobs:
            return self.content(ref[5:]).decode(errors="replace")
        return load_result(self.message_records, ref)

    # one tool call ----------------------------------------------------------------------------------------
    def context_for(self, call: ToolCall, step_id: str) -> ToolContext:
        return ToolContext(
            run_id=self.info.run_id,
            call_id=call.call_id,
            step_id=step_id,
            idempotency_key=idempotency_key(self.info.run_id, call.call_id),
            workspace=self.workspace,
            save_artifact=self.save_artifact,
            processes=self.processes,
            before_hashes={state.path: state.before_hash for state in self.befores.get(call.call_id, ())},
        )

    def _ledger(self, entry: ToolLedgerEntry, *, logged_input: dict[str, Any] | None = None) -> None:
        previous = self.ledger.get(entry.call_id)
        check_transition(previous, entry)
        if entry.status == "started":
            self._attempts[entry.call_id] = self.attempts(entry.call_id) + 1
        self.ledger[entry.call_id] = entry
        # The input is logged once, with the first entry of a call; later states inherit it (see core.ledger.fold).
        logged = {} if previous is not None else (entry.input if logged_input is None else logged_input)
        self._add(entry if logged is entry.input else msgspec.structs.replace(entry, input=logged))

    def _tool_message(self, call: ToolCall, text: str) -> tuple[Message, str]:
        """The observation, and the ref the ledger keeps as ``result_ref``: the result is stored once, here. An
        internal call's result is kept as a blob instead: the model never asked for it."""
        if call.tool in self.registry and self.registry.get(call.tool).internal:
            digest = self.put_content(text.encode())
            return Message(
                seq=-1, role="tool", content=text, tool_call_id=call.call_id, name=call.tool
            ), f"blob:{digest}"
        message = self.add_message("tool", text, tool_call_id=call.call_id, name=call.tool)
        return message, f"log:{self._seq}"

    def drive_call(self, call: ToolCall, step_id: str) -> CallDriver:
        """Carry one call through the ledger; yields once if the tool must run. Returns its tool message.

        A call the ledger knows is decided from its entry first: taking a recorded outcome or reporting an
        uncertain one needs no tool, so a tool missing at resume never turns a possible payment into an error.
        """
        existing = self.ledger.get(call.call_id)
        tool = self.registry.get(call.tool) if call.tool in self.registry else None
        if existing is None:
            if tool is None:
                return self._refuse_unknown(call, step_id, str(self.registry.unknown(call.tool)))
            befores = self.files.before(call.call_id, tool.writes(call.args)) if tool.writes else []
            planned = self._plan(tool, call, step_id, befores)
        else:
            if existing.input_hash != input_hash(call.args) or existing.tool_name != call.tool:
                raise ResumeError(
                    f"call id {call.call_id!r} is recorded for another call ({existing.tool_name} with other input); "
                    "give every distinct tool call its own call id"
                )
            decision = self.replay_decision(existing)
            if decision.action == "take_outcome":
                return self._take_outcome(call, existing, decision)
            if decision.action in ("skip", "report_uncertain"):
                return self._report_uncertain(call, existing, decision)
            if decision.action == "wait_decision":
                raise DecisionNeeded(f"call {call.call_id} ({call.tool}) needs a decision: {decision.why}")
            if tool is None:
                raise ResumeError(
                    f"call {call.call_id} must run ({decision.why}) but tool {call.tool!r} is not registered; "
                    "resume with the same tools (--tools MODULE:ATTR)"
                )
            if existing.status == "started":
                self._ledger(msgspec.structs.replace(existing, status="uncertain"))
            planned = self.ledger[call.call_id]
            befores = self.files.before(call.call_id, tool.writes(call.args)) if tool.writes else []
        if needs_approval(self, planned, tool.needs_approval):
            self.checkpoint("tool_start")  # a restart resumes this call's wait, not the model's turn
            self.commit()  # `safepoint approve` reads the call's input hash from the ledger
            answer = yield AwaitApproval(call, planned)
            assert isinstance(answer, ApprovalOutcome)
            if not answer.approved:
                return self._refused(call, planned, answer.why)
            planned = msgspec.structs.replace(planned, status="approved", decision=answer.why)
            self._ledger(planned)
            self.commit()  # the approval is durable before anything is dispatched
            # Before `started`: a restart that finds the flag knows the call may have gone out and waits for
            # nothing; the ledger's `started` (durable next) is what decides whether it runs again.
            self.restart.write(msgspec.structs.replace(answer.wait, dispatched_before_restart=True))
        ctx = self.context_for(call, step_id)
        failpoints.hit("before_started", call.tool)
        if tool.captures_workspace:
            hints = tool.capture_hints(call.args) if tool.capture_hints else ()
            self.capture().before_command(hints)  # the user's changes so far are settled, not blamed on the command
        started = msgspec.structs.replace(planned, status="started", started_at=now())
        self._ledger(started)
        self.checkpoint("tool_start")
        self.commit()  # durable: the ledger says `started` before the tool runs
        self.trace("tool_started", call_id=call.call_id, tool=call.tool)
        failpoints.hit("after_started", call.tool)
        outcome = yield Invocation(tool, ctx, call.args)
        assert isinstance(outcome, Outcome)
        failpoints.hit("after_tool", call.tool)
        self.files.after(call.call_id, befores)
        if tool.captures_workspace:
            self.capture().after_command(call.call_id)
        status: LedgerStatus = "succeeded" if outcome.ok else "failed"
        message, ref = self._tool_message(call, outcome.text if outcome.ok else f"error: {outcome.text}")
        self._ledger(
            msgspec.structs.replace(
                started,
                status=status,
                finished_at=now(),
                result_ref=ref,
                error=None if outcome.ok else outcome.text[:500],
            )
        )
        self._finish_pending(call)
        self.trace("tool_finished", call_id=call.call_id, status=status)
        failpoints.hit("after_outcome", call.tool)
        return message

    def _plan(self, tool: Tool, call: ToolCall, step_id: str, befores: list[FileBefore]) -> ToolLedgerEntry:
        found = tool.classify(call.args)
        planned = ToolLedgerEntry(
            call_id=call.call_id,
            step_id=step_id,
            tool_name=tool.name,
            input_hash=input_hash(call.args),
            status="planned",
            risk_level=found.risk_level,
            idempotency=found.idempotency,
            replay_policy=found.replay_policy,
            side_effects=found.side_effects,
            run_id=self.info.run_id,
            input=call.args,
            idempotency_key=idempotency_key(self.info.run_id, call.call_id),
            planned_at=now(),
            compensates=str(call.args.get("ledger_entry_id")) if tool.compensates else None,
        )
        self._ledger(planned, logged_input=self._compact_input(tool, call.args, befores))
        return planned

    def _compact_input(self, tool: Tool, args: dict[str, Any], befores: list[FileBefore]) -> dict[str, Any]:
        """A file writer's new content is logged as a patch against the file's before-state, so 100 one-line edits
        of a large file cost 100 small patches here too (the file patch recorded after it is the same bytes)."""
        value = args.get(tool.content_arg) if tool.content_arg else None
        if not isinstance(value, str) or len(value) < COMPACT_BYTES or len(befores) != 1:
            return args
        before = befores[0]
        if before.content is None:
            return args
        patch = self.files.patch(before, value.encode())
        return {**args, tool.content_arg: {"$patch": f"blob:{patch}", "base": before.hash}}  # type: ignore[dict-item]

    def call_input(self, entry: ToolLedgerEntry) -> dict[str, Any]:
        """A call's input as it was given (a compacted content argument is rebuilt from its patch)."""
        expanded = dict(entry.input)
        for key, value in entry.input.items():
            if isinstance(value, dict) and set(value) == {"$patch", "base"}:
                base = self.files.version(key, str(value["base"]))
                expanded[key] = apply_patch(base, self.content(str(value["$patch"]).removeprefix("blob:"))).decode()
        return expanded

    def _finish_pending(self, call: ToolCall) -> None:
        """The call is settled: it leaves the pending list, and the tool-end checkpoint makes that durable."""
        self.pending = [p for p in self.pending if p.call_id != call.call_id]
        self.checkpoint("tool_end")
        self.commit()

    def attempts(self, call_id: str) -> int:
        """How many times the call was started (a decision applies to one attempt only)."""
        return self._attempts.get(call_id, 0)

    def probe(self, entry: ToolLedgerEntry) -> ProbeResult | None:
        """Ask the tool's probe, once per resume, whether an uncertain call's effect already happened."""
        if entry.call_id in self.probes:
            return self.probes[entry.call_id]
        tool = self.registry.get(entry.tool_name) if entry.tool_name in self.registry else None
        if tool is None or tool.probe is None or entry.status not in ("started", "uncertain"):
            return None
        args = self.call_input(entry)
        ctx = self.context_for(ToolCall(call_id=entry.call_id, tool=entry.tool_name, args=args), entry.step_id)
        try:
            result = tool.probe(ctx, args)
        except Exception:  # a probe that cannot tell is "unknown", never a reason to re-run
            result = "unknown"
        self.probes[entry.call_id] = result
        return result

    def current_decision(self, call_id: str) -> CallDecision | None:
        decision = self.decisions.get(call_id)
        if decision is None or decision.attempt != self.attempts(call_id):
            return None  # made for an earlier attempt: a new crash needs a new decision
        return decision

    def replay_decision(self, entry: ToolLedgerEntry) -> ReplayDecision:
        settled = settle_after_crash(entry)
        decision = self.current_decision(entry.call_id)
        probe = self.probe(entry) if decision is None and settled.status == "uncertain" else None
        return decide_replay(settled, decision=decision, probe=probe)

    def _take_outcome(self, call: ToolCall, entry: ToolLedgerEntry, decision: ReplayDecision) -> Message:
        if entry.status not in ("succeeded", "failed"):
            # Settled by its probe: the effect is in place, so the call counts as done; its file changes are
            # recorded against the before-state kept when it started.
            if entry.status == "started":
                self._ledger(msgspec.structs.replace(entry, status="uncertain"))
                entry = self.ledger[call.call_id]
            self.files.after(call.call_id, self.files.before(call.call_id, ()))
            text = f"[safepoint] this call was interrupted, but its effect is in place ({decision.why})."
            message, ref = self._tool_message(call, text)
            self._ledger(
                msgspec.structs.replace(entry, status="succeeded", finished_at=now(), result_ref=ref, decision="probe")
            )
        else:
            # Finished before the crash: the recorded observation, never a second run (promise 3), and never a
            # second copy of it on the branch.
            on_branch = next((m for m in self.history if m.role == "tool" and m.tool_call_id == call.call_id), None)
            message = on_branch or self._tool_message(call, self.load_result(entry.result_ref))[0]
        self._finish_pending(call)
        return message

    def _report_uncertain(self, call: ToolCall, entry: ToolLedgerEntry, decision: ReplayDecision) -> Message:
        if entry.status == "started":
            self._ledger(msgspec.structs.replace(entry, status="uncertain", decision=decision.action))
        if decision.action == "skip":
            reason = "a person chose not to run it again"
        else:
            reason = f"it is {entry.idempotency} with replay policy {entry.replay_policy}: never repeated automatically"
        message, _ = self._tool_message(
            call,
            f"[safepoint] {call.tool}({call.call_id}) started before an interruption and no outcome was recorded. "
            f"It was NOT run again: {reason}. Its effect may or may not have happened; check before relying on it "
            "and do not simply call it again.",
        )
        self._finish_pending(call)
        return message

    def _refused(self, call: ToolCall, planned: ToolLedgerEntry, why: str) -> Message:
        """A call a person denied, or that nobody approved in time: it never ran, and the model is told why."""
        message, ref = self._tool_message(call, f"error: not run: {why}")
        self._ledger(
            msgspec.structs.replace(
                planned, status="failed", finished_at=now(), result_ref=ref, error=f"not run: {why}", decision=why
            )
        )
        self._finish_pending(call)
        return message

    def refuse(self, call: ToolCall, step_id: str, why: str) -> Message:
        """Record a call that must not run (a tool nobody registered, or one not granted): failed, never started."""
        if call.call_id in self.ledger:
            return self.execute(call, step_id)  # decided already (a resume): its recorded outcome stands
        return self._refuse_unknown(call, step_id, why)

    def _refuse_unknown(self, call: ToolCall, step_id: str, why: str) -> Message:
        entry = ToolLedgerEntry(
            call_id=call.call_id,
            step_id=step_id,
            tool_name=call.tool,
            input_hash=input_hash(call.args),
            status="planned",
            risk_level="high",
            idempotency="non_idempotent",
            replay_policy="never",
            run_id=self.info.run_id,
            input=call.args,
            planned_at=now(),
        )
        self.pending = [p for p in self.pending if p.call_id != call.call_id]
        message, ref = self._tool_message(call, f"error: {why}")
        if call.call_id not in self.ledger:
            self._ledger(entry)
            self._ledger(msgspec.structs.replace(entry, status="failed", finished_at=now(), error=why, result_ref=ref))
        return message

    def execute(self, call: ToolCall, step_id: str) -> Message:
        if call.tool in self.registry and self.registry.get(call.tool).is_async and _loop_running():
            raise SafepointError(f"{call.tool} is an async tool and an event loop runs: use `await run.acall(...)`")
        driver = self.drive_call(call, step_id)
        try:
            request = next(driver)
            while True:
                if isinstance(request, AwaitApproval):
                    request = driver.send(wait_for_approval(self, request))
                else:
                    with self.heartbeats():
                        request = driver.send(run_tool_sync(request))
        except StopIteration as done:
            result: Message = done.value
            return result

    async def aexecute(self, call: ToolCall, step_id: str) -> Message:
        tool = self.registry.get(call.tool) if call.tool in self.registry else None
        if tool is not None and tool.captures_workspace:
            # Two commands running at once could not be told apart in the workspace: they take turns.
            loop = asyncio.get_running_loop()
            turn = self._capture_turns.setdefault(loop, asyncio.Lock())  # a lock belongs to one event loop
            async with turn:
                return await self._aexecute(call, step_id)
        return await self._aexecute(call, step_id)

    async def _aexecute(self, call: ToolCall, step_id: str) -> Message:
        driver = self.drive_call(call, step_id)
        try:
            request = next(driver)
            while True:
                if isinstance(request, AwaitApproval):
                    request = driver.send(await asyncio.to_thread(wait_for_approval, self, request))
                else:
                    with self.heartbeats():
                        request = driver.send(await run_tool_async(request))
        except StopIteration as done:
            result: Message = done.value
            return result


def load_view(store: Store, run_id: str) -> RunView:
    info = msgspec.json.decode(store.run_header(run_id), type=RunInfo)
    return build_view(info, store.read_log(run_id))


def load_result(message_records: dict[int, Message], ref: str | None) -> str:
    """A call's recorded observation: ``log:N`` names the log record of its tool message. A record lost to
    damage is said so, never re-created by running the call again (promise 8)."""
    if not ref:
        return ""
    message = message_records.get(int(ref[4:])) if ref.startswith("log:") and ref[4:].isdigit() else None
    if message is None:
        return (
            f"[safepoint] this call finished, but its recorded output ({ref}) was lost to damage in the run's log; "
            "it was not run again"
        )
    return message.content


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def holder_id() -> str:
    return f"pid{os.getpid()}-{uuid.uuid4().hex[:8]}"
