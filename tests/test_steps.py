"""Steps that cost what is new (issue 10 §4): the restart checkpoint's payload, the context builder, the scripted
model and the scenario's call numbering work from what the step added, and say exactly what the old code said.

The old functions are kept here as the oracles. Checked:

1. equivalence, on random histories (Hypothesis): after every step of appends, rewinds, restores, pending calls,
   ledger changes and fresh starts (a resume: a new tally, a new builder), the payload and the context equal the
   ones computed from scratch by the old code;
2. equivalence on real runs: every payload an agent run writes and every context its model is shown, through a
   crash inside a tool and the resume after it, equal the old code's at that moment;
3. cost: one more step touches a bounded number of messages, whatever the run already holds (counted, not
   timed: the old code touched every message at every step).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsIndex, overload

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import safepoint
from safepoint.agent import loop as agent_loop
from safepoint.agent.context import RECOVERY_NOTE, ContextBuilder, Conversation, build_context
from safepoint.engine.tools import ToolContext
from safepoint.protocol import SELF_HEALING, RuntimeRestartReactionLoopState
from safepoint.providers.base import Context
from safepoint.providers.scripted import ScriptedProvider
from safepoint.records import Message, ToolCall, ToolDefinition, ToolLedgerEntry
from safepoint.restart.checkpoint import LoopTally, loop_state
from safepoint.standins.scenario import Scenario, ScenarioCall, ScenarioTurn, parse_scenario

# --------------------------------------------------------------------------------------------- the old code


def old_loop_state(facts: Any, turn: int, *, visible_output_started: bool = False) -> RuntimeRestartReactionLoopState:
    history = facts.history
    batches = 0
    for message in reversed(history):
        if message.role == "user":
            break
        if message.role == "assistant" and message.tool_calls:
            batches += 1
    in_history = {m.tool_call_id for m in history if m.role == "tool"}
    done = {
        call.call_id: entry.result_ref
        for call in facts.pending
        if (entry := facts.ledger.get(call.call_id)) is not None
        and entry.status in ("succeeded", "failed")
        and entry.result_ref
        and call.call_id not in in_history
    }
    return RuntimeRestartReactionLoopState(
        turn=turn,
        consecutive_batches=batches,
        pending_tool_calls=tuple(call.call_id for call in facts.pending),
        completed_unpersisted_tool_outputs=done,
        lifetime_inference_count=sum(1 for m in facts.lifetime_messages if m.role == "assistant"),
        lifetime_tool_call_count=len(facts.ledger),
        visible_output_started=visible_output_started,
    )


DEFAULT_SYSTEM = "You are a careful coding agent. Use the tools to do the task, then answer without tool calls."


def old_build_context(history: Sequence[Message], *, system: str = "", tools: Sequence[ToolDefinition] = ()) -> Context:
    notes = [message for message in history if message.name == RECOVERY_NOTE]
    healing = [message for message in history if message.name == SELF_HEALING]
    region = system or DEFAULT_SYSTEM
    for message in healing:
        region += "\n\n## A subtask stopped (read this first)\n" + message.content
    if notes:
        region += "\n\n## Recovery note (read this first)\n" + notes[-1].content
    conversation = [message for message in history if message.name not in (RECOVERY_NOTE, SELF_HEALING)]
    return Context(system=region, messages=conversation, tools=list(tools))


def old_calls(scenario: Scenario, turn: int) -> list[ToolCall]:
    number = sum(len(t.tool_calls) for t in scenario.turns[:turn])
    found = []
    for call in scenario.turns[turn].tool_calls:
        number += 1
        found.append(ToolCall(call_id=call.call_id or f"call_{number}", tool=call.tool, args=call.args))
    return found


def old_in_context(expected: str, context: Context) -> bool:
    return expected in context.system + "\n" + "\n".join(message.content for message in context.messages)


def same_context(new: Context, old: Context) -> None:
    assert new.system == old.system
    assert list(new.messages) == list(old.messages)
    assert all(a is b for a, b in zip(new.messages, old.messages, strict=True))
    assert new.messages == old.messages and old.messages == new.messages
    assert new.tools == old.tools


# ------------------------------------------------------------------------------ 1. random histories (fakes)


@dataclass
class Facts:
    """A session as the payload sees it: history replaced on a rewind, the log's messages only ever added."""

    history: list[Message] = field(default_factory=list)
    pending: list[ToolCall] = field(default_factory=list)
    ledger: dict[str, ToolLedgerEntry] = field(default_factory=dict)
    log: dict[int, Message] = field(default_factory=dict)

    def __hash__(self) -> int:  # the payload's tallies are kept per session object
        return id(self)

    @property
    def lifetime_messages(self) -> Any:
        return self.log.values()

    def add(self, message: Message) -> None:
        self.history.append(message)
        self.log[len(self.log)] = message


