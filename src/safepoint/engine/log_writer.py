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
- Trace events are observability, not recovery: they are batched (``TRACE_BATCH`` events or ``TRACE_BYTES``) and
  written after a commit or on close, never inside the group, and never fsync'd. A crash (SIGKILL) loses at most
  the batch not yet written, never a record recovery reads: recovery relies on the log's records only (the
  ledger's states, the checkpoints, the messages, file patches and before-states, decisions, recovery reports, the
  run's events), and every decision a trace event reports is in the log first; the trace is diagnostics and only
  ever says too little, never too much. The batch is written at the moments that matter: at the end of a step of
  the agent loop that changed something or decided something (``end_of_step``: a call that is not an idempotent
  read, a file patch, a decision, a run event; a step of reads only waits for the batch to fill, or to be
  ``TRACE_AGE`` old, so ``trace --follow`` is at most that far behind a stretch of reads: a flush a step made the
  trace 0.3 KB a step, a third of the history's records), after a recovery decision (the resume flushes; a
  restart cleanup, which has no session, writes its events at once: ``trace_now``), when a process is fenced off
  (the refusal is the last thing it says), and when the run is closed, so a process that ends normally loses
  nothing. Lines staged since the last commit are dropped when that commit's append is refused: what they said of
  its records never happened. Events and their fields are the vocabulary's (``core.trace_events``): a name or a
  field it does not hold is refused (``ValueError``), so producers cannot drift; each line carries the writer's
  generation.

Blobs (``core.blobs``): content too big to sit in a record is staged beside the group (``stage_blob``) and made
durable in the store (``Store.put_blobs``) before the group is appended; the group's ``Blob`` records are only
references to it.

