"""The history by reference (issue 10 §3): a snapshot's messages packed as bytes (``core.message_pack``) and its
branches as log seqs (``core.message_list``), read as the plain dict and list the whole log's fold gives: the same
messages, order, lookups, slices, equality and copies, with one object per message however often it is read (the
session tells a message of its branch by identity); packed in several writes; damaged parts refused."""

from __future__ import annotations

import array
import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safepoint.core import message_pack
from safepoint.core.message_list import MessageList
from safepoint.core.message_pack import MessageMap, PackedMessages, pack_messages
from safepoint.errors import CorruptRecordError
from safepoint.records import Message, ToolCall


def _message(index: int, rng: random.Random) -> Message:
    role = rng.choice(["user", "assistant", "tool", "system"])
    calls = (ToolCall(call_id=f"c{index}", tool="noop", args={"n": index, "s": "é" * rng.randint(0, 3)}),)
    return Message(
        seq=index,
        role=role,
        content=rng.choice(["", "ok", "x" * rng.randint(0, 300), "\u2028\x00 \U0001f600 \\ud800"]),
        tool_calls=calls if role == "assistant" else (),
        tool_call_id=f"c{index - 1}" if role == "tool" else None,
        turn=rng.choice([None, index]),
    )


def _records(rng: random.Random, count: int) -> dict[int, Message]:
    """Log seq -> message, seqs ascending with gaps (other records between them), as a fold's dict holds them."""
    seq, found = 0, {}
    for index in range(count):
        seq += rng.randint(1, 7)
        found[seq] = _message(index, rng)
    return found


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(0, 200), cuts=st.integers(1, 4), later=st.integers(0, 5))
def test_a_message_map_reads_as_the_dict_of_every_message(seed, count, cuts, later):
    rng = random.Random(seed)
    plain = _records(rng, count)
    items = list(plain.items())
    # packed in several writes, as a writer appends what was logged since (a partial last frame is reframed)
    packed: PackedMessages | None = None
    bounds = sorted(rng.sample(range(count + 1), min(cuts, count + 1)))
    start = 0
    for bound in [*bounds, count]:
        packed = pack_messages(items[start:bound], packed)
        start = max(start, bound)
    assert packed is not None
    packed.check()
    held = rng.randint(0, count)  # the last ones not packed yet: the dict part
    mapped = MessageMap(pack_messages(items[:held]), dict(items[held:]))
    assert len(mapped) == len(plain) and bool(mapped) == bool(plain)
    assert list(mapped) == list(plain) and list(mapped.items()) == list(plain.items())
    assert mapped == plain and dict(mapped) == plain and plain == mapped
    assert list(reversed(mapped.values())) == list(reversed(plain.values())) and len(mapped.values()) == len(plain)
    assert list(mapped.keys()) == list(plain.keys()) and list(reversed(mapped)) == list(reversed(plain))
    for seq in [*plain, -1, 0, max(plain, default=0) + 1]:
        assert (seq in mapped) == (seq in plain)
        assert mapped.get(seq) == plain.get(seq)
    # one object per message, in the map and in its copies
    for seq in plain:
        assert mapped[seq] is mapped[seq] is mapped.copy()[seq]
    assert all(a is b for a, b in zip(mapped.values(), mapped.copy().values(), strict=True))
    copied = mapped.copy()
    top = max(plain, default=0)
    for n in range(later):
        copied[top + 1 + n] = plain[top + 1 + n] = _message(count + n, rng)
    assert copied == plain and len(copied) == len(plain) and len(mapped) == count
    assert copied.added() == [(seq, plain[seq]) for seq in list(plain)[held:]]
    with pytest.raises(TypeError):
        copied.pop(top)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(0, 120))
