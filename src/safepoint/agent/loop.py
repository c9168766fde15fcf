"""Running an agent: the loop (model -> tool calls -> ledgered execution -> observations), resuming a run
(judge, claim, then ``agent.resume``'s steps), and how a subagent's run is started or resumed.

``agent.subagents`` holds the spawn tool; it is handed ``Children`` (this module's ``AgentChildren``) instead of
importing the loop, so the three modules import one way: loop -> resume, subagents.
"""

from __future__ import annotations

from collections.abc import Callable

from safepoint.agent.context import ContextBuilder
from safepoint.agent.resume import Recovery, prepare_resume, restore
from safepoint.agent.subagents import SPAWN_SUBAGENT, subagent_tool
from safepoint.core.nesting import UNFIT, arguments_problem
from safepoint.core.resume import check_decisions, last_completed_step, lost_beginning, model_call_id
from safepoint.core.run_view import RunView
from safepoint.engine import actions, decision_choices, failpoints, shutdown
from safepoint.engine.session import RunSession, holder_id, load_view
from safepoint.engine.tools import ToolRegistry
from safepoint.errors import (
    DamagedLogError,
    DecisionNeeded,
    Interrupted,
    RecoveryClosedError,
    ResumeError,
    ResumeOptionError,
    RunCancelled,
    WorkVoided,
)
from safepoint.providers.base import Provider
from safepoint.providers.select import provider_for
from safepoint.records import RunStatus, ToolCall
from safepoint.report import closed_words, log_ends_as_read
from safepoint.restart import approvals, inbox
from safepoint.restart.checkpoint import loop_state
from safepoint.restart.doubt import doubt_of
from safepoint.restart.judge import close_after_restart, judge, report_of
from safepoint.store.base import Store
from safepoint.workspace.files import Workspace

__all__ = ["Agent", "AgentChildren", "Recovery", "VisibleStream", "resume_session"]


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
            self.session.restart.write(loop_state(self.session, self.turn, visible_output_started=True))
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
        self.context = ContextBuilder()  # follows the history: a turn's context costs what the last turn added
        approvals.attach(session)  # a high-risk call waits for `safepoint approve`
        if subagents and SPAWN_SUBAGENT not in session.registry:
            session.registry.put(subagent_tool(session, provider_for, AgentChildren(output)))

    def run(self) -> RunStatus:
        """Run until the model answers without tool calls (and no submission is queued). Returns the status."""
        session = self.session
        if not session.history:
            session.add_message("user", session.info.task)
        try:
            while True:
                inbox.take_controls(session)  # cancel, reset, successor, subtasks that stopped, submissions
                if shutdown.requested():
                    raise Interrupted(f"{shutdown.why()}: stopped between steps; the run resumes from here on restart")
                turn = session.next_turn
                session.begin_turn(turn)
                failpoints.hit("before_step")
                overrides = inbox.overrides(session)
                context = self.context.build(
                    session.history,
                    system=overrides.system(self.system),
                    tools=[d for d in session.registry.definitions() if overrides.allows(d.name, session)],
                )
                if overrides.requested_model and hasattr(self.provider, "model"):
                    self.provider.model = overrides.requested_model
                    session.model = overrides.requested_model
                stream = VisibleStream(session, turn, self.output) if self.output is not None else None
                reply = self.provider.complete(context, turn, stream)  # the heartbeat thread beats meanwhile
                failpoints.hit("after_model")
                calls = [_fit(_on_this_branch(session, call)) for call in reply.tool_calls]
                session.answered(_plain_text(reply.text), calls, turn)
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
                session.restart.write(loop_state(session, turn))
                for call in calls:
                    if shutdown.requested():
                        # A safe point between two calls: those not started stay pending in the restart checkpoint
                        # and the tool-end checkpoint; the next start runs them.
                        raise Interrupted(f"{shutdown.why()}: stopped before call {call.call_id}; it runs on restart")
                    if not overrides.allows(call.tool, session):
                        session.runner.refuse(
                            call,
                            f"step_{session.step}",
                            f"tool {call.tool!r} is not granted to this run now (not in its grants, or they expired)",
                        )
                        continue
                    session.runner.execute(call, f"step_{session.step}")
                session.checkpoint("after_step")
                session.commit()
                failpoints.hit("after_step")
                session.log.end_of_step()  # the step's trace, written now when it changed something
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


def _fit(call: ToolCall) -> ToolCall:
    """The model's call as it can be recorded: the reply is logged before any call runs, and arguments no encoder
    takes (nested thousands deep, a lone surrogate) would end the run there, and every resume of it. They are
    recorded as why they were unfit, which the call runner refuses in words (and again on a resume)."""
    why = arguments_problem(call.args)
    return ToolCall(
        call_id=_plain_text(call.call_id),
        tool=_plain_text(call.tool),
        args=call.args if why is None else {UNFIT: why},
    )


def _plain_text(text: str) -> str:
    """A model's text as valid Unicode: a lone surrogate (which JSON lets through) becomes U+FFFD, not a crash of
    the log's encoder."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode(errors="surrogatepass").decode(errors="replace")
    return text


def _on_this_branch(session: RunSession, call: ToolCall) -> ToolCall:
    """After restore_session, a call id the model repeats from the abandoned branch is a new call on this one (a
    scripted model repeats its ids; a real one makes new ones): it is not mistaken for the old call's outcome."""
    if (call_id := model_call_id(call.call_id)) != call.call_id:  # never an id of safepoint's own calls
        call = ToolCall(call_id=call_id, tool=call.tool, args=call.args)
    if call.call_id not in session.abandoned:
        return call
    return ToolCall(call_id=f"{call.call_id}~b{session.restores}", tool=call.tool, args=call.args)


