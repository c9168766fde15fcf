"""Attacks on the OpenAI Agents SDK adapter and the Pydantic AI capability (issue 12 §2, §3): each test is a promise
the adapters make, tried just beside where their own tests looked. A test marked ``xfail(strict=True)`` is a
promise found broken (it fails today; the mark comes off with the fix); the others pin an edge that held.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, FunctionTool, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import safepoint
from safepoint.integrations.openai_agents import SafepointSession
from safepoint.integrations.openai_agents_tools import ToolPolicy, durable_model, durable_tools, run_durably

set_tracing_disabled(True)
TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # a GitHub token's shape: the redactor knows it
OPENED: list[safepoint.Safepoint] = []


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def opened(tmp_path: Path, **options: Any) -> safepoint.Safepoint:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    OPENED.append(safepoint.open(None, workspace=str(ws), **options))
    return OPENED[-1]


@pytest.fixture(autouse=True)
def _close_stores() -> Any:
    yield
    while OPENED:
        OPENED.pop().close()


def store_bytes(sp: safepoint.Safepoint) -> bytes:
    folder = sp.store.local_dir()
    assert folder is not None
    data = b"".join(p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file())
    assert len(data) > 1000  # a check of nothing would pass whatever was written
    return data


def agent_for(session: SafepointSession, steps: list[Any], tools: list[FunctionTool], **policies: ToolPolicy) -> Agent:
    return Agent(
        name="writer",
        model=durable_model(session, ScriptedModel(steps)),
        tools=durable_tools(session, tools, policies=policies),
    )


def transfer_tool(sent: Path) -> FunctionTool:
    @function_tool(needs_approval=True)
    def transfer(amount: int) -> str:
        """Send money."""
        with open(sent, "a") as f:
            f.write(f"{amount}\n")
        return f"sent {amount}"

    return transfer


def transfer_agent(session: SafepointSession, sent: Path, steps: list[Any]) -> Agent:
    return agent_for(session, steps, [transfer_tool(sent)], transfer=ToolPolicy(replay_policy="never"))


def approval_steps(call_id: str = "t1", amount: int = 10) -> list[Any]:
    return [[function_call("transfer", {"amount": amount}, call_id=call_id)], [assistant_message("paid")]]


# approvals: used once, for the arguments shown ---------------------------------------------------------------------
def test_an_approval_given_in_one_session_does_not_pay_again_in_another(tmp_path: Path) -> None:
    """A worker that picks up an approved ``RunState`` and runs it against the wrong session (or a session id that
    was reused) sends the money a second time: the other session's ledger has never heard of call ``t1`` and no
    digest was ever asked there, so ``approval_problem`` takes the SDK's per-call approval for an ``always_approve``
    and lets it through. The person approved one transfer of 10; the user sees two."""
    sp = opened(tmp_path)
    sent = tmp_path / "sent.txt"
    alpha = SafepointSession.open(sp, "alpha")
    agent = transfer_agent(alpha, sent, approval_steps())
    state = run(run_durably(agent, "pay", session=alpha)).to_state()
    state.approve(state.get_interruptions()[0])
    approved = state.to_json()
    assert run(run_durably(agent, state, session=alpha)).final_output == "paid"
    assert sent.read_text() == "10\n"
    alpha.close()
    beta = SafepointSession.open(sp, "beta")
    other = transfer_agent(beta, sent, [[assistant_message("paid")]])
    stale = run(RunState.from_json(other, approved))
    run(Runner.run(other, stale, session=beta))
    beta.close()
    assert sent.read_text() == "10\n"  # one approval, one transfer


def test_an_edited_state_cannot_run_other_arguments_under_a_new_call_id(tmp_path: Path) -> None:
    """Held: the adapter's own test edits the arguments of an approved ``RunState`` and keeps its call id. Renaming
    the call too (``t1`` -> ``t9``, approval and all) must not let 9,999 through either: nobody was shown it."""
    sp = opened(tmp_path)
    sent = tmp_path / "sent.txt"
    session = SafepointSession.open(sp, "edited")
    agent = transfer_agent(session, sent, approval_steps())
    state = run(run_durably(agent, "pay", session=session)).to_state()
    state.approve(state.get_interruptions()[0])  # the person saw amount 10
    kept = state.to_json()
    kept["context"].pop("tool_invocations", None)
    text = json.dumps(kept).replace('{\\"amount\\":10}', '{\\"amount\\":9999}').replace('"t1"', '"t9"')
    assert "9999" in text and '"t1"' not in text
    run(session.save_state(None))
    edited = run(RunState.from_json(agent, json.loads(text)))
    run(Runner.run(transfer_agent(session, sent, [[assistant_message("paid")]]), edited, session=session))
    session.close()
    assert not sent.exists()  # 9,999 was never shown to anyone


# secrets and sealing -------------------------------------------------------------------------------------------------
def test_a_secret_in_a_session_id_never_reaches_the_store(tmp_path: Path) -> None:
    """Apps key sessions by whatever they have (an API key, an email with a token in it). The run id is hashed for
    such an id; the run's task, which quotes the id, must be redacted like every other record."""
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, f"user-{TOKEN}")
    run(session.add_items([{"role": "user", "content": "hello there"}]))
    session.close()
    assert TOKEN.encode() not in store_bytes(sp)


