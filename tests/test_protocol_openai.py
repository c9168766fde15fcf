"""The recovery protocol with a real model provider: the CLI talks to an OpenAI-compatible server (a local fake that
streams Server-Sent Events), the user sees the text as it streams, and a crash after that is never replayed."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from safepoint.engine.session import load_view

from .conftest import read_until
from .openai_server import FakeOpenAI
from .test_protocol import Cli, assert_closed, wait_until


def run_args(server: FakeOpenAI, run_id: str = "r", model: str = "m1") -> list[str]:
    return ["run", "--task", "write a greeting", "--model", model, "--base-url", server.base_url, "--run-id", run_id]


def test_a_model_server_run_streams_calls_tools_and_completes(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    write = {"id": "c1", "name": "write_file", "arguments": {"path": "hello.txt", "content": "hi\n"}}
    with FakeOpenAI([{"text": "Writing it now.", "tool_calls": [write]}, {"text": "Done: hello.txt"}]) as server:
        done = cli(*run_args(server))
        assert done.returncode == 0, done.stderr
        assert "Writing it now." in done.stdout and "Done: hello.txt" in done.stdout  # streamed to the terminal
        second = server.requests[1]
        assert second["model"] == "m1"
        tool_results = [m for m in second["messages"] if m["role"] == "tool"]
        assert tool_results and tool_results[0]["tool_call_id"] == "c1"
    assert (cli.workspace / "hello.txt").read_text() == "hi\n"
    view = load_view(cli.store(), "r")
    assert view.info.provider is not None and view.info.provider["base_url"] == server.base_url
    assert "api_key" not in json.dumps(view.info.provider).replace("api_key_env", "")  # never a key on disk
    assert cli.checkpoint("r") is None


def test_a_crash_after_streamed_text_reached_the_user_is_never_replayed(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    reply = {"text": "Dear user, here is your greeting, streamed word by word.", "chunks": 6, "pause_after": 3}
    with FakeOpenAI([reply, {"text": "a second, different answer"}]) as server:
        client = cli.start(*run_args(server))
        assert server.paused.wait(60)
        wait_until(lambda: cli.checkpoint("r") is not None and cli.payload("r").get("visible_output_started"), "mark")
        # The mark is durable before the first character goes out, so the kill waits until the user saw the
        # start of the answer (read_until fails if it never shows), not only until the mark is on disk.
        read_until(client, "Dear user")
        client.send_signal(signal.SIGKILL)
        client.communicate(timeout=30)
        server.release.set()
        resumed = cli("resume", "r")
        assert resumed.returncode == 9 and "visible_output_started" in resumed.stderr
        assert len(server.requests) == 1  # the model was not asked again: no second answer was streamed
    assert_closed(cli, "r", "visible_output_started")


def test_the_model_recorded_per_checkpoint_detects_a_switch(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    write = {"id": "c1", "name": "write_file", "arguments": {"path": "a.txt", "content": "a\n"}}
    with FakeOpenAI([{"tool_calls": [write]}, {"text": "done"}]) as server:
        crashed = cli(*run_args(server), SAFEPOINT_FAILPOINT="after_tool:write_file")
        assert crashed.returncode == -signal.SIGKILL
        resumed = cli("resume", "r", "--model", "m2")
        assert resumed.returncode == 9 and "model_switch" in resumed.stderr
        assert "written under model 'm1', resumed with 'm2'" in resumed.stderr
    assert_closed(cli, "r", "model_switch")
