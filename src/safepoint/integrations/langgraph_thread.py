"""One LangGraph thread as the store keeps it: its records, and the index a saver folds them into.

A thread is one run of the store, ``lg-<SHA-256 of the thread id>`` (any thread id, ``../``, NUL, 10 KB or
unicode, becomes a fixed-size name; the id itself is in the run's header, checked on every load so a collision or
a renamed run is an error, never another thread's state). Its log holds ``Blob`` records only, each the msgpack of
one of the records below (rejected: new record kinds, which every reader of the store, ``status`` and ``fsck``
among them, would report as unknown; a ``Blob`` is what the log already keeps exactly and checksums):

- ``ValueRecord``: one channel's value at one version, stored once (``new_versions`` names what changed; a version
  stored already is not stored again). A list channel (a growing ``messages``) whose previous value is a prefix of
  the new one is stored as that base version plus the new items: a step that adds one message stores one message,
  not the whole list (the per-step storage promise; ``SqliteSaver`` stores every value on every step).
- ``CheckpointRecord``: the checkpoint without its values (they are named by ``channel_versions``), its metadata
  and its parent.
- ``WritesRecord``: a task's pending writes for one checkpoint (a regular write given twice is kept once; the
  special ones, ``__error__``, ``__interrupt__``..., are replaced, as in LangGraph's own savers).
- ``DropRecord``: checkpoints (and their writes) removed by ``prune``/``delete_for_runs``, or the whole thread.
  The log only grows, so a drop hides; the space comes back when the thread is deleted (``Store.delete_run``).

Values are what the graph's serializer (``serde.dumps_typed``) makes of them, after the run's redactor has walked
them: strings and bytes in dicts, lists, tuples and sets, a LangChain message's content, tool-call arguments and
extra fields (model text, what tools returned, what the user typed), the fields of pydantic models (a ``Document``)
and dataclasses. Other objects are stored as the serializer makes them.
A redacted secret comes back as ``[REDACTED:...]`` after a restart, as everywhere in safepoint; in the process that
wrote it the graph goes on with its own state.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from langgraph.checkpoint.base import WRITES_IDX_MAP

from safepoint.core.blobs import make_blob, open_blob
from safepoint.core.redact import Redactor
from safepoint.errors import CorruptRecordError
from safepoint.records import Blob, LogRecord, RunInfo

Version = int | float | str
Typed = tuple[str, bytes]  # what ``SerializerProtocol.dumps_typed`` returns
LIST = "safepoint.list"  # a list value stored item by item (``items``), after the items of ``base``
EMPTY = "empty"  # a version named in ``new_versions`` with no value (LangGraph's own marker)
PREFIX = "lg-"
MATCH_KEY = "langgraph_match_key"  # the header's key of the thread's HMAC key for metadata filters


class ValueRecord(msgspec.Struct, tag_field="record", tag="value", frozen=True, kw_only=True, omit_defaults=True):
    ns: str
    channel: str
    version: Version
    type: str
    data: bytes = b""
    base: Version | None = None  # LIST: the version whose items come first
    items: list[Typed] = msgspec.field(default_factory=list)


class CheckpointRecord(
    msgspec.Struct, tag_field="record", tag="checkpoint", frozen=True, kw_only=True, omit_defaults=True
):
    ns: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: Typed  # the checkpoint without ``channel_values``
    metadata: Typed
    # key -> HMAC (the thread's MATCH_KEY) of a metadata value the redactor changed: ``list(filter=...)`` matches
    # the caller's value against it, never against "[REDACTED:...]" (the same for every secret) nor a kept plain text
    matches: dict[str, str] = msgspec.field(default_factory=dict)


class WritesRecord(msgspec.Struct, tag_field="record", tag="writes", frozen=True, kw_only=True):
    ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: list[tuple[int, str, str, bytes]]  # (idx, channel, type, data)


class DropRecord(msgspec.Struct, tag_field="record", tag="drop", frozen=True, kw_only=True, omit_defaults=True):
    everything: bool = False
    checkpoints: list[tuple[str, str]] = msgspec.field(default_factory=list)  # (ns, checkpoint id)


ThreadRecord = ValueRecord | CheckpointRecord | WritesRecord | DropRecord
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ThreadRecord)
_blob_decoder = msgspec.json.Decoder(Blob)
_header_decoder = msgspec.json.Decoder(RunInfo)


def thread_run_id(thread_id: str) -> str:
    """The store's run for a thread: a fixed-size name whatever the thread id holds."""
    return PREFIX + hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]


