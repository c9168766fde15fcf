"""Attacks on the LangGraph adapter (issue 12 §1) beside where ``test_langgraph_*`` looked: state that is not
text, a node whose arguments change between attempts, tool call ids a model repeats, parallel ``Send`` branches,
and ``copy_thread`` of a thread a crash left uncertain.

The ``xfail(strict=True)`` tests are broken promises (each reason says which); they turn into failures the day a
fix lands, and the mark is dropped then."""

from __future__ import annotations

import dataclasses
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, RetryPolicy, Send
from pydantic import BaseModel

from safepoint.errors import DecisionNeeded, ResumeError, RunLockedError
from safepoint.integrations.langgraph import DurableCall, SafepointSaver, ToolNodeLedger, durable_tool

from .test_langgraph_saver import readable
from .test_langgraph_tools import killed_in_a_tool, order_graph

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2


def config(thread: str = "t") -> Any:
    return {"configurable": {"thread_id": thread}}


# Redaction: state that is not str, dict, list or a message -----------------------------------------------------
class Credentials(BaseModel):
    token: str


@dataclasses.dataclass
class Session:
    header: str


class Loose(TypedDict):
    value: Any


KINDS = {
    "pydantic model": lambda: Credentials(token=SECRET),
    "Document": lambda: Document(page_content=f"the key is {SECRET}"),  # what every RAG graph keeps
    "set": lambda: {f"key {SECRET}"},
    "bytes": lambda: f"Authorization: Bearer {SECRET}".encode(),
    "dataclass": lambda: Session(header=f"Bearer {SECRET}"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_secret_in_any_state_value_is_redacted_in_the_store(tmp_path: Path, kind: str) -> None:
    """A node puts the user's credentials in the state as a pydantic model (or retrieved ``Document``s, a set of
    tags, raw bytes of a response, a dataclass): the store keeps the API key in clear, though the same key in a
    message or a plain string is redacted. Whoever reads the store folder (a backup, a shared disk) gets it."""

    def load(state: Loose) -> dict[str, Any]:
        return {"value": KINDS[kind]()}

    graph = StateGraph(Loose)
    graph.add_node("load", load)
    graph.add_edge(START, "load")
    graph.add_edge("load", END)
    with SafepointSaver(f"file:{tmp_path}/store") as saver:
        graph.compile(checkpointer=saver).invoke({"value": None}, config(), durability="sync")
    assert not any(SECRET.encode() in text for text in readable(tmp_path / "store"))


# A node whose durable call changes between attempts --------------------------------------------------------------
class Order(TypedDict):
    status: str


def retried(node: Any) -> Any:
    graph = StateGraph(Order)
    graph.add_node("pay", node, retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False))
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    return graph


def test_a_retry_with_other_arguments_never_gets_the_old_result(tmp_path: Path) -> None:
    """Held: the node's first attempt charged 10 and failed; its retry asks for 20 at the same place. The ledger
    does not hand back "charged 10" for a charge of 20, and does not charge again on its own: it refuses."""
    charged: list[int] = []
    attempts: list[int] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="never")
    def charge(amount: int) -> str:
        charged.append(amount)
        return f"charged {amount}"

    def pay(state: Order) -> dict[str, Any]:
        attempts.append(1)
        receipt = charge(10 * len(attempts))
        if len(attempts) < 2:
            raise ConnectionError("the shipping API timed out")
        return {"status": receipt}

    saver = SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path))
    with saver, pytest.raises(ResumeError, match="other input"):
        retried(pay).compile(checkpointer=saver).invoke({"status": "new"}, config(), durability="sync")
    assert charged == [10]


def test_the_refusal_of_changed_arguments_says_what_a_graph_author_can_do(tmp_path: Path) -> None:
    """The user reads advice to set call ids, but ``durable_tool`` makes them; the message should name the thread
    and the tool and say that a node must call a durable tool with the same arguments on every attempt."""
    attempts: list[int] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="never")
    def charge(amount: int) -> str:
        return f"charged {amount}"

    def pay(state: Order) -> dict[str, Any]:
        attempts.append(1)
        receipt = charge(10 * len(attempts))
        if len(attempts) < 2:
            raise ConnectionError("the shipping API timed out")
        return {"status": receipt}

    saver = SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path))
    with saver, pytest.raises(ResumeError) as refused:
        retried(pay).compile(checkpointer=saver).invoke({"status": "new"}, config("order-17"), durability="sync")
    message = str(refused.value)
    assert "own call id" not in message and "order-17" in message, message


