"""The log writer: the one place a run's records become durable.

Ordering rules (promise 1 and 6 rest on them):

- ``add`` only stages a record in memory and gives it the next sequence number; nothing is on disk yet.
- ``commit`` hands every staged record to ``Store.append`` in ONE call, under the claim's generation: either the
  whole group is durable (fsync'd) or none of it is, and a stale generation is refused for the whole group. So a
  caller that needs "A is durable before B happens" stages A and commits before it does B (the ledger's
  ``started`` before a tool runs). A failed append takes the sequence numbers back, so the in-memory log never
  runs ahead of the store.
- ``durable_seq`` is the last record a committed group covered (it covers every record before it too): what a
  restart checkpoint may point into. Every commit is durable: no record of the log is worth a crash-window.
- Trace events are observability, not recovery: they are batched (``TRACE_BATCH``) and written after a commit or
  on close, never inside the group; losing the last few to a crash costs nothing.

Rejected: one append per record (an fsync each: a call would cost five), and a background flusher (a record
durable "soon" cannot order a tool run after it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from safepoint.errors import StoreError
from safepoint.records import RECORD_KINDS, Claim, LogRecord
from safepoint.store.base import Store

_encoder = msgspec.json.Encoder()
TRACE_BATCH = 64  # trace events are written in batches: they are observability, not recovery


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class LogWriter:
    """Stages records with sequence numbers and group-commits them under the run's claim."""

    def __init__(self, store: Store, claim: Claim, last_seq: int) -> None:
        self.store = store
        self.claim = claim
        self.run_id = claim.run_id
        self.seq = last_seq  # the sequence number of the last record staged (durable once committed)
        self._buffer: list[LogRecord] = []
        self._trace: list[bytes] = []
        self.durable_seq = last_seq

    def add(self, body: msgspec.Struct) -> int:
        """Stage a record; it becomes durable with the next ``commit``. Returns its sequence number."""
        self.seq += 1
        self._buffer.append(
            LogRecord(
                kind=RECORD_KINDS[type(body)],
                body=msgspec.Raw(_encoder.encode(body)),
                seq=self.seq,
                gen=self.claim.generation,
            )
        )
        return self.seq

    def commit(self) -> None:
        """Write every staged record in one append: one fsync."""
        if not self._buffer:
            return
        records, self._buffer = self._buffer, []
        try:
            self.store.append(self.claim, records)
        except StoreError:
            self.seq -= len(records)
            raise
        self.durable_seq = self.seq
        if len(self._trace) >= TRACE_BATCH:
            self.flush_trace()

    def trace(self, event: str, **data: Any) -> None:
        self._trace.append(_encoder.encode({"event": event, "at": now(), "run_id": self.run_id, "data": data}))

    def flush_trace(self) -> None:
        if self._trace:
            lines, self._trace = self._trace, []
            self.store.trace(self.run_id, lines)
