"""Second attack on issue 11's merge (secrets stay out, the store defends itself): each test is a broken promise
found by a reviewer-attacker playing a hostile agent (it controls the command lines), a hostile file in the workspace,
or a careless user. Marked xfail (strict) until it is fixed."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

import safepoint
from tests.store_text import every_store_byte

# A deploy token in a credential-named variable: 64 hex digits, the shape of many service tokens (no known prefix).
TOKEN = "5f0e3c9a7b2d4e6f8a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d2f4a6c8e0b1d3f"


def _store_bytes(workspace) -> bytes:
    return every_store_byte(workspace / ".agent-runtime")  # compressed history expanded


def _run_commands(workspace, commands, **start):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", **start) as run:
        for i, command in enumerate(commands):
            run.call_result("run_command", {"command": command}, call_id=f"c{i}")


# ------------------------------------------------------------------------------ §2 redaction: encoded values


def test_a_credential_printed_in_uppercase_hex_never_reaches_the_store(workspace, monkeypatch):
    """README: the values of credential variables are "also found ... in hex". `xxd -p -u`, `hexdump`-style tools,
    Python's `.hex().upper()` and `printf %02X` print it in capitals: kept as it is."""
    value = "Zk81-" + "planted-credential-value"  # letters whose hex has letters: upper and lower differ
    monkeypatch.setenv("DEPLOY_TOKEN", value)
    cmd = "python3 -c 'import os; print(os.environ[\"DEPLOY_TOKEN\"].encode().hex().upper())'"
    _run_commands(workspace, [cmd], pass_env=["DEPLOY_TOKEN"])
    stored = _store_bytes(workspace)
    assert b"python3" in stored
    assert value.encode().hex().upper().encode() not in stored


def test_a_credential_base64d_by_the_base64_program_never_reaches_the_store(workspace, monkeypatch):
    """README: base64 "wherever they stand in a longer base64 text". GNU `base64` (and `openssl base64`, MIME)
    wraps at 76 columns: a 64-character token base64'd is 88 characters, split by a newline; neither line holds any
    of the forms hunted. `printf %s "$DEPLOY_TOKEN" | base64` keeps the token, one decode away, in the ledger."""
    monkeypatch.setenv("DEPLOY_TOKEN", TOKEN)
    _run_commands(workspace, ['printf %s "$DEPLOY_TOKEN" | base64'], pass_env=["DEPLOY_TOKEN"])
    stored = _store_bytes(workspace)
    wrapped = base64.encodebytes(TOKEN.encode()).decode()  # what the program printed: 76 columns, then the rest
    assert "\n" in wrapped.strip()
    first, second = wrapped.split()
    assert first.encode() in stored or b"base64" in stored  # the command ran and was recorded
    assert not (first.encode() in stored and second.encode() in stored), "the wrapped base64 of the token is kept"


def test_a_credential_hex_dumped_by_xxd_never_reaches_the_store(workspace, monkeypatch):
    """`xxd -p` (plain hex, the usual hex dump) wraps at 60 columns: a token longer than 30 bytes, or one standing
    after other text, is split by a newline, and neither piece is hunted."""
    monkeypatch.setenv("DEPLOY_TOKEN", TOKEN)
    cmd = (
        "python3 -c 'import os, textwrap; "
        'print(chr(10).join(textwrap.wrap(os.environ["DEPLOY_TOKEN"].encode().hex(), 60)))\''
    )
    _run_commands(workspace, [cmd], pass_env=["DEPLOY_TOKEN"])
    stored = _store_bytes(workspace)
    assert TOKEN.encode().hex()[:60].encode() not in stored


def test_a_credential_percent_encoded_byte_by_byte_never_reaches_the_store(workspace, monkeypatch):
    """README: found "percent-encoded". `quote()` leaves letters and digits as they are, so for most tokens the
    percent-encoded form hunted is the token itself; an encoder that escapes every byte (`%5f%30...`, as `curl
    --data-urlencode` of binary, `jq @uri` of some, or `printf '%%%02x'`) is kept."""
    monkeypatch.setenv("DEPLOY_TOKEN", TOKEN)
    cmd = 'printf %s "$DEPLOY_TOKEN" | od -An -tx1 -v | tr -d " \\n" | sed "s/../%&/g"'
    _run_commands(workspace, [cmd], pass_env=["DEPLOY_TOKEN"])
    stored = _store_bytes(workspace)
    assert b"od -An" in stored
    assert "".join(f"%{b:02x}" for b in TOKEN.encode())[:60].encode() not in stored