def test_a_session_id_is_sealed_on_an_encrypted_store(tmp_path: Path) -> None:
    """On an encrypted store the items are sealed, but the session id (``oa_s_<id>`` as the run's folder, and the
    run's task ``openai-agents session '<id>'``) is written in plain text: anyone with the disk reads who talked to
    the agent about what ("patient-4411-hiv-results"). The user chose encryption to keep exactly this."""
    sp = opened(tmp_path, key="b2" * 32)
    session = SafepointSession.open(sp, "patient-4411-hiv-results")
    run(session.add_items([{"role": "user", "content": "the plaintext marmalade"}]))
    session.close()
    folder = sp.store.local_dir()
    assert folder is not None
    names = "\n".join(str(p) for p in Path(folder).rglob("*")).encode()
    data = store_bytes(sp)
    assert b"marmalade" not in data  # the items are sealed (the right bytes are read)
    assert b"hiv-results" not in data + names


# one session, many writers -------------------------------------------------------------------------------------------
def test_two_threads_adding_items_to_one_session_lose_nothing(tmp_path: Path) -> None:
    """A web server shares one session object between its worker threads (the SDK's own ``SQLiteSession`` takes a
    lock for this). Here two threads calling ``add_items`` interleave records on the run's one log writer: one is
    refused with "another writer slipped in; resume the run" (there is no other writer), and with the timing of a
    real disk (fsync releasing the GIL) every call returns, acknowledged, yet the next ``open`` refuses the session
    as damaged ("history has a hole") and ``accept_damage=True`` keeps only the items before the first
    overlap. Acknowledged items are lost."""
    import threading
    import time

    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "threads")
    log = session.run.session.log
    append = log.store.append

    def slow_disk(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.002)  # an fsync on a real disk: the GIL is released, the other thread goes on (tmpfs here)
        append(*args, **kwargs)

    log.store.append = slow_disk  # type: ignore[method-assign]  # the timing of a disk, nothing else changed
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(tag: str) -> None:
        start.wait()
        try:
            for i in range(40):
                run(session.add_items([{"role": "user", "content": f"{tag}{i}"}]))
        except BaseException as exc:  # a refusal in one line would be a kept promise too; it is recorded
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    live = [item["content"] for item in run(session.get_items())]
    session.close()
    assert not errors
    again = SafepointSession.open(sp, "threads")
    kept = [item["content"] for item in run(again.get_items())]
    again.close()
    assert kept == live and sorted(kept) == sorted(f"{t}{i}" for t in "ab" for i in range(40))


# Pydantic AI ----------------------------------------------------------------------------------------------------------
def pai_transfer_agent(run: safepoint.Run, sent: list[int], paid: list[int]) -> Any:
    """A Pydantic AI agent whose model asks once for ``transfer(amount=10)`` (needs approval), then says "ok"."""
    from pydantic_ai import Agent as PaiAgent
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from safepoint.integrations.pydantic_ai import SafepointCapability
    from safepoint.integrations.pydantic_ai import ToolPolicy as PaiPolicy

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        paid.append(len(messages))
        if not any(m.kind == "response" for m in messages):
            return ModelResponse(parts=[ToolCallPart("transfer", {"amount": 10}, tool_call_id="t1")])
        return ModelResponse(parts=[TextPart("ok")])

    agent: Any = PaiAgent(
        FunctionModel(script),
        capabilities=[SafepointCapability(run, tools={"transfer": PaiPolicy(replay_policy="never")})],
        output_type=[str, DeferredToolRequests],
    )

    @agent.tool_plain(requires_approval=True)
    def transfer(amount: int) -> str:
        sent.append(amount)
        return f"sent {amount}"

    return agent


