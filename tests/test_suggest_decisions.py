"""Every "needs a decision" message offers only what the engine accepts for that call, and each of its suggestions,
followed literally, works. A call waits for ``--replay`` or ``--skip`` after a crash; a call that cannot run again
(its arguments lost with a quarantined blob, or redacted because they held a secret) is offered ``--skip`` only,
by ``resume``, ``explain`` and ``settle``; its ``--replay`` is refused in one line (exit 2) before the run is claimed,
so nothing is written and the accepted choice still works. A test walks each suggestion of each such message on a
copy of the store and follows it (in process)."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest

from safepoint.errors import ExitCode

from .conftest import cli_env, safepoint_in_process

TOOLS = """
import os, safepoint

class Crash(BaseException):
    pass

@safepoint.tool(idempotency="non_idempotent", replay_policy="ask", risk_level="low")
def send(ctx, text: str) -> str:
    if os.environ.get("UX_DIE"):
        raise Crash()  # the process dies while it runs: `started` is durable, no outcome
    with open(os.environ["UX_SENT"], "a") as f:
        f.write(f"{len(text)}\\n")
    return "sent"
"""
BIG = "".join(f"line {i} {random.Random(i).getrandbits(64):x}\n" for i in range(1000))  # a store blob
TOKEN = "ghp_" + "Ux1Vv2Ww3Xx4Yy5Zz6Aa7Bb8Cc9Dd0Ee1Ff2Gg"  # a GitHub token's shape: the redactor knows it


@pytest.fixture(autouse=True)
def _tools(tmp_path, monkeypatch):
    """The tool module `--tools ux_decide_tools:send` loads (the same text for every test)."""
    (tmp_path / "ux_decide_tools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))


class Crashed:
    """A CLI run whose ``send`` call died mid-run (in process: the tool raises a BaseException past the CLI)."""

    def __init__(self, base: Path, text: str) -> None:
        self.base = base
        self.ws = base / "ws"
        self.ws.mkdir(parents=True)
        scenario = {"task": "t", "turns": [{"tool_calls": [{"tool": "send", "args": {"text": text}}]}, {"text": "ok"}]}
        (base / "s.json").write_text(json.dumps(scenario))
        with pytest.raises(BaseException) as died:
            self.cli("run", str(base / "s.json"), "--run-id", "r", UX_DIE="1")
        assert type(died.value).__name__ == "Crash"

    def cli(self, *args: str, **env: str):
        tools = ["--tools", "ux_decide_tools:send"] if args[0] in ("run", "resume") else []
        sent = str(self.base / "sent.log")
        return safepoint_in_process(*args, "-w", str(self.ws), *tools, env=cli_env(UX_SENT=sent, **env))

    def sent(self) -> int:
        path = self.base / "sent.log"
        return path.read_text().count("\n") if path.exists() else 0

    def lose_arguments(self) -> None:
        import safepoint
        from safepoint.report import load_view

        sp = safepoint.open(workspace=str(self.ws))
        try:
            [asked] = [m for m in load_view(sp.store, "r").message_records.values() if m.tool_calls]
            [ref] = [v for v in asked.tool_calls[0].args.values() if isinstance(v, dict)]
            assert sp.store.quarantine_blob(sp.store.blob_name(str(ref["$large"]).removeprefix("blob:")))
        finally:
            sp.close()

    def copy(self, to: Path) -> Crashed:
        shutil.copytree(self.base, to)
        twin = object.__new__(Crashed)
        twin.base, twin.ws = to, to / "ws"
        return twin

    def records(self) -> dict[str, bytes]:
        """What a refused option must not change: the run's ledger, log index and owner (its generation)."""
        run = self.ws / ".agent-runtime" / "runs" / "r"
        return {name: (run / name).read_bytes() for name in ("ledger.jsonl", "owner.json", "checkpoints/index.jsonl")}


def one_line(result) -> str:
    said = result.stderr
    assert said.startswith("safepoint: ") and said.count("\n") == 1 and "Traceback" not in said, said
    return said


