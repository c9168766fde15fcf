"""What people do to runs, shown as what they did (issue 9 §4): a cancel or a reset is "cancelled by USER" /
"context reset by USER" in status, explain and what the parent is told, never "closed during restart recovery"
(the records keep the seed's terminal status and reason verbatim); an approval or a denial of a run nobody runs
says so and what will act on it, and the API says whether the run is attended."""

from __future__ import annotations

import json
import signal

import pytest

import safepoint
from safepoint.engine.session import load_view
from safepoint.protocol import SELF_HEALING, SELF_HEALING_PROMPT, TERMINAL_STATUS_RESTART
from safepoint.results import Answered

from .test_protocol import NOTIFY, Cli, assert_closed, crashed_run, scenario, wait_until, waiting_for_approval

RESTART_WORDS = ("restart", "Closed during")


def _status(cli: Cli, run_id: str) -> dict[str, str]:
    data: dict[str, str] = json.loads(cli("status", run_id, "--json").stdout)
    return data


@pytest.mark.parametrize(
    ("command", "reason", "shown", "said"),
    [
        (["cancel", "r"], "user_cancelled", "cancelled", "cancelled by user at "),
        (["cancel", "r", "--whole-stream"], "user_cancelled_whole_stream", "cancelled", "cancelled by user at "),
        (["reset", "r"], "context_reset", "closed", "context reset by user at "),
    ],
)
def test_cancel_and_reset_of_a_run_nobody_runs_are_shown_as_what_they_are(tmp_path, command, reason, shown, said):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    assert cli(*command).returncode == 0
    assert_closed(cli, "r", reason)
    assert cli.store().owner("r").terminal_status == TERMINAL_STATUS_RESTART  # type: ignore[union-attr]  # the record
    status = _status(cli, "r")
    assert status["status"] == shown and status["terminal_status"].startswith(said), status
    table = cli("status", "r").stdout
    assert said in table and not any(word in table for word in RESTART_WORDS), table
    explained = cli.explain("r")
    assert explained["status"] == shown
    recovery = explained["recovery"]
    assert recovery["self_healing_prompt"] != SELF_HEALING_PROMPT and said in recovery["self_healing_prompt"]
    assert recovery["recovery_owner"]["terminal_status"].startswith(said)
    assert explained["needs_decision"] == [], "a closed run asks nobody to decide"
    shown_text = cli("explain", "r").stdout.replace("│", " ")
    assert "stopped during a restart" not in " ".join(shown_text.split()), shown_text


def test_a_live_cancel_and_a_reset_say_who(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok"}])
    run = cli.start("run", sc, "--run-id", "r", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    assert cli("cancel", "r").returncode == 0
    run.communicate(timeout=60)
    assert run.returncode == 10
    status = _status(cli, "r")
    assert status["status"] == "cancelled" and status["terminal_status"].startswith("cancelled by user at ")

    run = cli.start("run", sc, "--run-id", "r2", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "r2"), "the approval wait")
    assert cli("reset", "r2").returncode == 0
    run.communicate(timeout=60)
    status = _status(cli, "r2")
    assert status["terminal_status"].startswith("context reset by user at "), status


def test_a_subagent_cancelled_while_nobody_ran_it_is_reported_to_its_parent_as_cancelled(tmp_path):
    cli = Cli(tmp_path)
    child = {"task": "notify", "turns": [{"tool_calls": [NOTIFY]}, {"text": "sent"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "notify", "scenario": child}}
    sc = scenario(
        tmp_path,
        [{"tool_calls": [spawn]}, {"text": "checking", "expect_in_context": ["was cancelled by user at"]}],
    )
    crashed = cli("run", sc, "--run-id", "p", SAFEPOINT_FAILPOINT="after_started:send_notification")
    assert crashed.returncode == -signal.SIGKILL
    assert cli("cancel", "p.call_1").returncode == 0
    assert_closed(cli, "p.call_1", "user_cancelled")
    assert cli("resume", "p").returncode == 0
    healing = [m for m in load_view(cli.store(), "p").history if m.name == SELF_HEALING]
    assert len(healing) == 1 and "was cancelled by user at" in healing[0].content, healing
    assert "during a restart" not in healing[0].content


# approve / deny ---------------------------------------------------------------------------------------------------
def test_approving_a_run_nobody_runs_says_what_will_pick_it_up(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok"}])
    crashed = cli("run", sc, "--run-id", "r", "--approval", "high", SAFEPOINT_FAILPOINT="approval_wait")
    assert crashed.returncode == -signal.SIGKILL
    done = cli("approve", "r", "call_1")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())  # as one line, however the terminal wrapped it
    assert "approved; nobody is running run r: `safepoint resume r` continues it" in said, said
    assert "daemon" in said
    assert cli.sent() == 0
    assert cli("resume", "r").returncode == 0
    assert cli.sent() == 1


def test_the_api_says_whether_the_run_is_attended(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok"}])
    crashed = cli("run", sc, "--run-id", "r", "--approval", "high", SAFEPOINT_FAILPOINT="approval_wait")
    assert crashed.returncode == -signal.SIGKILL
    sp = safepoint.open(workspace=str(cli.workspace))
    try:
        denied = sp.deny("r", "call_1", reason="not today")
        assert isinstance(denied, Answered) and not denied.attended and not denied.approved
        assert "nobody is running run r" in denied.next and "denied" in denied.next
    finally:
        sp.close()
    assert cli("resume", "r").returncode == 0 and cli.sent() == 0

    run = cli.start("run", sc, "--run-id", "live", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "live"), "the approval wait")
    answered = json.loads(cli("approve", "live", "call_1", "--json").stdout)
    assert answered["attended"] is True and answered["approved"] is True and "nobody" not in answered["next"]
    run.communicate(timeout=60)
    assert run.returncode == 0 and cli.sent() == 1