CALL_IDS = [f"c{n}" for n in range(8)]
ROLES = ["user", "assistant", "tool", "system"]

step_st = st.one_of(
    st.tuples(
        st.just("message"),
        st.sampled_from(ROLES),
        st.lists(st.sampled_from(CALL_IDS), max_size=3),
        st.sampled_from([None, RECOVERY_NOTE, SELF_HEALING, "read_file"]),
        st.text(alphabet="ab\n", max_size=4),
    ),
    st.tuples(st.just("rewind"), st.integers(0, 40)),
    st.tuples(st.just("restore"), st.integers(0, 40)),  # a restore or resume: a copy of an earlier prefix
    st.tuples(st.just("pending"), st.lists(st.sampled_from(CALL_IDS), max_size=4, unique=True)),
    st.tuples(
        st.just("ledger"),
        st.sampled_from(CALL_IDS),
        st.sampled_from(["planned", "started", "succeeded", "failed", "uncertain"]),
        st.sampled_from([None, "", "log:7"]),
    ),
    st.tuples(st.just("resume")),
)


def apply(facts: Facts, step: tuple[Any, ...]) -> None:
    kind = step[0]
    if kind == "message":
        _, role, calls, name, text = step
        tool_calls = tuple(ToolCall(call_id=c, tool="t", args={}) for c in calls) if role == "assistant" else ()
        tool_call_id = calls[0] if role == "tool" and calls else None
        facts.add(
            Message(
                seq=len(facts.history),
                role=role,
                content=text,
                tool_calls=tool_calls,
                tool_call_id=tool_call_id,
                name=name,
            )
        )
    elif kind == "rewind":
        facts.history = facts.history[: step[1]]
    elif kind == "restore":
        facts.history = list(facts.history[: step[1]])
    elif kind == "pending":
        facts.pending = [ToolCall(call_id=c, tool="t", args={}) for c in step[1]]
    elif kind == "ledger":
        _, call_id, status, ref = step
        facts.ledger[call_id] = ToolLedgerEntry(
            call_id=call_id,
            run_id="r",
            step_id="s",
            tool_name="t",
            input={},
            input_hash="h",
            idempotency="read_only",
            replay_policy="safe",
            risk_level="low",
            status=status,
            result_ref=ref,
        )


TOOLS = [ToolDefinition(name="t", idempotency="read_only", replay_policy="safe")]


@settings(max_examples=120, deadline=None)
@given(st.lists(step_st, max_size=60), st.text(alphabet="sx", max_size=2))
def test_payload_and_context_equal_the_old_codes_after_every_step(steps: list[tuple[Any, ...]], system: str) -> None:
    facts = Facts()
    tally, builder = LoopTally(), ContextBuilder()
    earlier: list[tuple[Context, Context]] = []
    for turn, step in enumerate(steps):
        if step[0] == "resume":
            tally, builder = LoopTally(), ContextBuilder()  # rebuilt once, from what the run holds
        else:
            apply(facts, step)
        visible = turn % 3 == 0
        expected = old_loop_state(facts, turn, visible_output_started=visible)
        assert tally.state(facts, turn, visible_output_started=visible) == expected
        assert loop_state(facts, turn, visible_output_started=visible) == expected  # the one kept per session
        context = builder.build(facts.history, system=system, tools=TOOLS)
        oracle = old_build_context(list(facts.history), system=system, tools=TOOLS)
        same_context(context, oracle)
        same_context(build_context(facts.history, system=system, tools=TOOLS), oracle)
        earlier.append((context, oracle))
    for context, oracle in earlier:  # what a turn was shown does not change with the turns after it
        same_context(context, oracle)


def test_a_conversation_is_a_snapshot_that_reads_like_a_list() -> None:
    messages = [Message(seq=n, role="user", content=str(n)) for n in range(5)]
    view = Conversation(messages, 3)
    messages.append(Message(seq=5, role="user", content="5"))
    assert len(view) == 3 and list(view) == messages[:3] and view == messages[:3] and messages[:3] == view
    assert view[-1] is messages[2] and view[0] is messages[0] and view[1:] == messages[1:3]
    assert list(reversed(view)) == messages[2::-1] and messages[1] in view and messages[4] not in view
    assert view != messages and view != "abc"
    with pytest.raises(IndexError):
        view[3]
    with pytest.raises(IndexError):
        view[-4]
    with pytest.raises(TypeError):
        hash(view)


# -------------------------------------------------------------------- the scripted model and its scenario