def pai_waiting(tmp_path: Path) -> tuple[safepoint.Safepoint, bytes, list[int], list[int]]:
    """A run that asked a person to approve ``transfer(10)``, and whose process then went away: the store, the
    message history the app kept (JSON), what was sent and what the model was paid for."""
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    sp = opened(tmp_path)
    run_ = sp.start("pay", builtins=False, run_id="pai")
    sent: list[int] = []
    paid: list[int] = []
    asked = pai_transfer_agent(run_, sent, paid).run_sync("pay")
    assert isinstance(asked.output, DeferredToolRequests) and sent == [] and len(paid) == 1
    history = ModelMessagesTypeAdapter.dump_json(asked.all_messages())
    run_.close()
    return sp, history, sent, paid


def test_pai_an_approval_given_after_a_restart_finishes_the_run(tmp_path: Path) -> None:
    """The human-in-the-loop flow of the README: the run stops at ``DeferredToolRequests``, the process goes away,
    a person approves later and a new process (resumed run, new capability) goes on with the kept history. The
    approved transfer runs, but the next model turn is taken from the record *by position* (turn 0 of the new
    capability = the first response ever recorded), so instead of "ok" the user gets the same approval request for
    ``transfer(10)`` again, and again after approving it: the run can never finish and the model is never asked."""
    from pydantic_ai import DeferredToolResults
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    sp, history, sent, paid = pai_waiting(tmp_path)
    run_ = sp.resume("pai", builtins=False)
    agent = pai_transfer_agent(run_, sent, paid)
    messages = ModelMessagesTypeAdapter.validate_json(history)
    result = agent.run_sync(message_history=messages, deferred_tool_results=DeferredToolResults(approvals={"t1": True}))
    run_.close()
    assert sent == [10]
    assert result.output == "ok" and len(paid) == 2  # the model is asked what comes after the transfer, once


def test_pai_an_approval_after_a_restart_counts_for_the_arguments_shown_only(tmp_path: Path) -> None:
    """The person saw ``transfer(amount=10)`` in ``DeferredToolRequests`` and approved ``t1``. The history the app
    kept is then changed (a bug, a stale copy of another conversation, a hostile edit) to 9,999. In the process
    that asked, the capability refuses it (it remembers the digest asked); in any later process it sends 9,999: the
    digests asked live only in memory (``SafepointCapability.asked``), so the call's own arguments become "what was
    shown". The OpenAI adapter keeps them durably (``ASKED``) for exactly this."""
    from pydantic_ai import DeferredToolResults
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    sp, history, sent, paid = pai_waiting(tmp_path)
    run_ = sp.resume("pai", builtins=False)
    edited = ModelMessagesTypeAdapter.validate_json(history.replace(b'"amount":10', b'"amount":9999'))
    agent = pai_transfer_agent(run_, sent, paid)
    agent.run_sync(message_history=edited, deferred_tool_results=DeferredToolResults(approvals={"t1": True}))
    run_.close()
    assert 9999 not in sent


