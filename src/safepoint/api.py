"""The library API: for the scenario runner, and for people who bring their own agent loop.

::

    sp = safepoint.open("file:.agent-runtime", workspace=".")
    with sp.start("fix the bug", tools=[send_email]) as run:      # or sp.resume(run_id, tools=[...])
        run.add_message("assistant", text)
        result = run.call("send_email", {"to": "a@b.c", "body": "hi"}, call_id=model_call_id)
        run.checkpoint()

``run.call`` writes ``started`` durably before the tool runs; called again with the same ``call_id`` after a
crash it returns the recorded result, re-runs only what its policy allows, and never repeats a non-idempotent
call. ``await run.acall(...)`` is the same for asyncio.

The handle (``Safepoint``) also holds what people do to runs: the reports (``status``, ``ledger``,
``checkpoints``, ``explain``, ``history``), the three recovery actions (``recover(run_id, RollbackFiles(...))``),
conflicts, the recovery protocol's controls (approve, deny, submit, cancel, reset) and committing the agent's
changes. Results are typed (``safepoint.results``). The engine is imported when a method first needs it, so a
command that only reads starts fast.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from safepoint.api_controls import Controls
from safepoint.errors import ConfigError, DecisionNeeded, ResumeError
from safepoint.records import CompensateExternalAction, RestoreSession, RollbackFiles, RunInfo
from safepoint.results import (
    AgentChanges,
    CheckpointSummary,
    Committed,
    Compensated,
    ConflictView,
    Explanation,
    FsckResult,
    History,
    Resolved,
    Restored,
    RunSummary,
)
from safepoint.standalone import classify as classify  # re-exported: the API's functions that open no store
from safepoint.standalone import command_rules
from safepoint.standalone import find_workspace as find_workspace
from safepoint.standalone import migrate as migrate
from safepoint.store.names import mask_passwords as mask_passwords  # re-exported: the CLI masks its output
from safepoint.store.url import default_store_url, open_store
from safepoint.workspace.files import Workspace

if TYPE_CHECKING:
    from safepoint.core.progress import ProgressEvent as ProgressEvent  # what Run.on_event's observers get
    from safepoint.core.progress import answer_command as answer_command  # re-exported: the CLI's approve lines
    from safepoint.core.restart import RecoveryVerdict
    from safepoint.core.resume import ResumePlan
    from safepoint.core.rollback import RollbackPlan
    from safepoint.core.trace_events import TraceEvent
    from safepoint.engine.session import RunSession
    from safepoint.engine.tools import Tool, ToolRegistry
    from safepoint.history import RestoredHistory
    from safepoint.lifecycle import forget as forget  # re-exported: the store's lifecycle (gc, label, forget)
    from safepoint.lifecycle import gc as gc
    from safepoint.lifecycle import label as label
    from safepoint.lifecycle import labels as labels
    from safepoint.protocol import RuntimeRestartCheckpoint
    from safepoint.providers.base import Provider
    from safepoint.records import ConflictResolution, RecoveryAction, RunStatus, ToolLedgerEntry
    from safepoint.review import CallSettled, Follower, PendingApproval, RunDiff
    from safepoint.review import FileDiff as FileDiff  # re-exported: diff's parts
    from safepoint.run import Run as Run  # re-exported: the API hands out runs
    from safepoint.standins.scenario import Scenario
    from safepoint.store.base import Store
    from safepoint.timeline import ConflictSides, RunRow, Timeline


_LAZY = {"answer_command": "core.progress", "Run": "run"} | dict.fromkeys(
    ("forget", "gc", "label", "labels"), "lifecycle"
)


def __getattr__(name: str) -> Any:
    """PEP 562: these re-exports load when first used (a read of the store skips the redactor's tables, asyncio)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"safepoint.{_LAZY[name]}"), name)  # the very object, not a wrapper


class Safepoint(Controls):
    """A store plus a workspace: where runs are kept and where their tools act."""

    def __init__(self, store: Store, workspace: str, *, exclude: Iterable[str] = ()) -> None:
        self.store = store
        self.workspace = Workspace(workspace, exclude=tuple(exclude), protected=store.local_dir())

    @property
    def shown_url(self) -> str:
        """The store's URL as it may be shown: a password in it is masked."""
        from safepoint.store.names import safe_url

        return safe_url(self.store.url)

    @property
    def root(self) -> str:
        """The workspace folder, absolute."""
        return self.workspace.root

    def registry(self, tools: Iterable[Tool] = (), *, builtins: bool = True) -> ToolRegistry:
        if not builtins:
            from safepoint.engine.tools import ToolRegistry

            return ToolRegistry(tools)
        import dataclasses
        import functools

        from safepoint.core.command_reach import protected_for
        from safepoint.engine.builtin import _classify_command, _command_targets, builtin_registry

        registry = builtin_registry(*tools)
        rules, _ = command_rules(self.workspace.root)
        tool = registry.get("run_command")
        if tool.classifier is _classify_command:
            # The workspace's rules judge its lines, and the store is protected where it really is (a --store
            # path, another folder name), not only under its default name.
            store_dir = self.store.local_dir()
            protected = protected_for(os.path.realpath(store_dir) if store_dir else None, self.workspace.root)
            judge = functools.partial(_classify_command, rules=rules, protected=protected)
            hints = functools.partial(_command_targets, rules=rules)
            registry.put(dataclasses.replace(tool, classifier=judge, capture_hints=hints))
        return registry

    # runs -----------------------------------------------------------------------------------------------------------
    def start(
        self,
        task: str,
        *,
        tools: Iterable[Tool] = (),
        builtins: bool = True,
        model: str = "own-loop",
        model_config: dict[str, Any] | None = None,
        run_id: str | None = None,
        scenario: dict[str, Any] | None = None,
        provider: dict[str, Any] | None = None,
        approval: Literal["none", "high"] = "none",
        approval_timeout_s: float = 600.0,
        successor_of: str | None = None,
        pass_env: Iterable[str] = (),
    ) -> Run:
        """Start a run. ``approval="high"``: high-risk calls wait for ``approve``. ``successor_of``: this run takes
        over an earlier one's work; that run is never resumed again (``successor_accepted``). ``pass_env``: credential
        variables the run's commands get all the same (by default they get none, nor the store URL)."""
        from safepoint.engine.session import RunSession, load_view, now
        from safepoint.protocol import SuccessorAccepted
        from safepoint.restart import control
        from safepoint.run import Run, new_run_id

        info = RunInfo(
            run_id=run_id or new_run_id(),
            task=task,
            model=model,
            created_at=now(),
            workspace=self.workspace.root,
            model_config=model_config or {},
            scenario=scenario,
            provider=provider,
            approval=approval,
            approval_timeout_s=approval_timeout_s,
        )
        if successor_of is not None:
            load_view(self.store, successor_of)  # refuse an unknown predecessor before creating anything
        session = RunSession.create(self.store, info, self.workspace, self.registry(tools, builtins=builtins))
        session.pass_env = tuple(pass_env)
        session.add_message("user", task)
        session.commit()
        if successor_of is not None:
            control.post(self.store, successor_of, SuccessorAccepted(successor_run_id=info.run_id, at=now()))
        return Run(session)

    def start_scenario(self, scenario: Scenario, *, source: str = "scenario", **options: Any) -> Run:
        """Start a run of a scenario (the scripted model); a scenario calling a tool nobody registered is refused
        before anything is written. ``options`` are ``start``'s."""
        from safepoint.agent.subagents import SPAWN_SUBAGENT
        from safepoint.errors import ScenarioError
        from safepoint.standins.scenario import scenario_to_dict

        registry = self.registry(options.get("tools", ()))
        for index in range(len(scenario.turns)):
            for call in scenario.calls(index):
                if call.tool not in registry and call.tool != SPAWN_SUBAGENT:
                    raise ScenarioError(
                        f"{source}: turn {index + 1} calls unknown tool {call.tool!r}; "
                        f"known tools: {', '.join(registry.names())} (add your own with --tools MODULE:ATTR)"
                    )
        return self.start(
            scenario.task,
            model=scenario.model,
            model_config=scenario.model_config,
            scenario=scenario_to_dict(scenario),
            **options,
        )

    def resume(
        self,
        run_id: str,
        *,
        tools: Iterable[Tool] = (),
        builtins: bool = True,
        replay: Iterable[str] = (),
        skip: Iterable[str] = (),
        takeover: bool = False,
        model: str | None = None,
        output: Callable[[str], None] | None = None,
        pass_env: Iterable[str] = (),
    ) -> Run:
        """Open a run after a crash or a restart: check the seven recovery assertions and the replay disposition
        (seed 003), then plan, settle the interrupted calls and inject the recovery note. ``model``: the model
        the run will continue with (a different one than the interrupted turn's is ``model_switch``).

        Raises ``RecoveryClosedError`` when recovery closed the run instead (its parent, if any, is told),
        ``DecisionNeeded`` (exit code 3) when a call may have taken effect and a person must decide, and
        ``ResumeOptionError`` / ``UnknownReferenceError`` (exit code 2, nothing written) when ``replay`` or ``skip``
        names a call that does not wait for that decision. ``pass_env``: as for ``start`` (not remembered: give it
        again on every resume).
        """
        from safepoint.agent.loop import resume_session
        from safepoint.run import Run

        session, recovery = resume_session(
            self.store,
            run_id,
            self.workspace,
            self.registry(tools, builtins=builtins),
            replay=tuple(replay),
            skip=tuple(skip),
            takeover=takeover,
            model=model,
            output=output,
            pass_env=tuple(pass_env),
        )
        return Run(session, recovery)

    def nothing_to_resume(self, run_id: str, *, replay: Iterable[str] = (), skip: Iterable[str] = ()) -> bool:
        """A completed run with no input queued since: resuming it would do nothing (it stays completed).
        ``replay``/``skip``: the decisions a resume would be given, checked first (``ResumeOptionError``, exit 2,
        when one does not apply: on a finished run none does)."""
        from safepoint.agent.loop import check_resume_options
        from safepoint.engine.session import load_view
        from safepoint.restart import inbox

        check_resume_options(self.store, run_id, tuple(replay), tuple(skip), workspace=self.workspace)
        view = load_view(self.store, run_id)
        return view.status == "completed" and not inbox.pending_submissions(self.store, view)

    def provider_for(self, run_id: str, *, model: str | None = None) -> tuple[Provider, str]:
        """The model a run was started with (its scenario, or its model server) and its system prompt; ``model``
        switches to another one. A run of an own loop has none (``ConfigError``)."""
        from safepoint.engine.session import load_view
        from safepoint.providers.select import provider_for

        return provider_for(load_view(self.store, run_id).info, model=model)

    def run_agent(
        self,
        run: Run,
        provider: Provider | None = None,
        *,
        system: str | None = None,
        output: Callable[[str], None] | None = None,
    ) -> RunStatus:
        """Drive the run with a model (by default the one it was started with). ``output`` receives streamed text
        as the model writes it (as it is: not redacted); an observer of ``run.on_event`` gets it redacted, whole
        lines at a time."""
        from safepoint.agent.loop import Agent

        progress = run.session.progress
        if progress.observers:  # someone listens: the text streams to them, a whole line at a time, redacted
            shown = output

            def output(chunk: str) -> None:
                progress.stream(chunk)
                if shown is not None:
                    shown(chunk)

        if provider is None:
            from safepoint.providers.select import provider_for

            provider, prompt = provider_for(run.session.info)
            system = prompt if system is None else system
        return Agent(run.session, provider, system=system or "", output=output).run()

    # reports (read only) --------------------------------------------------------------------------------------------
    def list_runs(self) -> list[str]:
        return list(self.store.list_runs())

    def status(self, run_id: str | None = None) -> list[RunSummary]:
        """One run, or every run of the store (a run whose records cannot be read is ``unreadable``)."""
        from safepoint import report

        return report.status_rows(self.store, run_id)

    def ledger(self, run_id: str) -> list[ToolLedgerEntry]:
        from safepoint import report

        return report.ledger_rows(self.store, run_id)

    def checkpoints(self, run_id: str) -> list[CheckpointSummary]:
        from safepoint import report

        return report.checkpoint_rows(self.store, run_id)

    def checkpoint_for(self, run_id: str, ref: str) -> str:
        """A checkpoint id, or ``step:N``: the state after step N (``step:0``: before the first step)."""
        from safepoint import report

        return report.checkpoint_for(self.store, run_id, ref)

    def explain(
        self, run_id: str, *, probe_workspace: bool = True, limit: int | None = None, offset: int = 0
    ) -> Explanation:
        """What happened to every call, and where and why a resume would continue. ``probe_workspace``: compare
        the workspace with what the run left there and ask the tools' probes (they only read). ``offset`` and
        ``limit``: list that page of the calls only (a run of 50,000 calls)."""
        from safepoint import report

        root = self.workspace.root if probe_workspace else None
        return report.explain(self.store, run_id, root, limit=limit, offset=offset)

    def history(self, run_id: str) -> History:
        """The current branch of the conversation, and messages of abandoned branches."""
        from safepoint.engine import large_values
        from safepoint.engine.session import load_view

        view = load_view(self.store, run_id)
        current = {id(message) for message in view.history}
        content = large_values.reader(self.store, view)  # a long text or argument kept as a blob, read back
        abandoned = [m for m in view.message_records.values() if id(m) not in current]
        return History(
            current=large_values.resolve_messages(list(view.history), content),
            abandoned=large_values.resolve_messages(abandoned, content),
        )

    def restored_history(self, run_id: str, *, limit: int | None = None, abandoned: bool = False) -> RestoredHistory:
        """The conversation exactly as a resume would restore it (``safepoint.history``); ``limit``: its latest."""
        from safepoint.history import restored_history

        return restored_history(self.store, run_id, limit=limit, abandoned=abandoned)

    def trace(self, run_id: str, *, call_id: str | None = None, since: str | None = None) -> list[TraceEvent]:
        """The run's trace events, oldest first (what was written: a process killed with SIGKILL loses its last
        unwritten batch, never a record). ``call_id``: only the events about that call; ``since``: from an ISO
        time, a duration ago (``10m``) or a checkpoint id on. Event names and fields: ``core.trace_events``."""
        from datetime import UTC, datetime

        from safepoint.core import trace_events

        window = trace_events.parse_since(since, datetime.now(UTC)) if since else None
        events = [e for line in self.store.read_trace(run_id) if (e := trace_events.decode(line)) is not None]
        return trace_events.select(events, call_id=call_id, since=window)

    def diff(self, run_id: str, call_id: str | None = None) -> RunDiff:
        """The agent's changes as unified diffs: per path, from before the run (or ``call_id``) changed it to what
        it left (binary files named, large ones summarised, as ``conflicts`` does)."""
        from safepoint import review

        with self._session(run_id, read_only=True) as session:
            return review.run_diff(session, call_id)

    def settle(
        self, run_id: str, call_id: str, *, happened: bool, by: str = "user", takeover: bool = False
    ) -> CallSettled:
        """A person checked an uncertain call by hand. ``happened=True``: it is finished as succeeded ("settled by
        a person") and never run again; ``False``: the next resume runs it again without asking when its replay
        policy allows (``never``: finished as failed, the model is told it did not take effect). Recorded with
        ``by`` and the time, under the run's claim (``takeover`` fences off a live owner first)."""
        from safepoint.engine import actions
        from safepoint.review import CallSettled

        with self._session(run_id, takeover=takeover) as session:
            return CallSettled(**actions.settle_call(session, call_id, happened=happened, by=by))

    def approvals(self, run_id: str | None = None) -> list[PendingApproval]:
        """The calls waiting for a person's approval, in one run or across the store's runs."""
        from safepoint import review

        if run_id is not None:
            from safepoint.report import load_view

            load_view(self.store, run_id)  # an unknown run is said as such, not as "nothing waits"
        return review.pending_approvals(self.store, [run_id] if run_id else list(self.store.list_runs()))

    def follow(self, run_id: str) -> Follower:
        """Follow a run live from the store (any process may run it): ``poll()`` returns what happened since, as
        ``Run.on_event``'s events; ``ended()`` says when it stopped."""
        from safepoint.review import Follower

        return Follower(self.store, run_id)

    def runs_overview(self) -> list[RunRow]:
        """Every run for the review page: status, step, last activity, what waits for a person (latest first)."""
        from safepoint import timeline

        return timeline.run_rows(self.store, self.status(), self.approvals())

    def timeline(self, run_id: str, *, page: int = 1, per_page: int | None = None) -> Timeline:
        """One page of the run's timeline (``safepoint.timeline``): messages and calls with their ledger states,
        explain's verdict, outputs and diffs, and the recovery note."""
        from safepoint import report, review, timeline

        with self._session(run_id, read_only=True) as session:  # an unknown run is said here
            # explain reads the run as the session did (rejected: explain's own read, a second one of the whole log)
            explanation = report.explain(self.store, run_id, self.workspace.root, view=session.view)
            approvals = review.pending_approvals(self.store, [run_id])
            return timeline.build_timeline(
                session, explanation, approvals, page=page, per_page=per_page or timeline.PER_PAGE
            )

    def conflict_sides(self, run_id: str) -> list[ConflictSides]:
        """Every pending conflict with its three versions: before the agent, the agent's version, the file now."""
        from safepoint import timeline

        views = self.conflicts(run_id)
        with self._session(run_id, read_only=True) as session:
            return timeline.conflict_sides(session, views)

    def restart_checkpoint(self, run_id: str) -> RuntimeRestartCheckpoint | None:
        """The run's restart checkpoint (seed 003 §1.2) when one is stored and intact: the work in flight."""
        import msgspec

        from safepoint.protocol import RuntimeRestartCheckpoint

        if run_id not in self.store.list_runs():
            return None
        stored = self.store.read_restart_checkpoint(run_id)
        if stored is None or not stored.intact:
            return None
        return msgspec.json.decode(stored.data, type=RuntimeRestartCheckpoint)

    def judge(self, run_id: str, *, model: str | None = None) -> RecoveryVerdict:
        """What restart recovery would decide for the run now (reads only)."""
        from safepoint.restart.judge import judge

        return judge(self.store, run_id, resuming_model=model).verdict

    def plan(self, run_id: str) -> ResumePlan:
        """What a resume would do now, without claiming the run or running anything."""
        from safepoint.core.resume import plan_resume
        from safepoint.engine.session import load_view

        return plan_resume(load_view(self.store, run_id))

    # the three recovery actions (§8.8) and their companions ---------------------------------------------------------
    @contextlib.contextmanager
    def _session(
        self, run_id: str, tools: Iterable[Tool] = (), *, read_only: bool = False, takeover: bool = False
    ) -> Iterator[RunSession]:
        from safepoint.engine.session import RunSession
        from safepoint.restart import approvals

        session = RunSession.open(
            self.store,
            run_id,
            self.workspace,
            self.registry(tools),
            read_only=read_only,
            takeover=takeover,
            watch=False,  # rollback, resolve, restore and compensate run no command
        )
        approvals.attach(session)  # a compensation may wait for approval
        try:
            yield session
        finally:
            if not session.read_only:
                session.commit()
            session.close()

    def recover(
        self,
        run_id: str,
        action: RecoveryAction,
        *,
        dry_run: bool = False,
        with_files: bool = False,
        include_uncertain: bool = False,
        tools: Iterable[Tool] = (),
        assume_done: bool = False,
        decision: Literal["replay", "skip"] | None = None,
        takeover: bool = False,
    ) -> RollbackPlan | Restored | Compensated:
        """Carry out one of the seed's three recovery actions (§8.8), never one "undo":

        - ``RollbackFiles(checkpoint_id=...)``: the agent's file changes after it are reverted (``dry_run``: only
          planned); files changed since become conflicts; changes whose author is uncertain are reverted only with
          ``include_uncertain``. Returns the ``RollbackPlan``.
        - ``RestoreSession(checkpoint_id=...)``: the conversation and run state go back to it as a new branch
          (``with_files``: the files too). Returns ``Restored``: the new checkpoint, and the effects outside the
          workspace it does not undo (``tools``: to offer their compensators).
        - ``CompensateExternalAction(ledger_entry_id=...)``: the tool's compensator runs once for that call
          (``assume_done`` for an uncertain one; ``decision`` settles an interrupted compensation).
        """
        match action:
            case RollbackFiles(checkpoint_id=checkpoint_id):
                return self.rollback_files(
                    run_id, checkpoint_id, dry_run=dry_run, include_uncertain=include_uncertain, takeover=takeover
                )
            case RestoreSession(checkpoint_id=checkpoint_id):
                return self.restore_session(
                    run_id,
                    checkpoint_id,
                    with_files=with_files,
                    include_uncertain=include_uncertain,
                    tools=tools,
                    takeover=takeover,
                )
            case CompensateExternalAction(ledger_entry_id=entry_id):
                result = self.compensate(
                    run_id, entry_id, tools=tools, assume_done=assume_done, decision=decision, takeover=takeover
                )
                return Compensated(run_id=run_id, compensated=entry_id, result=result)
        raise ConfigError(
            f"{action!r} is not a recovery action; give RollbackFiles, RestoreSession or CompensateExternalAction"
        )

    def rollback_files(
        self,
        run_id: str,
        checkpoint_id: str,
        *,
        dry_run: bool = False,
        include_uncertain: bool = False,
        takeover: bool = False,
    ) -> RollbackPlan:
        """Revert the agent's file changes made after ``checkpoint_id``; files changed since become conflicts.
        Changes made while a command ran whose author is uncertain are listed (``plan.uncertain``) and reverted
        only with ``include_uncertain``."""
        from safepoint.engine import actions
        from safepoint.lifecycle import check_reachable

        with self._session(run_id, read_only=dry_run, takeover=takeover) as session:
            # Checked once the run is claimed (gc keeps an owned run whole), not before: a gc between would free
            # what the rollback then reads.
            check_reachable(self.store, run_id, checkpoint_id)
            return actions.rollback_files(session, checkpoint_id, dry_run=dry_run, include_uncertain=include_uncertain)

    def restore_session(
        self,
        run_id: str,
        checkpoint_id: str,
        *,
        with_files: bool = False,
        include_uncertain: bool = False,
        tools: Iterable[Tool] = (),
        takeover: bool = False,
    ) -> Restored:
        """Continue the run from an earlier checkpoint as a new branch; the old branch stays in the log. Says what
        it does not undo: effects outside the workspace after the checkpoint, and the compensations ``tools``
        declare for them."""
        from safepoint.engine import actions
        from safepoint.lifecycle import check_reachable

        with self._session(run_id, tools, takeover=takeover) as session:
            check_reachable(self.store, run_id, checkpoint_id)  # once claimed, as rollback_files does
            return actions.restore_session(
                session, checkpoint_id, with_files=with_files, include_uncertain=include_uncertain
            )

    def compensate(
        self,
        run_id: str,
        ledger_entry_id: str,
        *,
        tools: Iterable[Tool] = (),
        assume_done: bool = False,
        decision: str | None = None,
        takeover: bool = False,
    ) -> str:
        """Run the compensator a tool declares for one finished call, at most once; returns its observation.
        ``decision`` ("replay" or "skip") settles a compensation a crash interrupted."""
        from safepoint.engine import actions

        with self._session(run_id, tools, takeover=takeover) as session:
            return actions.compensate(session, ledger_entry_id, assume_done=assume_done, decision=decision)

    def conflicts(self, run_id: str) -> list[ConflictView]:
        """Pending conflicts, each with the agent's changes and what changed since (a three-way view)."""
        from safepoint.engine import conflicts

        with self._session(run_id, read_only=True) as session:
            index = conflicts.cover_index(session)
            return [
                ConflictView(**conflicts.describe_conflict(session, c, index))
                for c in conflicts.pending_conflicts(session.conflicts)
            ]

    def resolve(self, run_id: str, path: str, resolution: ConflictResolution, *, takeover: bool = False) -> Resolved:
        """``keep_user`` leaves the file, ``apply_agent`` finishes the rollback over it, ``manual_merge`` writes a
        three-way merge (conflict markers where the two changes overlap; refused for a symlink or binary file).
        Either settles the path: a later rollback leaves it as resolved."""
        from safepoint.engine import actions

        if resolution == "pending":
            raise ResumeError("a resolution is keep_user, apply_agent or manual_merge")
        with self._session(run_id, takeover=takeover) as session:
            return Resolved(**actions.resolve(session, path, resolution))

    # committing the agent's work ------------------------------------------------------------------------------------
    def agent_changes(self, run_id: str, *, require_git: bool = False) -> AgentChanges:
        """Paths holding exactly what the agent last left there over HEAD's version (its diff), and the others,
        each with the real reason it is left out (``reasons``): the user's uncommitted work from before, a change
        since, a file the agent deleted that was the user's, ignored by git, in a nested repository, an uncertain
        author, or no change left. ``require_git``: a workspace outside git is a ``ConfigError``."""
        from safepoint.engine.commit_scope import sort_changes
        from safepoint.workspace.git import git_state, head_blob_ids

        state = git_state(self.workspace.root)
        if require_git:
            self._require_git(state.is_repo)
        head = head_blob_ids(self.workspace.root)
        with self._session(run_id, read_only=True) as session:
            ours, reasons = sort_changes(session, head, state)
        return AgentChanges(run_id=run_id, would_commit=ours, left_out=[r.path for r in reasons], reasons=reasons)

    def commit(self, run_id: str, message: str | None = None) -> Committed:
        """Commit the agent's changes only (never the user's other work), when the user asks."""
        from safepoint.engine.session import load_view
        from safepoint.workspace.git import commit_paths

        changes = self.agent_changes(run_id, require_git=True)
        if not changes.would_commit:
            why = "; ".join(f"{r.path}: {r.why}" for r in changes.reasons[:3])
            raise ResumeError(f"run {run_id!r} left no change of its own to commit" + (f" ({why})" if why else ""))
        info = load_view(self.store, run_id).info
        sha = commit_paths(
            self.workspace.root, changes.would_commit, message or f"safepoint: changes of run {run_id}\n\n{info.task}"
        )
        return Committed(
            run_id=run_id,
            commit=sha,
            committed=changes.would_commit,
            left_out=changes.left_out,
            reasons=changes.reasons,
        )

    def _require_git(self, is_repo: bool | None = None) -> None:
        from safepoint.workspace.git import git_state

        if not (git_state(self.workspace.root).is_repo if is_repo is None else is_repo):
            raise ConfigError(
                f"workspace {self.workspace.root} is not in a git repository; there is nothing to commit to"
            )

    def fsck(self, run_id: str | None = None, *, repair: bool = False) -> FsckResult:
        """Check every checksum and reference of one run (None: every run); ``repair``: quarantine what is corrupt
        (never deleted) and make the run usable again (``safepoint.store.fsck`` says what is repaired)."""
        from safepoint.store import fsck

        return fsck.fsck(self.store, run_id, repair=repair)

    def mcp_proxy(
        self,
        command: builtins.list[str],
        *,
        run_id: str | None = None,
        trust: str | None = None,
        approval: Literal["none", "high"] = "none",
        replay: Iterable[str] = (),
        skip: Iterable[str] = (),
    ) -> int:
        """Front the MCP server ``command`` on this process's stdin/stdout, every ``tools/call`` through the ledger
        of one run (``run_id``: continue that one, or start it under that id); returns the exit code. See
        ``safepoint.integrations.mcp_proxy``."""
        import shlex

        from safepoint.integrations import mcp_policy, mcp_proxy

        trusted = mcp_policy.load_trust(trust)  # a bad trust file is refused before anything starts

        def opener() -> Run | mcp_proxy.Blocked:
            if run_id is None or run_id not in self.store.list_runs():
                task = "mcp-proxy -- " + shlex.join(command)
                return self.start(task, builtins=False, run_id=run_id, approval=approval)
            try:
                return self.resume(run_id, builtins=False, replay=replay, skip=skip)
            except DecisionNeeded as exc:
                waiting = tuple(r.entry.call_id for r in self.plan(run_id).needs_decision)
                skip_only = tuple(call for call, choices in exc.choices.items() if "replay" not in choices)
                return mcp_proxy.Blocked(run_id, str(exc).rstrip("."), waiting, skip_only)

        return mcp_proxy.serve(command, opener, trusted)

    def close(self) -> None:
        self.store.close()


def trace_key_fields(event: TraceEvent) -> list[tuple[str, Any]]:
    """The fields `safepoint trace` shows on an event's line, in the vocabulary's order."""
    from safepoint.core.trace_events import key_fields

    return key_fields(event)


def stop_at_safe_point_on_sigterm() -> None:
    """SIGTERM and Ctrl-C (SIGINT) make a running agent stop at its next safe point, keeping its restart
    checkpoint: the agent loop between steps and calls, an own loop at its next ``run.call`` (``Interrupted``,
    exit code 11). Ctrl-C also stops a command running then (its process group), as a terminal would."""
    from safepoint.engine import shutdown

    shutdown.install()


def load_tools(specs: Iterable[str]) -> list[Tool]:
    """``MODULE:ATTR`` specs (a Tool or a list of them), plus the notification stand-in every CLI run has."""
    from safepoint.standins.notify import cli_tools

    return cli_tools(specs)


def open(
    url: str | None = None,
    *,
    workspace: str = ".",
    exclude: Iterable[str] = (),
    key: bytes | str | None = None,
    key_file: str | None = None,
) -> Safepoint:
    """Open a store (``file:PATH``, a bare path, or ``postgresql://...``) for a workspace. ``exclude`` adds
    gitignore-style patterns that captures of command changes never look at (as does WORKSPACE/.safepointignore).
    ``key`` (32 bytes, or their hex or base64 text) or ``key_file``: the store is encrypted at rest with it (a new
    one becomes so); without either, ``SAFEPOINT_KEY_FILE`` or ``SAFEPOINT_KEY`` is used when set."""
    from safepoint.store.crypt import load_key

    workspace = os.path.abspath(workspace)
    store_key = load_key(key=key, key_file=key_file)
    return Safepoint(open_store(url or default_store_url(workspace), store_key), workspace, exclude=exclude)
