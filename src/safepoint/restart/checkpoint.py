"""What the run's restart checkpoint says at a model turn (seed 003 §2, ``RuntimeRestartReactionLoopState``): the
turn, its pending calls, the outputs finished but not in the history yet, and the run's lifetime counts. The
engine's ``RestartWriter`` writes it; this module decides what it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from safepoint.engine.restart_writer import now_ms
from safepoint.protocol import RuntimeRestartReactionLoopState
from safepoint.records import Message, ToolCall, ToolLedgerEntry

__all__ = ["LoopFacts", "loop_state", "now_ms"]


class LoopFacts(Protocol):
    """The conversation as a turn leaves it (a ``RunSession`` is one)."""

    @property
    def history(self) -> list[Message]: ...

    @property
    def pending(self) -> list[ToolCall]: ...

    @property
    def ledger(self) -> Mapping[str, ToolLedgerEntry]: ...

    @property
    def lifetime_messages(self) -> Sequence[Message]: ...


def loop_state(facts: LoopFacts, turn: int, *, visible_output_started: bool = False) -> RuntimeRestartReactionLoopState:
    history = facts.history
    batches = 0
    for message in reversed(history):
        if message.role == "user":
            break
        if message.role == "assistant" and message.tool_calls:
            batches += 1
    in_history = {m.tool_call_id for m in history if m.role == "tool"}
    done = {
        call.call_id: entry.result_ref
        for call in facts.pending
        if (entry := facts.ledger.get(call.call_id)) is not None
        and entry.status in ("succeeded", "failed")
        and entry.result_ref
        and call.call_id not in in_history
    }
    return RuntimeRestartReactionLoopState(
        turn=turn,
        consecutive_batches=batches,
        pending_tool_calls=tuple(call.call_id for call in facts.pending),
        completed_unpersisted_tool_outputs=done,
        # Over every branch the run ever had: a rewind does not give back the inferences it made.
        lifetime_inference_count=sum(1 for m in facts.lifetime_messages if m.role == "assistant"),
        lifetime_tool_call_count=len(facts.ledger),
        visible_output_started=visible_output_started,
    )