def suggestions(message: str, run_id: str, call_id: str) -> list[list[str]]:
    """Each command the message tells the user to run, as argv: a quoted `safepoint ...` command, a
    "resume with --replay/--skip ID" and a "settle it with --happened"."""
    found = [quoted.split()[1:] for quoted in re.findall(r"`(safepoint [^`]*)`", message)]
    offered = message.partition("resume with ")[2]  # what comes before it names what was asked, not the fix
    found += [["resume", run_id, flag, id_] for flag, id_ in re.findall(r"(--replay|--skip) ([\w:]+)", offered)]
    if "settle it with --happened" in message:
        found.append(["settle", run_id, call_id, "--happened"])
    unique: list[list[str]] = []
    for argv in found:
        if argv not in unique and argv[:1] in (["resume"], ["settle"]):
            unique.append(argv)
    return unique


def follow(crashed: Crashed, tmp_path: Path, message: str, *, expect: set[tuple[str, ...]]) -> None:
    """Each suggestion of ``message`` on its own copy of the store: accepted, and the run then completes without
    running the call again when the suggestion leaves it."""
    offered = suggestions(message, "r", "call_1")
    assert {tuple(argv) for argv in offered} == expect, message
    for number, argv in enumerate(offered):
        twin = crashed.copy(tmp_path / f"follow{number}")
        before = twin.sent()
        done = twin.cli(*argv)
        assert done.returncode == ExitCode.OK, (argv, done.stderr)
        if argv[0] == "settle":
            done = twin.cli("resume", "r")
            assert done.returncode == ExitCode.OK, (argv, done.stderr)
        status = json.loads(twin.cli("status", "r", "--json").stdout)["status"]
        assert status == "completed", (argv, status)
        assert twin.sent() == before + (1 if "--replay" in argv else 0), argv


def test_a_call_whose_arguments_are_lost_is_offered_skip_only_and_each_suggestion_works(tmp_path):
    crashed = Crashed(tmp_path / "run", BIG)
    crashed.lose_arguments()
    asked = crashed.cli("resume", "r")
    assert asked.returncode == ExitCode.WAITING_DECISION
    said = one_line(asked)
    assert "waits for a decision on send(call_1)" in said and "--replay" not in said, said
    assert "CALL_ID" not in said  # the call's own id, never a placeholder to fill in
    follow(crashed, tmp_path, said, expect={("resume", "r", "--skip", "call_1")})

    # explain says the same: --skip only, and its command works as printed
    explained = json.loads(crashed.cli("explain", "r", "--json").stdout)
    [wanted] = explained["needs_decision"]
    assert wanted["choices"] == ["skip"] and "waiting for --skip (it cannot run again" in wanted["why"]
    assert wanted["commands"] == ["safepoint resume r --skip call_1"]
    shown = crashed.cli("explain", "r").stdout
    assert "safepoint resume r --skip call_1" in shown and "--replay call_1" not in shown, shown

    # --replay is refused in one line, exit 2, before the claim: nothing written, --skip still accepted
    records = crashed.records()
    refused = crashed.cli("resume", "r", "--replay", "call_1")
    assert refused.returncode == ExitCode.USAGE
    said = one_line(refused)
    assert "--replay call_1: send(call_1) cannot run again" in said, said
    assert crashed.records() == records
    follow(crashed, tmp_path / "after-replay", said, expect={("resume", "r", "--skip", "call_1")})

    # settle --did-not-happen would ask for a run again: refused the same way, with what is accepted
    refused = crashed.cli("settle", "r", "call_1", "--did-not-happen")
    assert refused.returncode == ExitCode.USAGE
    said = one_line(refused)
    settled = crashed.records()  # settle judges under the run's claim (a generation), but records nothing
    assert settled.pop("owner.json") and {k: v for k, v in records.items() if k != "owner.json"} == settled
    follow(
        crashed,
        tmp_path / "after-settle",
        said,
        expect={("resume", "r", "--skip", "call_1"), ("settle", "r", "call_1", "--happened")},
    )
    assert crashed.sent() == 0  # never run from the note


def test_a_call_that_can_run_again_is_offered_both_and_each_works(tmp_path):
    crashed = Crashed(tmp_path / "run", "hello")
    asked = crashed.cli("resume", "r")
    assert asked.returncode == ExitCode.WAITING_DECISION
    said = one_line(asked)
    assert "CALL_ID" not in said
    both = {("resume", "r", "--replay", "call_1"), ("resume", "r", "--skip", "call_1")}
    follow(crashed, tmp_path, said, expect=both)
    [wanted] = json.loads(crashed.cli("explain", "r", "--json").stdout)["needs_decision"]
    assert wanted["choices"] == ["replay", "skip"]


