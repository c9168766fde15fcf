"""Secrets stay out (issue 11 §1, §2, §7): planted credentials, in the environment, the model's text, a call's
arguments and a command's output (`env`, `echo $OPENAI_API_KEY`, a long output kept as an artifact), never reach
a byte of the store nor `history`/`explain --json`; commands get the environment on purpose (`--pass-env` passes
exactly what it names); a call whose arguments held a secret is never run again with the redacted text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import cli_env, safepoint_in_process
from tests.store_text import every_store_byte, expanded_log

PY = sys.executable
TIMEOUT = 120

OPENAI = "sk-proj-" + "Q7w8E9r0T1y2U3i4O5p6" * 3  # the provider's key, only in the environment
DB_PASSWORD = "pw-Zx81-database-only"  # a password inside a URL variable
PASSED = "ghp_" + "Pp1Qq2Rr3Ss4Tt5Uu6Vv7Ww8Xx9Yy0Zz1Aa2Bb"  # handed over with --pass-env
IN_TEXT = "sk-ant-api03-" + "Mm1Nn2Oo3Pp4Qq5Rr6Ss7" * 2  # the model writes it
IN_ARGS = "xoxb-" + "220011223344-5566778899-KkLlMmNnOoPpQqRr"  # in a command's arguments
IN_LONG = "AKIA" + "ZQ7X2Y4W6V8U0T1S"  # in a long output, kept as an artifact
USER = "TICKET-" + "778899"  # a user pattern from .safepoint/redact.toml
ALL = (OPENAI, DB_PASSWORD, PASSED, IN_TEXT, IN_ARGS, IN_LONG, USER)


def _env(**extra: str) -> dict[str, str]:
    return cli_env(
        OPENAI_API_KEY=OPENAI,
        DATABASE_URL=f"postgresql://app:{DB_PASSWORD}@db.internal/prod",
        GITHUB_TOKEN=PASSED,
        PLAIN_SETTING="visible-value",
        **extra,
    )


def _call(tool: str, call_id: str | None = None, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args} | ({"call_id": call_id} if call_id else {})


SCENARIO = {
    "task": "Look at the environment.",
    "model": "scripted-v1",
    "turns": [
        {
            "text": f"My key is {IN_TEXT} and the ticket is {USER}.",
            "tool_calls": [
                _call("run_command", command="env > env.out; cat env.out"),
                _call("run_command", command='echo "key=$OPENAI_API_KEY db=$DATABASE_URL gh=$GITHUB_TOKEN"'),
                _call("run_command", command=f"echo {IN_ARGS}"),
                _call("run_command", command=f"yes 'row {IN_LONG}' | head -n 20000"),
            ],
        },
        {"text": "Done.", "tool_calls": []},
    ],
}


def _write(tmp_path: Path, scenario: dict[str, Any]) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".safepoint").mkdir()
    (ws / ".safepoint" / "redact.toml").write_text('patterns = ["TICKET-\\\\d{6}"]\n')
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    return ws, path


def _every_store_byte(ws: Path) -> bytes:
    return every_store_byte(ws / ".agent-runtime")  # compressed history expanded


def test_planted_secrets_never_reach_the_file_store_nor_reports(tmp_path):
    ws, scenario = _write(tmp_path, SCENARIO)
    done = safepoint_in_process("run", scenario, "--workspace", ws, "--run-id", "r", "--json", env=_env())
    assert done.returncode == 0, done.stderr
    # The commands got the environment on purpose: no provider key, no URL with a password; the passed one only.
    listed = (ws / "env.out").read_text()
    assert "PLAIN_SETTING=visible-value" in listed
    assert "OPENAI_API_KEY" not in listed and "DATABASE_URL" not in listed and OPENAI not in listed
    assert "GITHUB_TOKEN" not in listed and PASSED not in listed  # not passed: withheld
    assert "SAFEPOINT_STORE" not in listed
    stored = _every_store_byte(ws)
    assert stored, "the run stored nothing"
    for secret in ALL:
        assert secret.encode() not in stored, f"{secret[:8]}... reached the store"
    assert b"[REDACTED:" in stored
    reports = [
        safepoint_in_process(*args, "--workspace", ws, "--json", env=_env())
        for args in (("history", "r"), ("explain", "r"), ("ledger", "r"), ("status", "r"))
    ]
    for report in reports:
        assert report.returncode == 0, report.stderr
        for secret in ALL:
            assert secret not in report.stdout + report.stderr
    # The live run's output showed the redacted text too (what was printed came from what was kept)
    history = json.loads(reports[0].stdout)
    assert "[REDACTED:" in json.dumps(history)


def test_pass_env_passes_exactly_what_it_names(tmp_path):
    scenario = {
        "task": "env",
        "model": "scripted-v1",
        "turns": [{"text": "", "tool_calls": [_call("run_command", command="env > env.out")]}, {"text": "ok"}],
    }
    ws, path = _write(tmp_path, scenario)
    extra = {"MY_SERVICE_TOKEN": "tok-aaaaaaaaaaaa", "OTHER_SECRET": "sec-bbbbbbbbbbbb", "SAFEPOINT_STORE": ""}
    done = safepoint_in_process(
        "run", path, "--workspace", ws, "--run-id", "p", "--pass-env", "MY_SERVICE_TOKEN", "--pass-env",
        "SAFEPOINT_STORE", env=_env(**extra),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = {line.partition("=")[0] for line in (ws / "env.out").read_text().splitlines() if "=" in line}
    assert "MY_SERVICE_TOKEN" in names
    assert not names & {"OTHER_SECRET", "OPENAI_API_KEY", "GITHUB_TOKEN", "DATABASE_URL", "SAFEPOINT_STORE"}
    assert "PLAIN_SETTING" in names and "PATH" in names


def test_a_crashed_call_whose_arguments_held_a_secret_is_not_run_with_the_redacted_text(tmp_path):
    # An idempotent-looking command (it only writes a file) that a resume would re-run on its own; its argument
    # holds a secret. Killed after `started`: the resume must not run `echo [REDACTED:...]` into the file.
    scenario = {
        "task": "write the key",
        "model": "scripted-v1",
        "turns": [
            {"text": "", "tool_calls": [_call("write_file", "w1", path="key.txt", content=f"key {IN_ARGS}\n")]},
            {"text": "done"},
        ],
    }
    ws, path = _write(tmp_path, scenario)
    base = [PY, "-m", "safepoint"]
    crashed = subprocess.run(
        [*base, "run", str(path), "--workspace", str(ws), "--run-id", "c"],
        env=_env(SAFEPOINT_FAILPOINT="after_started:write_file"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert crashed.returncode != 0
    resumed = subprocess.run(
        [*base, "resume", "c", "--workspace", str(ws), "--json"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert resumed.returncode in (0, 3), resumed.stderr
    assert "Traceback" not in resumed.stderr
    written = (ws / "key.txt").read_text() if (ws / "key.txt").exists() else ""
    assert "[REDACTED:" not in written
    ledger = safepoint_in_process("ledger", "c", "--workspace", ws, "--json", env=_env())
    assert "held a secret" in ledger.stdout, ledger.stdout
    assert IN_ARGS.encode() not in _every_store_byte(ws)


STORE_PASSWORD = "pg-Planted-9931"  # trust authentication ignores it, but it is in the URL like a real one


def _with_password(url: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{STORE_PASSWORD}@", 1)


def _dump(url: str) -> str:
    import psycopg

    text = []
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        assert tables, "no table to dump"
        for schema, table in tables:
            for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"'):
                text.append(repr(row))
            if table == "log":  # the history's compressed text, expanded
                lines = [
                    bytes(row[0]) for row in conn.execute(f'SELECT line FROM "{schema}"."log" ORDER BY run_id, seq')
                ]
                text.append(expanded_log(b"\n".join(lines)).decode(errors="replace"))
    return "\n".join(text)


def test_planted_secrets_never_reach_postgresql_and_its_password_never_shows(tmp_path, fresh_url):
    url = _with_password(fresh_url)
    ws, scenario = _write(tmp_path, SCENARIO)
    # The store URL by the environment, as the daemon hands it to its workers: commands must not get it.
    env = _env(SAFEPOINT_STORE=url)
    done = safepoint_in_process("run", scenario, "--workspace", ws, "--run-id", "r", "--json", env=env)
    assert done.returncode == 0, done.stderr
    listed = (ws / "env.out").read_text()
    assert "SAFEPOINT_STORE" not in listed and STORE_PASSWORD not in listed
    dumped = _dump(fresh_url)
    assert "[REDACTED:" in dumped
    for secret in (*ALL, STORE_PASSWORD):
        assert secret not in dumped, f"{secret[:8]}... reached the database"
    for args in (("history", "r"), ("explain", "r"), ("status",), ("status", "r")):
        shown = safepoint_in_process(*args, "--workspace", ws, "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        for secret in (*ALL, STORE_PASSWORD):
            assert secret not in shown.stdout + shown.stderr


def test_a_password_in_a_store_url_is_masked_in_every_error(tmp_path, pg_server):
    ws = tmp_path / "ws"
    ws.mkdir()
    bad = [
        pg_server.url("missing_db").replace("postgres@", f"postgres:{STORE_PASSWORD}@"),  # the server refuses
        pg_server.url() + f"?password={STORE_PASSWORD}&nosuchoption=1",  # libpq refuses the conninfo
        f"postgresql://postgres:{STORE_PASSWORD}@127.0.0.1:1/x",  # nobody listens
        f"postgresql://postgres:{STORE_PASSWORD}%zz@127.0.0.1:1/x",  # libpq quotes the bad token: the password
        pg_server.url() + f"?password={STORE_PASSWORD}%zz",
    ]
    for url in bad:
        for as_json in ((), ("--json",)):
            shown = safepoint_in_process("status", "--store", url, "--workspace", ws, *as_json)
            assert shown.returncode != 0
            assert STORE_PASSWORD not in shown.stdout + shown.stderr, shown.stderr
            assert "Traceback" not in shown.stderr
            assert len(shown.stderr.strip().splitlines()) == 1, shown.stderr


def test_a_crashed_command_whose_arguments_held_a_secret_asks_and_cannot_be_replayed(tmp_path):
    # A command with an effect asks after a crash; its recorded line is redacted, so --replay would run
    # `echo [REDACTED:...]`: refused in one line (exit 2, nothing written); --skip settles it; nothing ran twice.
    scenario = {
        "task": "store the token",
        "model": "scripted-v1",
        "turns": [
            {"text": "", "tool_calls": [_call("run_command", "k1", command=f"echo {IN_ARGS} > token.txt")]},
            {"text": "done"},
        ],
    }
    ws, path = _write(tmp_path, scenario)
    base = [PY, "-m", "safepoint"]
    crashed = subprocess.run(
        [*base, "run", str(path), "--workspace", str(ws), "--run-id", "k"],
        env=_env(SAFEPOINT_FAILPOINT="after_started:run_command"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert crashed.returncode != 0
    asked = safepoint_in_process("resume", "k", "--workspace", ws, env=_env())
    assert asked.returncode == 3, asked.stderr
    # Only what the engine accepts is offered: --skip, never --replay.
    assert "--skip k1" in asked.stderr and "its arguments held a secret" in asked.stderr, asked.stderr
    assert "--replay" not in asked.stderr, asked.stderr
    refused = safepoint_in_process("resume", "k", "--workspace", ws, "--replay", "k1", env=_env())
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("safepoint: --replay k1: "), refused.stderr
    assert "its arguments held a secret" in refused.stderr and "--skip k1" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    skipped = safepoint_in_process("resume", "k", "--workspace", ws, "--skip", "k1", env=_env())
    assert skipped.returncode == 0, skipped.stderr
    assert not (ws / "token.txt").exists()  # killed after `started`, before it ran; never run since
    assert IN_ARGS.encode() not in _every_store_byte(ws)
