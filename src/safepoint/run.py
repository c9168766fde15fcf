"""An open run, for people who bring their own agent loop: calls through the ledger, messages, steps, checkpoints.

``Safepoint.start``/``resume`` (in :mod:`safepoint.api`) return one; see ``Run`` for the shape of a call.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from safepoint.errors import Interrupted, ToolFailure, ToolRegistrationError
from safepoint.records import Idempotency, Message, ReplayPolicy, RiskLevel, RunStatus, ToolCall

if TYPE_CHECKING:
    from safepoint.agent.loop import Recovery
    from safepoint.core.progress import ProgressEvent
    from safepoint.engine.call_runner import CallResult
    from safepoint.engine.offloop import Bookkeeper
    from safepoint.engine.session import RunSession
    from safepoint.engine.tools import ToolContext

__all__ = ["Run", "new_run_id"]

T = TypeVar("T")


def new_run_id() -> str:
    return "run_" + datetime.now(UTC).strftime("%Y%m%d") + "_" + uuid.uuid4().hex[:8]


class Run:
    """An open run: its session (the only writer) plus conveniences for an own loop.

    Calls, in one shape: ``run.call(tool, args, call_id=...)`` returns the tool's own value (a tool returning
    ``5`` gives ``5``, a dict gives the dict); if the call did not succeed (the tool raised, it was denied, or a
    crash left it uncertain and it was not run again) it raises ``ToolFailure`` whose message is the observation.
    ``run.call_result(...)`` never raises for those: it returns a ``CallResult`` with ``value``, ``observation``
    (the text the model sees, ``error: ...`` for a failure) and ``status`` (the ledger's: ``succeeded``,
    ``failed``, ``uncertain``). ``acall``/``acall_result`` are the same for asyncio.

    The value is the one recorded, so it is the same the first time and after a crash: a ``str`` or ``None`` as
    it is, anything else as the JSON round-trip of it (a tuple or set comes back as a list, a Struct or dataclass
    as a dict, bytes as base64 text). A call settled by its probe ran in a process that died with its value: its
    ``value`` is ``None``. A tool's value that msgspec cannot encode makes the call ``failed``.
    """

    def __init__(self, session: RunSession, recovery: Recovery | None = None) -> None:
        from safepoint.restart import approvals

        self.session = approvals.attach(session)  # a high-risk call waits for `safepoint approve`
        self.recovery = recovery
        self._auto_ids = 0  # calls without an id are numbered per step, so a redone step gets the same ids

    @property
    def run_id(self) -> str:
        return self.session.info.run_id

    def on_event(self, observer: Callable[[ProgressEvent], None]) -> None:
        """Be told each step as it happens: the model's text (``text`` pieces as they stream, then ``turn``), each
        call as it starts and settles (``call_started``, ``call_finished`` with status and duration), a call waiting
        for approval (``approval_wait``, with the commands that answer it) and the run's status (``status``). The
        events are ``safepoint.core.progress``'s Structs, redacted like everything the run keeps. An observer that
        raises is dropped; the run goes on."""
        self.session.progress.subscribe(observer)

    @property
    def history(self) -> list[Message]:
        return list(self.session.history)

    @property
    def recovery_note(self) -> str | None:
        return self.recovery.note if self.recovery else None

    @property
    def completed_steps(self) -> int:
        """Steps finished before the crash: an own loop resumes with the step after them."""
        at = self.recovery.plan.resume_from if self.recovery else None
        from safepoint.core.resume import last_completed_step

        return last_completed_step(at.checkpoint) if at else 0

    def _call(self, tool: str, args: dict[str, Any] | None, call_id: str | None) -> ToolCall:
        from safepoint.engine import shutdown

        if shutdown.requested():  # a safe point of an own loop: no call starts once a stop was asked for
            from safepoint.engine import decision_choices

            raise Interrupted(
                f"{shutdown.why()}: stopped before calling {tool}; {decision_choices.resumer(self.session.info)} "
                "continues the run"
            )
        if call_id is None:
            self._auto_ids += 1
            call_id = f"auto_{self.session.step}_{self._auto_ids}"
        from safepoint.core.resume import model_call_id

        return ToolCall(call_id=model_call_id(call_id), tool=tool, args=dict(args or {}))

    def call_result(self, tool: str, args: dict[str, Any] | None = None, *, call_id: str | None = None) -> CallResult:
        """Run a registered tool through the ledger; returns what the call came to (see the class docstring)."""
        return self.session.runner.execute(self._call(tool, args, call_id), f"step_{self.session.step}")

    def call(self, tool: str, args: dict[str, Any] | None = None, *, call_id: str | None = None) -> Any:
        """Run a registered tool through the ledger; returns the tool's own value."""
        return _value_of(self.call_result(tool, args, call_id=call_id))

    async def acall_result(
        self, tool: str, args: dict[str, Any] | None = None, *, call_id: str | None = None
    ) -> CallResult:
        """``call_result`` for asyncio: the loop never waits on the call's bookkeeping (hashing, patches, the
        capture, the fsync or the PostgreSQL round-trip run on the run's bookkeeping thread, see
        ``safepoint.engine.offloop``). A task cancelled during the call leaves the ledger saying what happened:
        failed if the tool had not run, ``uncertain`` if it was cancelled while it ran, its outcome if it ran on
        a thread (which cannot be stopped); then ``CancelledError`` is raised."""
        return await self.session.runner.aexecute(self._call(tool, args, call_id), f"step_{self.session.step}")

    async def acall(self, tool: str, args: dict[str, Any] | None = None, *, call_id: str | None = None) -> Any:
        return _value_of(await self.acall_result(tool, args, call_id=call_id))

    def ledgered(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        idempotency: Idempotency = "non_idempotent",
        replay_policy: ReplayPolicy = "ask",
        risk_level: RiskLevel = "medium",
        side_effects: Iterable[str] = (),
    ) -> Callable[..., Any]:
        """Wrap a plain function (a framework's tool, say) so each call goes through the ledger.

        ``send = run.ledgered(send_email, idempotency="non_idempotent", replay_policy="never")`` then
        ``send(to=..., body=..., call_id=model_call_id)``; an async function gives an async wrapper. The wrapper
        returns what ``fn`` returned (as ``call`` does) and raises ``ToolFailure`` when the call did not succeed.
        """
        from safepoint.engine.tools import tool

        if inspect.iscoroutinefunction(fn):

            async def run_async(ctx: ToolContext, **kwargs: Any) -> Any:
                return await fn(**kwargs)

            body: Callable[..., Any] = run_async
        else:

            def run_sync(ctx: ToolContext, **kwargs: Any) -> Any:
                return fn(**kwargs)

            body = run_sync
        wrapped = tool(
            name=name or fn.__name__,
            idempotency=idempotency,
            replay_policy=replay_policy,
            risk_level=risk_level,
            side_effects=side_effects,
            description=inspect.getdoc(fn) or "",
        )(body)
        existing = self.session.registry.get(wrapped.name) if wrapped.name in self.session.registry else None
        if existing is not None and getattr(existing.fn, "__wrapped_fn__", None) is not fn:
            raise ToolRegistrationError(
                f"a tool named {wrapped.name!r} is registered already; pass name=... to ledgered() to tell them apart"
            )
        if existing is None:
            body.__wrapped_fn__ = fn  # type: ignore[attr-defined]
            self.session.registry.register(wrapped)
        if wrapped.is_async:

            async def acall(*, call_id: str | None = None, **kwargs: Any) -> Any:
                return await self.acall(wrapped.name, kwargs, call_id=call_id)

            return acall

        def call(*, call_id: str | None = None, **kwargs: Any) -> Any:
            return self.call(wrapped.name, kwargs, call_id=call_id)

        return call

    # The run's own steps. Each takes the bookkeeping lock (a call's piece on the bookkeeping thread never runs in
    # the middle of one); the ``a*`` forms run on that thread, so an async loop never waits on their fsync.
    def add_message(self, role: Any, content: str, *, tool_calls: Iterable[ToolCall] = (), **fields: Any) -> Message:
        """Append to the history (an assistant message may carry the tool calls the model asked for)."""
        with self._bookkeeping.lock:
            return self.session.add_message(role, content, tool_calls=tuple(tool_calls), **fields)

    def step(self) -> int:
        """Start the next step (a model turn); takes the before-step checkpoint."""
        with self._bookkeeping.lock:
            self._auto_ids = 0
            return self.session.next_step()

    def checkpoint(self) -> str:
        """An after-step checkpoint, durable on return."""
        with self._bookkeeping.lock:
            checkpoint = self.session.checkpoint("after_step")
            self.session.commit()
            return checkpoint.checkpoint_id

    def finish(self, status: RunStatus = "completed", detail: str = "") -> None:
        with self._bookkeeping.lock:
            self.session.event(status, detail)

    def close(self) -> None:
        with self._bookkeeping.lock:
            self.session.close()
        self._bookkeeping.close()

    async def aadd_message(
        self, role: Any, content: str, *, tool_calls: Iterable[ToolCall] = (), **fields: Any
    ) -> Message:
        return await self._off_loop(lambda: self.add_message(role, content, tool_calls=tool_calls, **fields))

    async def astep(self) -> int:
        """``step`` for asyncio: the before-step checkpoint is written off the loop."""
        return await self._off_loop(self.step)

    async def acheckpoint(self) -> str:
        """``checkpoint`` for asyncio: durable on return, written off the loop."""
        return await self._off_loop(self.checkpoint)

    async def afinish(self, status: RunStatus = "completed", detail: str = "") -> None:
        await self._off_loop(lambda: self.finish(status, detail))

    async def aclose(self) -> None:
        """``close`` for asyncio: the last commit and the release run off the loop."""
        await self._off_loop(lambda: self._commit_and_close(commit=False))
        self._bookkeeping.close()

    async def _off_loop(self, fn: Callable[[], T]) -> T:
        """On the bookkeeping thread; a cancellation waits for it to be done (so it is whole), then is raised."""
        value, cancelled = await self._bookkeeping.arun(fn)
        if cancelled:
            raise asyncio.CancelledError
        return value

    def _commit_and_close(self, *, commit: bool) -> None:
        with self._bookkeeping.lock:
            if commit and not self.session.closed:
                self.session.commit()
            self.session.close()

    @property
    def _bookkeeping(self) -> Bookkeeper:
        return self.session.runner.bookkeeper

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._commit_and_close(commit=exc is None)
        self._bookkeeping.close()

    async def __aenter__(self) -> Run:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._off_loop(lambda: self._commit_and_close(commit=exc is None))
        self._bookkeeping.close()


def _value_of(result: CallResult) -> Any:
    if result.status != "succeeded":
        raise ToolFailure(result.observation)
    return result.value
