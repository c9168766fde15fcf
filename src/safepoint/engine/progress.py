"""A run's progress, told to whoever listens (``Run.on_event``): the session and the call runner report their steps
here; each event is redacted with the run's redactor before any observer sees it.

Nobody listening costs nothing (no event is built). An observer that raises is dropped and the run goes on: a
broken pipe to a terminal must never turn a call that ran into an uncertain one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from safepoint.core.progress import (
    ApprovalWait,
    CallFinished,
    CallStarted,
    LineHold,
    ModelText,
    ModelTurn,
    ProgressEvent,
    StatusChanged,
    answer_command,
    first_line,
    main_argument,
    redacted_event,
)
from safepoint.core.redact import Redactor

Observer = Callable[[ProgressEvent], None]


class Progress:
    def __init__(self, run_id: str, redactor: Redactor, trace: Callable[..., None]) -> None:
        self.run_id = run_id
        self.redactor = redactor
        self._trace = trace
        self.observers: list[Observer] = []
        self.step = 0
        self._started: dict[str, float] = {}  # call id -> when it started (monotonic), for its duration
        self._hold = LineHold(redactor, self._text)
        self._awaiting: ApprovalWait | None = None
        self._turn: ModelTurn | None = None  # a turn not yet durable: told with the next event

    @staticmethod
    def step_of(step_id: str) -> int:
        number = step_id.removeprefix("step_")
        return int(number) if number.isdigit() else 0

    def subscribe(self, observer: Observer) -> None:
        self.observers.append(observer)

    def _emit(self, event: ProgressEvent) -> None:
        if self._turn is not None and event is not self._turn:
            turn, self._turn = self._turn, None
            self._emit(turn)  # the turn is durable now: every other event is told after a commit
        shown = redacted_event(event, self.redactor)
        for observer in list(self.observers):
            try:
                observer(shown)
            except Exception as exc:
                self.observers.remove(observer)
                self._trace("progress_observer_dropped", error=f"{type(exc).__name__}: {exc}")

    # the model's text ---------------------------------------------------------------------------------------------
    def stream(self, chunk: str) -> None:
        """A piece of streamed text (the agent loop's output sink): let out a whole line at a time."""
        if self.observers:
            self._hold.feed(chunk)

    def _text(self, text: str) -> None:
        self._emit(ModelText(run_id=self.run_id, step=self.step, text=text))  # redacted by LineHold already

    def turn(self, step: int, text: str, calls: int) -> None:
        if not self.observers:
            return
        streamed = self._hold.flush()
        self.step = step
        turn = ModelTurn(run_id=self.run_id, step=step, text=text, streamed=streamed, calls=calls)
        if streamed:
            self._emit(turn)  # its text is out already: this only ends it
            return
        self._turn = turn
        # Otherwise it is told with the next event, each of which comes after a commit: text a crash could take
        # back (the turn generated again) is never shown.

    # calls --------------------------------------------------------------------------------------------------------
    def call_started(self, step: int, call_id: str, tool: str, args: dict[str, Any]) -> None:
        if not self.observers:
            return
        self.step = step
        self._started[call_id] = time.monotonic()
        self._emit(CallStarted(run_id=self.run_id, step=step, call_id=call_id, tool=tool, target=main_argument(args)))

    def call_finished(
        self, step: int, call_id: str, tool: str, args: dict[str, Any], status: str, observation: str
    ) -> None:
        if not self.observers:
            return
        began = self._started.pop(call_id, None)
        self._emit(
            CallFinished(
                run_id=self.run_id,
                step=step,
                call_id=call_id,
                tool=tool,
                target=main_argument(args),
                status=status,
                ran=began is not None,
                duration_s=None if began is None else round(time.monotonic() - began, 3),
                detail="" if status == "succeeded" and began is not None else first_line(observation),
            )
        )

    def approval_wait(self, call_id: str, tool: str, args: dict[str, Any], risk_level: str) -> None:
        """A call is about to wait for a person: told with the ``waiting_approval`` status, once the wait is
        durable (a command printed before then could answer a wait a crash never recorded)."""
        if not self.observers:
            return
        self._awaiting = ApprovalWait(
            run_id=self.run_id,
            call_id=call_id,
            tool=tool,
            target=main_argument(args),
            risk_level=risk_level,
            approve=answer_command("approve", self.run_id, call_id),
            deny=answer_command("deny", self.run_id, call_id),
        )

    def status(self, status: str, detail: str) -> None:
        if not self.observers:
            return
        self._hold.flush()
        if status == "waiting_approval" and self._awaiting is not None:
            self._emit(self._awaiting)
            self._awaiting = None
        self._emit(StatusChanged(run_id=self.run_id, status=status, detail=detail))