def test_a_call_whose_arguments_held_a_secret_is_offered_skip_only(tmp_path):
    crashed = Crashed(tmp_path / "run", f"deploy with {TOKEN}")
    said = one_line(crashed.cli("resume", "r"))
    follow(crashed, tmp_path, said, expect={("resume", "r", "--skip", "call_1")})
    [wanted] = json.loads(crashed.cli("explain", "r", "--json").stdout)["needs_decision"]
    assert wanted["choices"] == ["skip"]
    refused = crashed.cli("settle", "r", "call_1", "--did-not-happen")
    assert refused.returncode == ExitCode.USAGE, refused.stderr
    follow(
        crashed,
        tmp_path / "after-settle",
        one_line(refused),
        expect={("resume", "r", "--skip", "call_1"), ("settle", "r", "call_1", "--happened")},
    )


def test_the_library_is_told_the_choices_too(tmp_path):
    import safepoint
    from safepoint.errors import DecisionNeeded

    crashed = Crashed(tmp_path / "run", BIG)
    crashed.lose_arguments()
    sp = safepoint.open(workspace=str(crashed.ws))
    try:
        with pytest.raises(DecisionNeeded) as asked:
            sp.resume("r")
        assert asked.value.choices == {"call_1": ("skip",)}
    finally:
        sp.close()


def test_the_mcp_proxy_offers_only_skip_for_a_call_that_cannot_run_again():
    from safepoint.integrations.mcp_proxy import Blocked, settle_hint

    why = "run 'p' waits for a decision on fetch(mcp-1-x): resume with --skip mcp-1-x to leave it"
    hint = settle_hint(Blocked("p", why, ("mcp-1-x",), skip_only=("mcp-1-x",)), ["srv"])
    assert "--replay" not in hint and "safepoint mcp-proxy --run p --skip mcp-1-x -- srv" in hint
    both = settle_hint(Blocked("p", why, ("mcp-1-x",)), ["srv"])
    assert "--replay mcp-1-x" in both and "--skip mcp-1-x" in both


def test_an_own_loop_run_is_told_its_choices_as_resume_arguments_and_each_works(tmp_path):
    """`safepoint resume` refuses a run of a program's own loop ("resume it from there"), so the decision is said
    as ``sp.resume``'s arguments; each, passed as said, is accepted and the call runs again only when replayed."""
    import ast

    import safepoint
    from safepoint.errors import DecisionNeeded, ResumeOptionError

    ran: list[str] = []
    dies: list[bool] = [True]

    class Killed(BaseException):
        pass

    @safepoint.tool(idempotency="non_idempotent", replay_policy="ask", risk_level="low")
    def pay(ctx: safepoint.ToolContext, amount: int) -> str:
        if dies:
            raise Killed()
        ran.append(ctx.call_id)
        return "paid"

    def crashed(where: Path) -> safepoint.Safepoint:
        where.mkdir()
        sp = safepoint.open(workspace=str(where))
        dies[:] = [True]
        with pytest.raises(Killed), sp.start("pay", tools=[pay], run_id="own") as run:
            run.step()
            run.call("pay", {"amount": 5}, call_id="c1")
        dies.clear()
        return sp

    sp = crashed(tmp_path / "said")
    with pytest.raises(DecisionNeeded) as asked:
        sp.resume("own", tools=[pay])
    [wanted] = sp.explain("own").needs_decision  # explain says it the same way, as the program's call
    assert wanted.commands == ["sp.resume('own', replay=['c1'])", "sp.resume('own', skip=['c1'])"]
    with pytest.raises(ResumeOptionError) as refused:  # settle has no pending call of an own loop to answer
        sp.settle("own", "c1", happened=False)
    said = str(refused.value)  # it was "is started: only a call whose outcome is uncertain ... can be settled"
    assert "is uncertain" in said and "sp.resume('own', replay=['c1']) or sp.resume('own', skip=['c1'])" in said
    sp.close()
    said = str(asked.value)
    assert "--replay" not in said and "--skip" not in said, said
    offered = re.findall(r"(replay|skip)=(\[[^\]]*\])", said)
    assert sorted(name for name, _ in offered) == ["replay", "skip"], said
    for number, (name, value) in enumerate(offered):
        sp = crashed(tmp_path / f"follow{number}")
        ran.clear()
        with sp.resume("own", tools=[pay], **{name: ast.literal_eval(value)}) as run:
            value_ = run.call("pay", {"amount": 5}, call_id="c1") if name == "replay" else None
            run.finish()
        assert ran == (["c1"] if name == "replay" else []) and value_ in ("paid", None)
        sp.close()


