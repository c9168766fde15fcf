"""`run` and `resume` tell each step as it happens (issue 13, the CLI §1): the model's text, each call as it starts
and ends, the exact command that answers an approval; --quiet silences it, --json gives one event a line. It all
goes through the library's hook (Run.on_event), redacted like everything the run keeps."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import safepoint

from .conftest import PY, cli_env, read_until, safepoint_in_process

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token's shape
SCENARIO = {
    "task": "t",
    "turns": [
        {
            "text": "I will write the file.\nThe key is " + TOKEN + " as you see.",
            "streamed": True,
            "tool_calls": [{"tool": "write_file", "args": {"path": "notes/a.txt", "content": "hi\n"}}],
        },
        {
            "text": "Now I check it.",
            "tool_calls": [
                {"tool": "run_command", "args": {"command": "cat notes/a.txt"}},
                {"tool": "read_file", "args": {"path": "missing.txt"}},
            ],
        },
        {"text": "All done."},
    ],
}


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCENARIO))
    (tmp_path / "ws").mkdir()
    return path


def test_run_shows_each_step_as_it_happens(scenario, tmp_path):
    done = safepoint_in_process("run", scenario, "-w", tmp_path / "ws", "--run-id", "r")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # the model's text, a blank line between turns, in the order it happened
    order = ["I will write the file.", "-> write_file notes/a.txt", "ok write_file notes/a.txt in ", "Now I check it."]
    order += ["-> run_command cat notes/a.txt", "ok run_command cat notes/a.txt in ", "failed read_file missing.txt"]
    order += ["All done.", "run r: completed"]
    at = [out.index(piece) for piece in order]
    assert at == sorted(at), out
    assert "\n\nI will write the file.\nThe key is" in out and "as you see.\n  -> write_file" in out
    assert "\n\nNow I check it.\n  -> run_command" in out and "\n\nAll done.\n\nrun r: completed\n" in out, out
    # a call that failed says why, on its line
    failed = next(line for line in out.splitlines() if "failed read_file" in line)
    assert ("missing.txt" in failed and " ms" in failed) or " s" in failed


def test_no_secret_reaches_the_terminal_through_progress(scenario, tmp_path):
    """The scripted model streams the turn in two pieces cut inside the token: each half alone is no token, so a
    redaction piece by piece would let it through. The command's argument holds a credential variable's value."""
    text = SCENARIO["turns"][0]["text"]
    assert text.index(TOKEN) < len(text) // 2 < text.index(TOKEN) + len(TOKEN)  # the cut falls inside it
    secret_value = "s3cr3t-value-of-the-deploy-key"
    data = json.loads(scenario.read_text())
    data["turns"][1]["tool_calls"][0]["args"]["command"] = f"echo {secret_value} > notes/b.txt"
    scenario.write_text(json.dumps(data))
    env = cli_env(DEPLOY_TOKEN=secret_value)
    for extra in ([], ["--json"]):
        done = safepoint_in_process("run", scenario, "-w", tmp_path / "ws", *extra, env=env)
        assert done.returncode == 0, done.stderr
        shown = done.stdout + done.stderr
        assert TOKEN not in shown and TOKEN[:20] not in shown and secret_value not in shown, shown
        assert "[REDACTED:github_token]" in shown and "[REDACTED:credential_value]" in shown


def test_quiet_prints_only_the_run_and_its_status(scenario, tmp_path):
    done = safepoint_in_process("run", scenario, "-w", tmp_path / "ws", "--run-id", "r", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["run id: r", "run r: completed"]
    quiet_json = safepoint_in_process("run", scenario, "-w", tmp_path / "ws", "--run-id", "r2", "-q", "--json")
    assert [json.loads(line) for line in quiet_json.stdout.splitlines()] == [
        {"event": "finished", "run_id": "r2", "status": "completed"}
    ]


def _script(*calls: dict[str, object], text: str = "") -> dict[str, object]:
    first: dict[str, object] = {"tool_calls": list(calls)} | ({"text": text} if text else {})
    return {"task": "t", "turns": [first, {"text": "all good"}]}


NOTIFY = {"tool": "send_notification", "args": {"to": "a@b.c", "message": "m"}}

EVENT_KEYS = {
    "text": {"event", "run_id", "step", "text"},
    "turn": {"event", "run_id", "step", "text", "streamed", "calls"},
    "call_started": {"event", "run_id", "step", "call_id", "tool", "target"},
    "call_finished": {
        "event", "run_id", "step", "call_id", "tool", "target", "status", "ran", "duration_s", "detail",
    },
    "approval_wait": {"event", "run_id", "call_id", "tool", "target", "risk_level", "approve", "deny"},
    "status": {"event", "run_id", "status", "detail"},
    "finished": {"event", "run_id", "status"},
}  # fmt: skip


def test_json_is_one_event_a_line_with_the_documented_shapes(scenario, tmp_path):
    done = safepoint_in_process("run", scenario, "-w", tmp_path / "ws", "--run-id", "r", "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    for event in events:
        assert set(event) == EVENT_KEYS[event["event"]], event
    kinds = [e["event"] for e in events]
    assert kinds[0] == "text" and kinds[-1] == "finished" and kinds[-2] == "status"
    assert kinds.count("turn") == 3 and kinds.count("call_started") == 3 and kinds.count("call_finished") == 3
    finished = [e for e in events if e["event"] == "call_finished"]
    assert [(e["tool"], e["status"], e["ran"]) for e in finished] == [
        ("write_file", "succeeded", True),
        ("run_command", "succeeded", True),
        ("read_file", "failed", True),
    ]
    assert all(isinstance(e["duration_s"], float) for e in finished)
    turns = [e for e in events if e["event"] == "turn"]
    assert [t["streamed"] for t in turns] == [True, False, False] and [t["step"] for t in turns] == [1, 2, 3]
    assert {e["step"] for e in events if e["event"] == "text"} == {1}
    # the README documents every event and field
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for kind, keys in EVENT_KEYS.items():
        assert f"`{kind}`" in readme, kind
        assert all(f"`{key}`" in readme for key in keys)


def test_a_crashed_run_told_the_call_it_started_and_the_resume_goes_on_telling(tmp_path):
    """A crash after a call's `started`: the last line printed names the call in flight; the resume shows the
    recovery note (the call was not run again) and then its own steps."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = _script(NOTIFY)
    (tmp_path / "s.json").write_text(json.dumps(script))
    env = cli_env(SAFEPOINT_FAILPOINT="after_started:send_notification", SAFEPOINT_OUTBOX=str(tmp_path / "out"))
    crashed = subprocess.run(
        [PY, "-m", "safepoint", "run", tmp_path / "s.json", "-w", ws, "--run-id", "r"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert crashed.returncode != 0
    assert crashed.stdout.rstrip().endswith("-> send_notification a@b.c")  # told before the crash
    done = safepoint_in_process("resume", "r", "-w", ws, env=cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "out")))
    assert done.returncode == 0, done.stderr
    assert "NOT run again" in done.stdout and "\n\nall good\n\nrun r: completed\n" in done.stdout


