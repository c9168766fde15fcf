"""The agent loop (model -> tool calls -> ledgered execution -> observations) and resume (§8.6, all eight steps)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from safepoint.agent.context import RECOVERY_NOTE, build_context
from safepoint.agent.subagents import SPAWN_SUBAGENT, subagent_tool
from safepoint.core.note import recovery_note
from safepoint.core.resume import CallReport, ResumePlan, expected_files, pending_calls, plan_resume, recent_calls
from safepoint.engine import failpoints, shutdown
from safepoint.engine.session import RunSession
from safepoint.errors import DecisionNeeded, Interrupted, ResumeError, RunCancelled, ToolFailure, WorkVoided
from safepoint.providers.base import Provider
from safepoint.records import RunStatus, ToolCall, ToolLedgerEntry
from safepoint.restart import inbox


class VisibleStream:
    """Streams a turn's text to the user; before the first character goes out, the restart checkpoint says so
    durably (``visible_output_started``): a restart must then not generate the turn again (seed 003 §4.1)."""

    def __init__(self, session: RunSession, turn: int, sink: Callable[[str], None]) -> None:
        self.session = session
        self.turn = turn
        self.sink = sink
        self.started = False

    def text(self, chunk: str) -> None:
        if not chunk:
            return
        if not self.started:
            restart = self.session.restart
            restart.write(restart.loop_state(self.turn, visible_output_started=True))
            self.started = True
        self.sink(chunk)
        failpoints.hit("visible_output")


class Agent:
    def __init__(
        self,
        session: RunSession,
        provider: Provider,
        *,
        system: str = "",
        output: Callable[[str], None] | None = None,
        subagents: bool = True,
    ) -> None:
        self.session = session
        self.provider = provider
        self.system = system
        self.output = output  # where streamed text is shown (None: nothing is streamed to anyone)
        if subagents and SPAWN_SUBAGENT not in session.registry:
            from safepoint.providers.select import provider_for

            session.registry.put(subagent_tool(session, provider_for, output))

    def run(self) -> RunStatus:
        """Run until the model answers without tool calls (and no submission is queued). Returns the status."""
        session = self.session
        if not session.history:
            session.add_message("user", session.info.task)
        try:
            while True:
                inbox.take_controls(session)  # cancel, reset, successor, subtasks that stopped, submissions
                if shutdown.requested():
                    raise Interrupted("stopped between steps; the run resumes from here on restart")
                turn = session.next_turn
                session.step = turn + 1
                session.pending = []
                session.checkpoint("before_step")
                failpoints.hit("before_step")
                overrides = inbox.overrides(session)
                context = build_context(
                    session.history,
                    system=overrides.system(self.system),
                    tools=[d for d in session.registry.definitions() if overrides.allows(d.name, session)],
                )
                if overrides.requested_model and hasattr(self.provider, "model"):
                    self.provider.model = overrides.requested_model
                    session.model = overrides.requested_model
                stream = VisibleStream(session, turn, self.output) if self.output is not None else None
                with session.heartbeats():  # a long model call must not look like a dead owner to a reaper
                    reply = self.provider.complete(context, turn, stream)
                failpoints.hit("after_model")
                calls = [_on_this_branch(session, call) for call in reply.tool_calls]
                session.add_message("assistant", reply.text, tool_calls=tuple(calls), turn=turn)
                session.next_turn = turn + 1
                session.pending = list(calls)
                if stream is not None and stream.started and calls:
                    # The user saw this turn: a resume continues from it, its calls pending, and never asks the
                    # model for it again. Durable before the flag that guards it is cleared.
                    session.checkpoint("tool_start")
                    session.commit()
                if not calls:
                    session.checkpoint("after_step")
                    session.commit()
                    if inbox.has_submissions(session):
                        continue  # queued input: the conversation goes on
                    session.event("completed", reply.text[:200])
                    session.restart.delete()
                    return "completed"
                session.restart.write(session.restart.loop_state(turn))
                for call in calls:
                    if not overrides.allows(call.tool, session):
                        session.refuse(
                            call,
                            f"step_{session.step}",
                            f"tool {call.tool!r} is not granted to this run now (not in its grants, or they expired)",
                        )
                        continue
                    session.execute(call, f"step_{session.step}")
                session.checkpoint("after_step")
                session.commit()
                failpoints.hit("after_step")
                session.flush_trace()
        except DecisionNeeded as exc:
            session.event("waiting_decision", str(exc))
            return "waiting_decision"
        except RunCancelled as exc:
            inbox.close_cancelled(session, exc)
            return "cancelled"
        except WorkVoided as exc:
            inbox.close_voided(session, exc)
            return "closed"
        except Interrupted as exc:
            session.commit()
            session.event("interrupted", str(exc))
            return "interrupted"


def _on_this_branch(session: RunSession, call: ToolCall) -> ToolCall:
    """After restore_session, a call id the model repeats from the abandoned branch is a new call on this one (a
    scripted model repeats its ids; a real one makes new ones): it is not mistaken for the old call's outcome."""
    if call.call_id not in session.abandoned:
        return call
    return ToolCall(call_id=f"{call.call_id}~b{session.restores}", tool=call.tool, args=call.args)


