"""LangGraph adapter: a thread id that looks like a secret (a session named by an API key) is an identifier: found
again, never written in clear into the store (issue 12, a colleague's notes, the agent-name family)."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph

from safepoint.integrations.langgraph import SafepointSaver, durable_tool

SECRET = "sk-proj-" + "Q7vN2xLmA9" * 3


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def graph(saver: SafepointSaver, sent: list[str]) -> Any:  # a compiled graph (its type is private)
    @durable_tool
    def send(text: str) -> str:
        sent.append(text)
        return f"sent {text}"

    def node(state: State) -> State:
        return {"items": [send(state["items"][-1])]}

    built = StateGraph(State)
    built.add_node("n", node)
    built.add_edge(START, "n")
    built.add_edge("n", END)
    return built.compile(checkpointer=saver)


@pytest.mark.parametrize("thread", [SECRET, f"user {SECRET}"])
def test_a_thread_named_like_a_key_is_found_again_and_never_stored_clear(tmp_path: Path, thread: str) -> None:
    store = tmp_path / "store"
    sent: list[str] = []
    config = {"configurable": {"thread_id": thread}}
    with SafepointSaver(f"file:{store}", workspace=str(tmp_path)) as saver:
        graph(saver, sent).invoke({"items": ["a"]}, config)
    with SafepointSaver(f"file:{store}", workspace=str(tmp_path)) as saver:  # another process's saver
        app = graph(saver, sent)
        assert app.get_state(config).values == {"items": ["a", "sent a"]}
        app.invoke({"items": ["b"]}, config)
        assert app.get_state(config).values["items"] == ["a", "sent a", "b", "sent b"]
        assert [c.config["configurable"]["thread_id"] for c in saver.list(config)][:1] == [thread]
        assert thread not in {c.config["configurable"]["thread_id"] for c in saver.list(None)}  # not in the store
    assert sent == ["a", "b"]
    held = [p for p in store.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert held == []
