"""The runtime in one process: the loop, ledgered calls, probes, fencing, the library API and its example."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading

import pytest

import safepoint
from safepoint.engine.log_writer import LogWriter
from safepoint.engine.session import RunSession, load_view
from safepoint.engine.tools import ToolContext
from safepoint.errors import RunLockedError, ScenarioError, StaleGenerationError, ToolRegistrationError
from safepoint.records import RunEvent
from safepoint.standins.scenario import parse_scenario

from .conftest import PY, ROOT, cli_env


class Crash(BaseException):
    """Stands in for a process dying inside a tool: no outcome is recorded."""


def scenario(*turns, task="t"):
    return parse_scenario(json.dumps({"task": task, "turns": list(turns)}).encode())


def play(tm, script, run_id="r", tools=()):
    run = tm.start(script.task, tools=tools, run_id=run_id, model=script.model)
    with run:
        return tm.run_agent(run, safepoint.ScriptedProvider(script)), run


def test_a_scripted_run_records_everything_it_did(workspace):
    tm = safepoint.open(workspace=str(workspace))
    script = scenario(
        {"tool_calls": [{"tool": "write_file", "args": {"path": "pkg/a.py", "content": "x = 1\n"}}]},
        {"tool_calls": [{"tool": "read_file", "args": {"path": "pkg/a.py"}}, {"tool": "list_files", "args": {}}]},
        {"text": "done"},
    )
    status, _ = play(tm, script)
    assert status == "completed"
    assert (workspace / "pkg" / "a.py").read_text() == "x = 1\n"
    view = load_view(tm.store, "r")
    assert [e.status for e in view.ledger.values()] == ["succeeded"] * 3
    assert [p.path for p in view.patches] == ["pkg/a.py"] and view.patches[0].op == "create"
    kinds = [c.checkpoint.kind for c in view.checkpoints]
    assert kinds[:4] == ["before_step", "tool_start", "tool_end", "after_step"]
    tool_messages = [m.content for m in view.history if m.role == "tool"]
    assert tool_messages[1] == "x = 1\n"
    assert view.status == "completed"


def test_the_ledger_says_started_before_the_tool_runs(workspace):
    tm = safepoint.open(workspace=str(workspace))
    seen = []

    @safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
    def spy(ctx: ToolContext) -> str:
        seen.append(load_view(tm.store, ctx.run_id).ledger[ctx.call_id].status)  # read from disk, mid-call
        return "ok"

    with tm.start("t", tools=[spy], run_id="r") as run:
        run.call("spy", {}, call_id="c1")
    assert seen == ["started"]


def test_paths_outside_the_workspace_are_refused(workspace, tmp_path):
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", workspace / "link")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        assert "outside the workspace" in run.call_result("write_file", {"path": "../evil", "content": "x"}).observation
        with pytest.raises(safepoint.ToolFailure, match="outside the workspace"):
            run.call("read_file", {"path": "link"})
    assert not (tmp_path / "evil").exists()
    assert load_view(tm.store, "r").ledger["auto_0_1"].status == "failed"


def test_an_interrupted_idempotent_call_is_rerun_and_a_never_call_is_not(workspace, outbox):
    tm = safepoint.open(workspace=str(workspace))
    runs = []

    @safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
    def lookup(ctx: ToolContext) -> str:
        runs.append("lookup")
        if len(runs) == 1:
            raise Crash
        return "found"

    run = tm.start("t", tools=[lookup], run_id="r")
    with pytest.raises(Crash):
        run.call("lookup", {}, call_id="c1")
    run.session.store.release(run.session.claim)  # the "dead" process's lock goes away
    resumed = tm.resume("r", tools=[lookup])
    with resumed:
        assert resumed.call("lookup", {}, call_id="c1") == "found"
    assert runs == ["lookup", "lookup"]


def test_a_probe_settles_an_uncertain_write_without_running_it_again(workspace):
    tm = safepoint.open(workspace=str(workspace))
    writes = []

    def probe(ctx, args):
        return "done" if (workspace / "f.txt").exists() else "not_done"

    @safepoint.tool(idempotency="conditional", replay_policy="ask", risk_level="medium", probe=probe)
    def create(ctx: ToolContext) -> str:
        writes.append(1)
        ctx.workspace.write("f.txt", b"made")
        raise Crash

    run = tm.start("t", tools=[create], run_id="r")
    with pytest.raises(Crash):
        run.call("create", {}, call_id="c1")
    run.session.store.release(run.session.claim)
    resumed = tm.resume("r", tools=[create])
    with resumed:
        observation = resumed.call_result("create", {}, call_id="c1").observation
    assert writes == [1]
    assert "effect is in place" in observation
    entry = load_view(tm.store, "r").ledger["c1"]
    assert entry.status == "succeeded" and entry.decision == "probe" and entry.decision_reason


def test_an_ask_call_waits_for_a_decision(workspace):
    tm = safepoint.open(workspace=str(workspace))

    @safepoint.tool(idempotency="non_idempotent", replay_policy="ask", risk_level="medium")
    def charge(ctx: ToolContext) -> str:
        raise Crash

    run = tm.start("t", tools=[charge], run_id="r")
    with pytest.raises(Crash):
        run.call("charge", {}, call_id="c1")
    run.session.store.release(run.session.claim)
    said = r"resume with replay=\['c1'\] to run it again or skip=\['c1'\] to leave it"  # sp.resume's arguments
    with pytest.raises(safepoint.DecisionNeeded, match=said):
        tm.resume("r", tools=[charge])
    assert load_view(tm.store, "r").status == "waiting_decision"
    resumed = tm.resume("r", tools=[charge], skip=["c1"])
    with resumed:
        result = resumed.call_result("charge", {}, call_id="c1")
        assert "NOT run again" in result.observation and result.status == "uncertain" and result.value is None
    assert load_view(tm.store, "r").ledger["c1"].decision == "skip"


def test_registration_refuses_non_idempotent_auto():
    with pytest.raises(ToolRegistrationError):

        @safepoint.tool(idempotency="non_idempotent", replay_policy="auto")
        def pay(ctx: ToolContext) -> str:
            return "paid"


def test_run_command_is_classified_per_input_and_long_output_is_kept(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "ls"}, call_id="c1")
        run.call("run_command", {"command": "echo x > out.txt"}, call_id="c2")
        long = run.call("run_command", {"command": "seq 1 20000"}, call_id="c3")
        failed = run.call_result("run_command", {"command": "exit 3"}, call_id="c4").observation
    ledger = load_view(tm.store, "r").ledger
    assert (ledger["c1"].idempotency, ledger["c1"].replay_policy) == ("idempotent", "auto")
    assert ledger["c2"].idempotency != "idempotent" and ledger["c2"].replay_policy != "auto"
    assert "full output kept as artifact:" in long
    ref = long.split("full output kept as ")[1].split("]")[0]
    assert tm.store.get_artifact("r", ref).decode().splitlines()[-1] == "20000"
    assert failed.startswith("error: exit code 3") and ledger["c4"].status == "failed"


def test_apply_patch_is_conditional_on_its_base(workspace):
    (workspace / "a.txt").write_text("one\ntwo\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        assert run.call("apply_patch", {"patch": patch}, call_id="c1").startswith("applied")
        refused = run.call_result("apply_patch", {"patch": patch}, call_id="c2")
        assert refused.observation.startswith("error: patch does not apply") and refused.status == "failed"
    assert (workspace / "a.txt").read_text() == "one\nTWO\n"


def test_every_recorded_version_is_reproduced_exactly(workspace):
    tm = safepoint.open(workspace=str(workspace))
    text = "".join(f"line {i}\n" for i in range(2000))
    versions = [text]
    with tm.start("t", run_id="r") as run:
        run.call("write_file", {"path": "big.txt", "content": text}, call_id="c0")
        for i in range(20):
            text = text.replace(f"line {i * 50}\n", f"line {i * 50} edited\n")
            versions.append(text)
            run.call("write_file", {"path": "big.txt", "content": text}, call_id=f"c{i + 1}")
        session = run.session
        for patch, expected in zip(session.patches, versions, strict=True):
            assert session.files.version("big.txt", patch.after_hash) == expected.encode()
        stored = sum(len(b.data) for b in session.contents.blobs.values())
    assert stored < len(versions[0]) * 2  # 21 versions, far less than 21 copies


def test_async_calls_share_the_sync_implementation(workspace):
    tm = safepoint.open(workspace=str(workspace))

    @safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
    async def fetch(ctx: ToolContext, n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    async def go(run):
        return [await run.acall("fetch", {"n": 21}, call_id="a1"), await run.acall_result("read_file", {"path": "x"})]

    with tm.start("t", tools=[fetch], run_id="r") as run:
        results = asyncio.run(go(run))
    assert results[0] == 42 and results[1].observation.startswith("error:") and results[1].status == "failed"


def test_a_call_returns_the_tools_own_value_and_the_same_value_after_a_crash(workspace):
    tm = safepoint.open(workspace=str(workspace))
    runs: list[str] = []

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    def count(ctx: ToolContext) -> int:
        runs.append("count")
        return 5

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    def info(ctx: ToolContext) -> dict:
        runs.append("info")
        return {"n": 1, "tags": ["a", "b"]}

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    def nothing(ctx: ToolContext) -> None:
        runs.append("nothing")

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    def text(ctx: ToolContext) -> str:
        runs.append("text")
        return "5"

    tools = [count, info, nothing, text]
    run = tm.start("t", tools=tools, run_id="r")
    first = [run.call(name, {}, call_id=name) for name in ("count", "info", "nothing", "text")]
    assert first == [5, {"n": 1, "tags": ["a", "b"]}, None, "5"]
    assert run.call_result("count", {}, call_id="count").observation == "5"  # what the model sees
    run.session.store.release(run.session.claim)  # the process "dies" without closing
    resumed = tm.resume("r", tools=tools)
    with resumed:
        again = [resumed.call(name, {}, call_id=name) for name in ("count", "info", "nothing", "text")]
        results = [resumed.call_result(name, {}, call_id=name) for name in ("count", "info", "nothing", "text")]
    assert again == first  # recorded values, types kept: 5 is an int, "5" a str
    assert [r.observation for r in results] == ["5", '{"n":1,"tags":["a","b"]}', "ok", "5"]
    assert runs == ["count", "info", "nothing", "text"]  # never run twice


@pytest.mark.parametrize(
    ("made", "seen"),
    [
        ((1, 2), [1, 2]),
        ({3}, [3]),
        (b"hi", "aGk="),
        ({1: "a"}, {"1": "a"}),
        (float("nan"), None),
        ({"nested": ({"x": (1,)},)}, {"nested": [{"x": [1]}]}),
    ],
)
def test_a_value_is_the_same_before_and_after_a_crash_whatever_its_type(workspace, made, seen):
    """The value handed back is the recorded one from the start: a caller never sees whether a crash came between."""
    tm = safepoint.open(workspace=str(workspace))
    runs: list[int] = []

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    def make(ctx: ToolContext) -> object:
        runs.append(1)
        return made

    run = tm.start("t", tools=[make], run_id="r")
    first = run.call("make", {}, call_id="c1")
    run.session.store.release(run.session.claim)  # the process "dies" without closing
    with tm.resume("r", tools=[make]) as resumed:
        again = resumed.call("make", {}, call_id="c1")
    assert first == again == seen
    assert runs == [1]


def test_async_call_values_survive_a_crash_too(workspace):
    tm = safepoint.open(workspace=str(workspace))

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    async def pair(ctx: ToolContext) -> list:
        return [1, 2]

    run = tm.start("t", tools=[pair], run_id="r")
    assert asyncio.run(run.acall("pair", {}, call_id="p")) == [1, 2]
    run.session.store.release(run.session.claim)
    with tm.resume("r", tools=[pair]) as resumed:
        assert asyncio.run(resumed.acall("pair", {}, call_id="p")) == [1, 2]


def test_a_tool_is_told_which_attempt_it_is(workspace):
    tm = safepoint.open(workspace=str(workspace))
    seen: list[int] = []

    @safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
    def lookup(ctx: ToolContext) -> int:
        seen.append(ctx.attempt)
        if len(seen) < 3:
            raise Crash
        return ctx.attempt

    for _ in range(2):
        run = tm.start("t", tools=[lookup], run_id="r") if not seen else tm.resume("r", tools=[lookup])
        with pytest.raises(Crash):
            run.call("lookup", {}, call_id="c1")
        run.session.store.release(run.session.claim)  # the "dead" process's lock goes away
    with tm.resume("r", tools=[lookup]) as resumed:
        assert resumed.call("lookup", {}, call_id="c1") == 3
    assert seen == [1, 2, 3]


def test_a_second_writer_is_refused_and_a_fenced_writer_stops(workspace):
    tm = safepoint.open(workspace=str(workspace))
    first = tm.start("t", run_id="r")
    other = safepoint.open(workspace=str(workspace))
    with pytest.raises(RunLockedError, match="--takeover"):
        other.resume("r")
    second = other.resume("r", takeover=True)
    with pytest.raises(StaleGenerationError, match="taken over"):
        first.call("read_file", {"path": "x"}, call_id="late")
    with second:
        second.call("list_files", {}, call_id="c2")
    assert "late" not in load_view(tm.store, "r").ledger


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_own_loop_example_survives_a_crash_without_resending(tmp_path, mode):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    example = os.path.join(ROOT, "examples", "own_loop.py")
    crashed = subprocess.run(
        [PY, example, str(workspace), "start"],
        env=cli_env(SAFEPOINT_FAILPOINT="after_tool:send_email"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert crashed.returncode == -9
    assert (tmp_path / "outbox.jsonl").read_text().count("\n") == 1
    args = [PY, example, str(workspace), "resume"] + (["--async"] if mode == "async" else [])
    resumed = subprocess.run(args, env=cli_env(), capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    assert "Do not repeat" in resumed.stdout and "send_email(call_c)" in resumed.stdout
    assert "call_d read_file: # v2" in resumed.stdout
    assert (tmp_path / "outbox.jsonl").read_text().count("\n") == 1
    assert (workspace / "NOTES.md").read_text() == "# v2\n- faster resume\n"


def test_the_recovery_note_reaches_the_models_high_priority_context(workspace, outbox):
    tm = safepoint.open(workspace=str(workspace))
    crashes = []

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="high")
    def publish(ctx: ToolContext) -> str:
        crashes.append(1)
        raise Crash

    script = scenario(
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a", "content": "1"}}]},
        {"tool_calls": [{"tool": "publish", "args": {}}]},
        {
            "text": "check",
            "expect_in_context": ["Do not repeat write_file(call_1), publish(call_2).", "Checkpoint: ckpt_"],
        },
        {"text": "done"},
    )
    run = tm.start(script.task, tools=[publish], run_id="r", model=script.model)
    with pytest.raises(Crash):
        tm.run_agent(run, safepoint.ScriptedProvider(script))
    run.session.store.release(run.session.claim)
    resumed = tm.resume("r", tools=[publish])
    provider = safepoint.ScriptedProvider(script)
    with resumed:
        assert tm.run_agent(resumed, provider) == "completed"
    assert crashes == [1]
    context = provider.contexts[0]
    assert "## Recovery note (read this first)" in context.system
    assert all(m.name != "recovery_note" for m in context.messages)
    tool_results = [m.content for m in context.messages if m.role == "tool"]
    assert "NOT run again" in tool_results[-1]


def test_a_scenario_expectation_that_fails_stops_the_run(workspace):
    tm = safepoint.open(workspace=str(workspace))
    script = scenario({"text": "x", "expect_in_context": ["never there"]})
    with pytest.raises(ScenarioError, match="never there"):
        play(tm, script)


def test_ledgered_wraps_a_plain_function_sync_and_async(workspace):
    tm = safepoint.open(workspace=str(workspace))
    sent = []

    def send_email(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    async def lookup(key: str) -> str:
        return key.upper()

    with tm.start("t", run_id="r") as run:
        send = run.ledgered(send_email, idempotency="non_idempotent", replay_policy="never", risk_level="high")
        assert send(to="a@b", call_id="m1") == "sent to a@b"
        assert send(to="a@b", call_id="m1") == "sent to a@b"  # same call id: the recorded result, not a resend
        alookup = run.ledgered(lookup, idempotency="idempotent", replay_policy="auto", risk_level="low")
        assert asyncio.run(alookup(key="k", call_id="m2")) == "K"
    assert sent == ["a@b"]
    ledger = load_view(tm.store, "r").ledger
    assert ledger["m1"].replay_policy == "never" and ledger["m2"].status == "succeeded"


def test_a_call_id_reused_for_another_input_is_refused(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call_result("read_file", {"path": "a"}, call_id="c1")
        with pytest.raises(safepoint.ResumeError, match="its own call id"):
            run.call("read_file", {"path": "b"}, call_id="c1")


def test_a_tool_that_raises_has_a_known_outcome_failed(workspace):
    tm = safepoint.open(workspace=str(workspace))

    @safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
    def flaky(ctx: ToolContext, n: int) -> str:
        raise ConnectionError("upstream said 503")

    with tm.start("t", tools=[flaky], run_id="r") as run:
        assert (
            run.call_result("flaky", {"n": 1}, call_id="c1").observation == "error: ConnectionError: upstream said 503"
        )
        with pytest.raises(safepoint.ToolFailure, match=r"^error: bad arguments for flaky"):
            run.call("flaky", {"m": 1}, call_id="c2")
    ledger = load_view(tm.store, "r").ledger
    assert ledger["c1"].status == ledger["c2"].status == "failed"
    assert ledger["c1"].error == "ConnectionError: upstream said 503"


def test_making_a_session_has_no_side_effects_and_opening_it_is_explicit(workspace):
    tm = safepoint.open(workspace=str(workspace))
    tm.start("t", run_id="r").close()
    claim = tm.store.claim("r", "me")
    beats = [t for t in threading.enumerate() if t.name == "heartbeat-r"]
    session = RunSession(tm.store, claim, load_view(tm.store, "r"), tm.workspace, tm.registry())
    try:
        assert [t for t in threading.enumerate() if t.name == "heartbeat-r"] == beats  # no thread yet
        assert session.capture_started is None and session.workspace is tm.workspace  # no capture, no staging
        session.start()
        assert len([t for t in threading.enumerate() if t.name == "heartbeat-r"]) == len(beats) + 1
        assert session.capture_started is not None  # run_command captures: it watches from the start
    finally:
        session.close()


def test_a_refused_group_takes_its_sequence_numbers_back(workspace):
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start("t", run_id="r")
    stale = run.session.claim
    writer = LogWriter(tm.store, stale, run.session.log.seq)
    before = writer.seq
    tm.resume("r", takeover=True).close()  # a newer owner: this generation is fenced off
    for _ in range(2):
        writer.add(RunEvent(status="running", at="now", detail="late"))
    assert writer.seq == before + 2
    with pytest.raises(StaleGenerationError):
        writer.commit()
    assert writer.seq == before  # the in-memory log never runs ahead of the store
    writer.commit()  # nothing staged is left to write
    assert all(e.detail != "late" for e in load_view(tm.store, "r").events)
    run.session.heartbeat.stop()


def test_a_value_lost_to_damage_is_none_and_the_call_is_not_run_again(workspace):
    tm = safepoint.open(workspace=str(workspace))
    runs: list[str] = []

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    def info(ctx: ToolContext) -> dict:
        runs.append("info")
        return {"marker": "UNIQUE-VALUE"}

    run = tm.start("t", tools=[info], run_id="r")
    assert run.call("info", {}, call_id="c1") == {"marker": "UNIQUE-VALUE"}
    run.session.store.release(run.session.claim)
    path = os.path.join(tm.store.run_dir("r"), "ledger.jsonl")
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:  # the tool message's record is damaged: its checksum fails
        handle.write(data.replace(b"UNIQUE-VALUE", b"UNIQUE-VALUX", 1))
    with tm.resume("r", tools=[info]) as resumed:
        result = resumed.call_result("info", {}, call_id="c1")
    assert result.value is None and "lost to damage" in result.observation
    assert runs == ["info"]  # never re-created by running the call again
