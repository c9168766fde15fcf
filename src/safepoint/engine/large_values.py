"""Large values of a run's records kept as blobs (``core.large_values``, the rule): stored through the run's
``Content`` (a store blob, staged with the log group that references it and durable before it; in the log itself
when the store keeps no blobs), and read back, checked against their hash, where a reader needs the value."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from safepoint.core import large_values
from safepoint.core.hashing import input_hash
from safepoint.core.lost_content import message_what
from safepoint.core.message_list import MessageList
from safepoint.core.patches import apply_patch
from safepoint.core.run_view import RunView
from safepoint.engine.content import LOST_NOTE, Content, LostContentError
from safepoint.engine.file_changes import FileChanges
from safepoint.errors import StoreError
from safepoint.records import Message, ToolCall, ToolLedgerEntry
from safepoint.store.base import Blobs


def externalize(value: Any, content: Content, redact: Callable[[bytes], bytes]) -> Any:
    """``value`` as a record keeps it: each large string a blob of its text as the record would hold it (through
    ``redact``, the log's redaction of the field; the blob never holds what the record would not)."""

    def put(text: str) -> tuple[str, str]:
        # surrogatepass: a lone surrogate (a model's broken escape) round-trips instead of failing the call here
        kept = redact(text.encode(errors="surrogatepass"))
        return content.put(kept), kept.decode(errors="surrogatepass")

    return large_values.externalize(value, put)


def resolve(value: Any, content: Content) -> Any:
    """``value`` with its large strings read back (``value`` itself when it has none: an old log's inline ones).
    ``LostContentError`` when one is gone: a caller that runs or checks the value needs it exactly."""
    return large_values.resolve(value, lambda digest: content.get(digest).decode(errors="surrogatepass"))


def _resolve_shown(value: Any, content: Content, what: str) -> tuple[Any, str | None]:
    """``value`` as a reader shows it: a lost large string becomes a note naming ``what`` and why (never the raw
    reference, never dropped). The note, or None when nothing was lost."""
    lost: list[str] = []

    def get(digest: str) -> str:
        try:
            return content.get(digest).decode(errors="surrogatepass")
        except LostContentError as exc:
            lost.append(content.found_lost(what, exc))
            return lost[-1]

    shown = large_values.resolve(value, get)
    return shown, (lost[0] if lost else None)


def externalize_message(message: Message, content: Content, redact: Callable[[bytes], bytes]) -> Message:
    """A history message as the log keeps it: a large content (a tool's long result) and the large arguments of
    its tool calls (a model's ``write_file`` of a big file) as blobs of their redacted text."""
    calls = tuple(_call_out(call, content, redact) for call in message.tool_calls)
    changed = any(new is not old for new, old in zip(calls, message.tool_calls, strict=True))
    text = message.content
    if len(text) * 4 > large_values.LARGE_BYTES and len(text.encode()) > large_values.LARGE_BYTES:
        digest = content.put(redact(text.encode()))
        return msgspec.structs.replace(message, content="", content_ref=f"blob:{digest}", tool_calls=calls)
    return msgspec.structs.replace(message, tool_calls=calls) if changed else message


def resolve_message(message: Message, content: Content) -> Message:
    """``message`` as it was said (``message`` itself when the log held it whole)."""
    calls = tuple(resolve_call(call, content) for call in message.tool_calls)
    changed = any(new is not old for new, old in zip(calls, message.tool_calls, strict=True))
    if message.content_ref is not None:
        try:
            text = content.get(message.content_ref.removeprefix("blob:")).decode(errors="replace")
        except LostContentError as exc:
            text = content.found_lost(message_what(message), exc)  # the model sees a note, not a hole
        return msgspec.structs.replace(message, content=text, content_ref=None, tool_calls=calls)
    return msgspec.structs.replace(message, tool_calls=calls) if changed else message


def resolve_messages(messages: Iterable[Message], content: Content) -> list[Message]:
    return [resolve_message(message, content) for message in messages]


def resolve_branch(messages: MessageList, refs: Mapping[int, Message], content: Content) -> MessageList:
    """``resolve_messages`` of a branch of the view's history, looking only at the messages the fold found to
    hold blob references (``RunView.ref_messages``): the others are as the log holds them (a copy of the branch's
    seqs, not a pass over every message: a branch by reference stays one)."""
    resolved = messages.copy()
    for message in refs.values():
        if message.seq < len(resolved) and resolved[message.seq] is message:
            resolved[message.seq] = resolve_message(message, content)
    return resolved


def resolve_call(call: ToolCall, content: Content) -> ToolCall:
    """``call`` as the model asked it. An argument whose blob is lost reads as a note, and the call is marked
    (``content.lost_args``): the runner never runs it with the note, it looks for the ledger's copy first."""
    args, lost = _resolve_shown(call.args, content, f"the arguments of {call.tool}({call.call_id}) in the history")
    if lost is not None:
        content.lost_args[call.call_id] = lost
    return call if args is call.args else msgspec.structs.replace(call, args=args)


def _call_out(call: ToolCall, content: Content, redact: Callable[[bytes], bytes]) -> ToolCall:
    args = externalize(call.args, content, redact)
    return call if args is call.args else msgspec.structs.replace(call, args=args)


def reader(store: Blobs, view: RunView) -> Content:
    """The run's content, to read only (a reader that shows what the log kept as blobs: ``history``, ``explain``)."""
    return Content(view.info.run_id, view.blobs, view.message_records, _read_only, store)


def _read_only(body: msgspec.Struct) -> int:
    raise StoreError(f"a reader stored a {type(body).__name__}: it reads only")  # a bug, never a user's mistake


def expand_input(entry: ToolLedgerEntry, files: FileChanges, content: Content) -> dict[str, Any]:
    """A call's input as it was given (a compacted content argument is rebuilt from its patch)."""
    expanded: dict[str, Any] = dict(resolve(entry.input, content))
    for key, value in entry.input.items():
        if isinstance(value, dict) and set(value) == {"$patch", "base"}:
            base = files.version(key, str(value["base"]))
            expanded[key] = apply_patch(base, content.get(str(value["$patch"]).removeprefix("blob:"))).decode()
    return expanded


def read_as_note(call: ToolCall, content: Content) -> bool:
    """Whether ``call``'s arguments are the history's, read back with a note where a lost blob was: the same call
    id asked again with whole arguments (a model re-asking after a rewind) is the model's, and runs as given."""
    note = content.lost_args.get(call.call_id)
    return note is not None and large_values.contains(call.args, note)


def recovered_call(
    call: ToolCall, entry: ToolLedgerEntry | None, files: FileChanges, content: Content
) -> ToolCall | None:
    """``call`` with the arguments the history lost taken from its ledger entry's input (read back, a patch
    applied to its base), when that copy is whole and its hash is the entry's input hash (so it is what the
    model asked, not a near miss). None when no such copy is left."""
    if entry is None or entry.tool_name != call.tool:
        return None
    try:
        args = expand_input(entry, files, content)
    except StoreError:  # its blobs or its patch's base are lost too
        return None
    if input_hash(args) != entry.input_hash:
        return None
    return msgspec.structs.replace(call, args=args)


def cannot_run(call: ToolCall, why: str) -> str:
    return (
        f"{call.tool}({call.call_id}) cannot run again: {why.removeprefix(LOST_NOTE).strip()}, and the ledger "
        f"keeps no whole copy of them; resume with --skip {call.call_id} (its effect stays as it is)"
    )