Redaction (promise: secrets stay out): every record but a ``Blob`` goes through the run's ``Redactor`` here, the
one place records become bytes, so model text, tool arguments and results, decisions and trace events are
redacted whoever staged them (rejected: redacting in each caller, which the next caller forgets). Blobs stay exact:
they are file versions and patches that rollback restores byte for byte (the user's own files). So do the fields
of a record that rollback, restore, capture and conflicts rely on (paths, hashes, refs, ids, statuses:
``records.FIELD_REDACTION``, through ``Redactor.record``): no pattern can make a file escape rollback. The in-memory
records keep the real text, so the live session (and the input hash the ledger records, taken of the real
arguments) is unchanged; a resume reads the redacted text (see ``redacted_arguments``).

Rejected: one append per record (an fsync each: a call would cost five), and a background flusher (a record
durable "soon" cannot order a tool run after it).
"""

from __future__ import annotations

import contextlib
import os
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from safepoint.core import checkpoint_codec, record_rows, trace_events
from safepoint.core.environment import credential_values
from safepoint.core.history_codec import HistoryEncoder
from safepoint.core.redact import Redactor
from safepoint.core.run_summary import SummaryFold, summary_encoder
from safepoint.engine import failpoints
from safepoint.errors import ConfigError, CorruptRecordError, SafepointError, StaleGenerationError, StoreError
from safepoint.records import (
    RECORD_KINDS,
    Blob,
    CallDecision,
    Checkpoint,
    CheckpointConflict,
    Claim,
    FileBeforeState,
    FilePatchEntry,
    LogRecord,
    Message,
    MessageDictionary,
    Rewind,
    RunEvent,
    RunInfo,
    ToolLedgerEntry,
)
from safepoint.store.base import Store
from safepoint.store.sealed import store_key

_header_decoder = msgspec.json.Decoder(RunInfo)

_encoder = msgspec.json.Encoder()
TRACE_BATCH = 256  # trace events are written in batches: they are observability, not recovery
TRACE_BYTES = 64 * 1024  # ... or once their lines hold this much
# Seconds: a step of reads only writes a batch this old (``end_of_step``). Not one: an agent whose model takes a
# few seconds a turn would then write its trace every step again (0.3 KB a step, not 0.1).
TRACE_AGE = 30.0
# Records after which the step's trace is written at its end (``end_of_step``): what changes something or decides
# something. A ledger entry counts unless its call is an idempotent read.
_TRACED_NOW = (FilePatchEntry, FileBeforeState, CallDecision, RunEvent, Rewind, CheckpointConflict)
REDACT_FILE = os.path.join(".safepoint", "redact.toml")  # the workspace's own patterns: ``patterns = ["..."]``
REDACTED_MARK = "[REDACTED:"
# Why a crashed call whose arguments held a secret is reported, not re-run (rejected: re-running it with the
# redacted text, which would send "[REDACTED:...]" where a password was; and keeping the real arguments, which
# would put the secret on disk).
SECRET_ARGUMENTS = "its arguments held a secret, redacted before they were stored, so it is never run again from them"


def run_redactor(
    workspace: str | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    withhold: Iterable[str] = (),
    store: Store | None = None,
) -> Redactor:
    """The redactor of a session: the built-in patterns, the values of the environment's credential variables
    (``core.environment``; the store URL's password among them) and of the variables in ``withhold`` (the
    provider's key variable, whatever its name: ``provider_key_variables``), the key ``store`` was opened with
    (however it was given: ``SAFEPOINT_KEY``, a key file, the library's argument), and the workspace's
    ``.safepoint/redact.toml``."""
    environ = os.environ if environ is None else environ
    patterns: list[str] = []
    if workspace is not None:
        path = os.path.join(workspace, REDACT_FILE)
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            data = {}
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{REDACT_FILE}: cannot read it ({exc}); fix or remove it") from None
        listed = data.get("patterns", [])
        if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
            raise ConfigError(f'{REDACT_FILE}: patterns must be a list of regular expressions, e.g. patterns = ["x"]')
        patterns = listed
    values = credential_values(environ, withhold=withhold)
    key = store_key(store) if store is not None else None
    if key is not None:
        values.extend(key.texts())
    return Redactor(values=values, patterns=patterns)


def provider_key_variables(provider: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The variable a run's provider reads its key from (``--api-key-env``), as a run header records it."""
    name = (provider or {}).get("api_key_env")
    return (str(name),) if name else ()


def redacted_arguments(args: Mapping[str, Any]) -> bool:
    """True when recorded arguments lost a secret to redaction: such a call is never run again from them."""
    stack: list[Any] = [args]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if REDACTED_MARK in item:
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class LogWriter:
    """Stages records with sequence numbers and group-commits them under the run's claim."""

    def __init__(self, store: Store, claim: Claim, last_seq: int, redactor: Redactor | None = None) -> None:
        self.store = store
        self.redactor = redactor or run_redactor()
        self.claim = claim
        self.run_id = claim.run_id
        self.seq = last_seq  # the sequence number of the last record staged (durable once committed)
        self._buffer: list[LogRecord] = []
        self._blobs: dict[str, bytes] = {}  # store-wide blobs the staged records reference, by name
        self._trace: list[bytes] = []
        self._trace_bytes = 0
        self._trace_since = 0.0  # monotonic time of the oldest line not yet written
        self._trace_now = False  # a record staged since the last batch asks for it at the step's end
        self._traced_durable = 0  # the staged trace lines up to here were staged before the last commit
        self.refused = False  # a write was refused: a newer owner took the run over
        self._trace_redactor = TraceRedactor(self.redactor)
        self.durable_seq = last_seq
        self._history = HistoryEncoder()  # messages compressed after redaction (``core.history_codec``)
        self._header: RunInfo | Literal[False] | None = None  # the run's header, once a row needs it (False: unread)
        # The run's summary, folded from every record staged and written with each group (``core.run_summary``);
        # None: this writer keeps none (a reader's, a restart's), and readers of the run read its log.
        self.summary: SummaryFold | None = None
        # Called after each group is durable (the session's snapshot schedule); None: nothing to do.
        self.after_commit: Callable[[], None] | None = None

    def add(self, body: msgspec.Struct) -> int:
        """Stage a record; it becomes durable with the next ``commit``. Returns its sequence number."""
        encoded = self._encode(body)  # first: a message may stage its history's new dictionary ahead of it
        self.seq += 1
        if self.summary is not None:
            self.summary.observe(body)
        if isinstance(body, _TRACED_NOW) or (isinstance(body, ToolLedgerEntry) and body.idempotency != "idempotent"):
            self._trace_now = True
        self._buffer.append(
            LogRecord(kind=RECORD_KINDS[type(body)], body=msgspec.Raw(encoded), seq=self.seq, gen=self.claim.generation)
        )
        return self.seq

    def _encode(self, body: msgspec.Struct) -> bytes:
        if isinstance(body, Blob):
            return _encoder.encode(body)
        if isinstance(body, Checkpoint):  # without what its place in the log says (``core.checkpoint_codec``)
            body = checkpoint_codec.compact(body, self.run_id, self.seq + 1)
        if isinstance(body, Message):  # redacted first: the compressed bytes never hide a secret
            return self._history.encode(self.redactor.record(body), self._stage_dictionary)
        redacted = self.redactor.record(body)
        # A ledger state or a checkpoint as a row (``core.record_rows``): its values without their names.
        place = self._place(self.seq + 1)
        return record_rows.encode(RECORD_KINDS[type(body)], redacted, place) or _encoder.encode(redacted)

    def _place(self, seq: int) -> record_rows.Place:
        """Where record ``seq`` sits, with what the run's header says (read once; a row says less without it)."""
        if self._header is None:
            try:
                self._header = _header_decoder.decode(self.store.run_header(self.run_id))
            except (SafepointError, msgspec.DecodeError, OSError):  # the row then says what the header would
                self._header = False
        if self._header is False:
            return record_rows.Place(self.run_id, seq)
        return record_rows.place_of(self._header, seq)

    def _stage_dictionary(self, dictionary: MessageDictionary) -> int:
        """Stage the history's new dictionary ahead of the message compressed against it (same group)."""
        self.seq += 1
        self._buffer.append(
            LogRecord(
                kind="message_dict",
                body=msgspec.Raw(_encoder.encode(dictionary)),
                seq=self.seq,
                gen=self.claim.generation,
            )
        )
        return self.seq

    def redact_bytes(self, data: bytes) -> bytes:
        """An artifact (a command's long output) as it may be kept: redacted; bytes that are not UTF-8 are kept as
        they decode with replacement, so no secret hides behind a stray byte."""
        text = data.decode(errors="replace")
        redacted = self.redactor.text(text)
        return data if redacted == text else redacted.encode()

    def stage_blob(self, name: str, data: bytes) -> None:
        """Stage a store-wide blob (``core.blobs``) that a record staged with it references: it is made durable
        before the group is appended, by the same ``commit``."""
        self._blobs[name] = data

    def staged_blob(self, name: str) -> bytes | None:
        """A blob staged and not yet committed (it is the store's to give once committed)."""
        return self._blobs.get(name)

    def commit(self) -> None:
        """Write the staged blobs, then every staged record in one append: one fsync each. The blobs first, and
        the append only once they are durable: a record never references a blob a crash can lose (a blob a crash
        leaves unreferenced costs only space, which ``gc`` frees)."""
        if not self._buffer:
            return
        records, self._buffer = self._buffer, []
        blobs, self._blobs = list(self._blobs.items()), {}
        try:
            summary = self._summary(records[-1].seq)
            if blobs:
                # Held from the put to the append: gc cannot remove a blob whose reference is on its way in.
                with self.store.blobs_shared():
                    self.store.put_blobs(blobs)
                    failpoints.hit("blob_written")
                    self.store.append(self.claim, records, summary=summary)
                failpoints.hit("log_group_durable")
            else:
                self.store.append(self.claim, records, summary=summary)
        except StoreError as exc:
            if self.summary is not None:
                self.summary.enabled = False  # it folded records the store refused: no longer the log's summary
            self.seq -= len(records)
            self._history.forget(self.seq)  # a dictionary staged in the refused group was never stored
            del self._trace[self._traced_durable :]  # what they said of the refused records never happened
            self._trace_bytes = sum(map(len, self._trace))
            if isinstance(exc, StaleGenerationError):
                self.fenced("append")
            raise
        self.durable_seq = self.seq
        self._traced_durable = len(self._trace)
        if len(self._trace) >= TRACE_BATCH or self._trace_bytes >= TRACE_BYTES:
            self.flush_trace()
        if self.after_commit is not None:
            self.after_commit()

    def _summary(self, seq: int) -> bytes | None:
        fold = self.summary
        if fold is None or not fold.enabled:
            return None
        found = fold.snapshot(seq, now())
        if found.closed_detail:
            found = msgspec.structs.replace(found, closed_detail=self.redactor.text(found.closed_detail))
        return summary_encoder.encode(found)

    def trace(self, event: str, **data: Any) -> None:
        """Stage a trace event (``core.trace_events`` names it and its fields); written with the next batch."""
        line = trace_line(self._trace_redactor, self.run_id, self.claim.generation, event, data)
        if not self._trace:
            self._trace_since = time.monotonic()
        self._trace.append(line)
        self._trace_bytes += len(line)

    def end_of_step(self) -> None:
        """A step of the agent loop ended: its trace is written now when it changed or decided something, else
        when the batch is full or ``TRACE_AGE`` old (see the module's ordering rules)."""
        if self._trace_now or (self._trace and time.monotonic() - self._trace_since >= TRACE_AGE):
            self.flush_trace()

    def flush_trace(self) -> None:
        self._trace_now = False
        if self._trace:
            lines, self._trace = self._trace, []
            self._traced_durable = 0
            self._trace_bytes = 0
            self.store.trace(self.run_id, lines)

    def fenced(self, what: str) -> None:
        """This process was refused a write: a newer owner took the run over. Said in the trace at once (not
        fenced: the trace is observability, and the refusal is this process's last word), whatever else fails."""
        self.refused = True
        owner = None
        with contextlib.suppress(Exception):
            owner = self.store.owner(self.run_id)
        self.trace("fencing_refused", what=what, current_generation=owner.generation if owner else None)
        with contextlib.suppress(Exception):
            self.flush_trace()


class TraceRedactor:
    """The run's redactor as the trace uses it: the same patterns, with what it returned for a short string
    remembered, since a trace says the same ids, tool names and statuses again and again (rejected: redacting
    every value afresh, 30 µs of a 40 µs event). Field names are the vocabulary's and are not redacted."""

    CACHED = 256  # longer strings (a reason, a detail) are redacted each time
    LIMIT = 4096  # remembered strings; past this the memory starts again

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._seen: dict[str, str] = {}

    def text(self, text: str) -> str:
        found = self._seen.get(text)
        if found is None:
            found = self.redactor.text(text)
            if len(text) <= self.CACHED:
                if len(self._seen) >= self.LIMIT:
                    self._seen.clear()
                self._seen[text] = found
        return found

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        return value


def trace_line(redactor: TraceRedactor, run_id: str, generation: int, event: str, data: dict[str, Any]) -> bytes:
    """One trace line: checked against the vocabulary, redacted, encoded."""
    trace_events.check(event, data)
    fields = {name: redactor.value(value) for name, value in msgspec.to_builtins(data).items()}
    entry = {"event": event, "at": now(), "run_id": redactor.text(run_id), "generation": generation, "data": fields}
    return _encoder.encode(entry)


def stored_run_redactor(store: Store, run_id: str) -> Redactor:
    """A run's redactor from its stored header, for what is written without its session (a person's control
    record, a restart's own records, their trace): the built-in patterns, this process's credential values, the
    provider's key variable whatever its name and the patterns of the run's workspace. Raises
    ``RunNotFoundError``; a header that does not decode gives the redactor without the run's own parts."""
    try:
        info = _header_decoder.decode(store.run_header(run_id))
    except (msgspec.DecodeError, CorruptRecordError):
        return run_redactor(None, store=store)
    return header_redactor(info, store)


def header_redactor(info: RunInfo, store: Store | None = None) -> Redactor:
    """The redactor of the run ``info`` heads: its workspace's patterns and its provider's key variable too (and
    the key of ``store``, when given)."""
    return run_redactor(info.workspace, withhold=provider_key_variables(info.provider), store=store)


def trace_now(store: Store, run_id: str, generation: int, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Write trace events at once, for work done without a session (a restart cleanup, a control request),
    redacted as the run's own session would."""
    if events:
        try:
            base = stored_run_redactor(store, run_id)
        except SafepointError:  # observability never stops the work it describes
            base = run_redactor(None)
        redactor = TraceRedactor(base)
        store.trace(run_id, [trace_line(redactor, run_id, generation, event, data) for event, data in events])