def test_resume_json_ends_with_the_choices_of_each_waiting_call(tmp_path):
    crashed = Crashed(tmp_path / "run", BIG)
    crashed.lose_arguments()
    asked = crashed.cli("resume", "r", "--json")
    assert asked.returncode == ExitCode.WAITING_DECISION
    last = json.loads(asked.stdout.splitlines()[-1])
    assert last["status"] == "waiting_decision" and last["choices"] == {"call_1": ["skip"]}


def test_an_own_loop_stopped_at_a_safe_point_is_told_its_program_resumes_it(tmp_path):
    """`safepoint resume` refuses an own loop's run ("resume it from there"), so the stop says sp.resume."""
    import safepoint
    from safepoint.engine import shutdown
    from safepoint.errors import Interrupted

    sp = safepoint.open(workspace=str(tmp_path))
    try:
        with sp.start("t", run_id="own") as run:
            shutdown.request("SIGTERM")
            with pytest.raises(Interrupted) as stopped:
                run.call("list_files", {})
    finally:
        shutdown.reset()
        sp.close()
    said = str(stopped.value)
    assert "`sp.resume('own')` in its program continues the run" in said and "safepoint resume" not in said, said


def test_an_answer_to_an_own_loops_approval_says_its_program_resumes_it(tmp_path):
    import safepoint
    from safepoint.engine.decision_choices import answered_next

    sp = safepoint.open(workspace=str(tmp_path))
    try:
        with sp.start("t", run_id="own"):
            pass
        said = answered_next(sp.store, "own", attended=False, approved=True)
    finally:
        sp.close()
    assert "`sp.resume('own')` in its program continues it and runs the call" in said, said


def test_the_review_page_offers_only_the_settlement_that_is_accepted(tmp_path):
    """The page's "It did not happen" asks for a run again: not offered for a call that cannot run again."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    import safepoint
    from safepoint.ui.app import create_app
    from safepoint.ui.guard import loopback_hosts

    crashed = Crashed(tmp_path / "run", BIG)
    crashed.lose_arguments()
    sp = safepoint.open(workspace=str(crashed.ws))
    try:
        tab = TestClient(
            create_app(sp, token="tok", hosts=loopback_hosts(8780)),
            base_url="http://127.0.0.1:8780",
            headers={"x-safepoint-token": "tok"},
        )
        page = tab.get("/runs/r").text
    finally:
        sp.close()
    assert 'id="settle-yes-call_1"' in page and 'id="settle-no-call_1"' not in page


def test_several_waiting_calls_are_each_offered_what_they_accept():
    from safepoint.engine.decision_choices import waiting

    said = waiting("r", [("pay", "c2", ""), ("send", "c1", "its arguments are lost")])
    assert said.count("\n") == 0 and "--replay c1" not in said
    offered = {tuple(argv) for argv in suggestions(said, "r", "c1")}
    assert offered == {
        ("resume", "r", "--replay", "c2"),
        ("resume", "r", "--skip", "c2"),
        ("resume", "r", "--skip", "c1"),
    }


def test_a_restored_own_loop_run_is_told_its_program_continues_it(tmp_path):
    import safepoint

    sp = safepoint.open(workspace=str(tmp_path))
    try:
        with sp.start("t", run_id="own") as run:
            for number in (1, 2):
                run.step()
                run.call("write_file", {"path": f"f{number}.txt", "content": "x"}, call_id=f"c{number}")
                run.checkpoint()
        restored = sp.recover("own", safepoint.RestoreSession(checkpoint_id=sp.checkpoint_for("own", "step:1")))
    finally:
        sp.close()
    assert restored.resume_with == "`sp.resume('own')` in its program", restored.resume_with