def test_pai_a_resumed_run_is_never_answered_from_the_record_of_another_question(tmp_path: Path) -> None:
    """A chat app keeps one safepoint run per conversation and resumes it for the next question. Model turns are
    found by position, not by what was asked, so the new question ("capital of France?") gets the recorded answer
    of the first ("2+2?"), silently and unpaid. The README says to start a resumed run as the interrupted one; a
    run started otherwise must be answered by the model or refused in one line, never answered wrongly."""
    from pydantic_ai import Agent as PaiAgent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from safepoint.integrations.pydantic_ai import SafepointCapability

    def oracle(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = [p for m in messages for p in m.parts if isinstance(p, UserPromptPart)][-1].content
        return ModelResponse(parts=[TextPart("4" if "2+2" in str(last) else "Paris")])

    sp = opened(tmp_path)
    run_ = sp.start("chat", builtins=False, run_id="chat")
    first = PaiAgent(FunctionModel(oracle), capabilities=[SafepointCapability(run_)]).run_sync("2+2?")
    assert first.output == "4"
    run_.close()
    run_ = sp.resume("chat", builtins=False)
    agent = PaiAgent(FunctionModel(oracle), capabilities=[SafepointCapability(run_)])
    try:
        answer = agent.run_sync("capital of France?", message_history=first.all_messages()).output
    except safepoint.SafepointError as exc:  # refused in one line: a kept promise
        answer = f"refused: {exc}"
    run_.close()
    assert answer != "4"


# crashes around tool calls: handoffs, agents as tools, streamed runs --------------------------------------------------
class Crash(BaseException):
    """The process stops inside a tool, its effect done (not an ``Exception``: nothing records an outcome)."""


def line_tool(notes: Path, die_on: str | None = None) -> FunctionTool:
    @function_tool
    def append_line(text: str) -> str:
        """Append a line to the notes (not idempotent)."""
        with open(notes, "a") as f:
            f.write(text + "\n")
        if text == die_on:
            raise Crash
        return f"appended {text}"

    return append_line


def two_lines() -> list[Any]:
    return [
        [function_call("append_line", {"text": "a"}, call_id="call_a")],
        [function_call("append_line", {"text": "b"}, call_id="call_b")],
        [assistant_message("done")],
    ]


def crash_then_reopen(tmp_path: Path, build: Any, prompt: str = "write", **open_options: Any) -> SafepointSession:
    """Run ``build(session, die_on="b")`` until it dies inside ``call_b``; return the session reopened by a new
    process (``takeover``: the dead one never released it) with ``open_options``."""
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "crash")
    with pytest.raises(Crash):
        run(Runner.run(build(session, "b"), prompt, session=session))
    return SafepointSession.open(opened(tmp_path), "crash", takeover=True, **open_options)


def test_a_run_killed_after_a_handoff_resumes_where_it_died(tmp_path: Path) -> None:
    """``front`` hands off to ``back``, which dies inside ``append_line("b")``. Resumed as the module docstring says
    (``Runner.run(agent, [], session=session)`` with the agent the app starts with), the run does not continue in
    ``back``: ``front`` is asked again about a conversation it no longer owns (a paid, new turn, not the recorded
    one), answers, and the run ends with ``back``'s work abandoned. The session does not say which agent held the
    turn, so the app cannot resume in the right one either."""
    notes = tmp_path / "notes.txt"
    models: list[Any] = []

    def build(session: SafepointSession, die_on: str | None, front_steps: Any = None, back_steps: Any = None) -> Agent:
        back = Agent(
            name="back",
            instructions="back office",
            model=durable_model(session, ScriptedModel(back_steps or two_lines())),
            tools=durable_tools(session, [line_tool(notes, die_on)]),
        )
        front_model = durable_model(
            session, ScriptedModel(front_steps or [[function_call("transfer_to_back", {}, call_id="h1")]])
        )
        models.append(front_model)
        return Agent(name="front", instructions="front desk", model=front_model, handoffs=[back])

    session = crash_then_reopen(tmp_path, build, skip=["call_b"])
    agent = build(session, None, [[assistant_message("front again")]], [[assistant_message("done")]])
    result = run(Runner.run(agent, [], session=session))
    session.close()
    assert notes.read_text() == "a\nb\n"
    assert models[-1].paid == 0 and result.final_output == "done"  # back goes on; front is not paid again


