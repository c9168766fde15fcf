"""The property of gc (issue 10 §8): gc at random moments of random runs (file writes, commands, user edits,
rollbacks, conflicts, unfinished runs resumed later, runs restored to a kept checkpoint and continued, labels)
changes nothing a kept checkpoint, a resume or a rollback gives: the same operations on a store that never saw gc
leave the same files, the same conflicts and the same checkpoints."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import safepoint
from safepoint.core.hashing import input_hash
from safepoint.core.retention import lifecycle_state, retention
from safepoint.engine import large_values
from safepoint.engine.session import load_view
from safepoint.lifecycle import gc, label
from safepoint.store.fsck import fsck

FILES = ("a.txt", "b.txt")
OPS = st.tuples(st.sampled_from(["write", "command", "note"]), st.integers(0, 1), st.integers(0, 4))
MOMENTS = st.sampled_from(["nothing", "gc", "user_edit", "rollback", "restore", "label"])


def _text(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(f"{seed}.{i} {rng.getrandbits(48):x}\n" for i in range(1500))  # packed, more than INLINE_MAX


@safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def keep_note(ctx, text: str) -> str:
    """A Python tool with a large argument (kept as a blob the ledger entry references: ``core.large_values``)."""
    return f"kept {len(text)}"


class World:
    def __init__(self, root: Path, with_gc: bool) -> None:
        self.ws = root / "ws"
        self.ws.mkdir(parents=True)
        for number, name in enumerate(FILES):
            (self.ws / name).write_text(_text(1000 + number))
        self.tm = safepoint.open(str(root / "store"), workspace=str(self.ws))
        self.with_gc = with_gc
        self.calls = 0

    def session(self, run_id: str, first: bool, ops: list[tuple[str, int, int]], finish: bool) -> None:
        tools = [keep_note]
        run = self.tm.start("t", run_id=run_id, tools=tools) if first else self.tm.resume(run_id, tools=tools)
        with run:
            for op, file, version in ops:
                run.step()
                self.calls += 1
                path = FILES[file]
                if op == "write":
                    args = {"path": path, "content": _text(version * 10 + file)}
                    run.call("write_file", args, call_id=f"c{self.calls}")
                elif op == "note":
                    run.call("keep_note", {"text": _text(version * 7 + file + 500)}, call_id=f"c{self.calls}")
                else:
                    command = f"printf 'command {version}\\n' >> {path}"
                    run.call("run_command", {"command": command}, call_id=f"c{self.calls}")
                run.checkpoint()
            if finish:
                run.finish("completed")

    def kept(self, run_id: str, keep: int) -> list[str]:
        view = load_view(self.tm.store, run_id)
        marks, _, unreachable = lifecycle_state(self.tm.store.read_control(run_id))
        kept = retention(view, keep=keep, labels=frozenset(marks)).kept_checkpoints
        return [c for c in kept if c not in unreachable]  # an earlier gc's, before the run went on

    def inputs(self, run_id: str) -> dict[str, object]:
        """Every call's input as explain and a re-run read it back (large values from their blobs)."""
        view = load_view(self.tm.store, run_id)
        content = large_values.reader(self.tm.store, view)
        found = {}
        for call_id, entry in view.ledger.items():
            found[call_id] = large_values.resolve(entry.input, content)
            if entry.tool_name == "keep_note":
                assert input_hash(found[call_id]) == entry.input_hash
        return found

    def files(self) -> dict[str, str | None]:
        return {name: (self.ws / name).read_text() if (self.ws / name).exists() else None for name in FILES}


