"""Cases beside issue 12's attacks on the adapters (tests/test_attack_i12oa.py): approvals bound to one call of
one turn, refusals kept durably, ambiguous arguments never run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import RunState, set_tracing_disabled
from agents.testing import assistant_message

import safepoint
from safepoint.integrations.openai_agents import SafepointSession
from safepoint.integrations.openai_agents_tools import _repeats_a_key, run_durably
from tests.test_attack_i12oa import approval_steps, transfer_agent

set_tracing_disabled(True)
OPENED: list[safepoint.Safepoint] = []


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def opened(tmp_path: Path) -> safepoint.Safepoint:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    OPENED.append(safepoint.open(None, workspace=str(ws)))
    return OPENED[-1]


@pytest.fixture(autouse=True)
def _close_stores() -> Any:
    yield
    while OPENED:
        OPENED.pop().close()


@pytest.mark.parametrize(
    ("text", "repeats"),
    [
        ('{"amount": 10, "amount": 9999}', True),
        ('{"to": {"iban": "A", "iban": "B"}, "amount": 1}', True),  # nested: the same ambiguity one level down
        ('[{"a": 1}, {"a": 2}]', False),  # the same key in two objects is no repeat
        ('{"amount": 10}', False),
        ('{"amount": 10', False),  # not JSON: kept as text, never bound to a parsed value
    ],
)
def test_a_repeated_key_is_found_at_any_depth(text: str, repeats: bool) -> None:
    assert _repeats_a_key(text) is repeats


def test_a_nested_repeated_key_is_not_run_under_an_approval(tmp_path: Path) -> None:
    from openai.types.responses import ResponseFunctionToolCall

    sent = tmp_path / "sent.txt"
    session = SafepointSession.open(opened(tmp_path), "nested")
    raw = '{"amount": 10, "memo": {"x": 1, "x": 2}}'
    call = ResponseFunctionToolCall(type="function_call", name="transfer", arguments=raw, call_id="t1")
    agent = transfer_agent(session, sent, [[call], [assistant_message("paid")]])
    state = run(run_durably(agent, "pay", session=session)).to_state()
    state.approve(state.get_interruptions()[0])
    run(run_durably(agent, state, session=session))
    session.close()
    assert not sent.exists()


def test_a_call_id_reused_in_a_later_turn_asks_again_and_runs_as_approved(tmp_path: Path) -> None:
    """``t1`` approved and sent in one request; the next request's model asks ``transfer(20)`` as ``t1`` again:
    the person is asked about the new call (its own digest), and once approved it runs, once."""
    sent = tmp_path / "sent.txt"
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "twice")
    for amount in (10, 20):
        agent = transfer_agent(session, sent, approval_steps("t1", amount))
        result = run(run_durably(agent, f"pay {amount}", session=session))
        [waiting] = result.interruptions
        assert waiting.raw_item.arguments == f'{{"amount":{amount}}}'
        state = result.to_state()
        state.approve(waiting)
        assert run(run_durably(agent, state, session=session)).final_output == "paid"
    assert sent.read_text() == "10\n20\n"
    assert [e.call_id for e in sp.ledger(session.run.run_id)] == ["t1", "t1~1"]
    session.close()


def test_a_rejection_is_kept_across_processes_and_beats_a_later_approval(tmp_path: Path) -> None:
    """The same as the attack, with the stale copy run through ``run_durably`` by a new process (the store
    reopened): the rejection recorded by the first process refuses it."""
    sent = tmp_path / "sent.txt"
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "no")
    agent = transfer_agent(session, sent, [*approval_steps()[:1], [assistant_message("not paid")]])
    state = run(run_durably(agent, "pay", session=session)).to_state()
    stale = state.to_json()
    state.reject(state.get_interruptions()[0])
    run(run_durably(agent, state, session=session))
    session.close()
    later = SafepointSession.open(opened(tmp_path), "no")
    other = transfer_agent(later, sent, [[assistant_message("paid")]])
    copy = run(RunState.from_json(other, stale))
    copy.approve(copy.get_interruptions()[0])
    run(run_durably(other, copy, session=later))
    later.close()
    assert not sent.exists()


def test_a_whole_tool_approval_is_still_honoured_in_the_session_that_asked(tmp_path: Path) -> None:
    """``always_approve`` (the SDK's sticky approval) binds no arguments and is honoured for a tool whose approval
    the SDK asks for: the refusal of per-call approvals this session never asked about does not touch it."""
    sent = tmp_path / "sent.txt"
    session = SafepointSession.open(opened(tmp_path), "always")
    agent = transfer_agent(session, sent, approval_steps())
    state = run(run_durably(agent, "pay", session=session)).to_state()
    state.approve(state.get_interruptions()[0], always_approve=True)
    assert run(run_durably(agent, state, session=session)).final_output == "paid"
    session.close()
    assert sent.read_text() == "10\n"