def test_a_run_killed_inside_an_agent_used_as_a_tool_repeats_nothing(tmp_path: Path) -> None:
    """Held: an agent used as a tool (``as_tool``) is one ledgered call around its own ledgered calls; killed inside
    the inner one, both are uncertain and named at ``open``; replaying the outer one runs the inner agent again from
    its recorded turns, where the finished call comes from the ledger and the skipped one is not run."""
    notes = tmp_path / "notes.txt"

    def build(session: SafepointSession, die_on: str | None, inner: Any = None, outer: Any = None) -> Agent:
        writer = Agent(
            name="writer",
            instructions="writes",
            model=durable_model(session, ScriptedModel(inner or two_lines())),
            tools=durable_tools(session, [line_tool(notes, die_on)]),
        )
        steps = outer or [[function_call("writer", {"input": "write"}, call_id="w1")], [assistant_message("ok")]]
        boss = writer.as_tool(tool_name="writer", tool_description="Writes lines.")
        return Agent(
            name="boss", model=durable_model(session, ScriptedModel(steps)), tools=durable_tools(session, [boss])
        )

    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "crash")
    with pytest.raises(Crash):
        run(Runner.run(build(session, "b"), "write", session=session))
    from safepoint.errors import DecisionNeeded

    with pytest.raises(DecisionNeeded, match=r"writer\(w1\), append_line\(call_b\)"):
        SafepointSession.open(opened(tmp_path), "crash", takeover=True)
    session = SafepointSession.open(opened(tmp_path), "crash", takeover=True, skip=["call_b"], replay=["w1"])
    agent = build(session, None, [[assistant_message("done")]], [[assistant_message("ok")]])
    assert run(Runner.run(agent, [], session=session)).final_output == "ok"
    assert notes.read_text() == "a\nb\n"
    assert {e.call_id: e.status for e in sp.ledger(session.run.run_id)} == {
        "w1": "succeeded",
        "call_a": "succeeded",
        "call_b": "uncertain",
    }
    session.close()


def test_a_streamed_run_killed_mid_tool_resumes_with_the_effect_once(tmp_path: Path) -> None:
    """Held: the adapter's streamed test fails a tool; here a streamed run dies inside one, and the resumed
    streamed run takes the recorded turn (the same call ids) and never appends "b" twice."""
    notes = tmp_path / "notes.txt"
    models: list[Any] = []

    async def streamed(agent: Agent, prompt: Any, session: SafepointSession) -> Any:
        result = Runner.run_streamed(agent, prompt, session=session)
        async for _ in result.stream_events():
            pass
        return result.final_output

    def build(session: SafepointSession, die_on: str | None, steps: Any = None) -> Agent:
        models.append(durable_model(session, ScriptedModel(steps or two_lines())))
        return Agent(name="w", model=models[-1], tools=durable_tools(session, [line_tool(notes, die_on)]))

    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "crash")
    with pytest.raises(Crash):
        run(streamed(build(session, "b"), "write", session))
    session = SafepointSession.open(opened(tmp_path), "crash", takeover=True, skip=["call_b"])
    assert run(streamed(build(session, None, [[assistant_message("done")]]), [], session)) == "done"
    assert notes.read_text() == "a\nb\n" and (models[-1].replayed, models[-1].paid) == (1, 1)
    session.close()


def test_hostile_call_ids_and_secrets_in_tool_errors_are_kept_safe(tmp_path: Path) -> None:
    """Held: call ids a model made up (NUL and ``../``, 5,000 characters, spaces, unicode) are each ledgered, and a
    secret in a tool's output or in the exception it raised reaches neither the ledger nor the items on disk."""

    @function_tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        if url == "bad":
            raise ValueError(f"login failed with {TOKEN}")
        return f"body with {TOKEN}"

    ids = ["\x00../../x", "y" * 5000, "a b c", "\u00e9/..\\"]
    urls = ["ok", "bad", "ok2", "ok3"]
    calls = [function_call("fetch", {"url": u}, call_id=i) for i, u in zip(ids, urls, strict=True)]
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "hostile")
    agent = agent_for(session, [calls, [assistant_message("done")]], [fetch])
    assert run(Runner.run(agent, "go", session=session)).final_output == "done"
    ledger = {e.call_id: e.status for e in sp.ledger(session.run.run_id)}
    session.close()
    assert sorted(ledger) == sorted(ids) and set(ledger.values()) == {"succeeded"}
    assert TOKEN.encode() not in store_bytes(sp)
    again = SafepointSession.open(sp, "hostile")
    assert len(run(again.get_items())) == 1 + 2 * len(ids) + 1  # the input, each call and its output, the answer
    again.close()