def _same(worlds: list[World], run_id: str, checkpoint_id: str) -> tuple[str, str]:
    """The checkpoint in each world that is ``checkpoint_id`` of the first: the same step, kind and call (ids are
    log positions, and a session's background start may stage its records a little earlier or later)."""
    shapes = [[(c.step, c.kind, c.call_id) for c in world.tm.checkpoints(run_id)] for world in worlds]
    assert shapes[0] == shapes[1]
    index = [c.checkpoint_id for c in worlds[0].tm.checkpoints(run_id)].index(checkpoint_id)
    return checkpoint_id, worlds[1].tm.checkpoints(run_id)[index].checkpoint_id


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    runs=st.lists(st.lists(st.lists(OPS, min_size=1, max_size=3), min_size=1, max_size=3), min_size=1, max_size=2),
    moments=st.lists(MOMENTS, min_size=8, max_size=8),
    keep=st.integers(0, 2),
    leave_last_unfinished=st.booleans(),
    picks=st.lists(st.integers(0, 1000), min_size=16, max_size=16),
)
def test_gc_at_random_moments_changes_nothing_a_kept_checkpoint_resume_or_rollback_gives(
    tmp_path_factory, runs, moments, keep, leave_last_unfinished, picks
):
    root = tmp_path_factory.mktemp("gc")
    worlds = [World(root / "with", True), World(root / "without", False)]
    moment = iter(moments * 4)
    pick = iter(picks * 4)
    freed = 0

    def between(run_id: str, finished: bool) -> None:
        nonlocal freed
        what = next(moment)
        if what == "gc":
            freed += gc(worlds[0].tm.store, keep=keep).freed_blobs
        elif what == "user_edit":
            for world in worlds:
                with (world.ws / FILES[0]).open("a") as handle:
                    handle.write("the user's line\n")
        elif what == "rollback":
            kept = worlds[0].kept(run_id, keep)
            target = kept[next(pick) % len(kept)]
            plans = [
                world.tm.rollback_files(run_id, same)
                for world, same in zip(worlds, _same(worlds, run_id, target), strict=True)
            ]
            assert [sorted(c.path for c in plan.conflicts) for plan in plans] == [
                sorted(c.path for c in plans[1].conflicts)
            ] * 2
        elif what in ("restore", "label"):  # a kept checkpoint: restored and the run goes on, or labelled
            kept = worlds[0].kept(run_id, keep)
            same = _same(worlds, run_id, kept[next(pick) % len(kept)])
            with_files = next(pick) % 2 == 0
            ops = [("write", next(pick) % 2, next(pick) % 5)]
            for world, checkpoint_id in zip(worlds, same, strict=True):
                if what == "label":
                    label(world.tm.store, run_id, checkpoint_id, "kept")
                else:
                    world.tm.restore_session(run_id, checkpoint_id, with_files=with_files)
                    world.session(run_id, False, ops, finished)
        assert worlds[0].files() == worlds[1].files()

    for number, sessions in enumerate(runs):
        run_id = f"r{number}"
        for index, ops in enumerate(sessions):
            last = index == len(sessions) - 1
            finish = last and not (leave_last_unfinished and number == len(runs) - 1)
            for world in worlds:
                world.session(run_id, index == 0, ops, finish)
            assert worlds[0].files() == worlds[1].files()
            between(run_id, finish)
    freed += gc(worlds[0].tm.store, keep=keep).freed_blobs
    assert fsck(worlds[0].tm.store, None, repair=False).clean
    if leave_last_unfinished:  # an unfinished run is resumed after gc, and goes on
        for world in worlds:
            world.session(f"r{len(runs) - 1}", False, [("write", 1, 3)], True)
        assert worlds[0].files() == worlds[1].files()
    for number in range(len(runs)):
        run_id = f"r{number}"
        kept = worlds[0].kept(run_id, keep)
        target = kept[next(pick) % len(kept)]
        plans = [
            world.tm.rollback_files(run_id, same)
            for world, same in zip(worlds, _same(worlds, run_id, target), strict=True)
        ]
        assert sorted(c.path for c in plans[0].conflicts) == sorted(c.path for c in plans[1].conflicts)
        assert worlds[0].files() == worlds[1].files()
        assert worlds[0].inputs(run_id) == worlds[1].inputs(run_id)  # gc kept every large input
    for world in worlds:
        world.tm.close()