def test_an_approval_wait_prints_the_exact_commands_that_answer_it(tmp_path):
    """Printed as they must be typed from where the user stands: from outside the workspace they name it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = _script(NOTIFY)
    (tmp_path / "s.json").write_text(json.dumps(script))
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "out"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = [PY, "-m", "safepoint", "run", str(tmp_path / "s.json"), "-w", str(ws), "--run-id", "r"]
    with subprocess.Popen(
        [*args, "--approval", "high"], cwd=elsewhere, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as running:
        where = f"-w {shlex.quote(str(ws))}"
        shown = read_until(running, f"deny:    safepoint deny r call_1 {where}\n")
        approve = next(line for line in shown.splitlines() if "approve:" in line).split("approve:", 1)[1].strip()
        deny = next(line for line in shown.splitlines() if "deny:" in line).split("deny:", 1)[1].strip()
        assert approve == f"safepoint approve r call_1 -w {shlex.quote(str(ws))}"
        assert deny == f"safepoint deny r call_1 -w {shlex.quote(str(ws))}"
        words = shlex.split(approve)
        answered = subprocess.run(
            [PY, "-m", "safepoint", *words[1:]], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120
        )
        assert answered.returncode == 0, answered.stderr
        out, err = running.communicate(timeout=120)
    assert running.returncode == 0, err
    assert "ok send_notification a@b.c" in out and "run r: completed" in out


def test_the_hook_is_the_library_s_and_a_raising_observer_is_dropped(tmp_path):
    """Run.on_event serves an own loop too; an observer that raises never turns a call into an uncertain one."""
    ws = tmp_path / "ws"
    ws.mkdir()
    sp = safepoint.open(workspace=str(ws))
    seen: list[object] = []

    def broken(event: object) -> None:
        raise BrokenPipeError("the terminal went away")

    with sp.start("t") as run:
        run.on_event(broken)
        run.on_event(seen.append)
        run.step()
        assert run.call("write_file", {"path": "a.txt", "content": "x"}, call_id="c1") is not None
        run.checkpoint()
    kinds = [type(e).__name__ for e in seen]
    assert kinds == ["CallStarted", "CallFinished"]
    assert sp.ledger(run.run_id)[0].status == "succeeded"
    sp.close()


def test_the_console_script_streams_progress_before_the_run_ends(tmp_path):
    """Lines are flushed as they happen, not at exit: the first call is on the pipe while an approval waits."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = _script({"tool": "write_file", "args": {"path": "a", "content": "x"}}, NOTIFY, text="first")
    (tmp_path / "s.json").write_text(json.dumps(script))
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "out"))
    args = [PY, "-m", "safepoint", "run", str(tmp_path / "s.json"), "-w", str(ws), "--run-id", "r"]
    with subprocess.Popen(
        [*args, "--approval", "high", "--approval-timeout", "600"],
        cwd=ws,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as running:
        shown = read_until(running, "deny:")
        assert "ok write_file a in " in shown and "approve: safepoint approve r call_2\n" in shown + "\n"
        denied = subprocess.run(
            [sys.executable, "-m", "safepoint", "deny", "r", "call_2"], cwd=ws, env=env, capture_output=True, text=True
        )
        assert denied.returncode == 0, denied.stderr
        out, _ = running.communicate(timeout=120)
    assert "failed send_notification a@b.c (not run now): error: not run: denied by user" in out


SECRETS = [
    "sk-proj-" + "abcdefghijklmnopqrstuvwx0123",
    TOKEN,
    "Bearer " + "abcdefghijklmnop0123456789",
    "Authorization: Basic " + "dXNlcjpwYXNzd29yZDEyMw==",
    "https://user:hunter2hunter2@example.com/x",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc def\n-----END RSA PRIVATE KEY-----",
    "the value s3cr3t-of-the-env-variable here",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_streamed_text_cut_anywhere_never_lets_a_secret_through(secret):
    """Every cut of the text into two pieces, and one piece a character: what goes out never holds the secret
    (nor its longest piece a redaction would miss), and whole words go out before the turn ends."""
    from safepoint.core.progress import LineHold
    from safepoint.core.redact import Redactor

    redactor = Redactor(values=["s3cr3t-of-the-env-variable"])
    text = f"Here it is: {secret} and more words after it. "
    whole = redactor.text(text)
    assert whole != text  # the redactor knows this secret
    pieces_list = [[text[:i], text[i:]] for i in range(1, len(text))] + [list(text)]
    for pieces in pieces_list:
        out: list[str] = []
        hold = LineHold(redactor, out.append)
        for piece in pieces:
            hold.feed(piece)
        before_flush = "".join(out)
        hold.flush()
        shown = "".join(out)
        assert shown == whole, pieces
        for line in secret.splitlines():
            assert not (len(line) > 12 and line in shown and line not in whole), (pieces, shown)
        if len(pieces) > 2:
            assert before_flush.startswith("Here it is: ")  # streamed word by word, not at the end


def test_a_secret_that_may_hold_a_space_makes_the_text_go_out_a_line_at_a_time():
    from safepoint.core.progress import LineHold
    from safepoint.core.redact import Redactor

    redactor = Redactor(values=["open sesame now"])
    out: list[str] = []
    hold = LineHold(redactor, out.append)
    for piece in ["say open ", "sesame now", " please\nnext"]:
        hold.feed(piece)
    assert out == ["say [REDACTED:credential_value] please\n"]
    hold.flush()
    assert "".join(out).endswith("next") and "sesame" not in "".join(out)