def test_a_call_id_a_provider_reuses_in_a_later_request_still_runs_the_new_call(tmp_path: Path) -> None:
    """Several OpenAI-compatible servers number tool calls per response (``call_0`` every time); Pydantic AI's
    adapter keys calls by turn for this very reason (``pai-<turn>-<id>``). Here the ledger is keyed by the SDK's call
    id alone: the user asks for milk on the list, later asks for a second carton, the model calls
    ``append_line("milk")`` again as ``call_0``, and the adapter hands back the first call's "appended milk"
    without running it. The user is told it is done; the list has one line."""
    sp = opened(tmp_path)
    notes = tmp_path / "list.txt"
    session = SafepointSession.open(sp, "shopping")
    for prompt in ("add milk", "add another milk, we need two"):
        steps = [[function_call("append_line", {"text": "milk"}, call_id="call_0")], [assistant_message("added")]]
        assert run(Runner.run(agent_for(session, steps, [line_tool(notes)]), prompt, session=session)).final_output
    session.close()
    assert notes.read_text() == "milk\nmilk\n"


def test_pai_a_recorded_turn_never_runs_a_call_whose_arguments_lost_a_secret(tmp_path: Path) -> None:
    """The model asks for ``note("x")`` and ``save_token(<the user's token>)``; the process dies in ``note``. On
    resume the recorded turn comes back as the log keeps it, redacted, and ``save_token`` (never started, so not in
    the ledger) runs with ``"[REDACTED:assigned_secret]"`` as the token: the user's stored credential is overwritten
    with the placeholder and the run says "ok". The OpenAI adapter refuses such a call ("its arguments lost a secret
    to redaction"); this one must too (or ask the model again), never run it."""
    from pydantic_ai import Agent as PaiAgent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from safepoint.integrations.pydantic_ai import SafepointCapability
    from safepoint.integrations.pydantic_ai import ToolPolicy as PaiPolicy

    saved: list[str] = []

    def agent(run_: safepoint.Run, die: bool) -> Any:
        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if not any(m.kind == "response" for m in messages):
                calls = [ToolCallPart("note", {"text": "x"}, "n1"), ToolCallPart("save_token", {"token": TOKEN}, "s1")]
                return ModelResponse(parts=list(calls))
            return ModelResponse(parts=[TextPart("ok")])

        idempotent = PaiPolicy(idempotency="idempotent", replay_policy="auto")
        made: Any = PaiAgent(
            FunctionModel(script), capabilities=[SafepointCapability(run_, tools={"note": idempotent})]
        )

        @made.tool_plain(sequential=True)
        def note(text: str) -> str:
            if die:
                raise KeyboardInterrupt  # the process stops inside the first call; the second never started
            return "noted"

        @made.tool_plain(sequential=True)
        def save_token(token: str) -> str:
            saved.append(token)
            return "saved"

        return made

    sp = opened(tmp_path)
    run_ = sp.start("keep my token", builtins=False, run_id="tok")
    with pytest.raises(KeyboardInterrupt):
        agent(run_, True).run_sync(f"save my token {TOKEN}")
    run_.close()
    run_ = sp.resume("tok", builtins=False)
    with contextlib.suppress(safepoint.SafepointError):  # refused in one line: a kept promise
        agent(run_, False).run_sync(f"save my token {TOKEN}")
    run_.close()
    assert all("REDACTED" not in token for token in saved)