turns_st = st.lists(
    st.lists(st.one_of(st.none(), st.sampled_from(["x", "y", "call_2"])), max_size=3),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(turns_st)
def test_call_ids_equal_the_old_numbering(turns: list[list[str | None]]) -> None:
    scenario = Scenario(
        task="t",
        turns=[ScenarioTurn(tool_calls=[ScenarioCall(tool="t", call_id=c) for c in calls]) for calls in turns],
    )
    for turn in range(len(turns)):
        assert scenario.calls(turn) == old_calls(scenario, turn)
    copy = parse_scenario(json.dumps({"task": "t", "turns": [{"text": "a"}]}).encode())
    assert copy == parse_scenario(json.dumps({"task": "t", "turns": [{"text": "a"}]}).encode())
    assert "_calls_before" not in json.dumps(safepoint.standins.scenario.scenario_to_dict(copy))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet="ab\n", max_size=4), max_size=6),
    st.text(alphabet="ab\n", max_size=3),
    st.text(alphabet="ab\n", max_size=6),
)
def test_what_a_turn_expects_is_found_as_the_old_code_found_it(contents: list[str], system: str, expected: str):
    from safepoint.providers.scripted import _in_context

    history = [Message(seq=n, role="user", content=text) for n, text in enumerate(contents)]
    context = ContextBuilder().build(history, system=system)
    assert _in_context(expected, context) == old_in_context(expected, context)


# ---------------------------------------------------------------------------------- 2. real runs, a crash


class Crash(BaseException):
    """Stands in for a process dying inside a tool: no outcome is recorded."""


def random_scenario(seed: int, turns: int) -> Scenario:
    rng = random.Random(seed)
    script: list[dict[str, Any]] = []
    for n in range(turns):
        calls = []
        for k in range(rng.choice([1, 1, 2, 3])):
            tool = rng.choice(["write_file", "read_file", "list_files"])
            args: dict[str, Any] = {"path": f"f{rng.randrange(4)}.txt"}
            if tool == "write_file":
                args["content"] = f"{n}.{k}\n"
            elif tool == "list_files":
                args = {}
            calls.append({"tool": tool, "args": args})
        if n == turns // 2:
            calls.append({"tool": "publish", "args": {}})
        script.append({"text": f"turn {n}", "tool_calls": calls, "streamed": rng.random() < 0.3})
    script.append({"text": "done"})
    return parse_scenario(json.dumps({"task": "write and read", "turns": script}).encode())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_payload_and_context_of_a_run_with_a_crash_equal_the_old_codes(
    workspace: Any, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    (workspace / "f0.txt").write_text("zero\n")
    tm = safepoint.open(workspace=str(workspace))
    crashed: list[int] = []

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="high")
    def publish(ctx: ToolContext) -> str:
        if not crashed:
            crashed.append(1)
            raise Crash
        return "published"

    compared: list[str] = []
    real = agent_loop.loop_state

    def checked(facts: Any, turn: int, *, visible_output_started: bool = False) -> RuntimeRestartReactionLoopState:
        payload = real(facts, turn, visible_output_started=visible_output_started)
        assert payload == old_loop_state(facts, turn, visible_output_started=visible_output_started)
        compared.append("payload")
        return payload

    monkeypatch.setattr(agent_loop, "loop_state", checked)

    class Checked(ScriptedProvider):
        def __init__(self, scenario: Scenario, session: Any) -> None:
            super().__init__(scenario)
            self.session = session

        def complete(self, context: Context, turn: int, stream: Any = None) -> Any:
            system = self.scenario.system
            same_context(context, old_build_context(self.session.history, system=system, tools=context.tools))
            compared.append("context")
            return super().complete(context, turn, stream)

    script = random_scenario(seed, 14)
    run = tm.start(script.task, tools=[publish], run_id="r", model=script.model)
    shown: list[str] = []
    with pytest.raises(Crash):
        tm.run_agent(run, Checked(script, run.session), output=shown.append)
    run.session.store.release(run.session.claim)
    run.session.close()
    resumed = tm.resume("r", tools=[publish], skip=("call_" + str(_publish_number(script)),))
    with resumed:
        provider = Checked(script, resumed.session)
        assert tm.run_agent(resumed, provider, output=shown.append) == "completed"
    assert crashed == [1]
    assert compared.count("payload") >= 14 and compared.count("context") >= 15
    assert "Recovery note" in provider.contexts[0].system


def _publish_number(script: Scenario) -> int:
    number = 0
    for turn in range(len(script.turns)):
        for call in script.calls(turn):
            number += 1
            if call.tool == "publish":
                return number
    raise AssertionError("no publish call")


# ------------------------------------------------------------------------- 3. what one more step touches