def test_a_branch_by_reference_reads_as_the_list_of_its_messages(seed, count):
    rng = random.Random(seed)
    records = _records(rng, count)
    messages = list(records.values())
    mapped = MessageMap(pack_messages(list(records.items())[: count // 2]), dict(list(records.items())[count // 2 :]))
    branch = MessageList(mapped, array.array("Q", records))
    extra = [_message(count + n, rng) for n in range(rng.randint(0, 4))]
    for message in extra:
        branch.append(message)  # a session's own, not logged yet
    plain = messages + extra
    assert len(branch) == len(plain) and bool(branch) == bool(plain)
    assert list(branch) == plain and list(reversed(branch)) == plain[::-1]
    assert branch == plain and plain == branch and branch == tuple(plain)
    assert (branch != plain) is False
    assert branch != plain[:-1] or not plain
    for index in range(-len(plain), len(plain)):
        assert branch[index] == plain[index]
    for _ in range(10):
        a, b = rng.randint(-len(plain) - 2, len(plain) + 2), rng.randint(-len(plain) - 2, len(plain) + 2)
        for piece in (slice(a, b), slice(a, None), slice(None, b), slice(a, b, rng.choice([1, 2, -1]))):
            assert list(branch[piece]) == plain[piece] and branch[piece] == plain[piece]
    with pytest.raises(IndexError):
        branch[len(plain)]
    # a message read back in place of one (``engine.large_values.resolve_branch``): on a copy only
    if plain:
        index = rng.randrange(len(plain))
        changed = branch.copy()
        changed[index] = msgspec.structs.replace(plain[index], content="read back")
        assert changed[index].content == "read back" and branch[index] == plain[index]
        assert changed != branch and changed[:index] == branch[:index] and changed.logged_seqs() is None
        assert changed[index:][0].content == "read back"
    # the same branch read twice gives the same objects (identity), and equal branches need no message decoded
    assert all(a is b for a, b in zip(branch, branch.copy(), strict=True))
    assert MessageList(mapped, array.array("Q", records)) == MessageList(mapped, array.array("Q", records))
    assert branch.logged_seqs() is None if extra else list(branch.logged_seqs() or []) == list(records)


def test_equal_branches_compare_their_seqs_not_their_messages(monkeypatch):
    rng = random.Random(7)
    records = _records(rng, 300)
    mapped = MessageMap(pack_messages(list(records.items())))
    one, two = MessageList(mapped, array.array("Q", records)), MessageList(mapped, array.array("Q", records))
    monkeypatch.setattr(message_pack._Packed, "message", lambda *_: pytest.fail("a message was decoded"))
    assert one == two and one[:100] == two[:100] and len(one.copy()) == 300
    # nor a map's length, its seqs, or its values' count (``lifetime_messages`` at every turn)
    assert len(mapped) == len(mapped.values()) == 300 and list(mapped) == list(records) and -1 not in mapped
    assert one != MessageList(mapped, array.array("Q", list(records)[:299]))  # lengths differ: nothing read


def test_damaged_packed_messages_are_refused():
    rng = random.Random(3)
    packed = pack_messages(list(_records(rng, 100).items()))
    packed.check()
    for broken in (
        msgspec.structs.replace(packed, seqs=packed.seqs[:-8]),  # an index shorter than the messages
        msgspec.structs.replace(packed, blob=packed.blob[:-1]),  # frames cut short
    ):
        with pytest.raises(ValueError):
            broken.check()
    # a branch naming a message the map lacks: a corrupt record where it is read, not a KeyError's traceback
    records = _records(random.Random(3), 100)
    branch = MessageList(MessageMap(packed), array.array("Q", [*records, max(records) + 1]))
    assert list(branch[:100]) == list(records.values())
    with pytest.raises(CorruptRecordError):
        branch[100]
    with pytest.raises(CorruptRecordError):
        list(branch)
    # bytes damaged inside a frame (its sizes intact) are found when the frame is read, as a corrupt record
    blob = bytearray(packed.blob)
    blob[20:30] = b"\xff" * 10
    mapped = MessageMap(msgspec.structs.replace(packed, blob=bytes(blob)))
    with pytest.raises(CorruptRecordError):
        list(mapped.values())
    with pytest.raises(ValueError):
        pack_messages([(1, _message(0, rng))], packed)  # a seq before the packed ones: never out of log order


def _closed_open_run(tmp_path, calls: int):
    """A run of ``calls`` calls (five to a step), closed without a finish (as a crash leaves it), its snapshot
    written at close."""
    from typing import Any

    import safepoint
    from safepoint.engine.tools import tool

    @tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
    def noop(ctx: Any, n: int = 0) -> str:
        return "ok"

    ws = tmp_path / "ws"
    ws.mkdir()
    tm = safepoint.open(workspace=str(ws))
    run = tm.start("t", tools=[noop], run_id="r")
    for n in range(calls):
        if n % 5 == 0:
            run.step()
        run.call("noop", {"n": n}, call_id=f"c{n}")
    run.close()
    return tm, noop


def test_a_resume_reads_the_history_by_reference(tmp_path, monkeypatch):
    """Resuming a run whose snapshot covers 600 messages decodes a few of them (the judge's and the note's, from
    the branch's end), and the session's history is the whole conversation, as the log holds it."""
    from contextlib import closing

    from safepoint.store import view_index

    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 50)
    tm, noop = _closed_open_run(tmp_path, 600)
    with closing(tm):
        whole = list(tm.history("r").current)  # read before: every message, decoded
        decoded: list[int] = []
        real = message_pack._Packed.message

        def counted(packed: message_pack._Packed, position: int) -> Message:
            decoded.append(position)
            return real(packed, position)

        monkeypatch.setattr(message_pack._Packed, "message", counted)
        run = tm.resume("r", tools=[noop])
        assert 0 < len(decoded) < 20, decoded  # the branch's last messages, not its 600
        assert len(run.session.history) == len(whole) + 1  # and the recovery note
        assert list(run.session.history)[:-1] == whole  # read when asked: the same conversation
        assert run.call("noop", {"n": 1}, call_id="after") == "ok"
        run.finish("completed")
        assert [m.content for m in tm.history("r").current][-1] == "ok"


@settings(max_examples=30, deadline=None)
@given(turns=st.lists(st.integers(0, 3), max_size=40), asked=st.integers(-1, 45))
def test_assistant_turns_asked_from_the_end_agree_with_the_whole_set(turns, asked):
    """The judge's question (was turn T's assistant message logged?) asked from the branch's end gives what the
    set of every turn gives, on branches whose turns never go down; it stops at an earlier turn."""
    from safepoint.core.run_view import AssistantTurns

    history, turn = [], 0
    for step, gap in enumerate(turns):
        turn += gap
        history.append(Message(seq=len(history), role="assistant", content="", turn=turn))
        history.append(Message(seq=len(history), role="tool", content="ok", tool_call_id=f"c{step}"))
    whole = frozenset(m.turn for m in history if m.role == "assistant")
    found = AssistantTurns(history)
    assert (asked in found) == (asked in whole)
    assert len(found) == len(whole) and set(found) == whole
    read: list[int] = []

    class Counting(list):  # a branch that counts what is read from its end
        def __reversed__(self):
            for message in super().__reversed__():
                read.append(message.seq)
                yield message

    assert (asked in AssistantTurns(Counting(history))) == (asked in whole)
    later = [m for m in history if m.role == "assistant" and m.turn is not None and m.turn > asked]
    assert len(read) <= 2 * len(later) + 2  # the later turns' messages and one more turn's, not the whole branch
