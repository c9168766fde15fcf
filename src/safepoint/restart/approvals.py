"""Waiting for a person to approve a high-risk call (seed 003 §2.1, ``RuntimeRestartToolApprovalWait``).

The wait is durable: its restart checkpoint is written when it begins and refreshed with the time left, so a
restart continues it with the remaining timeout instead of a fresh one (or none). An approval counts only for the
input it was given for: ``safepoint approve`` reads the call's ``input_hash`` from the ledger and the wait checks it.

Who decides: a command runs as the same user as safepoint, so it can write the control channel as well as
``safepoint approve`` can (the checksum is no signature, the input hash is computable). The defence is *when*:

- a decision counts only when it was posted after the wait for that call began: the channel's end at that moment
  is kept in the wait's restart checkpoint (``control_position``), so a restart keeps the same line;
- while a run waits, none of its commands' processes is alive: every command's processes die with it (its
  supervisor is a subreaper), what a command left by killing its supervisor is killed here (``Launcher.sweep``)
  before the wait begins, and a command started meanwhile by this process moves the line past what it could write;
- any tool call of this process that runs during the wait (an MCP client's second call, a Python tool, a
  subagent's) moves the line past what was written while it ran, without timing: the count of tool calls started
  and ended (``engine/tool_activity.py``) is sampled before and after each read of the channel, and a record new
  at a read counts only if that count stayed the same, with nothing running, from before the previous read to
  after this one (the whole span in which it can have been written);
- a decision found before the line is tampering: not counted, marked in the run's log (``ControlSeen`` of type
  ``tampered``), traced and said in the call's result, and kept in the channel as evidence;
- when a command killed the reaper server itself, what it left is out of reach: no decision is taken in this
  process (the call is refused, and says why).

Its limit: a process of the same user outside the run (the user's shell, a service) is trusted, as ``safepoint
approve`` itself is.
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any, Protocol

import msgspec

from safepoint.engine import failpoints, shutdown
from safepoint.engine.approval_wait import ApprovalOutcome, AwaitApproval, WaitAbandoned
from safepoint.engine.control_watch import ControlWatch
from safepoint.engine.launcher import LAUNCHER
from safepoint.engine.processes import running_groups
from safepoint.engine.restart_writer import RestartWriter, now_ms
from safepoint.engine.session import RunSession
from safepoint.engine.tool_activity import TOOLS
from safepoint.errors import Interrupted
from safepoint.protocol import Approval, ControlRecord, ControlSeen, RuntimeRestartToolApprovalWait
from safepoint.records import Claim, RunInfo, RunStatus
from safepoint.restart import stops
from safepoint.restart.judge import controls, mark_seen
from safepoint.store.base import Store
from safepoint.store.ownership import now

POLL_SECONDS = 0.05
PERSIST_SECONDS = 1.0  # how often the time left is written: a restart loses at most this much of the wait


class ApprovalHost(Protocol):
    """What a wait reads and writes of its run (a ``RunSession`` is one)."""

    store: Store
    claim: Claim
    info: RunInfo
    restart: RestartWriter
    next_turn: int
    control_seen: dict[int, ControlSeen]

    @property
    def bookkeeping(self) -> contextlib.AbstractContextManager[Any]:
        """The run's lock: the wait runs on its own thread and takes it around each write (never while it sleeps,
        reads the channel or samples ``TOOLS``), so no write of the wait lands inside a bookkeeping piece's group
        or commits half of it."""

    def event(self, status: RunStatus, detail: str = "") -> None: ...

    def add_record(self, body: msgspec.Struct) -> int: ...

    def commit(self) -> None: ...

    def trace(self, event: str, **data: Any) -> None: ...


def attach(session: RunSession) -> RunSession:
    """Let the session's calls wait for a person's approval (the engine cannot: waiting is this layer's job)."""
    session.runner.approvals = functools.partial(wait_for_approval, session)
    return session


def wait_for_approval(session: ApprovalHost, request: AwaitApproval) -> ApprovalOutcome:
    call, entry = request.call, request.entry
    swept = LAUNCHER.sweep()  # what a command left by killing its supervisor: dead before anything is decided
    if swept:
        with session.bookkeeping:
            session.trace("leftovers_killed", call_id=call.call_id, pids=swept)
    before = TOOLS.sample()
    found = controls(session.store, session.info.run_id)
    after = TOOLS.sample()
    end = max((position for position, _ in found), default=0)
    # The line: the channel's end once none of the session's commands was alive (a decision posted between the
    # call being planned and this wait is a person's: `safepoint approve` takes a planned call); the end now if a
    # command of this process started since, or the session has no watch (it runs none).
    watch = getattr(session, "processes", None)
    quiet = watch.quiet_from if isinstance(watch, ControlWatch) else end
    if LAUNCHER.launches != getattr(watch, "launches_at_quiet", LAUNCHER.launches) or running_groups():
        quiet = end
    if before != after or after.active:
        quiet = end  # a tool call ran while the channel was read: what it holds may be the call's
    prior = session.restart.current
    if (
        isinstance(prior, RuntimeRestartToolApprovalWait)
        and prior.call_id == call.call_id
        and prior.input_hash == entry.input_hash
    ):
        # A restart: the same wait goes on with the time it had left, and the same line (a wait recorded before
        # the line was kept starts it now: a decision posted while nobody waited is asked again).
        wait = prior if prior.control_position is not None else msgspec.structs.replace(prior, control_position=quiet)
    else:
        wait = RuntimeRestartToolApprovalWait(
            call_id=call.call_id,
            tool_name=entry.tool_name,
            input_hash=entry.input_hash,
            wait_started_at_ms=now_ms(),
            timeout_remaining_ms=int(session.info.approval_timeout_s * 1000),
            producer_inference_request_id=f"{session.info.run_id}/turn{session.next_turn}",
            producer_inference_attempt_id=f"{session.info.run_id}/gen{session.claim.generation}",
            control_position=min(quiet, end),
        )
    with session.bookkeeping:
        session.restart.write(wait)  # durable: the line below which no decision counts
        session.event(
            "waiting_approval",
            f"call {call.call_id} ({entry.tool_name}, {entry.risk_level} risk) waits for `safepoint approve "
            f"{session.info.run_id} {call.call_id}` ({wait.timeout_remaining_ms / 1000:.0f} s left)",
        )
    line = wait.control_position or 0
    failpoints.hit("approval_wait", entry.tool_name)
    deadline = time.monotonic() + wait.timeout_remaining_ms / 1000
    persisted = time.monotonic()
    ignored: set[int] = set()
    forged: list[str] = []
    marked = 0
    launches = LAUNCHER.launches
    previous = before  # sampled before the previous read of the channel
    while True:
        if request.stop.stopped:
            raise WaitAbandoned  # its task was cancelled: nothing more is read or taken
        before = TOOLS.sample()
        found = controls(session.store, session.info.run_id)
        after = TOOLS.sample()
        ran = after.changes != previous.changes or previous.active or after.active
        previous = before
        moved = line
        if LAUNCHER.launches != launches or running_groups() or (ran and (after.active or watch is None)):
            # A command or any other tool call of this process runs or ran during the wait (another thread's run,
            # an MCP client's concurrent call): whatever was posted meanwhile may be its. The line moves past it.
            launches = LAUNCHER.launches
            moved = max(line, *(position for position, _ in found), 0)
        elif ran and isinstance(watch, ControlWatch):
            # Every call that ran meanwhile has ended: what they wrote lies at or before the channel's end read
            # when the last one ended; a person's decision posted after that still counts.
            moved = max(line, watch.quiet_end)
        if moved != line:
            line = moved
            wait = msgspec.structs.replace(wait, control_position=line)
            with session.bookkeeping:
                session.restart.write(wait)  # a restart keeps the moved line
        stops.raise_if_stopped(session, found)  # a cancel, a reset or a successor ends the wait: nothing is sent
        for position, record in found:
            if not isinstance(record, Approval) or record.call_id != call.call_id or position in ignored:
                continue
            ignored.add(position)
            seen = session.control_seen.get(position)
            if seen is not None and seen.type == "tampered":
                forged.append(_shown(position, record))  # marked already: written while a command ran
                continue
            if seen is not None:
                continue
            if position <= line:
                forged.append(_tampered(session, position, record, call.call_id))
                continue
            if record.input_hash != entry.input_hash:
                with session.bookkeeping:
                    session.trace("approval_ignored", call_id=call.call_id, reason="input hash differs")
                continue
            if LAUNCHER.lost is not None:
                why = (
                    f"not taken: {LAUNCHER.lost} while a command ran, so what that command left may still run "
                    "and could have written this decision; no decision is taken in this process: check `ps` for "
                    f"what is left, then resume run {session.info.run_id} in a new process"
                )
                with session.bookkeeping:
                    session.trace("approval_ignored", call_id=call.call_id, reason="containment lost")
                return ApprovalOutcome(False, "denied", why, wait)
            # Taken only while the wait is still its call's; the stop's lock first, then the run's (the runner
            # stops a wait holding neither).
            with request.stop.deciding(), session.bookkeeping:
                session.add_record(mark_seen(position, record, call.call_id))
                left = max(0, int((deadline - time.monotonic()) * 1000))
                verb = "approved" if record.approved else "denied"
                why = f"{verb} by {record.by} at {record.at}" + (f": {record.reason}" if record.reason else "")
                left_wait = msgspec.structs.replace(wait, timeout_remaining_ms=left)
                return ApprovalOutcome(
                    record.approved, "approved" if record.approved else "denied", why + _said(forged), left_wait
                )
        if len(forged) > marked:
            marked = len(forged)
            with session.bookkeeping:  # the evidence is durable at once (`safepoint approve` no longer takes it)
                session.commit()
        if shutdown.requested():
            raise Interrupted(
                f"{shutdown.why()}: stopped while call {call.call_id} waited for approval; the wait resumes on restart"
            )
        expires = session.info.grant_expires_at_ms
        if expires is not None and now_ms() >= expires:
            return ApprovalOutcome(
                False,
                "grant_expired",
                "the grant this subagent runs under expired while it waited" + _said(forged),
                wait,
            )
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            timeout = session.info.approval_timeout_s
            return ApprovalOutcome(False, "timeout", f"no approval within {timeout:g} s" + _said(forged), wait)
        if time.monotonic() - persisted >= PERSIST_SECONDS:
            wait = msgspec.structs.replace(wait, timeout_remaining_ms=int(left_s * 1000))
            with session.bookkeeping:
                session.restart.write(wait)
            persisted = time.monotonic()
        time.sleep(POLL_SECONDS)


def tampered(position: int, record: ControlRecord, what: str) -> ControlSeen:
    """The log's mark on a control record that is not applied because a command of the run could have written it
    (it stays in the channel, as evidence). Its type is ``tampered``, never the record's own: a tampered
    submission must not count as absorbed (its overrides would apply)."""
    kind = type(record).__struct_config__.tag or type(record).__name__
    return ControlSeen(position=position, type="tampered", at=now(), key=f"{kind}: {what}")


def _tampered(session: ApprovalHost, position: int, record: Approval, call_id: str) -> str:
    kind = "approval" if record.approved else "denial"
    what = f"{kind} of call {call_id} written before its wait began or while a tool call ran"
    with session.bookkeeping:
        if position not in session.control_seen:  # the control watch may have marked it meanwhile, on its thread
            session.add_record(tampered(position, record, what))
            session.trace("control_tampered", call_id=call_id, position=position, type="approval", detail=what)
    return _shown(position, record)


def _shown(position: int, record: Approval) -> str:
    return f"control record {position} ({'approval' if record.approved else 'denial'} 'by {record.by}')"


def _said(forged: list[str]) -> str:
    if not forged:
        return ""
    return (
        f"; not counted: {', '.join(forged)}, written before the wait for this call began or while a tool call ran "
        "(a tool of the run could have: tampering, kept in the run's control channel as evidence)"
    )