class PaymentsClient:
    """A client object passed to a tool, made afresh by each attempt (as ``requests.Session()`` is)."""

    def __init__(self) -> None:
        self.base = "https://pay.example"


def test_a_client_object_argument_is_the_same_call_on_a_retry(tmp_path: Path) -> None:
    """``charge(client, 10)`` with a client the node builds: the node's retry (or its resume after a crash, in a
    new process) calls it the same way, yet is refused as "charge with other input" and the graph dies, so the
    ledger breaks the very retry it is there to make safe. The memory address also lands in the store."""
    charged: list[int] = []
    attempts: list[int] = []
    alive: list[PaymentsClient] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="never")
    def charge(client: PaymentsClient, amount: int) -> str:
        charged.append(amount)
        return f"charged {amount}"

    def pay(state: Order) -> dict[str, Any]:
        attempts.append(1)
        client = PaymentsClient()
        alive.append(client)  # kept, so a retry's client cannot reuse its address (a new process never does)
        receipt = charge(client, 10)
        if len(attempts) < 2:
            raise ConnectionError("the shipping API timed out")
        return {"status": receipt}

    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        out = retried(pay).compile(checkpointer=saver).invoke({"status": "new"}, config(), durability="sync")
    assert out == {"status": "charged 10"} and charged == [10]


# ToolNodeLedger: a model that repeats a tool call id ---------------------------------------------------------------
class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@pytest.mark.parametrize("same_id", ["", "call_0"])
def test_two_calls_of_one_message_with_one_id_each_run_once(tmp_path: Path, same_id: str) -> None:
    """The model asks for two emails in one turn and its server gives both calls the same id: the first email is
    sent, the second is refused as "recorded for another call" and the graph dies (with the same arguments, the
    second would silently get the first's result and never be sent)."""
    sent: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    calls = [{"name": "send_email", "args": {"to": to}, "id": same_id} for to in ("a@example.com", "b@example.com")]
    model = FakeMessagesListChatModel(responses=[AIMessage(content="", tool_calls=calls)])
    ledger = ToolNodeLedger(default=DurableCall(replay_policy="never"))
    graph = StateGraph(Chat)
    graph.add_node("think", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([send_email], wrap_tool_call=ledger, awrap_tool_call=ledger.acall))
    graph.add_edge(START, "think")
    graph.add_edge("think", "tools")
    graph.add_edge("tools", END)
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        out = graph.compile(checkpointer=saver).invoke(
            {"messages": [HumanMessage("mail")]}, config(), durability="sync"
        )
    assert sorted(sent) == ["a@example.com", "b@example.com"]
    assert sorted(m.content for m in out["messages"] if isinstance(m, ToolMessage)) == [
        "sent to a@example.com",
        "sent to b@example.com",
    ]


# Send: parallel branches --------------------------------------------------------------------------------------------
class Fan(TypedDict):
    out: Annotated[list[str], operator.add]


def test_parallel_send_branches_run_each_durable_call_once_when_one_branch_fails(tmp_path: Path) -> None:
    """Held: three ``Send`` branches each charge; one fails after its charge. Run again, the failed branch takes
    its charge from the ledger and the finished ones are not run again (their writes were kept): one charge
    each, and the branches' calls never take each other's results."""
    charged: list[int] = []
    failing = {"on": True}

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def charge(amount: int) -> str:
        charged.append(amount)
        return f"charged {amount}"

    def work(arg: dict[str, int]) -> dict[str, Any]:
        receipt = charge(arg["i"])
        if arg["i"] == 2 and failing["on"]:
            raise RuntimeError("the branch failed after its charge")
        return {"out": [receipt]}

    graph = StateGraph(Fan)
    graph.add_node("work", work)
    graph.add_conditional_edges(START, lambda state: [Send("work", {"i": i}) for i in range(3)], ["work"])
    graph.add_edge("work", END)
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        app = graph.compile(checkpointer=saver)
        with pytest.raises(RuntimeError, match="after its charge"):
            app.invoke({"out": []}, config(), durability="sync")
        failing["on"] = False
        out = app.invoke(None, config(), durability="sync")
    assert sorted(charged) == [0, 1, 2]
    assert sorted(out["out"]) == ["charged 0", "charged 1", "charged 2"]