class AgentChildren:
    """How the spawn tool runs a child: with this loop, streaming to the same place (``subagents.Children``)."""

    def __init__(self, output: Callable[[str], None] | None) -> None:
        self.output = output

    def run(self, child: RunSession, provider: Provider, system: str) -> RunStatus:
        return Agent(child, provider, system=system, output=self.output).run()

    def resume(
        self,
        store: Store,
        child_id: str,
        workspace: Workspace,
        registry: ToolRegistry,
        model: str,
        pass_env: tuple[str, ...] = (),
    ) -> RunSession:
        # The parent's current owner is the only one entitled to its children: any other holder is stale.
        child, _ = resume_session(store, child_id, workspace, registry, takeover=True, model=model, pass_env=pass_env)
        return child


def check_resume_options(
    store: Store,
    run_id: str,
    replay: tuple[str, ...],
    skip: tuple[str, ...],
    view: RunView | None = None,
    workspace: Workspace | None = None,
) -> None:
    """``--replay``/``--skip`` must name calls waiting for that decision (``ResumeOptionError``, exit 2); a
    ``--replay`` of a call that cannot run again (its arguments redacted or lost) is refused here too."""
    if replay or skip:
        view = view or load_view(store, run_id)
        check_decisions(view, replay, skip, frozenset(doubt_of(store, view).calls))
        for call_id, refused in decision_choices.refusals(store, view, workspace, replay).items():
            if refused:
                raise ResumeOptionError(decision_choices.replay_refused(view.ledger[call_id], refused))


def resume_session(
    store: Store,
    run_id: str,
    workspace: Workspace,
    registry: ToolRegistry,
    *,
    replay: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
    takeover: bool = False,
    model: str | None = None,
    output: Callable[[str], None] | None = None,
    pass_env: tuple[str, ...] = (),
) -> tuple[RunSession, Recovery | None]:
    """The open session and what was recovered (None: a finished run goes on with newly submitted input).

    Raises ``RecoveryClosedError`` when recovery closed the run instead (its parent, if any, is told), and
    ``DecisionNeeded`` when a call may have taken effect and a person must decide."""
    owner = store.owner(run_id)
    if owner is not None and owner.terminal_at is not None and store.read_restart_checkpoint(run_id) is None:
        # Closed, and its cleanup finished: nothing to claim, nothing to record again.
        raise RecoveryClosedError(
            f"run {run_id!r} is closed ({closed_words(store, run_id)}); it is never resumed. "
            f"See `safepoint explain {run_id}`; continue its work with `safepoint run ... --successor-of {run_id}`"
        )
    # The log is read once per resume (rejected: reading it again to judge and again to open, three whole reads).
    view = load_view(store, run_id)
    check_resume_options(
        store, run_id, replay, skip, view, workspace
    )  # before the claim: a refused option writes nothing
    if (lost := lost_beginning(view)) is not None:
        raise DamagedLogError(lost)  # before the claim too: nothing is written to a log that lost its beginning
    # Claim first, then judge under the claim: a holder fenced off now cannot change what is judged.
    claim = store.claim(run_id, holder_id(), takeover=takeover)  # a restart: the generation goes up
    try:
        if not log_ends_as_read(store, view):  # a holder appended before it was fenced off: read it again
            view = load_view(store, run_id)
        judged = judge(store, run_id, resuming_model=model, view=view)
    except BaseException:
        store.release(claim)
        raise
    if not judged.verdict.resumable:
        try:
            close_after_restart(store, claim, judged)
        finally:
            store.release(claim)
        raise RecoveryClosedError(
            f"run {run_id!r} was not resumed ({judged.verdict.summary}); it was closed "
            f"({closed_words(store, run_id)}). See `safepoint explain {run_id}`"
        )
    session = approvals.attach(
        RunSession.open(store, run_id, workspace, registry, claim=claim, takeover=takeover, view=view)
    )
    session.pass_env = pass_env  # before anything runs: a call replayed now is one of the run's commands too
    if SPAWN_SUBAGENT not in registry:  # an interrupted spawn call resumes its child while the run is restored
        session.registry.put(subagent_tool(session, provider_for, AgentChildren(output)))
    try:
        session.add_record(report_of(judged.verdict, claim.generation, "resumed"))
        session.restart.current = judged.verdict.payload  # what the wait or turn in flight goes on from
        if session.view.status == "completed":
            if inbox.has_submissions(session):
                # The conversation goes on with what was submitted since; until it finishes again it is running,
                # so a crash in between is resumed, not taken for a finished run.
                session.event("running", "resumed: new input was submitted")
                return session, None
            raise ResumeError(f"run {run_id!r} already completed; there is nothing to resume")
        actions.finish_interrupted(session)  # a rollback or resolution a crash cut short is finished first
        plan = prepare_resume(session, replay=replay, skip=skip)
        if plan.needs_decision:
            waiting = ", ".join(f"{r.entry.tool_name}({r.entry.call_id})" for r in plan.needs_decision)
            session.event("waiting_decision", waiting)
            raise decision_choices.decision_needed(
                store, session.view, workspace, [r.entry for r in plan.needs_decision]
            )
        recovery = restore(session, plan)
        # An own loop numbers its steps itself: it continues after the last completed one.
        session.step = last_completed_step(plan.resume_from.checkpoint) if plan.resume_from else 0
    except BaseException:
        session.commit()
        session.close()
        raise
    return session, recovery