def _left_behind(session: RunSession) -> list[ToolLedgerEntry]:
    """The calls a restore_session just left on the abandoned branch (when that restore is what is resumed)."""
    events = session.view.events
    if not session.view.restores or not events or not events[-1].detail.startswith("session restored"):
        return []
    return [session.ledger[c] for c in session.view.restores[-1].abandoned if c in session.ledger]


@dataclass(frozen=True)
class Recovery:
    plan: ResumePlan
    note: str


def workspace_hashes(session: RunSession) -> dict[str, str | None]:
    hashes = {}
    for path in expected_files(session.view):
        try:
            hashes[path] = session.workspace.hash(path)
        except ToolFailure:
            hashes[path] = None
    return hashes


def prepare_resume(session: RunSession, *, replay: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> ResumePlan:
    """Steps 1-3 and 5-6: checkpoint, integrity, workspace, last calls, replay decisions (nothing runs yet)."""
    for call_id, choice in [(c, "replay") for c in replay] + [(c, "skip") for c in skip]:
        entry = session.ledger.get(call_id)
        if entry is None:
            raise ResumeError(f"call {call_id!r} is not in run {session.info.run_id!r}; see `safepoint ledger`")
        if entry.status == "uncertain":
            raise ResumeError(
                f"call {call_id!r} was already reported to the model as uncertain and is no longer pending; "
                "the model decides whether to call it again"
            )
        if entry.status != "started":
            raise ResumeError(f"call {call_id!r} is {entry.status}, not uncertain: there is nothing to decide")
        session.decide(call_id, choice)
    probes = {}
    for call_id, entry in session.ledger.items():
        if entry.status == "started" and session.current_decision(call_id) is None:
            found = session.probe(entry)
            if found is not None:
                probes[call_id] = found
    return plan_resume(
        session.view,
        decisions={call_id: d for call_id, d in session.decisions.items() if session.current_decision(call_id)},
        probes=probes,
        workspace_hashes=workspace_hashes(session),
    )


def restore(session: RunSession, plan: ResumePlan) -> Recovery:
    """Steps 4, 7 and 8: restore history and state, settle the interrupted calls, inject the recovery note."""
    at = plan.resume_from
    if at is None:
        if session.history:
            session.rewind(0, "", "no complete checkpoint")
        session.add_message("user", session.info.task)  # the run starts over: the model needs its task first
        session.step, session.next_turn, session.pending = 0, 0, []
    else:
        checkpoint = at.checkpoint
        if session.history != at.history:
            session.rewind(checkpoint.history_len, checkpoint.checkpoint_id, "resume from checkpoint")
            session.history = list(at.history)
        session.step = checkpoint.step
        session.next_turn = checkpoint.next_turn
        session.pending = pending_calls(at.history, checkpoint.pending_tool_calls)
        if len(session.pending) != len(checkpoint.pending_tool_calls):
            raise ResumeError(
                f"checkpoint {checkpoint.checkpoint_id} names pending calls its history lacks; the run's log is damaged"
            )
        session.model = checkpoint.model
        session.model_config = dict(checkpoint.model_config)
    session.event("running", f"resumed: {plan.why}")
    step_id = f"step_{session.step}"
    for call in list(session.pending):
        session.execute(call, step_id)
    # The note tells what actually happened: each call as the ledger has it now, with the decision taken.
    left = _left_behind(session)
    recent = [
        CallReport(session.ledger.get(r.entry.call_id, r.entry), r.decision)
        for r in recent_calls(plan)
        if r.entry.call_id not in {entry.call_id for entry in left}
    ]
    summaries = {r.entry.call_id: session.load_result(r.entry.result_ref)[:300] for r in recent if r.entry.result_ref}
    restored = (session.view.restores[-1].checkpoint_id, left) if left else None
    note = recovery_note(plan, recent, summaries, restored=restored)
    session.add_message("system", note, name=RECOVERY_NOTE)
    # No after-step checkpoint here: the interrupted step ends when its loop says so, not when resume does.
    session.commit()
    session.trace("recovery_note", checkpoint_id=at.checkpoint.checkpoint_id if at else None)
    return Recovery(plan, note)
