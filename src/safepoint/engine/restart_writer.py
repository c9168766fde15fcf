"""The run's one restart checkpoint (seed 003 §1.2, §2), written by its owner: upserted at the moments the seed
names (after a model turn with the calls it made, before streamed text reaches the user, while a call waits for
approval, when a submission is admitted, when scheduled work starts) and deleted when no work is in flight.

Why not one per tool call: the log already makes every call's outcome durable (promise 3), and an atomic
replace costs three fsyncs. The payload names the step's calls; recovery reads their outcomes from the ledger.
What goes into a payload is the restart layer's business (``restart.checkpoint``); this part only writes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from safepoint.errors import StaleGenerationError
from safepoint.protocol import PAYLOAD_MODES, ExecutionConfig, RestartPayload, RuntimeRestartCheckpoint
from safepoint.records import Claim, RunInfo
from safepoint.store.base import Store

_encoder = msgspec.json.Encoder()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class RestartWriter:
    def __init__(
        self,
        store: Store,
        claim: Claim,
        info: RunInfo,
        config: Callable[[], ExecutionConfig],
        trace: Callable[..., Any],
        redact: Callable[[Any], Any],
        fenced: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.claim = claim
        self.info = info
        self._config = config  # the execution config as it is now (generation, model, durable history, grants)
        self._trace = trace
        self._fenced = fenced  # says in the trace that a write was refused to this (stale) process
        self._redact = redact  # the run's redactor: a queued submission's text is the person's, secrets and all
        self.created_at: int | None = None
        self.current: RestartPayload | None = None  # what the checkpoint holds now (None: no work in flight)

    def write(self, payload: RestartPayload) -> None:
        """Upsert the checkpoint: durable and atomic before this returns, refused if this process is stale."""
        at = now_ms()
        if self.created_at is None:
            self.created_at = at
        checkpoint = RuntimeRestartCheckpoint(
            agent_id=self.info.run_id,
            mode=PAYLOAD_MODES[type(payload)],
            payload_json=_encoder.encode(self._redact(msgspec.to_builtins(payload))).decode(),
            created_at=self.created_at,
            updated_at=at,
            recovery_class=self.info.recovery_class,
            recovery_owner_id=self.info.owner_id,
            execution_config_json=_encoder.encode(self._redact(msgspec.to_builtins(self._config()))).decode(),
        )
        try:
            self.store.upsert_restart_checkpoint(self.claim, _encoder.encode(checkpoint))
        except StaleGenerationError:
            self._refused()
            raise
        self.current = payload
        self._trace("restart_checkpoint", mode=checkpoint.mode)

    def delete(self) -> None:
        try:
            self.store.delete_restart_checkpoint(self.claim)
        except StaleGenerationError:
            self._refused()
            raise
        self.current = None
        self.created_at = None
        self._trace("restart_checkpoint_deleted")

    def _refused(self) -> None:
        if self._fenced is not None:
            self._fenced("restart_checkpoint")
