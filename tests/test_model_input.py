"""What a model sends is untrusted (issue 9 §3): a reply whose calls nest thousands deep or hold text that is not
valid Unicode (JSON lets a lone surrogate through) is recorded and its calls fail in words; it never ends the run
with a RecursionError or a UnicodeEncodeError from the log's encoder (a resume answers the same: the unfit
arguments are recorded as why they were unfit)."""

from __future__ import annotations

import pytest

import safepoint
from safepoint.engine.session import load_view
from safepoint.providers.base import Context, ModelTurn
from safepoint.providers.openai_compat import parse_arguments
from safepoint.records import ToolCall


def _deep(depth: int) -> list:
    nested: list = []
    inner = nested
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return nested


class Hostile:
    """A model whose first turn is ``calls`` (and ``text``), then "done"."""

    model = "hostile-model"

    def __init__(self, calls: list[ToolCall], text: str = "") -> None:
        self.turns = [ModelTurn(text=text, tool_calls=calls), ModelTurn(text="done", tool_calls=[])]

    def complete(self, context: Context, turn: int, stream: object = None) -> ModelTurn:
        return self.turns.pop(0) if self.turns else ModelTurn(text="done", tool_calls=[])


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"path": "a.txt", "content": _deep(3000)}, "nest more than 64 levels"),
        ({"path": "a.txt", "content": "half a pair \ud800"}, "not valid Unicode"),
        ({"path": "a.txt", "content": "x", "\udcff": 1}, "not valid Unicode"),
    ],
    ids=["deep", "surrogate", "surrogate-key"],
)
def test_a_models_unfit_arguments_fail_the_call_in_words(workspace, args, said):
    calls = [
        ToolCall(call_id="bad", tool="write_file", args=args),
        ToolCall(call_id="good", tool="write_file", args={"path": "b.txt", "content": "fine\n"}),
    ]
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", model=Hostile.model) as run:
        assert tm.run_agent(run, Hostile(calls)) == "completed"
    view = load_view(tm.store, "r")
    assert view.ledger["bad"].status == "failed" and view.ledger["good"].status == "succeeded"
    told = {m.tool_call_id: m.content for m in view.history if m.role == "tool"}
    assert said in told["bad"] and "It did not run" in told["bad"], told["bad"]
    assert not (workspace / "a.txt").exists() and (workspace / "b.txt").read_text() == "fine\n"


def test_a_models_text_and_names_that_are_not_valid_unicode_are_kept_readable(workspace):
    calls = [ToolCall(call_id="c\ud800", tool="write\udcff_file", args={"path": "a.txt", "content": "x"})]
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", model=Hostile.model) as run:
        assert tm.run_agent(run, Hostile(calls, text="thinking \ud83d")) == "completed"
    view = load_view(tm.store, "r")
    assert any(m.content.startswith("thinking \ufffd") for m in view.history if m.role == "assistant")
    assert [entry.status for entry in view.ledger.values()] == ["failed"]  # no tool by that name
    assert not (workspace / "a.txt").exists()


def test_arguments_nested_thousands_deep_in_a_servers_json_are_kept_as_raw_text():
    """json.loads recurses per level: the OpenAI provider's RecursionError ended the turn."""
    text = '{"content": ' + "[" * 3000 + "]" * 3000 + "}"
    assert parse_arguments(text) == {"_raw": text}