class Counted(list[Message]):
    """A list that counts the items read from it (by iteration, reversed iteration, index or slice)."""

    reads = 0

    def __iter__(self) -> Iterator[Message]:
        for item in super().__iter__():
            Counted.reads += 1
            yield item

    def __reversed__(self) -> Iterator[Message]:
        for item in super().__reversed__():
            Counted.reads += 1
            yield item

    @overload
    def __getitem__(self, index: SupportsIndex) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> Message | list[Message]:
        found = super().__getitem__(index)
        Counted.reads += len(found) if isinstance(found, list) else 1
        return found


class CountedLog(Mapping[int, Message]):
    def __init__(self) -> None:
        self.items = Counted()

    def __getitem__(self, key: int) -> Message:
        return self.items[key]

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.items)))

    def __len__(self) -> int:
        return len(self.items)


class CountedFacts(Facts):
    def __init__(self) -> None:
        super().__init__(history=Counted())
        self.counted_log = CountedLog()

    def __hash__(self) -> int:
        return id(self)

    @property
    def lifetime_messages(self) -> Any:
        return self.counted_log.items

    def add(self, message: Message) -> None:
        self.history.append(message)
        self.counted_log.items.append(message)


def one_step(facts: CountedFacts, n: int) -> None:
    call = ToolCall(call_id=f"call_{n}", tool="t", args={})
    facts.add(Message(seq=len(facts.history), role="assistant", content=f"turn {n}", tool_calls=(call,)))
    facts.pending = [call]
    facts.add(Message(seq=len(facts.history), role="tool", content="ok", tool_call_id=call.call_id, name="t"))


def test_one_more_payload_reads_only_what_the_step_added() -> None:
    facts = CountedFacts()
    facts.add(Message(seq=0, role="user", content="the task"))
    for n in range(3000):
        one_step(facts, n)
        Counted.reads = 0
        payload = loop_state(facts, n)
        if n in (10, 2999):
            # The two messages the step added to the history and to the log, and the few read to check that the
            # last ones seen are still there (the old code read every message twice).
            assert Counted.reads <= 10, f"step {n} read {Counted.reads} messages"
    assert payload.consecutive_batches == 3000 and payload.lifetime_inference_count == 3000


def test_one_more_agent_step_reads_only_what_it_added(workspace: Any) -> None:
    """Through the agent loop: the context builder and the payload together, on a real run of 300 steps."""
    steps = 300
    script = parse_scenario(
        json.dumps(
            {
                "task": "read",
                "turns": [{"text": f"{n}", "tool_calls": [{"tool": "list_files", "args": {}}]} for n in range(steps)]
                + [{"text": "done"}],
            }
        ).encode()
    )
    reads: list[int] = []

    class Counting(ScriptedProvider):
        def complete(self, context: Context, turn: int, stream: Any = None) -> Any:
            reads.append(Counted.reads)  # what the step before this turn read (and this turn's context)
            Counted.reads = 0
            return super().complete(context, turn, stream)

    tm = safepoint.open(workspace=str(workspace))
    run = tm.start(script.task, run_id="r", model=script.model)
    run.session.history = Counted(run.session.history)
    with run:
        assert tm.run_agent(run, Counting(script)) == "completed"
    assert len(run.session.history) == 2 * steps + 2
    assert max(reads[5:]) <= 20, f"steps read {reads[5]} messages at step 5 and {reads[-1]} at the last"


def test_the_scripted_model_reads_the_context_only_for_what_a_turn_expects() -> None:
    scenario = parse_scenario(
        json.dumps({"task": "t", "turns": [{"text": "a"}, {"text": "b", "expect_in_context": ["m 4998"]}]}).encode()
    )
    messages = Counted(Message(seq=n, role="user", content=f"m {n}") for n in range(5000))
    provider = ScriptedProvider(scenario)
    Counted.reads = 0
    provider.complete(Context(system="s", messages=messages), 0)
    assert Counted.reads == 0
    provider.complete(Context(system="s", messages=messages), 1)  # found near the end, read from there
    assert Counted.reads <= 2


def test_a_scenarios_call_ids_cost_what_the_turn_holds() -> None:
    class CountedTurns(list[ScenarioTurn]):
        reads = 0

        @overload
        def __getitem__(self, index: SupportsIndex) -> ScenarioTurn: ...
        @overload
        def __getitem__(self, index: slice) -> list[ScenarioTurn]: ...
        def __getitem__(self, index: SupportsIndex | slice) -> ScenarioTurn | list[ScenarioTurn]:
            found = super().__getitem__(index)
            CountedTurns.reads += len(found) if isinstance(found, list) else 1
            return found

    turns = CountedTurns([ScenarioTurn(tool_calls=[ScenarioCall(tool="t")])] * 5000)
    scenario = Scenario(task="t", turns=turns)
    scenario.calls(0)  # the numbering is counted once
    CountedTurns.reads = 0
    assert scenario.calls(4999)[0].call_id == "call_5000"
    assert CountedTurns.reads <= 1
