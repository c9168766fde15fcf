"""Every example in ``examples/`` runs offline as written: each is run as its own process, as a reader would, and
its output and effects are checked (a crash in the middle where the example is about one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import cli_env

HERE = Path(__file__).parent
EXAMPLES = HERE.parent / "examples"
COVERED = {
    "langgraph_graph.py",
    "own_loop.py",
    "pydantic_ai_agent.py",
    "mcp_proxy_client.py",
    "openai_agents_session.py",
}


def example(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_example_has_a_case_here() -> None:
    names = {p.name for p in EXAMPLES.glob("*.py")}
    assert names - COVERED == set(), "give each new example a test in tests/test_examples.py"


def test_the_langgraph_example_killed_in_the_charge_waits_then_is_skipped(tmp_path: Path) -> None:
    crashed = example("langgraph_graph.py", str(tmp_path), "crash")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    effects = tmp_path / "effects.txt"
    assert effects.read_text() == "price looked up for book\ncard charged 12\n"
    waiting = example("langgraph_graph.py", str(tmp_path), "resume")
    assert waiting.returncode == 0, waiting.stderr
    assert "next node: pay" in waiting.stdout and "waiting for a decision" in waiting.stdout
    assert "charge_card(lg-charge_card-" in waiting.stdout
    skipped = example("langgraph_graph.py", str(tmp_path), "skip")
    assert skipped.returncode == 0, skipped.stderr
    assert "decided: skip lg-charge_card-" in skipped.stdout and "status: not charged again" in skipped.stdout
    # the price came from the ledger, the charge happened once
    assert effects.read_text() == "price looked up for book\ncard charged 12\n"


def test_the_langgraph_example_replayed_by_a_person_charges_again(tmp_path: Path) -> None:
    assert example("langgraph_graph.py", str(tmp_path), "crash").returncode == -signal.SIGKILL
    replayed = example("langgraph_graph.py", str(tmp_path), "replay")
    assert replayed.returncode == 0, replayed.stderr
    assert "status: charged 12" in replayed.stdout
    text = (tmp_path / "effects.txt").read_text()
    assert text == "price looked up for book\ncard charged 12\ncard charged 12\n"  # because a person said so


def test_the_langgraph_example_refuses_a_bad_command_line(tmp_path: Path) -> None:
    wrong = example("langgraph_graph.py", str(tmp_path), "launch")
    assert wrong.returncode == 2 and wrong.stderr.startswith("usage: ") and "Traceback" not in wrong.stderr


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_own_loop_example_crashed_and_resumed(tmp_path: Path, mode: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    crashed = example("own_loop.py", str(workspace), "start", env=cli_env(SAFEPOINT_FAILPOINT="after_tool:send_email"))
    assert crashed.returncode == -signal.SIGKILL
    resumed = example("own_loop.py", str(workspace), "resume", *(["--async"] if mode == "async" else []))
    assert resumed.returncode == 0, resumed.stderr
    assert "call_d read_file: # v2" in resumed.stdout
    assert (tmp_path / "outbox.jsonl").read_text().count("\n") == 1  # the email went once


def test_the_pydantic_ai_example_run_twice_pays_once(tmp_path: Path) -> None:
    first = example("pydantic_ai_agent.py", str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert "paid for: 2" in first.stdout
    second = example("pydantic_ai_agent.py", str(tmp_path))
    assert second.returncode == 0, second.stderr
    assert "(model turns paid for: 0)" in second.stdout  # the same run: the turns and the call from the ledger
    assert (tmp_path / "notes.txt").read_text() == "hello\n"


def test_the_mcp_example_ledgers_each_call(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    server = [sys.executable, str(HERE / "mcp_server.py")]
    env = cli_env(PYTHONPATH=os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")]))
    for _ in range(2):
        done = example("mcp_proxy_client.py", str(tmp_path), *server, env=env)
        assert done.returncode == 0, done.stderr
        assert "tools:" in done.stdout and "append_line" in done.stdout
    assert (tmp_path / "notes.txt").read_text() == "hello\nhello\n"  # two sessions, two calls, each once


def test_the_openai_agents_example_waits_then_finishes_in_another_process(tmp_path: Path) -> None:
    if not (EXAMPLES / "openai_agents_session.py").exists():
        pytest.skip("the OpenAI Agents SDK example is on its own branch")
    pytest.importorskip("agents")
    first = example("openai_agents_session.py", str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert "waiting for approval" in first.stdout
    second = example("openai_agents_session.py", str(tmp_path), "approve")
    assert second.returncode == 0, second.stderr
    assert (tmp_path / "notes.txt").read_text().count("\n") == 1  # the append was not done again