# copy_thread of a thread a crash left uncertain ---------------------------------------------------------------------
def test_a_copied_thread_does_not_run_an_uncertain_call_again(tmp_path: Path) -> None:
    """A process was killed inside ``charge_card`` (the card was charged). The user copies the thread to try
    something on the side (``copy_thread``, LangGraph's fork) and runs the copy: it charges the card a second
    time, where the original thread stops and asks (``DecisionNeeded``)."""
    store, effects = killed_in_a_tool(tmp_path)
    with SafepointSaver(store, workspace=str(tmp_path)) as saver:
        saver.copy_thread("t", "t-copy")
        app = order_graph(saver, effects)
        assert app.get_state(config("t-copy")).next == ("pay",)
        with pytest.raises(DecisionNeeded):
            app.invoke(None, config("t-copy"), durability="sync")
    assert effects.read_text() == "fetch book\ncharge 10\n"


# list(): the reference saver's answers ------------------------------------------------------------------------------
class Count(TypedDict):
    n: int


def counting_graph(saver: Any) -> Any:
    graph = StateGraph(Count)
    graph.add_node("a", lambda state: {"n": state["n"] + 1})
    graph.add_edge(START, "a")
    graph.add_edge("a", END)
    return graph.compile(checkpointer=saver)


def test_a_metadata_filter_finds_what_the_reference_saver_finds(tmp_path: Path) -> None:
    """A service tags each run with its caller's session (``metadata={"session": <a JWT>}``) and looks its
    checkpoints up by it: ``InMemorySaver`` finds 3, ``SafepointSaver`` none, so the service believes the session
    never ran. (The fix must not match every redacted value either: ``[REDACTED:jwt]`` is the same for all.)"""
    from langgraph.checkpoint.memory import InMemorySaver

    session = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
    found = {}
    for name, saver in (("reference", InMemorySaver()), ("safepoint", SafepointSaver(f"file:{tmp_path}/store"))):
        run_config = {**config(), "metadata": {"session": session}}
        counting_graph(saver).invoke({"n": 0}, run_config, durability="sync")
        found[name] = len(list(saver.list(config(), filter={"session": session})))
        if isinstance(saver, SafepointSaver):
            saver.close()
    assert found["safepoint"] == found["reference"] == 3, found


class Deep(TypedDict):
    n: int


def nested_graph(saver: Any) -> Any:
    from langgraph.types import interrupt

    sub = StateGraph(Deep)
    sub.add_node("s1", lambda state: {"n": state["n"] + 1})
    sub.add_node("s2", lambda state: {"n": state["n"] + interrupt("more?")})
    sub.add_edge(START, "s1")
    sub.add_edge("s1", "s2")
    sub.add_edge("s2", END)
    graph = StateGraph(Deep)
    graph.add_node("a", lambda state: {"n": state["n"] + 10})
    graph.add_node("sub", sub.compile())
    graph.add_node("b", lambda state: {"n": state["n"] * 2})
    graph.add_edge(START, "a")
    graph.add_edge("a", "sub")
    graph.add_edge("sub", "b")
    graph.add_edge("b", END)
    return graph.compile(checkpointer=saver)


