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


# Pydantic AI ----------------------------------------------------------------------------------------------------------
def pai_repeating_agent(run_: safepoint.Run, sent: list[int], amounts: list[int]) -> Any:
    """Asks ``transfer(amounts[n])`` as ``t1`` in turn ``n`` (the id repeated, as ``TestModel`` does), then "ok"."""
    from pydantic_ai import Agent as PaiAgent
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from safepoint.integrations.pydantic_ai import SafepointCapability
    from safepoint.integrations.pydantic_ai import ToolPolicy as PaiPolicy

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(1 for m in messages if m.kind == "response")
        if turn < len(amounts):
            return ModelResponse(parts=[ToolCallPart("transfer", {"amount": amounts[turn]}, tool_call_id="t1")])
        return ModelResponse(parts=[TextPart("ok")])

    capability = SafepointCapability(run_, tools={"transfer": PaiPolicy(replay_policy="never")})
    agent: Any = PaiAgent(FunctionModel(script), capabilities=[capability], output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def transfer(amount: int) -> str:
        sent.append(amount)
        return f"sent {amount}"

    return agent


def test_pai_the_same_arguments_twice_under_one_id_run_when_each_call_is_approved(tmp_path: Path) -> None:
    """Two transfers of 10, both asked as ``t1``: an approval passed back with the metadata of the request
    (its call id) is for that very call and runs; the first call's used approval never counts for the second."""
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    sp = opened(tmp_path)
    run_ = sp.start("pay twice", builtins=False)
    sent: list[int] = []
    agent = pai_repeating_agent(run_, sent, [10, 10])
    result = agent.run_sync("pay twice")
    for _ in range(3):
        if not isinstance(result.output, DeferredToolRequests):
            break
        requests = result.output
        results = DeferredToolResults(approvals={"t1": True}, metadata=dict(requests.metadata))
        result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=results)
    assert sent == [10, 10] and result.output == "ok"
    run_.close()


def test_pai_a_stale_approval_of_the_same_arguments_asks_again(tmp_path: Path) -> None:
    """The first ``t1`` (10) approved and sent; the second request (10 again, as ``t1``) answered with the first
    approval as it was (no metadata naming the new call): asked again, never a second transfer on one approval."""
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    sp = opened(tmp_path)
    run_ = sp.start("pay", builtins=False)
    sent: list[int] = []
    agent = pai_repeating_agent(run_, sent, [10, 10])
    first = agent.run_sync("pay")
    approval = DeferredToolResults(approvals={"t1": True})
    second = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=approval)
    assert sent == [10] and isinstance(second.output, DeferredToolRequests)
    third = agent.run_sync(message_history=second.all_messages(), deferred_tool_results=approval)
    run_.close()
    assert sent == [10] and isinstance(third.output, DeferredToolRequests)


def test_pai_a_denial_is_kept_across_processes(tmp_path: Path) -> None:
    """Denied in one process; the same history approved in a later process (the run resumed, a new capability):
    the durable denial refuses it."""
    from pydantic_ai import DeferredToolResults, ToolDenied
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    sp = opened(tmp_path)
    run_ = sp.start("pay", builtins=False, run_id="deny2")
    sent: list[int] = []
    agent = pai_repeating_agent(run_, sent, [10])
    history = ModelMessagesTypeAdapter.dump_json(agent.run_sync("pay").all_messages())
    denied = DeferredToolResults(approvals={"t1": ToolDenied("no")})
    agent.run_sync(message_history=ModelMessagesTypeAdapter.validate_json(history), deferred_tool_results=denied)
    run_.close()
    run_ = sp.resume("deny2", builtins=False)
    approved = DeferredToolResults(approvals={"t1": True})
    again = pai_repeating_agent(run_, sent, [10])
    again.run_sync(message_history=ModelMessagesTypeAdapter.validate_json(history), deferred_tool_results=approved)
    run_.close()
    assert sent == []


def test_pai_a_crashed_run_resumed_with_the_same_prompt_is_answered_from_the_record(tmp_path: Path) -> None:
    """The digest key still finds the turn a crash interrupted: the same prompt after a restart replays it (the
    model is not paid again) and the finished call comes from the ledger."""
    from pydantic_ai import Agent as PaiAgent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from safepoint.integrations.pydantic_ai import SafepointCapability
    from safepoint.integrations.pydantic_ai import ToolPolicy as PaiPolicy

    paid: list[int] = []
    noted: list[str] = []

    def agent(run_: safepoint.Run, die: bool) -> Any:
        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            paid.append(len(messages))
            if not any(m.kind == "response" for m in messages):
                return ModelResponse(parts=[ToolCallPart("note", {"text": "x"}, "n1")])
            return ModelResponse(parts=[TextPart("ok")])

        made: Any = PaiAgent(
            FunctionModel(script),
            capabilities=[
                SafepointCapability(run_, tools={"note": PaiPolicy(idempotency="idempotent", replay_policy="auto")})
            ],
        )

        @made.tool_plain
        def note(text: str) -> str:
            noted.append(text)
            if die:
                raise KeyboardInterrupt  # the process stops after the effect, before the outcome is recorded
            return "noted"

        return made

    sp = opened(tmp_path)
    run_ = sp.start("note", builtins=False, run_id="again")
    with pytest.raises(KeyboardInterrupt):
        agent(run_, True).run_sync("note x")
    run_.close()
    run_ = sp.resume("again", builtins=False)
    assert agent(run_, False).run_sync("note x").output == "ok"
    run_.close()
    assert len(paid) == 2  # turn 0 once (replayed after the restart), then the answer
    assert noted == ["x", "x"]  # the interrupted idempotent call run again, as its policy allows


