"""What a run's records keep as content-addressed blobs, named as a person reads it: a file version by its path
and call, a call's arguments (the ledger's copy, or the history's), a tool's result, a message's text. Used to
say what is lost when blobs are (``restart.doubt``'s recovery note, ``fsck``'s problems): the same words in both.
Pure: one pass over the view's patches, before-states, ledger and messages."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from safepoint.core.large_values import references
from safepoint.core.run_view import RunView
from safepoint.records import Message


def message_what(message: Message) -> str:
    """A message as a person names it: a tool's result by its call, anything else by its role and place."""
    if message.role == "tool" and message.tool_call_id:
        return f"the result of {message.name or 'a tool'}({message.tool_call_id})"
    return f"the text of a {message.role} message (record {message.seq})"


def _digest(ref: object) -> str | None:
    return ref.removeprefix("blob:") if isinstance(ref, str) and ref.startswith("blob:") else None


def kept(view: RunView) -> Iterator[tuple[str, str]]:
    """Every (digest, what it holds) the run's records name, in the records' order (a digest may repeat)."""
    for patch in view.patches:
        for ref in (patch.before_ref, patch.patch_ref):
            if (digest := _digest(ref)) is not None:
                yield digest, f"{patch.path} ({patch.tool_call_id})"
    for call_id, states in view.befores.items():
        for state in states:
            if (digest := _digest(state.before_ref)) is not None:
                yield digest, f"{state.path} ({call_id})"
    for entry in view.ledger.values():
        what = f"the arguments of {entry.tool_name}({entry.call_id})"
        for value in entry.input.values():
            patched = isinstance(value, dict) and set(value) == {"$patch", "base"}
            if patched and (digest := _digest(value["$patch"])) is not None:
                yield digest, what
        for digest in references(entry.input):
            yield digest, what
        if (digest := _digest(entry.result_ref)) is not None:
            yield digest, f"the result of {entry.tool_name}({entry.call_id})"
    for message in view.message_records.values():
        if (digest := _digest(message.content_ref)) is not None:
            yield digest, message_what(message)
        for call in message.tool_calls:
            for digest in references(call.args):
                yield digest, f"the arguments of {call.tool}({call.call_id}) in the history"


def needing(view: RunView, lost: Callable[[str], bool]) -> list[str]:
    """What the records kept in blobs ``lost`` says are gone, each named once, in the records' order."""
    return list(dict.fromkeys(what for digest, what in kept(view) if lost(digest)))


def needs_of(view: RunView, digests: set[str]) -> dict[str, list[str]]:
    """For each of ``digests``, what the run's records keep in it (none: a blob no record of the run needs)."""
    found: dict[str, list[str]] = {}
    for digest, what in kept(view):
        if digest in digests and what not in found.setdefault(digest, []):
            found[digest].append(what)
    return found