def test_subgraph_namespaces_before_limit_and_filter_answer_as_the_reference_saver(tmp_path: Path) -> None:
    """Held: a graph with a subgraph interrupted inside it, then resumed; ``get_state`` (with subgraphs), the
    subgraph's own state, and ``list`` by namespace, ``before``, ``limit`` and ``filter`` answer what
    ``InMemorySaver`` answers for the same run (checkpoint ids differ; namespaces, steps and sources do not)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    def told(saver: Any) -> list[Any]:
        app = nested_graph(saver)
        app.invoke({"n": 0}, config(), durability="sync")
        state = app.get_state(config(), subgraphs=True)
        inner = state.tasks[0].state
        assert inner is not None and not isinstance(inner, dict)
        said: list[Any] = [state.values, state.next, app.get_state(inner.config).values]
        app.invoke(Command(resume=5), config(), durability="sync")
        said.append(app.get_state(config()).values)

        def shape(found: Any) -> list[tuple[str, Any, Any]]:
            return [
                (t.config["configurable"]["checkpoint_ns"].split(":")[0], t.metadata.get("step"), t.metadata["source"])
                for t in found
            ]

        every = list(saver.list(config()))
        root = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        middle = [t for t in every if t.config["configurable"]["checkpoint_ns"] == ""][2].config
        said += [
            shape(every),
            shape(saver.list(root)),
            shape(saver.list(config(), limit=2)),
            shape(saver.list(config(), before=middle)),
            shape(saver.list(root, before=middle, limit=1)),
            shape(saver.list(config(), filter={"step": 1})),
            [(s.metadata and s.metadata.get("step"), s.next) for s in app.get_state_history(config())],
        ]
        return said

    reference = told(InMemorySaver())
    with SafepointSaver(f"file:{tmp_path}/store") as saver:
        ours = told(saver)
    assert ours == reference


# One writer per thread, when the graph writes only at its end ---------------------------------------------------
def test_a_second_saver_is_refused_before_its_tool_runs_even_when_it_writes_only_at_exit(tmp_path: Path) -> None:
    """Held: with ``durability="exit"`` (or ``"async"``) a graph writes no checkpoint before its nodes run, so the
    thread's fence on ``put`` comes too late; the durable call's own ledger is fenced too, and refuses the second
    saver before the charge runs."""
    effects: list[int] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def charge(amount: int) -> int:
        effects.append(amount)
        return amount

    def build(saver: SafepointSaver) -> Any:
        graph = StateGraph(Count)
        graph.add_node("a", lambda state: {"n": charge(state["n"])})
        graph.add_edge(START, "a")
        graph.add_edge("a", END)
        return graph.compile(checkpointer=saver)

    url = f"file:{tmp_path}/store"
    with SafepointSaver(url, workspace=str(tmp_path)) as first, SafepointSaver(url, workspace=str(tmp_path)) as second:
        build(first).invoke({"n": 1}, config(), durability="sync")
        for durability in ("exit", "async"):
            with pytest.raises(RunLockedError, match="another saver"):
                build(second).invoke({"n": 2}, config(), durability=durability)
    assert effects == [1]


# ToolNodeLedger: a tool that returns a Command ------------------------------------------------------------------
class Booking(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    done: bool


def test_a_tool_returning_a_command_is_refused_before_it_runs_or_recorded(tmp_path: Path) -> None:
    """LangGraph's own docs have tools return ``Command(update=...)`` (handoffs, state updates). Wrapped in a
    ``ToolNodeLedger``, the tool books the hotel, then the ledger says it "cannot record a Command": the graph
    dies, and every run of the thread after that fails with the recorded refusal, so the booking is made and
    its confirmation is lost for good. Either refuse before running (the tool's return annotation says
    ``Command``) or record the Command."""
    booked: list[str] = []

    @tool
    def book(city: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Book a hotel."""
        booked.append(city)
        update = {"done": True, "messages": [ToolMessage(f"booked {city}", tool_call_id=tool_call_id)]}
        return Command(update=update)

    asked = [{"name": "book", "args": {"city": "Oslo"}, "id": "call_1"}]
    model = FakeMessagesListChatModel(responses=[AIMessage(content="", tool_calls=asked)])
    ledger = ToolNodeLedger(default=DurableCall(replay_policy="never"))
    graph = StateGraph(Booking)
    graph.add_node("think", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([book], wrap_tool_call=ledger, awrap_tool_call=ledger.acall))
    graph.add_edge(START, "think")
    graph.add_edge("think", "tools")
    graph.add_edge("tools", END)
    finished = False
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        app = graph.compile(checkpointer=saver)
        for attempt in range(2):  # the first run, then the run a user tries after the error
            try:
                start = {"messages": [HumanMessage("book Oslo")], "done": False} if attempt == 0 else None
                finished = app.invoke(start, config(), durability="sync").get("done") is True
            except Exception:  # the refusal as it comes out today: ConfigError, then ToolFailure
                continue
            break
    assert booked == [] or (finished and booked == ["Oslo"]), (booked, finished)