def test_a_call_waiting_in_a_cleared_session_never_runs_from_a_kept_copy(tmp_path: Path) -> None:
    """ "New chat" while a transfer waits: the app's own copy of the state, approved later, runs nothing."""
    sent = tmp_path / "sent.txt"
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "cleared")
    agent = transfer_agent(session, sent, approval_steps())
    kept = run(run_durably(agent, "pay", session=session)).to_state().to_json()
    run(session.clear_session())
    session.close()
    again = SafepointSession.open(sp, "cleared")
    other = transfer_agent(again, sent, [[assistant_message("paid")]])
    copy = run(RunState.from_json(other, kept))
    copy.approve(copy.get_interruptions()[0])
    run(run_durably(other, copy, session=again))
    again.close()
    assert not sent.exists()


def test_a_sealed_session_id_is_found_again_and_differs_under_another_key(tmp_path: Path) -> None:
    """The keyed run id is stable under one key (the session reopens with its items) and reveals nothing a
    guess could confirm without the key: another store's key gives another id for the same session id."""
    from safepoint.integrations.openai_agents import sealed_run_id_for
    from safepoint.store.sealed import SealedStore

    ws = tmp_path / "ws"
    ws.mkdir()
    sp = safepoint.open(None, workspace=str(ws), key="c3" * 32)
    OPENED.append(sp)
    session = SafepointSession.open(sp, "Patient 4411")
    run(session.add_items([{"role": "user", "content": "hello"}]))
    first = session.run.run_id
    session.close()
    again = SafepointSession.open(sp, "Patient 4411")
    assert again.run.run_id == first and first.startswith("oa_k_")
    assert [i["content"] for i in run(again.get_items())] == ["hello"]
    again.close()
    other_ws = tmp_path / "other"
    other_ws.mkdir()
    other = safepoint.open(None, workspace=str(other_ws), key="d4" * 32)
    OPENED.append(other)
    assert isinstance(other.store, SealedStore)
    assert sealed_run_id_for("Patient 4411", other.store) != first


def test_a_pause_in_a_long_session_writes_no_more_than_in_a_short_one(tmp_path: Path) -> None:
    """As the attack's cost test, with items that do not compress (the store compresses records, which hid the
    repeated history of a session of "xxx..."), and the approval then given in a new process: the state rebuilt
    from the reference runs the transfer once."""
    import hashlib

    sent = tmp_path / "sent.txt"

    def kept(sp: safepoint.Safepoint) -> int:
        folder = sp.store.local_dir()
        assert folder is not None
        return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())

    def pause_bytes(items: int) -> int:
        (tmp_path / f"s{items}").mkdir()
        sp = opened(tmp_path / f"s{items}")
        session = SafepointSession.open(sp, "long")
        noise = [
            "".join(hashlib.sha256(f"{items}-{i}-{k}".encode()).hexdigest() for k in range(16)) for i in range(items)
        ]
        run(session.add_items([{"role": "user", "content": text} for text in noise]))
        before = kept(sp)
        assert run(run_durably(transfer_agent(session, sent, approval_steps()), "pay", session=session)).interruptions
        session.close()
        written = kept(sp) - before
        again = SafepointSession.open(sp, "long")
        agent = transfer_agent(again, sent, [[assistant_message("paid")]])
        state = run(again.load_state(agent))
        assert state is not None and state._original_input[:1] == [{"role": "user", "content": noise[0]}]
        state.approve(state.get_interruptions()[0])
        assert run(run_durably(agent, state, session=again)).final_output == "paid"
        again.close()
        return written

    short, long = pause_bytes(10), pause_bytes(200)
    assert long < 2 * short, (short, long)
    assert sent.read_text() == "10\n10\n"


def test_a_state_whose_items_were_popped_is_refused_in_one_line(tmp_path: Path) -> None:
    from safepoint.integrations.openai_agents import SessionStateError

    sent = tmp_path / "sent.txt"
    session = SafepointSession.open(opened(tmp_path), "popped")
    agent = transfer_agent(session, sent, approval_steps())
    assert run(run_durably(agent, "pay", session=session)).interruptions
    while run(session.pop_item()) is not None:
        pass
    with pytest.raises(SessionStateError, match="changed since") as raised:
        run(session.load_state(agent))
    assert "\n" not in str(raised.value)
    session.close()
