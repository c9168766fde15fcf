"""Large values of a run's records kept as blobs (``core.large_values``, the rule): stored through the run's
``Content`` (a store blob, staged with the log group that references it and durable before it; in the log itself
when the store keeps no blobs), and read back, checked against their hash, where a reader needs the value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from safepoint.core import large_values
from safepoint.core.run_view import RunView
from safepoint.engine.content import Content
from safepoint.errors import StoreError
from safepoint.records import Message, ToolCall
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
    """``value`` with its large strings read back (``value`` itself when it has none: an old log's inline ones)."""
    return large_values.resolve(value, lambda digest: content.get(digest).decode(errors="surrogatepass"))


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
        text = content.get(message.content_ref.removeprefix("blob:")).decode(errors="replace")
        return msgspec.structs.replace(message, content=text, content_ref=None, tool_calls=calls)
    return msgspec.structs.replace(message, tool_calls=calls) if changed else message


def resolve_messages(messages: list[Message], content: Content) -> list[Message]:
    return [resolve_message(message, content) for message in messages]


def resolve_call(call: ToolCall, content: Content) -> ToolCall:
    args = resolve(call.args, content)
    return call if args is call.args else msgspec.structs.replace(call, args=args)


def _call_out(call: ToolCall, content: Content, redact: Callable[[bytes], bytes]) -> ToolCall:
    args = externalize(call.args, content, redact)
    return call if args is call.args else msgspec.structs.replace(call, args=args)


def reader(store: Blobs, view: RunView) -> Content:
    """The run's content, to read only (a reader that shows what the log kept as blobs: ``history``, ``explain``)."""
    return Content(view.info.run_id, view.blobs, view.message_records, _read_only, store)


def _read_only(body: msgspec.Struct) -> int:
    raise StoreError(f"a reader stored a {type(body).__name__}: it reads only")  # a bug, never a user's mistake