THREAD = "langgraph_thread_id"  # the thread id in its run's header (redacted when it looks like a secret)
THREAD_DIGEST = "langgraph_thread_digest"  # then: its digest, by which the run is known to hold it


def thread_config(thread_id: str, redactor: Redactor, name: Callable[[str], str]) -> dict[str, str]:
    """What a thread's run header says of its id. An id the redactor would change (a thread named by an API key,
    a token in a session name) is kept as an identifier: its digest (``name``: the store's ``blob_name``, keyed on an
    encrypted store), and the redacted text for a reader; never in clear (rejected: the id as given, which put the
    secret in every header, and the redacted id alone, which no thread id matches again). Such a thread is found by
    its id; ``list()`` without a thread does not name it (its id is not in the store)."""
    shown = str(redactor.text(thread_id))
    if shown == thread_id:
        return {THREAD: thread_id}
    return {THREAD: shown, THREAD_DIGEST: thread_digest(thread_id, name)}


def thread_digest(thread_id: str, name: Callable[[str], str]) -> str:
    digest = hashlib.sha256(b"langgraph thread\0" + thread_id.encode("utf-8", "surrogatepass")).hexdigest()
    return name("sha256:" + digest)


def holds_thread(header: bytes, thread_id: str, name: Callable[[str], str]) -> bool:
    """Whether a run's header names ``thread_id`` (in clear, or by its digest: ``thread_config``)."""
    try:
        info = _header_decoder.decode(header)
    except msgspec.DecodeError:
        return False
    if info.model != "langgraph":
        return False
    kept = info.model_config.get(THREAD_DIGEST)
    if isinstance(kept, str):
        return hmac.compare_digest(kept, thread_digest(thread_id, name))
    return info.model_config.get(THREAD) == thread_id


def thread_of(header: bytes) -> str | None:
    """The thread id a run's header names, or None: the run is not a LangGraph thread."""
    try:
        info = _header_decoder.decode(header)
    except msgspec.DecodeError:
        return None
    if info.model != "langgraph" or THREAD_DIGEST in info.model_config:
        return None  # a thread kept by its digest: its id is not in the store to name (``thread_config``)
    thread = info.model_config.get(THREAD)
    return thread if isinstance(thread, str) else None


def match_key_of(header: bytes) -> bytes:
    """The thread's key for ``CheckpointRecord.matches``, kept in its run's header (sealed on an encrypted store)."""
    try:
        info = _header_decoder.decode(header)
        return bytes.fromhex(str(info.model_config.get(MATCH_KEY, "")))
    except (msgspec.DecodeError, ValueError):
        return b""


def encode(record: ThreadRecord) -> Blob:
    return make_blob(_encoder.encode(record))


def decode(record: LogRecord) -> ThreadRecord:
    if record.kind != "blob":
        raise CorruptRecordError(f"record {record.seq} is a {record.kind!r}, not one of a LangGraph thread")
    return _decoder.decode(open_blob(_blob_decoder.decode(record.body)))


# Redaction by structure ------------------------------------------------------------------------------------------
def redact(redactor: Redactor, value: Any) -> Any:
    """``value`` with its text redacted (see the module docstring); the very object when nothing changed, so a
    value without secrets costs no copy. Walked: str, bytes, dict, list, tuple, set, a LangChain message, any
    pydantic model (a ``Document``, the user's own), a dataclass (rejected: str, dict, list and messages only, which
    kept a key held in a model, a retrieved ``Document``, a set, raw bytes or a dataclass in clear)."""
    return _redact(redactor, value, set())


def _redact(redactor: Redactor, value: Any, path: set[int]) -> Any:
    if isinstance(value, str):
        return redactor.text(value)
    if isinstance(value, bytes | bytearray):
        text = bytes(value).decode("utf-8", "surrogateescape")
        redacted = redactor.text(text)
        return value if redacted == text else type(value)(redacted.encode("utf-8", "surrogateescape"))
    if isinstance(value, int | float | bool) or value is None:
        return value
    if id(value) in path:  # a cycle (a model that holds itself): walked once
        return value
    path.add(id(value))
    try:
        return _redact_container(redactor, value, path)
    finally:
        path.discard(id(value))


