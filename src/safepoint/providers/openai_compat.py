"""A provider for any OpenAI-compatible chat-completions endpoint (OpenAI itself, vLLM, llama.cpp, Ollama, ...).

The reply is always streamed: each piece of text goes to the ``OutputStream`` as it arrives (the first piece is
what marks visible output), and tool calls, which arrive as fragments keyed by index, are put together here.
Every failure of the server or the connection becomes one ``ProviderError`` line naming the endpoint, the model
and what to check.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import Stream, omit
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
from openai.types.shared_params import FunctionDefinition

from safepoint.errors import ProviderError
from safepoint.providers.base import Context, ModelTurn, OutputStream
from safepoint.records import Message, ToolCall, ToolDefinition

# Tools declare no argument schema (ToolDefinition has none), so the model is told "an object" and relies on the
# tool's description; a definition that one day carries ``parameters`` gets those instead.
PERMISSIVE_PARAMETERS: dict[str, Any] = {"type": "object", "additionalProperties": True}
NO_RESULT = "(no result was recorded for this call)"
LOCAL_API_KEY = "not-needed"  # local servers ignore the key, but the client insists on one


class OpenAIProvider:
    """``complete()`` sends the context to ``{base_url}/chat/completions`` and streams the reply back."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        temperature: float | None = None,
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.temperature = temperature
        custom_url = base_url or os.environ.get("OPENAI_BASE_URL")
        key = api_key or os.environ.get("OPENAI_API_KEY") or (LOCAL_API_KEY if custom_url else None)
        # Where the key came from, for a rejection's fix (``--api-key-env``: a name of the user's choosing).
        self.key_source = api_key_env or ("OPENAI_API_KEY" if api_key is None else "the API key given")
        self._key = key or ""
        if not key:
            raise ProviderError(
                f"no API key for model {model!r} at https://api.openai.com/v1; "
                "set OPENAI_API_KEY, or pass --base-url for a local model server"
            )
        # Retries cover the request only (connection errors, 408/409/429/5xx before any text): a reply that breaks
        # off after text was shown is never silently asked again.
        self.client = openai.OpenAI(api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries)
        self.base_url = str(self.client.base_url).rstrip("/")

    def complete(self, context: Context, turn: int, stream: OutputStream | None = None) -> ModelTurn:
        try:
            response: Stream[ChatCompletionChunk] = self.client.chat.completions.create(
                model=self.model,
                messages=to_messages(context),
                tools=to_tools(context.tools) or omit,
                temperature=self.temperature if self.temperature is not None else omit,
                stream=True,
            )
        except openai.OpenAIError as exc:
            raise self._error(exc, started=False) from exc
        reply = _Reply(turn)
        with response:
            for chunk in self._chunks(response):
                for choice in chunk.choices or ():
                    if choice.index:  # only the first choice (some servers leave the index out: None)
                        continue
                    delta = choice.delta
                    if delta is None:  # a finish-only chunk from a lax server
                        reply.finished = reply.finished or choice.finish_reason is not None
                        continue
                    if delta.content:
                        reply.text.append(delta.content)
                        if stream is not None:
                            stream.text(delta.content)
                    for fragment in delta.tool_calls or ():
                        reply.add_fragment(fragment)
                    if choice.finish_reason is not None:
                        reply.finished = True
        if not reply.finished:
            raise ProviderError(
                f"model server at {self.base_url} ended the reply of model {self.model!r} before it finished "
                "(no finish_reason); check the server's log, then resume the run to ask again"
            )
        return ModelTurn(text="".join(reply.text), tool_calls=reply.calls())

    def _chunks(self, response: Stream[ChatCompletionChunk]) -> Iterator[ChatCompletionChunk]:
        """The reply's chunks; only reading them is guarded, so an error raised by the output stream (a crash
        point, a full disk) passes through as it is."""
        iterator = iter(response)
        while True:
            try:
                chunk = next(iterator)
            except StopIteration:
                return
            except (openai.OpenAIError, ValueError) as exc:  # ValueError: a chunk that is not JSON
                raise self._error(exc, started=True) from exc
            yield chunk

    def _error(self, exc: Exception, *, started: bool) -> ProviderError:
        at, model = f"model server at {self.base_url}", f"model {self.model!r}"
        if isinstance(exc, openai.APITimeoutError):
            when = "stopped answering mid-reply" if started else "did not answer"
            return ProviderError(
                f"{at} {when} within {self.timeout:g}s for {model}; check the server, or raise the timeout"
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = _one_line(str(exc.__cause__ or exc))
            if started:
                return ProviderError(
                    f"{at} broke off the reply of {model} ({cause}); check the server, then resume the run"
                )
            return ProviderError(
                f"cannot reach the model server at {self.base_url} for {model} ({cause}); "
                "check --base-url and that the server is running"
            )
        if isinstance(exc, openai.APIStatusError):
            status = f"{exc.status_code}: {masked(_status_detail(exc), self._key)}"  # a server may echo the key
            if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
                return ProviderError(f"{at} rejected the API key for {model} ({status}); check {self.key_source}")
            if isinstance(exc, openai.RateLimitError):
                return ProviderError(f"{at} is rate-limiting {model} ({status}); wait, then resume the run")
            if exc.status_code >= 500:
                return ProviderError(f"{at} failed on {model} ({status}); check the server's log, then resume the run")
            return ProviderError(f"{at} refused the request for {model} ({status}); check --base-url and --model")
        if isinstance(exc, openai.APIError):  # an error event inside the stream
            return ProviderError(
                f"{at} reported an error mid-reply for {model} ({_one_line(exc.message)}); "
                "check the server's log, then resume the run"
            )
        return ProviderError(
            f"{at} sent a reply for {model} that could not be read ({_one_line(str(exc))}); "
            "check that it speaks the OpenAI chat-completions API"
        )


@dataclass
class _PartialCall:
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Reply:
    turn: int
    text: list[str] = field(default_factory=list)
    partial: dict[int, _PartialCall] = field(default_factory=dict)
    finished: bool = False

    def add_fragment(self, fragment: ChoiceDeltaToolCall) -> None:
        """A tool-call fragment: the first one of an index carries the id and name, later ones more arguments."""
        index: int | None = fragment.index
        call_id, function = fragment.id, fragment.function
        if index is None:  # a server that leaves the index out: a new id or name starts a call, else it continues
            index = self._guess_index(call_id, function.name if function is not None else None)
        call = self.partial.setdefault(index, _PartialCall())
        if call_id and not call.call_id:
            call.call_id = call_id
        if function is not None:
            if function.name and not call.name:
                call.name = function.name
            if function.arguments:
                call.arguments.append(function.arguments)

    def _guess_index(self, call_id: str | None, name: str | None) -> int:
        if call_id:
            for index, call in self.partial.items():
                if call.call_id == call_id:
                    return index
            return len(self.partial)
        if not self.partial:
            return 0
        last = max(self.partial)
        return last + 1 if name and self.partial[last].name else last

    def calls(self) -> list[ToolCall]:
        calls = []
        for index in sorted(self.partial):
            call = self.partial[index]
            call_id = call.call_id or f"call_t{self.turn}_{index}"  # some local servers send no id
            calls.append(ToolCall(call_id=call_id, tool=call.name, args=parse_arguments("".join(call.arguments))))
        return calls


def parse_arguments(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments; anything but a JSON object is kept as ``{"_raw": text}`` (the tool then fails
    visibly, and the model sees why) rather than failing the turn."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):  # nested thousands deep: json recurses per level
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def to_tools(definitions: Iterable[ToolDefinition]) -> list[ChatCompletionFunctionToolParam]:
    tools: list[ChatCompletionFunctionToolParam] = []
    for definition in definitions:
        parameters = getattr(definition, "parameters", None) or PERMISSIVE_PARAMETERS
        function: FunctionDefinition = {"name": definition.name, "parameters": parameters}
        if definition.description:
            function["description"] = definition.description
        tools.append({"type": "function", "function": function})
    return tools


def to_messages(context: Context) -> list[ChatCompletionMessageParam]:
    """The context as chat messages: the system region first, then the conversation in order, with system
    messages kept where they are. The API insists that an assistant message's tool calls be followed at once by
    one result each, so a system message that falls inside that block comes right after it, a call with no
    recorded result gets a placeholder, and a result whose call is not in the conversation becomes a user message.
    """
    out: list[ChatCompletionMessageParam] = []
    if context.system:
        out.append({"role": "system", "content": context.system})
    awaiting: dict[str, str] = {}  # call id -> tool name, results still to come
    held: list[ChatCompletionMessageParam] = []  # system messages that arrived among the results

    def close_block() -> None:
        for call_id in awaiting:
            out.append({"role": "tool", "tool_call_id": call_id, "content": NO_RESULT})
        awaiting.clear()
        out.extend(held)
        held.clear()

    for message in context.messages:
        if message.role == "tool":
            if message.tool_call_id is not None and message.tool_call_id in awaiting:
                del awaiting[message.tool_call_id]
                out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
                if not awaiting:
                    close_block()
            else:
                close_block()
                out.append({"role": "user", "content": _orphan_result(message)})
        elif message.role == "system" and awaiting:
            held.append({"role": "system", "content": message.content})
        else:
            close_block()
            if message.role == "assistant":
                out.append(_assistant(message))
                awaiting.update((call.call_id, call.tool) for call in message.tool_calls)
            elif message.role == "system":
                out.append({"role": "system", "content": message.content})
            else:
                out.append({"role": "user", "content": message.content})
    close_block()
    return out


def _assistant(message: Message) -> ChatCompletionMessageParam:
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content}
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {
            "id": call.call_id,
            "type": "function",
            "function": {"name": call.tool, "arguments": json.dumps(call.args, ensure_ascii=False)},
        }
        for call in message.tool_calls
    ]
    return {"role": "assistant", "content": message.content or None, "tool_calls": calls}


def _orphan_result(message: Message) -> str:
    tool = message.name or "a tool"
    return f"(result of {tool}, call {message.tool_call_id or '?'}, asked for earlier)\n{message.content}"


def _status_detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _one_line(error["message"])
        if isinstance(error, str):
            return _one_line(error)
    try:
        text = exc.response.text
    except Exception:  # a body that cannot be read: the status line says enough
        text = ""
    return _one_line(text or exc.message)


def masked(text: str, key: str, shortest: int = 6) -> str:
    """``text`` with the key, and any piece of it of ``shortest`` characters or more, shown as ``***`` (a server
    that echoes a rejected key may show it whole, or cut). Rejected: masking only the whole key."""
    if len(key) < shortest or key == LOCAL_API_KEY:
        return text
    for size in range(len(key), shortest - 1, -1):
        for start in range(len(key) - size + 1):
            piece = key[start : start + size]
            if piece in text:
                text = text.replace(piece, "***")
    return text


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