def test_pai_a_new_call_under_a_repeated_tool_call_id_can_be_approved(tmp_path: Path) -> None:
    """The README: "models such as ``TestModel`` repeat tool call ids". The model asks ``transfer(10)`` as ``t1``
    (approved, sent), then ``transfer(20)``, again as ``t1``. The person approves the 20, as shown, and is asked
    again, forever: the use-once rule is keyed by the tool call id alone (``SafepointCapability.used``), so the
    first call's use of *its* approval refuses every later approval under that id. The run can never finish."""
    from pydantic_ai import Agent as PaiAgent
    from pydantic_ai import DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from safepoint.integrations.pydantic_ai import SafepointCapability
    from safepoint.integrations.pydantic_ai import ToolPolicy as PaiPolicy

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(1 for m in messages if m.kind == "response")
        if turn < 2:
            return ModelResponse(parts=[ToolCallPart("transfer", {"amount": 10 * (turn + 1)}, tool_call_id="t1")])
        return ModelResponse(parts=[TextPart("ok")])

    sent: list[int] = []
    sp = opened(tmp_path)
    run_ = sp.start("pay two bills", builtins=False)
    policy = PaiPolicy(replay_policy="never")
    agent: Any = PaiAgent(
        FunctionModel(script),
        capabilities=[SafepointCapability(run_, tools={"transfer": policy})],
        output_type=[str, DeferredToolRequests],
    )

    @agent.tool_plain(requires_approval=True)
    def transfer(amount: int) -> str:
        sent.append(amount)
        return f"sent {amount}"

    result = agent.run_sync("pay two bills")
    for _ in range(3):  # the person approves each request exactly as shown
        if not isinstance(result.output, DeferredToolRequests):
            break
        approvals = {call.tool_call_id: True for call in result.output.approvals}
        results = DeferredToolResults(approvals=approvals)
        result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=results)
    run_.close()
    assert sent == [10, 20] and result.output == "ok"


# costs ---------------------------------------------------------------------------------------------------------------
def bytes_kept(sp: safepoint.Safepoint) -> int:
    folder = sp.store.local_dir()
    assert folder is not None
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def test_a_run_waiting_for_approval_costs_the_same_in_a_long_session(tmp_path: Path) -> None:
    """Counted in bytes written, not timed: a run that stops for an approval (``run_durably`` saving its
    ``RunState``) writes ~17 KB in a session of 10 items and ~530 KB in one of 500 items of 1 KB: the SDK's
    ``RunState`` carries the whole session history as its input, and the adapter stores it whole at every pause
    (and again, redacted, beside the items it duplicates). A support agent asking approval every few turns writes
    its conversation again each time: quadratic in the session's length."""
    sent = tmp_path / "sent.txt"

    def pause_bytes(items: int) -> int:
        sp = opened(tmp_path / f"s{items}")
        session = SafepointSession.open(sp, "long")
        run(session.add_items([{"role": "user", "content": f"m{i} " + "x" * 1000} for i in range(items)]))
        before = bytes_kept(sp)
        assert run(run_durably(transfer_agent(session, sent, approval_steps()), "pay", session=session)).interruptions
        session.close()
        return bytes_kept(sp) - before

    (tmp_path / "s10").mkdir()
    (tmp_path / "s400").mkdir()
    short, long = pause_bytes(10), pause_bytes(400)
    assert long < 3 * short, (short, long)  # what one pause writes does not grow with the session


def test_arguments_with_a_duplicate_key_are_not_approved_as_shown(tmp_path: Path) -> None:
    """A model steered by a prompt injection writes ``{"amount": 10, "amount": 9999}``. The person approves what the
    SDK shows (``ToolApprovalItem.raw_item.arguments``, the raw text, where 10 comes first and is what a reader
    sees); the approval is bound to the digest of the parsed arguments, in which the last duplicate wins, so 9,999
    is sent under an approval "bound to the arguments shown". Ambiguous arguments must be refused (or shown as
    they will run), never run."""
    from openai.types.responses import ResponseFunctionToolCall

    sent = tmp_path / "sent.txt"
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "dup")
    raw = '{"amount": 10, "amount": 9999}'
    call = ResponseFunctionToolCall(type="function_call", name="transfer", arguments=raw, call_id="t1")
    agent = transfer_agent(session, sent, [[call], [assistant_message("paid")]])
    state = run(run_durably(agent, "pay 10", session=session)).to_state()
    [waiting] = state.get_interruptions()
    assert waiting.raw_item.arguments == raw  # what the person is shown
    state.approve(waiting)
    run(run_durably(agent, state, session=session))
    session.close()
    assert not sent.exists() or sent.read_text() == "10\n"


