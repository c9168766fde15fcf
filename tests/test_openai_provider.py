"""The OpenAI-compatible provider against a real HTTP server (tests/openai_server.py), no mocks of the client."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

import safepoint
from safepoint.engine.session import load_view
from safepoint.errors import ProviderError
from safepoint.providers.base import Context, Provider
from safepoint.providers.openai_compat import NO_RESULT, PERMISSIVE_PARAMETERS, OpenAIProvider, to_messages
from safepoint.records import Message, ToolCall, ToolDefinition

from .conftest import PY, ROOT
from .openai_server import FakeOpenAI

MODEL = "fake-model"


class Recorder:
    """An OutputStream that remembers each piece and when the first one came."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.first = threading.Event()

    def text(self, chunk: str) -> None:
        self.pieces.append(chunk)
        self.first.set()


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def provider_for(server: FakeOpenAI, **options) -> OpenAIProvider:
    options.setdefault("max_retries", 0)
    return OpenAIProvider(MODEL, base_url=server.base_url, **options)


def simple_context(task: str = "say hello") -> Context:
    return Context(system="You are a test.", messages=[Message(seq=0, role="user", content=task)])


def test_text_is_streamed_in_order_and_the_first_piece_comes_before_the_reply_is_done(server):
    server.add({"text": "Hello, streaming world", "chunks": 4, "pause_after": 2})  # role chunk + first piece
    provider = provider_for(server)
    out = Recorder()
    result = {}
    worker = threading.Thread(target=lambda: result.update(turn=provider.complete(simple_context(), 0, out)))
    worker.start()
    try:
        assert out.first.wait(10), "the first piece never reached the stream"
        assert server.paused.is_set() and worker.is_alive()  # the reply is still being generated
        assert out.pieces == ["Hello,"]
    finally:
        server.release.set()
        worker.join(10)
    assert out.pieces == ["Hello,", " strea", "ming ", "world"]  # never an empty piece (the role chunk has "")
    assert result["turn"].text == "Hello, streaming world" and result["turn"].tool_calls == []


def test_without_a_stream_the_turn_is_still_returned(server):
    server.add({"text": "quiet reply"})
    turn = provider_for(server).complete(simple_context(), 0)
    assert turn.text == "quiet reply" and turn.tool_calls == []


def test_tool_calls_are_put_together_from_fragments(server):
    server.add(
        {
            "text": "Let me look.",
            "chunks": 5,
            "tool_calls": [
                {"id": "call_a", "name": "read_file", "arguments": {"path": "src/a.py"}},
                {"id": "call_b", "name": "write_file", "arguments": {"path": "b.txt", "content": "x\n" * 20}},
            ],
        }
    )
    out = Recorder()
    turn = provider_for(server).complete(simple_context(), 0, out)
    assert turn.text == "Let me look." == "".join(out.pieces)
    assert turn.tool_calls == [
        ToolCall(call_id="call_a", tool="read_file", args={"path": "src/a.py"}),
        ToolCall(call_id="call_b", tool="write_file", args={"path": "b.txt", "content": "x\n" * 20}),
    ]


def test_tool_calls_without_index_or_id_are_still_told_apart(server):
    calls = [{"id": "-", "name": "read_file", "arguments": {"path": "a"}}, {"id": "-", "name": "list_files"}]
    server.add({"text": "loose", "tool_calls": calls, "loose": True})
    turn = provider_for(server).complete(simple_context(), 4)
    assert turn.text == "loose"
    assert turn.tool_calls == [
        ToolCall(call_id="call_t4_0", tool="read_file", args={"path": "a"}),
        ToolCall(call_id="call_t4_1", tool="list_files", args={}),
    ]


def test_arguments_that_are_not_a_json_object_are_kept_raw(server):
    server.add(
        {
            "tool_calls": [
                {"id": "c1", "name": "t", "arguments": '{"path": "a'},
                {"id": "c2", "name": "t", "arguments": "[1, 2]"},
                {"id": "c3", "name": "t", "arguments": ""},
            ]
        }
    )
    turn = provider_for(server).complete(simple_context(), 0)
    assert [call.args for call in turn.tool_calls] == [{"_raw": '{"path": "a'}, {"_raw": "[1, 2]"}, {}]