@pytest.mark.parametrize("password", ['Tr0ub4dor"&3\\horse', "p\u00e4ssw\u00f6rd-2024-x"])
def test_a_credential_printed_as_json_never_reaches_the_store(workspace, monkeypatch, password):
    """A generated password holding `"` or `\\` (or a letter outside ASCII) is printed JSON-escaped by every tool
    that prints JSON (`docker inspect`, `jq`, `kubectl ... -o json`, `json.dumps`): `Tr0ub4dor\\"&3\\\\horse`,
    `p\\u00e4ssw...`. The value is hunted only as it is: kept. (`"value": ...` is no secret-sounding field name.)"""
    monkeypatch.setenv("DB_PASSWORD", password)
    cmd = 'python3 -c \'import json, os; print(json.dumps({"value": os.environ["DB_PASSWORD"]}))\''
    _run_commands(workspace, [cmd], pass_env=["DB_PASSWORD"])
    stored = _store_bytes(workspace).decode("utf-8", "replace")
    assert "json.dumps" in stored
    escaped = json.dumps(password)[1:-1]
    assert escaped not in stored and json.dumps(escaped)[1:-1] not in stored, "the JSON-escaped password is kept"


NAMED_SECRETS = {
    ".netrc": "machine github.com\n  login bob\n  password {s}\n",  # curl, git, pip read it
    "settings.xml": "<server><id>repo</id><username>bob</username><password>{s}</password></server>\n",  # Maven
    "secrets.yml": "production:\n  secret_key_base: {s}\n",  # Rails
    "deploy.sh": "mysql --password {s} -h db prod < dump.sql\n",
}


@pytest.mark.parametrize("name", sorted(NAMED_SECRETS))
def test_a_secret_beside_its_name_in_a_common_file_never_reaches_the_store(workspace, name):
    """README: caught is a secret with "a secret-sounding name beside it" (`.env` lines, quoted fields, `password:`).
    Not these: `.netrc`'s `password X`, Maven's `<password>X</password>`, Rails' `secret_key_base: X`, an option
    `--password X` (`--password=X` is caught). `cat` of the user's file puts the password in the ledger."""
    secret = "Qv7-" + "not-a-known-shape-81"
    (workspace / name).write_text(NAMED_SECRETS[name].format(s=secret))
    _run_commands(workspace, [f"cat {name}"])
    log = (workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl").read_bytes().splitlines()
    records = b"\n".join(line for line in log if b'{"kind":"blob"' not in line)
    assert f"cat {name}".encode() in records
    assert secret.encode() not in records, f"the password in {name} is kept"


# ------------------------------------------------------------------------------ §1 the environment on purpose


@pytest.mark.parametrize(
    "name", ["SMTP_PASS", "DB_PASS", "CI_JOB_JWT", "MAIL_CREDS", "HONEYCOMB_WRITEKEY", "OTEL_EXPORTER_OTLP_HEADERS"]
)
def test_a_password_variable_under_a_common_name_is_withheld_and_hunted(workspace, monkeypatch, name):
    """`*_PASS` (`DB_PASS`, `SMTP_PASS`, `REDIS_PASS`: the names of countless docker-compose files), `*_JWT`,
    `*_CREDS`: not credentials by is_credential's words or endings. So `echo "$DB_PASS"` gets the value (it is
    not withheld, no --pass-env given) and the ledger keeps it: the value is not hunted either. Only `DB_PASS=...`
    printed by `env` is caught, by the .env-line shape. `HONEYCOMB_WRITEKEY` (no `_KEY` ending) and
    `OTEL_EXPORTER_OTLP_HEADERS` (`x-honeycomb-team=KEY`: the exporter's credential, beside safepoint's own OTel
    export) are neither withheld nor hunted."""
    value = "Hx7-" + "mail-relay-password-q9"
    monkeypatch.setenv(name, value)
    _run_commands(workspace, [f'echo "relay: ${name}"'])
    stored = _store_bytes(workspace)
    assert b"relay: " in stored
    assert value.encode() not in stored, f"{name}'s value was handed to the command and kept"


# ------------------------------------------------------------------------------ §4 the store and .git out of reach


def test_a_hook_planted_through_a_link_the_agent_made_to_git_is_held(workspace):
    """`ln -s .git g` names `.git` only as the link's target (not held: ln writes `g`), then `printf ... >
    g/hooks/pre-commit` names no `.git` part: neither is held, and the hook runs on the user's next `git commit`.
    The README lists what is not seen (a path built at run time, a script, an absolute path, an archive's members):
    not a link; the file tools refuse "a link into .git", commands do not."""
    subprocess.run(["git", "-C", str(workspace), "init", "-q"], check=True)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval_timeout_s=0.2) as run:  # a held command: nobody answers, refused
        run.call_result("run_command", {"command": "ln -s .git g"}, call_id="c1")
        plant = "printf '#!/bin/sh\\necho pwned\\n' > g/hooks/pre-commit && chmod +x g/hooks/pre-commit"
        run.call_result("run_command", {"command": plant}, call_id="c2")
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists(), "the agent planted a git hook"