def _redact_container(redactor: Redactor, value: Any, path: set[int]) -> Any:
    if isinstance(value, dict):
        pairs = [(_redact(redactor, k, path), _redact(redactor, v, path)) for k, v in value.items()]
        changed = any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True))
        return dict(pairs) if changed else value
    if isinstance(value, list | tuple | set | frozenset):
        items = [_redact(redactor, item, path) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, set | frozenset):
            return type(value)(items)
        return type(value)(items) if isinstance(value, tuple) and not hasattr(value, "_fields") else items
    return _redact_object(redactor, value, path)


def _redact_object(redactor: Redactor, value: Any, path: set[int]) -> Any:
    import dataclasses

    from langchain_core.messages import BaseMessage
    from pydantic import BaseModel

    if isinstance(value, BaseMessage):
        names: Iterable[str] = ("content", "additional_kwargs", "tool_calls", "invalid_tool_calls", "artifact")
    elif isinstance(value, BaseModel):
        names = type(value).model_fields
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value)]
    else:
        return value  # stored as the serializer makes it
    update: dict[str, Any] = {}
    for name in names:
        if hasattr(value, name):
            current = getattr(value, name)
            redacted = _redact(redactor, current, path)
            if redacted is not current:
                update[name] = redacted
    if not update:
        return value
    if isinstance(value, BaseModel):
        return value.model_copy(update=update)
    import copy

    copied = copy.copy(value)  # not dataclasses.replace: it refuses init=False fields
    for name, redacted in update.items():
        object.__setattr__(copied, name, redacted)  # a frozen dataclass too
    return copied


# The index a saver keeps of one thread ---------------------------------------------------------------------------
@dataclass
class Saved:
    record: CheckpointRecord
    metadata: dict[str, Any]  # decoded once: ``list(filter=...)`` compares against it