def test_the_request_carries_the_system_region_the_tools_and_the_earlier_calls(server):
    server.add({"text": "ok"})
    call = ToolCall(call_id="call_7", tool="write_file", args={"path": "a.txt", "content": "hi"})
    context = Context(
        system="SYSTEM REGION\n\n## Recovery note (read this first)\nthe run was resumed",
        messages=[
            Message(seq=0, role="user", content="write a.txt"),
            Message(seq=1, role="assistant", content="", tool_calls=(call,), turn=0),
            Message(seq=2, role="tool", content="wrote a.txt", tool_call_id="call_7", name="write_file"),
            Message(seq=3, role="system", content="self-healing: a.txt changed on disk", name="notice"),
            Message(seq=4, role="assistant", content="Done writing.", turn=1),
            Message(seq=5, role="user", content="thanks"),
        ],
        tools=[
            ToolDefinition(name="write_file", idempotency="conditional", replay_policy="auto", description="Write."),
            ToolDefinition(name="list_files", idempotency="idempotent", replay_policy="auto"),
        ],
    )
    provider_for(server, temperature=0.2).complete(context, 2)
    [body] = server.requests
    assert body["model"] == MODEL and body["stream"] is True and body["temperature"] == 0.2
    assert body["messages"] == [
        {"role": "system", "content": context.system},
        {"role": "user", "content": "write a.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": json.dumps(call.args)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_7", "content": "wrote a.txt"},
        {"role": "system", "content": "self-healing: a.txt changed on disk"},
        {"role": "assistant", "content": "Done writing."},
        {"role": "user", "content": "thanks"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "write_file", "parameters": PERMISSIVE_PARAMETERS, "description": "Write."},
        },
        {"type": "function", "function": {"name": "list_files", "parameters": PERMISSIVE_PARAMETERS}},
    ]


def test_no_tools_and_no_temperature_are_left_out_of_the_request(server):
    server.add({"text": "ok"})
    provider_for(server).complete(simple_context(), 0)
    assert "tools" not in server.requests[0] and "temperature" not in server.requests[0]


def test_every_call_gets_a_result_right_after_it_and_stray_results_do_not_break_the_request():
    calls = (ToolCall(call_id="a", tool="t"), ToolCall(call_id="b", tool="t"))
    context = Context(
        system="",
        messages=[
            Message(seq=0, role="user", content="go"),
            Message(seq=1, role="assistant", content="two calls", tool_calls=calls),
            Message(seq=2, role="tool", content="a done", tool_call_id="a", name="t"),
            Message(seq=3, role="system", content="note among the results"),
            Message(seq=4, role="user", content="go on"),  # b never got a result (skipped after a crash)
            Message(seq=5, role="tool", content="late", tool_call_id="zz", name="t"),
        ],
    )
    assert [(m["role"], m.get("tool_call_id"), m.get("content")) for m in to_messages(context)] == [
        ("user", None, "go"),
        ("assistant", None, "two calls"),
        ("tool", "a", "a done"),
        ("tool", "b", NO_RESULT),
        ("system", None, "note among the results"),
        ("user", None, "go on"),
        ("user", None, "(result of t, call zz, asked for earlier)\nlate"),
    ]


def test_model_base_url_and_api_key_are_honored(server):
    server.models = ["other-model"]
    server.add({"text": "from the other model"})
    provider = OpenAIProvider("other-model", base_url=server.base_url, api_key="sk-test", max_retries=0)
    assert provider.model == "other-model" and provider.base_url == server.base_url
    assert provider.complete(simple_context(), 0).text == "from the other model"
    assert server.paths == ["/v1/chat/completions"]
    assert server.requests[0]["model"] == "other-model"
    assert server.headers[0]["authorization"] == "Bearer sk-test"


def test_a_local_server_needs_no_key_and_the_env_key_is_used_when_set(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    server.add({"text": "a"}, {"text": "b"})
    provider_for(server).complete(simple_context(), 0)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    provider_for(server).complete(simple_context(), 0)
    assert [h["authorization"] for h in server.headers] == ["Bearer not-needed", "Bearer sk-env"]


def test_no_key_and_no_base_url_is_a_provider_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ProviderError, match="set OPENAI_API_KEY, or pass --base-url"):
        OpenAIProvider("gpt-x")


def one_line_error(provider: OpenAIProvider) -> str:
    with pytest.raises(ProviderError) as caught:
        provider.complete(simple_context(), 0)
    message = str(caught.value)
    assert "\n" not in message and provider.base_url in message and repr(provider.model) in message
    assert caught.value.exit_code == 8
    return message


def test_a_server_error_is_one_provider_error_line(server):
    server.add({"status": 500, "error": "the GPU\nfell over"})
    message = one_line_error(provider_for(server))
    assert message == (
        f"model server at {server.base_url} failed on model 'fake-model' (500: the GPU fell over); "
        "check the server's log, then resume the run"
    )


def test_an_unknown_model_names_the_fix(server):
    server.models = ["real-model"]
    message = one_line_error(provider_for(server))
    assert "refused the request for model 'fake-model' (404: model 'fake-model' not found)" in message
    assert message.endswith("check --base-url and --model")