def test_a_streamed_run_waiting_for_approval_is_kept_durably(tmp_path: Path) -> None:
    """A chat UI streams its runs (``Runner.run_streamed``). When one stops for an approval, ``save_state(result)``
    (documented for "a ``RunResult`` with interruptions") dies with ``AttributeError: 'RunResultStreaming' object
    has no attribute 'to_json'``: ``RunResultStreaming`` is not a ``RunResult``, so it is taken for a ``RunState``.
    The user sees a traceback and the waiting run is not kept: a restart loses the pending approval."""
    sent = tmp_path / "sent.txt"
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "streamed")
    agent = transfer_agent(session, sent, approval_steps())

    async def stream() -> Any:
        result = Runner.run_streamed(agent, "pay", session=session)
        async for _ in result.stream_events():
            pass
        return result

    streamed = run(stream())
    assert [i.raw_item.call_id for i in streamed.interruptions] == ["t1"]
    run(session.save_state(streamed))
    session.close()
    again = SafepointSession.open(sp, "streamed")
    state = run(again.load_state(transfer_agent(again, sent, [[assistant_message("paid")]])))
    again.close()
    assert state is not None and [i.raw_item.call_id for i in state.get_interruptions()] == ["t1"]


def test_clearing_a_session_forgets_the_run_waiting_in_it(tmp_path: Path) -> None:
    """The user clicks "new chat" (``clear_session``) while a transfer waits for approval. The items go, the saved
    ``RunState`` stays (``has_state`` is still true), so the app's "pending approvals" screen, reading the store as
    the module docstring shows, offers the transfer of a conversation that no longer exists; approving it sends
    the money and writes its output into the new, empty chat."""
    sent = tmp_path / "sent.txt"
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "chat")
    assert run(run_durably(transfer_agent(session, sent, approval_steps()), "pay", session=session)).interruptions
    run(session.clear_session())
    session.close()
    again = SafepointSession.open(sp, "chat")
    assert run(again.get_items()) == []
    pending = again.has_state
    again.close()
    assert not pending


def test_a_call_a_person_rejected_never_runs_from_a_stale_copy_of_its_state(tmp_path: Path) -> None:
    """The person rejects ``transfer(10)``; the run goes on and ends ("not paid"). A second approver's screen still
    holds the ``RunState`` as it was saved while waiting (or the app's cache does) and approves it in another
    process later: the transfer is sent. The store keeps what was asked and which approvals were used, not that
    the call was refused, and the SDK never hands a rejected call to the wrapped tool, so nothing durable says no.
    The person's "no" is undone by a stale copy."""
    sent = tmp_path / "sent.txt"
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "reject")
    agent = transfer_agent(session, sent, [*approval_steps()[:1], [assistant_message("not paid")]])
    state = run(run_durably(agent, "pay", session=session)).to_state()
    stale = state.to_json()  # the copy another screen holds
    state.reject(state.get_interruptions()[0])
    assert run(run_durably(agent, state, session=session)).final_output == "not paid"
    session.close()
    assert not sent.exists()
    later = SafepointSession.open(sp, "reject")
    other = transfer_agent(later, sent, [[assistant_message("paid")]])
    copy = run(RunState.from_json(other, stale))
    copy.approve(copy.get_interruptions()[0])
    run(Runner.run(other, copy, session=later))
    later.close()
    assert not sent.exists()  # rejected once is rejected


def test_pai_a_denied_call_never_runs_when_the_same_history_is_approved_later(tmp_path: Path) -> None:
    """The person denies ``transfer(10)`` (``ToolDenied``); the run goes on. A second approver (or a retry of the
    request with a stale form) sends the same message history with ``t1: True``: the transfer is sent. Nothing
    durable (nor in memory) says the call was denied; approvals are "consumed once" but denials are forgotten."""
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolDenied
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    sp = opened(tmp_path)
    run_ = sp.start("pay", builtins=False, run_id="deny")
    sent: list[int] = []
    paid: list[int] = []
    agent = pai_transfer_agent(run_, sent, paid)
    asked = agent.run_sync("pay")
    assert isinstance(asked.output, DeferredToolRequests)
    history = ModelMessagesTypeAdapter.dump_json(asked.all_messages())
    denied = DeferredToolResults(approvals={"t1": ToolDenied("no")})
    agent.run_sync(message_history=ModelMessagesTypeAdapter.validate_json(history), deferred_tool_results=denied)
    assert sent == []
    approved = DeferredToolResults(approvals={"t1": True})
    agent.run_sync(message_history=ModelMessagesTypeAdapter.validate_json(history), deferred_tool_results=approved)
    run_.close()
    assert sent == []  # denied once is denied
