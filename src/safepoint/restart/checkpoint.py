"""The run's one restart checkpoint (seed 003 §1.2, §2), kept by its session: upserted at the moments the seed
names (after a model turn with the calls it made, before streamed text reaches the user, while a call waits for
approval, when a submission is admitted, when scheduled work starts) and deleted when no work is in flight.

Why not one per tool call: the log already makes every call's outcome durable (promise 3), and an atomic
replace costs three fsyncs. The payload names the step's calls; recovery reads their outcomes from the ledger.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import msgspec

from safepoint.protocol import (
    PAYLOAD_MODES,
    ExecutionConfig,
    RestartPayload,
    RuntimeRestartCheckpoint,
    RuntimeRestartReactionLoopState,
)

if TYPE_CHECKING:
    from safepoint.engine.session import RunSession

_encoder = msgspec.json.Encoder()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class RestartState:
    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.created_at: int | None = None
        self.current: RestartPayload | None = None

    def config(self) -> ExecutionConfig:
        session = self.session
        info = session.info
        return ExecutionConfig(
            generation=session.claim.generation,
            model=session.model,
            context_epoch=session.view.context_epoch,
            history_len=session.durable_history_len,
            parent_run_id=info.parent_run_id,
            parent_call_id=info.parent_call_id,
            tools_allowed=info.tools_allowed,
            grant_expires_at_ms=info.grant_expires_at_ms,
        )

    def write(self, payload: RestartPayload) -> None:
        """Upsert the checkpoint: durable and atomic before this returns, refused if this process is stale."""
        session = self.session
        at = now_ms()
        if self.created_at is None:
            self.created_at = at
        checkpoint = RuntimeRestartCheckpoint(
            agent_id=session.info.run_id,
            mode=PAYLOAD_MODES[type(payload)],
            payload_json=_encoder.encode(payload).decode(),
            created_at=self.created_at,
            updated_at=at,
            recovery_class=session.info.recovery_class,
            recovery_owner_id=session.info.owner_id,
            execution_config_json=_encoder.encode(self.config()).decode(),
        )
        session.store.upsert_restart_checkpoint(session.claim, _encoder.encode(checkpoint))
        self.current = payload
        session.trace("restart_checkpoint", mode=checkpoint.mode)

    def loop_state(self, turn: int, *, visible_output_started: bool = False) -> RuntimeRestartReactionLoopState:
        session = self.session
        history = session.history
        batches = 0
        for message in reversed(history):
            if message.role == "user":
                break
            if message.role == "assistant" and message.tool_calls:
                batches += 1
        in_history = {m.tool_call_id for m in history if m.role == "tool"}
        done = {
            call.call_id: entry.result_ref
            for call in session.pending
            if (entry := session.ledger.get(call.call_id)) is not None
            and entry.status in ("succeeded", "failed")
            and entry.result_ref
            and call.call_id not in in_history
        }
        return RuntimeRestartReactionLoopState(
            turn=turn,
            consecutive_batches=batches,
            pending_tool_calls=tuple(call.call_id for call in session.pending),
            completed_unpersisted_tool_outputs=done,
            # Over every branch the run ever had: a rewind does not give back the inferences it made.
            lifetime_inference_count=sum(1 for m in session.message_records.values() if m.role == "assistant"),
            lifetime_tool_call_count=len(session.ledger),
            visible_output_started=visible_output_started,
        )

    def delete(self) -> None:
        self.session.store.delete_restart_checkpoint(self.session.claim)
        self.current = None
        self.created_at = None