def test_a_bad_key_names_the_fix(server):
    server.add({"status": 401, "error": "invalid api key"})
    assert one_line_error(provider_for(server)).endswith("(401: invalid api key); check OPENAI_API_KEY")


def test_a_failed_request_is_retried_before_any_text(server):
    server.add({"status": 503, "error": "busy"}, {"text": "second try"})
    assert provider_for(server, max_retries=1).complete(simple_context(), 0).text == "second try"
    assert len(server.requests) == 2


def test_an_unreachable_server_names_the_endpoint():
    with FakeOpenAI() as gone:
        url = gone.base_url
    provider = OpenAIProvider(MODEL, base_url=url, max_retries=0, timeout=5)
    message = one_line_error(provider)
    assert message.startswith(f"cannot reach the model server at {url} for model 'fake-model' (")
    assert message.endswith("check --base-url and that the server is running")


def test_a_reply_cut_short_is_a_provider_error_after_the_text_already_shown(server):
    server.add({"text": "partial answer", "cut_after": 3})
    out = Recorder()
    with pytest.raises(ProviderError, match="broke off the reply of model 'fake-model'"):
        provider_for(server).complete(simple_context(), 0, out)
    assert out.pieces == ["parti", "al an"]
    assert len(server.requests) == 1  # not retried once text was shown


def test_an_error_event_in_the_stream_is_a_provider_error(server):
    server.add({"text": "abc", "error_after": 2, "error": "context too long"})
    message = one_line_error(provider_for(server))
    assert "reported an error mid-reply for model 'fake-model' (context too long)" in message


def test_a_reply_that_never_finishes_is_not_taken_as_complete(server):
    server.add({"text": "half of it", "no_finish": True})
    assert "ended the reply of model 'fake-model' before it finished" in one_line_error(provider_for(server))


def test_a_stalled_reply_times_out(server):
    server.add({"text": "slow", "pause_after": 2})
    message = one_line_error(provider_for(server, timeout=0.5))
    assert "stopped answering mid-reply within 0.5s" in message


def test_an_error_from_the_output_stream_passes_through_untouched(server):
    class Crash(BaseException):
        pass

    class Exploding:
        def text(self, chunk: str) -> None:
            raise Crash(chunk)

    server.add({"text": "boom"})
    with pytest.raises(Crash):
        provider_for(server).complete(simple_context(), 0, Exploding())


def test_it_is_a_provider_for_the_agent_loop(server, workspace):
    provider: Provider = provider_for(server)
    server.add(
        {"tool_calls": [{"id": "call_w", "name": "write_file", "arguments": {"path": "a.txt", "content": "hi\n"}}]},
        {"text": "All done."},
    )
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("write a.txt", run_id="r", model=MODEL) as run:
        assert tm.run_agent(run, provider) == "completed"
    assert (workspace / "a.txt").read_text() == "hi\n"
    assert load_view(tm.store, "r").ledger["call_w"].status == "succeeded"
    second = server.requests[1]["messages"]
    assert second[0]["role"] == "system" and second[1] == {"role": "user", "content": "write a.txt"}
    assert second[2]["tool_calls"][0]["id"] == "call_w"
    assert second[3]["role"] == "tool" and second[3]["tool_call_id"] == "call_w"
    assert {tool["function"]["name"] for tool in server.requests[0]["tools"]} >= {"write_file", "read_file"}


def test_the_server_runs_as_its_own_process(tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps({"replies": [{"text": "from a subprocess", "pause_after": 2}], "models": [MODEL]}))
    port_file, requests, paused, release = (tmp_path / name for name in ("port", "requests.jsonl", "paused", "go"))
    command = [PY, os.path.join(ROOT, "tests", "openai_server.py"), "--script", str(script), "--port-file"]
    command += [
        str(port_file),
        "--requests",
        str(requests),
        "--paused-file",
        str(paused),
        "--release-file",
        str(release),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        base_url = process.stdout.readline().strip()
        assert base_url == f"http://127.0.0.1:{int(port_file.read_text())}/v1"
        provider = OpenAIProvider(MODEL, base_url=base_url, max_retries=0, timeout=10)
        out = Recorder()
        result = {}
        worker = threading.Thread(target=lambda: result.update(turn=provider.complete(simple_context(), 0, out)))
        worker.start()
        assert out.first.wait(10)
        deadline = time.monotonic() + 10
        while not paused.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert paused.exists() and worker.is_alive()
        release.write_text("go")
        worker.join(10)
        assert result["turn"].text == "from a subprocess"
        [body] = [json.loads(line) for line in requests.read_text().splitlines()]
        assert body["messages"][1] == {"role": "user", "content": "say hello"}
    finally:
        process.terminate()
        assert process.wait(10) == 0