def test_a_hard_link_into_the_store_cannot_erase_the_runs_log(workspace):
    """`ln .agent-runtime/runs/r/ledger.jsonl notes.txt` writes `notes.txt` (not held: the store is only read),
    and `: > notes.txt` truncates the run's log through the second name (held neither: notes.txt is the agent's).
    Every record before it is gone: the write_file and the planting of anything else vanish from `ledger`,
    `explain` and `history`; the call result only says "a file with 2 names"."""
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval_timeout_s=0.2) as run:
        run.call_result("write_file", {"path": "a.txt", "content": "evidence\n"}, call_id="first")
        run.call_result("run_command", {"command": "ln .agent-runtime/runs/r/ledger.jsonl notes.txt"}, call_id="c1")
        run.call_result("run_command", {"command": ": > notes.txt"}, call_id="c2")
    log = (workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl").read_bytes()
    assert b'"first"' in log, "the run's log lost every record before the truncation"


def test_fsck_reports_a_log_whose_beginning_was_cut(workspace):
    """A log cut at its start (the attack above, or any truncation and re-append) begins at seq N > 1. fsck says
    at most that the checkpoint index does not match, `--repair` rebuilds the index from what is left and the next
    fsck says "clean"; `explain` then says the resume "starts again from its first step": every call whose record
    went (non-idempotent ones included) is run again. The promise: a damaged log is never taken at its word."""
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.checkpoint()
        run.call_result("write_file", {"path": "a.txt", "content": "a\n"}, call_id="c1")
        run.call_result("run_command", {"command": "echo sent > sent.txt"}, call_id="c2")
        run.checkpoint()
        run.call_result("write_file", {"path": "b.txt", "content": "b\n"}, call_id="c3")
    log = workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[len(lines) // 2 :]))  # the first half of the log is gone
    tm.fsck("r", repair=True)
    again = tm.fsck("r")
    assert again.problems, "a log missing its first records is called clean after --repair"


GIT_PROGRAMS = [
    # runs on the user's next signed `git commit` (gpg.format=ssh, no user.signingKey): the file "ran" appears
    "git config gpg.ssh.defaultKeyCommand 'touch ran'",
    "git config sendemail.sendmailCmd ./evil",  # `git send-email` runs it
    "git config sendemail.toCmd ./evil",
    "git config sendemail.ccCmd ./evil",
    "git config commit.gpgSign true",  # git_guard.py: "writing either setting is held (core/command_git.py)"
]


@pytest.mark.parametrize("command", GIT_PROGRAMS)
def test_a_git_setting_that_runs_a_program_is_held(command):
    """README: held is "`git config` setting a program git runs (`core.fsmonitor`, `core.hooksPath`, ...)". These
    set one all the same (checked by hand: after `git config gpg.format ssh; git config commit.gpgSign true; git
    config gpg.ssh.defaultKeyCommand 'touch ran'`, the user's `git commit` runs it)."""
    from safepoint.core.command_reach import classify_with_reach

    assert "store_or_git" in classify_with_reach(command).side_effects


WRITERS = [
    "awk -i inplace '{print}' .git/config",  # gawk's in-place edit: `sed -i` on the same file is held
    "mkdir -p .git/hooks",
    "ln -s .agent-runtime s",  # the store, one command away from `rm -rf s/*` (see the .git link test)
    "echo .git | xargs rm -rf",
    "xargs rm -rf <<< .agent-runtime",
]


@pytest.mark.parametrize("command", WRITERS)
def test_a_command_naming_git_or_the_store_literally_is_held(command):
    """Each names `.git` or `.agent-runtime` literally on the line (no path built at run time): the README's
    "a path the line writes ... with a part named .git ... however spelled"."""
    from safepoint.core.command_reach import classify_with_reach

    assert "store_or_git" in classify_with_reach(command).side_effects


# ------------------------------------------------------------------------------ encryption at rest


def test_the_stores_key_read_from_its_key_file_never_reaches_the_record(tmp_path, workspace):
    """README: keep the key file outside the workspace, "a command the agent runs can read any file you can". So
    it may: `cat ~/.safepoint.key` (the README's own path). Given as SAFEPOINT_KEY, the value is hunted and the
    record shows [REDACTED]; given as a key file (the README's recommended way), the key is kept in the run's
    records and `history --json` prints it (and the model was sent it)."""
    pytest.importorskip("cryptography")
    from tests.conftest import cli_env, safepoint_in_process

    key = "c0ffee" * 10 + "1234"
    key_file = tmp_path / "sp.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    tm = safepoint.open(workspace=str(workspace), key_file=str(key_file))
    with tm.start("t", run_id="r") as run:
        run.call_result("run_command", {"command": f"cat {key_file}"}, call_id="c1")
    done = safepoint_in_process(
        "history", "r", "--json", "-w", workspace, env=cli_env(SAFEPOINT_KEY_FILE=str(key_file))
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "run_command"' in done.stdout
    assert key not in done.stdout, "the store's own key is in its records"


def test_an_encrypted_store_keeps_no_file_name_in_clear(workspace):
    """README, what stays in clear: ids, kinds, seqs, the owner record, positions, artifact names, checksums,
    times, sizes; "files a running tool writes pass through the run's tmp/ folder". Not listed: the workspace's
    file names, which the capture's state file (tmp/capture-state.msgpack) keeps in clear after the run closed
    (`patient-1234-diagnosis.txt`), where the log's own patch records are sealed."""
    pytest.importorskip("cryptography")
    tm = safepoint.open(workspace=str(workspace), key="ab" * 32)
    with tm.start("t", run_id="r") as run:
        run.call_result("write_file", {"path": "patient-1234-diagnosis.txt", "content": "x\n"}, call_id="c1")
        run.call_result("run_command", {"command": "true"}, call_id="c2")
    assert b"patient-1234" not in _store_bytes(workspace), "a file name in clear in an encrypted store"


# ------------------------------------------------------------------------------ who decides


def test_the_held_command_a_person_is_shown_is_the_one_they_approve(workspace):
    """The model writes the command line. `safepoint approvals` prints it as it is, escape sequences included:
    `\\x1b[2K` erases the line on the user's terminal and `\\x1b[1A` moves up, so the person reads `ls -la` where
    the command is `rm -rf .git; ...` (the \\r is shown as a space; ESC is not). `--json` escapes them (\\u001b).
    The same holds for `watch`, `ledger`-like tables and progress lines wherever model text is printed."""
    import sys

    from safepoint.core.progress import ApprovalWait
    from tests.conftest import cli_env

    shown = {}

    def look(event):
        # Asked the moment the call waits (the run's own event), not after a sleep: no race with the wait's timeout.
        if isinstance(event, ApprovalWait) and "out" not in shown:
            done = subprocess.run(
                [sys.executable, "-m", "safepoint", "approvals", "-w", str(workspace)],
                capture_output=True,
                env=cli_env(),
                timeout=60,
                check=False,
            )
            shown["out"] = done.stdout

    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval_timeout_s=0.5) as run:  # held (.git), nobody answers: refused
        run.on_event(look)
        run.call_result("run_command", {"command": "rm -rf .git; echo '\x1b[2K\r\x1b[1Als -la'"}, call_id="c1")
    assert b"c1" in shown["out"], shown
    assert b"\x1b" not in shown["out"], "a terminal escape of the model's is printed to the person deciding"


# ------------------------------------------------------------------------------ /proc above a command


def test_a_command_of_a_daemons_worker_cannot_read_the_daemons_environment(tmp_path, workspace):
    """The workers get the store URL and the credentials by a pipe and blank themselves; the reaper and supervisor
    start with the locale only. One process above the command was left: the daemon, started with the user's whole
    environment and never made undumpable. The command walks up $PPID to the process whose command line says
    `daemon` and reads its /proc/PID/environ: the provider's key (and SAFEPOINT_STORE's PostgreSQL password,
    SAFEPOINT_KEY) in clear. The README's exception is only "the shell that started safepoint"."""
    import json
    import sys

    from tests.conftest import cli_env

    key = "sk-proj-" + "D43m0nK3yAbCdEfGh1jK" * 2
    steal = (
        "p=$PPID; for i in 1 2 3 4 5 6 7 8; do "
        "case \"$(tr '\\0' ' ' < /proc/$p/cmdline)\" in *' daemon '*) "
        "tr '\\0' '\\n' < /proc/$p/environ > daemon_env.out; break;; esac; "
        "p=$(awk '{print $4}' /proc/$p/stat); done"
    )
    scenario = {
        "task": "env",
        "turns": [
            {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "one\n"}}]},
            {"tool_calls": [{"tool": "run_command", "args": {"command": steal}}]},
            {"text": "done"},
        ],
    }
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    env = cli_env(OPENAI_API_KEY=key)
    run = [sys.executable, "-m", "safepoint", "run", str(path), "--run-id", "r", "--workspace", str(workspace)]
    crashed = subprocess.run(
        run, env={**env, "SAFEPOINT_FAILPOINT": "after_outcome:write_file"}, capture_output=True, timeout=120
    )
    assert crashed.returncode == -9, crashed.stderr
    daemon = subprocess.run(
        [sys.executable, "-m", "safepoint", "daemon", "--once", "--json", "--workspace", str(workspace)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert daemon.returncode == 0, daemon.stderr
    read = (workspace / "daemon_env.out").read_text()
    assert "PATH=" in read  # the daemon's environment block was read
    assert key not in read, "the provider's key, read from the daemon's /proc/PID/environ"


# ------------------------------------------------------------------------------ rollback: the user's work


def test_the_agent_cannot_make_the_users_files_ignored_then_delete_them_for_good(workspace):
    """The known limit: "An ignored file a command removes without naming it is said, not kept". Here the files
    were the user's, not ignored, when the run began: the agent writes `.gitignore` = `*` (its own file: allowed),
    then `find . -name '*.py' -delete` (one extension: not held). main.py goes "not kept, so rollback cannot put it
    back"; lib/util.py goes without a word (its folder is ignored now, so unwatched). Rolling the run back restores
    the .gitignore and nothing else: the user's work is gone."""
    (workspace / "main.py").write_text("the user's work\n")
    (workspace / "lib").mkdir()
    (workspace / "lib" / "util.py").write_text("the user's util\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval_timeout_s=0.2) as run:
        start = run.checkpoint()
        run.call_result("write_file", {"path": ".gitignore", "content": "*\n"}, call_id="c1")
        run.call_result("run_command", {"command": "find . -name '*.py' -delete"}, call_id="c2")
    tm.rollback_files("r", start, include_uncertain=True)
    assert (workspace / "main.py").exists(), "the user's main.py is lost for good"
    assert (workspace / "lib" / "util.py").exists(), "the user's lib/util.py is lost, unsaid"


# ------------------------------------------------------------------------------ mcp-proxy


def test_an_mcp_client_cannot_approve_its_own_held_call_through_a_file_tool(tmp_path):
    """`mcp-proxy --approval high`: a destructive call waits for `safepoint approve`. The client (the model) sends
    a second call meanwhile (calls run concurrently): `set_value` (idempotent, not destructive, closed world: not
    held) with the path of the run's control channel and its lines plus one approval (the format is open, the
    input hash computable; here made by `safepoint approve` on a copy of the store). Nothing looks at MCP
    arguments naming the store (commands naming it are held), and a record written by a concurrent call is taken
    as a person's: the held append runs."""
    import shutil
    import time

    pytest.importorskip("mcp")
    from tests.test_mcp_proxy import Raw

    ws, notes = tmp_path / "ws", tmp_path / "notes.txt"
    ws.mkdir()
    client = Raw(ws, "--run", "r", "--approval", "high")
    try:
        client.send(
            {
                "jsonrpc": "2.0",
                "id": "held",
                "method": "tools/call",
                "params": {"name": "append_line", "arguments": {"path": str(notes), "text": "a"}},
            }
        )
        sp = safepoint.open(None, workspace=str(ws))
        deadline = time.monotonic() + 30
        while not (planned := [e.call_id for e in sp.ledger("r") if e.status == "planned"]):
            assert time.monotonic() < deadline, "the call never waited for approval"
            time.sleep(0.05)
        sp.close()
        copy = tmp_path / "copy"
        shutil.copytree(ws, copy)
        forged = safepoint.open(None, workspace=str(copy))
        forged.approve("r", planned[0])
        forged.close()
        channel = ws / ".agent-runtime" / "runs" / "r" / "control.jsonl"
        content = (copy / ".agent-runtime" / "runs" / "r" / "control.jsonl").read_text()
        answer = client.call("set_value", path=str(channel), text=content)
        assert "result" in answer, answer
        deadline = time.monotonic() + 4
        while not notes.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not notes.exists(), "the client approved its own held destructive call"
    finally:
        client.proc.kill()
        client.proc.wait(30)


# ------------------------------------------------------------------------------ a hostile file in the workspace


def test_a_store_shipped_in_a_cloned_repository_is_not_resumed_by_the_daemon(tmp_path):
    """A repository can ship `.agent-runtime/` as a real folder (git makes it the user's, 0755: made 0700 and
    accepted; only a symlink is refused). Its run `x` crashed after its first turn, its scenario's next turn runs
    a command, its header's workspace names a folder that exists on any machine (here another scratch folder; by
    hand, `/tmp` with the header's CRC recomputed works too). The user clones it and starts `safepoint daemon` in
    it: startup recovery resumes `x` and the attacker's command runs."""
    import json
    import shutil
    import sys

    from tests.conftest import cli_env

    marker = tmp_path / "PWNED"
    scenario = {
        "task": "t",
        "turns": [
            {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "one\n"}}]},
            {"tool_calls": [{"tool": "run_command", "args": {"command": f"echo pwned > {marker}"}}]},
            {"text": "done"},
        ],
    }
    (tmp_path / "s.json").write_text(json.dumps(scenario))
    attacker, victim = tmp_path / "anywhere", tmp_path / "clone"
    attacker.mkdir()
    made = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(tmp_path / "s.json"), "--run-id", "x", "-w", str(attacker)],
        env={**cli_env(), "SAFEPOINT_FAILPOINT": "after_outcome:write_file"},
        capture_output=True,
        timeout=120,
    )
    assert made.returncode == -9, made.stderr
    victim.mkdir()
    shutil.copytree(attacker / ".agent-runtime", victim / ".agent-runtime")  # what `git clone` checks out
    for name in ("lock", ".gitignore"):
        for path in (victim / ".agent-runtime").rglob(name):
            path.unlink()
    daemon = subprocess.run(
        [sys.executable, "-m", "safepoint", "daemon", "--once", "--json", "--workspace", str(victim)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "daemon_started" in daemon.stdout, daemon.stderr
    assert not marker.exists(), "the daemon resumed a run shipped in the repository and ran its command"