# A durable tool that calls another ----------------------------------------------------------------------------------
class SelfDeadlock(RuntimeError):
    pass


class DeadlockDetectingLock:
    """``threading.Lock`` that raises where a thread would wait for itself for ever (the real lock hangs the
    test run instead: nothing else can release it)."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._owner: int | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        import threading

        if self._owner == threading.get_ident():
            raise SelfDeadlock("this thread waits for a lock it holds: it would hang for ever")
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._owner = threading.get_ident()
        return got

    def release(self) -> None:
        self._owner = None
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_durable_tool_may_call_another_durable_tool(tmp_path: Path) -> None:
    """``checkout`` (non-idempotent) is built from a durable ``price`` lookup: the graph never returns, no error,
    no timeout, and Ctrl-C is the only way out (the same lock also makes parallel ``Send`` branches run their
    tools one after another). Here the lock is swapped for one that says so instead of hanging."""
    effects: list[str] = []

    @durable_tool(idempotency="idempotent", replay_policy="auto")
    def price(item: str) -> int:
        effects.append("price")
        return 10

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def checkout(item: str) -> int:
        effects.append("checkout")
        return price(item) * 2

    graph = StateGraph(Count)
    graph.add_node("a", lambda state: {"n": checkout("book")})
    graph.add_edge(START, "a")
    graph.add_edge("a", END)
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        if hasattr(saver.tools, "lock"):
            saver.tools.lock = DeadlockDetectingLock()  # the hang made an error
        out = graph.compile(checkpointer=saver).invoke({"n": 0}, config(), durability="sync")
    assert out == {"n": 20} and effects == ["checkout", "price"]


# A durable tool that asks a person -------------------------------------------------------------------------------
def test_a_durable_tool_that_asks_through_interrupt_gets_the_answer(tmp_path: Path) -> None:
    """LangGraph's docs put ``interrupt()`` inside tools ("confirm before charging"). Made durable, the tool's
    question is shown once; the answer ``Command(resume="yes")`` then fails with ``ToolFailure: ...
    GraphInterrupt`` and so does every later run: the thread is dead, with no way to answer or settle (only
    ``ToolNodeLedger`` documents that such a tool must not be ledgered)."""
    charged: list[int] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def charge(amount: int) -> str:
        from langgraph.types import interrupt

        if interrupt(f"charge {amount}?") != "yes":
            return "declined"
        charged.append(amount)
        return f"charged {amount}"

    graph = StateGraph(Order)
    graph.add_node("pay", lambda state: {"status": charge(10)})
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        app = graph.compile(checkpointer=saver)
        asked = app.invoke({"status": "new"}, config(), durability="sync")["__interrupt__"][0].value
        assert asked == "charge 10?"
        out = app.invoke(Command(resume="yes"), config(), durability="sync")
    assert out == {"status": "charged 10"} and charged == [10]


# The encrypted store holds the durable calls' ledger too -----------------------------------------------------------
def test_a_durable_calls_arguments_and_result_are_sealed_on_an_encrypted_store(tmp_path: Path) -> None:
    """Held: the ledger beside the thread (a second run of the store) is sealed like the thread itself: neither
    a durable call's arguments nor its result are readable in the store folder."""
    plain = "a very plain argument anyone could read"

    @durable_tool(idempotency="non_idempotent", replay_policy="never")
    def note(text: str) -> str:
        return f"noted: {text[::-1]}"

    graph = StateGraph(Count)
    graph.add_node("a", lambda state: {"n": len(note(plain))})
    graph.add_edge(START, "a")
    graph.add_edge("a", END)
    with SafepointSaver(f"file:{tmp_path}/store", key=bytes(range(32)), workspace=str(tmp_path)) as saver:
        graph.compile(checkpointer=saver).invoke({"n": 0}, config(), durability="sync")
    texts = list(readable(tmp_path / "store"))
    assert not any(plain.encode() in t or plain[::-1].encode() in t for t in texts)
