"""Arguments of the wrong type never reach a tool (issue 9 §3): checked against its annotations before it runs.

The model is told in one sentence which argument is wrong and what it takes (never Python's own error text); the
call is recorded ``failed`` and the tool did not run. A tool without annotations, or with types msgspec cannot
check, keeps working.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec
import pytest

import safepoint
from safepoint import ToolContext, tool
from safepoint.errors import ExitCode
from tests.conftest import safepoint_in_process

BAD_BUILTIN_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("read_file", {"path": 5}, "argument 'path' must be str, not an integer"),
    ("read_file", {"path": ["a", "b"]}, "argument 'path' must be str, not a list"),
    ("read_file", {}, "argument 'path' (str) is missing"),
    ("read_file", {"path": "a.txt", "mode": "rb"}, "takes no argument 'mode'"),
    ("write_file", {"path": 5, "content": "x"}, "argument 'path' must be str, not an integer"),
    ("write_file", {"path": "a.txt", "content": ["x"]}, "argument 'content' must be str, not a list"),
    ("run_command", {"command": "echo hi >> ran.txt", "timeout": "soon"}, "'timeout' must be float, not a string"),
    ("run_command", {"command": ["echo", "hi"]}, "argument 'command' must be str, not a list"),
    ("apply_patch", {"patch": 5}, "argument 'patch' must be str, not an integer"),
    ("search_files", {"pattern": 5}, "argument 'pattern' must be str, not an integer"),
    ("list_files", {"path": None}, "argument 'path' must be str, not null"),
]


def test_builtin_tools_refuse_wrong_arguments_in_one_sentence(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("kept\n")
    calls = [{"tool": name, "args": args} for name, args, _ in BAD_BUILTIN_CALLS]
    scenario = {"task": "t", "turns": [{"text": "go", "tool_calls": calls}, {"text": "done"}]}
    (tmp_path / "s.json").write_text(json.dumps(scenario))
    done = safepoint_in_process("run", tmp_path / "s.json", "-w", ws, "--run-id", "r")
    assert done.returncode == ExitCode.OK, done.stderr
    history = json.loads(safepoint_in_process("history", "r", "-w", ws, "--json").stdout)
    said = {m["tool_call_id"]: m["content"] for m in history if m["role"] == "tool"}
    ledger = {row["call_id"]: row for row in json.loads(safepoint_in_process("ledger", "r", "-w", ws, "--json").stdout)}
    for index, (name, _, expected) in enumerate(BAD_BUILTIN_CALLS, 1):
        text = said[f"call_{index}"]
        assert expected in text and f"bad arguments for {name}" in text, text
        assert "\n" not in text and "Error" not in text and "object" not in text, text  # no Python error text
        assert ledger[f"call_{index}"]["status"] == "failed", ledger[f"call_{index}"]
    assert (ws / "a.txt").read_text() == "kept\n" and not (ws / "ran.txt").exists()


class Payment(msgspec.Struct):
    amount: int
    currency: Literal["usd", "eur"]


class Opaque:
    """A type msgspec cannot validate: such an argument is passed as it is."""


RAN: list[str] = []


@tool(name="charge")
def charge(ctx: ToolContext, amount: int, currency: Literal["usd", "eur"], tags: list[str] | None = None) -> str:
    RAN.append("charge")
    return f"charged {amount} {currency}"


@tool(name="pay")
def pay(ctx: ToolContext, payment: Payment) -> str:
    RAN.append("pay")
    return "paid"


@tool(name="loose")
def loose(ctx, anything, **more):  # type: ignore[no-untyped-def]  # the point: a tool without annotations
    RAN.append("loose")
    return f"{anything!r} {sorted(more)}"


@tool(name="opaque")
def opaque(ctx: ToolContext, thing: Opaque, count: int = 1) -> str:
    RAN.append("opaque")
    return "ok"


@pytest.mark.parametrize(
    ("name", "args", "said"),
    [
        ("charge", {"amount": "12", "currency": "usd"}, "argument 'amount' must be int, not a string"),
        ("charge", {"amount": 12, "currency": "gbp"}, "argument 'currency' must be Literal['usd', 'eur']"),
        ("charge", {"amount": 12, "currency": "usd", "tags": ["a", 3]}, "'tags' must be list[str] | None"),
        ("charge", {"amount": 12}, "argument 'currency' (Literal['usd', 'eur']) is missing"),
        ("charge", {"amount": 12, "currency": "usd", "note": "x"}, "takes no argument 'note'"),
        ("pay", {"payment": {"amount": 1}}, "argument 'payment' must be Payment"),
        ("opaque", {"thing": "x", "count": "many"}, "argument 'count' must be int, not a string"),
    ],
)
def test_a_user_tool_refuses_wrong_arguments(tmp_path, name, args, said):
    RAN.clear()
    sp = safepoint.open(workspace=str(tmp_path))
    try:
        with sp.start("t", tools=[charge, pay, loose, opaque]) as run:
            result = run.call_result(name, args, call_id="c1")
            assert result.status == "failed" and said in result.observation, result.observation
            assert result.observation.startswith(f"error: bad arguments for {name}: ")
            assert result.observation.endswith("It did not run.")
            assert [row.status for row in sp.ledger(run.run_id)] == ["failed"]
            with pytest.raises(safepoint.ToolFailure, match="bad arguments"):
                run.call(name, args, call_id="c2")
    finally:
        sp.close()
    assert RAN == [], "the tool ran with arguments it does not take"


def test_tools_that_declare_less_keep_working(tmp_path):
    RAN.clear()
    sp = safepoint.open(workspace=str(tmp_path))
    try:
        with sp.start("t", tools=[charge, pay, loose, opaque]) as run:
            assert run.call("loose", {"anything": [1], "extra": 2}) == "[1] ['extra']"
            assert run.call("opaque", {"thing": {"any": "shape"}}) == "ok"
            assert run.call("charge", {"amount": 3, "currency": "eur", "tags": ["x"]}) == "charged 3 eur"
            assert run.call("pay", {"payment": {"amount": 1, "currency": "usd"}}) == "paid"

            def refund(amount: float, reason: str = "") -> str:
                return f"refunded {amount}"

            ledgered = run.ledgered(refund, idempotency="non_idempotent", replay_policy="never")
            assert ledgered(amount=2) == "refunded 2"
            with pytest.raises(safepoint.ToolFailure, match="argument 'amount' must be float, not a string"):
                ledgered(amount="two")
    finally:
        sp.close()
    assert RAN == ["loose", "opaque", "charge", "pay"]
