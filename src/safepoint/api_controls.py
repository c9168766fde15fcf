"""The library API's controls of the recovery protocol (seed 003): what people do to runs they do not own (answer
a waiting call, submit input, cancel, reset the context). A part of ``safepoint.api.Safepoint`` (its base), kept
apart so the API's module stays readable; every control goes through ``safepoint.restart.control``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from safepoint.results import Answered, ControlOutcome, Submitted

if TYPE_CHECKING:
    from safepoint.store.base import Store


class Controls:
    """``Safepoint``'s recovery-protocol controls (its ``store`` is the one they act on)."""

    store: Store

    def approve(self, run_id: str, call_id: str, *, by: str = "user", reason: str = "") -> Answered:
        """Approve a call waiting for approval. ``attended`` in the result: a live owner runs the call now;
        otherwise ``next`` says what will (``safepoint resume``, or a daemon serving this store)."""
        return self._answer(run_id, call_id, approved=True, by=by, reason=reason)

    def deny(self, run_id: str, call_id: str, *, by: str = "user", reason: str = "") -> Answered:
        """Deny a call waiting for approval: it never runs, and the model is told (now, or when the run goes on)."""
        return self._answer(run_id, call_id, approved=False, by=by, reason=reason)

    def _answer(self, run_id: str, call_id: str, *, approved: bool, by: str, reason: str) -> Answered:
        from safepoint.engine.decision_choices import answered_next
        from safepoint.restart import control

        position = control.answer(self.store, run_id, call_id, approved=approved, by=by, reason=reason)
        attended = control.owner_is_live(self.store, run_id)
        after = answered_next(self.store, run_id, attended=attended, approved=approved)  # an own loop: sp.resume
        return Answered(
            run_id=run_id, call_id=call_id, approved=approved, position=position, attended=attended, next=after
        )

    def submit(
        self,
        run_id: str,
        text: str,
        *,
        key: str | None = None,
        override_system_prompt: str | None = None,
        append_system_prompt: str | None = None,
        requested_model: str | None = None,
        reasoning_strength_override: str | None = None,
        tools_allowed_override: tuple[str, ...] | None = None,
    ) -> Submitted:
        """Queue user input for a run. A client that may retry passes the same ``key`` each time: it is admitted
        once. The overrides apply to this input only (seed 003 §2.2)."""
        from safepoint.restart import control

        submission_key, position = control.submit(
            self.store,
            run_id,
            text,
            key=key,
            override_system_prompt=override_system_prompt,
            append_system_prompt=append_system_prompt,
            requested_model=requested_model,
            reasoning_strength_override=reasoning_strength_override,
            tools_allowed_override=tools_allowed_override,
        )
        return Submitted(run_id=run_id, submission_key=submission_key, position=position)

    def cancel(self, run_id: str, *, whole_stream: bool = False, by: str = "user") -> ControlOutcome:
        """``requested``: a live owner stops at its next safe point; ``closed``: settled now (no live owner)."""
        from safepoint.restart import control

        outcome = control.cancel(self.store, run_id, whole_stream=whole_stream, by=by)
        return "closed" if outcome == "closed" else "requested"

    def reset_context(self, run_id: str, *, by: str = "user") -> ControlOutcome:
        from safepoint.restart import control

        return "closed" if control.reset_context(self.store, run_id, by=by) == "closed" else "requested"