@dataclass
class ThreadIndex:
    """Everything one thread's log says, folded; ``apply`` is the one way a record changes it (loading a log and
    writing a new record go through it alike, so what a saver serves is what a reload would serve)."""

    thread_id: str
    run_id: str
    checkpoints: dict[str, dict[str, Saved]] = field(default_factory=dict)  # ns -> checkpoint id -> saved
    values: dict[tuple[str, str, Version], ValueRecord] = field(default_factory=dict)  # (ns, channel, version)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, str, bytes, str]]] = field(
        default_factory=dict
    )  # (ns, checkpoint id) -> (task id, idx) -> (task id, channel, type, data, task path)
    # (ns, channel) -> (version, the items of its latest list value, serialized): what the next list is compared to
    lists: dict[tuple[str, str], tuple[Version, list[Any], list[Typed]]] = field(default_factory=dict)
    last_seq: int = 0
    match_key: bytes = b""  # the thread's key for ``matches`` (empty: a thread made before it; plain compare only)

    def _digest(self, value: Any) -> str | None:
        try:
            encoded = msgspec.json.encode(value, order="sorted")
        except (TypeError, msgspec.EncodeError):
            return None  # a value JSON cannot hold is matched as it is stored, as before
        return hmac.new(self.match_key, encoded, hashlib.sha256).hexdigest()

    def matches_of(self, plain: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, str]:
        """The keyed hashes of the metadata values redaction changed (see ``CheckpointRecord.matches``)."""
        if not self.match_key:
            return {}
        found = {}
        for key, value in plain.items():
            if stored.get(key) is not value and (digest := self._digest(value)) is not None:
                found[key] = digest
        return found

    def matches(self, saved: Saved, wanted: dict[str, Any]) -> bool:
        """Does a checkpoint's metadata hold every ``wanted`` value (as ``InMemorySaver`` compares)?"""
        for key, value in wanted.items():
            digest = saved.record.matches.get(key)
            if digest is not None and self.match_key:
                if not hmac.compare_digest(digest, self._digest(value) or ""):
                    return False
            elif saved.metadata.get(key) != value:
                return False
        return True

    def apply(self, record: ThreadRecord, load_metadata: Any) -> None:
        if isinstance(record, ValueRecord):
            self.values.setdefault((record.ns, record.channel, record.version), record)
        elif isinstance(record, CheckpointRecord):
            metadata = load_metadata(record.metadata)
            self.checkpoints.setdefault(record.ns, {})[record.checkpoint_id] = Saved(record, metadata)
        elif isinstance(record, WritesRecord):
            kept = self.writes.setdefault((record.ns, record.checkpoint_id), {})
            for idx, channel, kind, data in record.writes:
                key = (record.task_id, idx)
                if idx >= 0 and key in kept:
                    continue  # a regular write given again (a retried put_writes) is kept once
                kept[key] = (record.task_id, channel, kind, data, record.task_path)
        elif record.everything:
            self.checkpoints.clear()
            self.values.clear()
            self.writes.clear()
            self.lists.clear()
        else:
            for ns, checkpoint_id in record.checkpoints:
                self.checkpoints.get(ns, {}).pop(checkpoint_id, None)
                self.writes.pop((ns, checkpoint_id), None)

    def items_of(self, ns: str, channel: str, version: Version) -> list[Typed]:
        """The serialized items of a LIST value, its bases' first (walked without recursion)."""
        parts: list[list[Typed]] = []
        key: tuple[str, str, Version] | None = (ns, channel, version)
        while key is not None:
            record = self.values.get(key)
            if record is None or record.type != LIST:
                raise CorruptRecordError(
                    f"LangGraph thread {self.thread_id!r}: the value of {channel!r} at version {key[2]!r} is "
                    f"missing from run {self.run_id}; check the store with `safepoint fsck {self.run_id}`"
                )
            parts.append(record.items)
            key = None if record.base is None else (ns, channel, record.base)
        return [item for part in reversed(parts) for item in part]

    def new_writes(
        self, ns: str, checkpoint_id: str, task_id: str, writes: Iterable[tuple[str, Any]]
    ) -> Iterator[tuple[int, str, Any]]:
        """The writes of a ``put_writes`` not kept already: (idx, channel, value)."""
        kept = self.writes.get((ns, checkpoint_id), {})
        for position, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, position)
            if idx >= 0 and (task_id, idx) in kept:
                continue
            yield idx, channel, value

    def runs_of(self, run_ids: set[str]) -> list[tuple[str, str]]:
        """The checkpoints (ns, id) whose metadata names one of ``run_ids``."""
        return [
            (ns, checkpoint_id)
            for ns, saved in self.checkpoints.items()
            for checkpoint_id, one in saved.items()
            if one.metadata.get("run_id") in run_ids
        ]

    def all_but_latest(self) -> list[tuple[str, str]]:
        """What ``prune(keep_latest)`` drops: in each namespace, all but the latest checkpoint and the ancestors a
        ``DeltaChannel`` needs to rebuild its value (back to the nearest one its metadata says holds a snapshot of
        every delta channel: no ``counters_since_delta_snapshot``). Rejected: keeping the latest alone, which left
        a delta channel empty without a word (LangGraph's ``prune`` docstring warns of it)."""
        dropped: list[tuple[str, str]] = []
        for ns, saved in self.checkpoints.items():
            kept: set[str] = set()
            at: str | None = max(saved)  # uuid6 ids sort by time
            while at is not None and at in saved and at not in kept:
                kept.add(at)
                if not saved[at].metadata.get("counters_since_delta_snapshot"):
                    break
                at = saved[at].record.parent_id
            dropped.extend((ns, checkpoint_id) for checkpoint_id in saved if checkpoint_id not in kept)
        return dropped

    def copy_records(self) -> list[ThreadRecord]:
        """What the thread holds now, as records another thread can take (values first: every version a kept
        checkpoint names, and the bases of list values, so no delta chain is cut)."""
        records: list[ThreadRecord] = list(self.values.values())
        for saved in self.checkpoints.values():
            records.extend(one.record for one in sorted(saved.values(), key=lambda s: s.record.checkpoint_id))
        for (ns, checkpoint_id), kept in self.writes.items():
            if checkpoint_id not in self.checkpoints.get(ns, {}):
                continue
            by_task: dict[tuple[str, str], list[tuple[int, str, str, bytes]]] = {}
            for (task_id, idx), (_, channel, kind, data, task_path) in kept.items():
                by_task.setdefault((task_id, task_path), []).append((idx, channel, kind, data))
            for (task_id, task_path), writes in by_task.items():
                records.append(
                    WritesRecord(
                        ns=ns, checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path, writes=writes
                    )
                )
        return records
