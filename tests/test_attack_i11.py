"""Attacks on issue 11's merge (secrets stay out, the store defends itself): each test is a broken promise found
by a reviewer-attacker playing a hostile agent (it controls the command lines), a hostile file in the workspace,
or a careless user. Marked xfail (strict) until it is fixed."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile

import pytest

import safepoint
from tests.attacks import run_in_a_fresh_process, tree
from tests.conftest import cli_env, safepoint_in_process
from tests.store_text import every_store_byte, trace_lines

PLANTED = "Zq81-" + "planted-credential-value"  # a credential only in safepoint's environment


def _store_bytes(workspace) -> bytes:
    return every_store_byte(workspace / ".agent-runtime")  # compressed history expanded


def _records(workspace) -> bytes:
    """Every line of the run's log but file versions (kept exact, by design), and the trace."""
    run = workspace / ".agent-runtime" / "runs" / "r"
    trace = (run / "trace.jsonl").read_bytes()
    lines = (run / "ledger.jsonl").read_bytes().splitlines() + trace.splitlines() + trace_lines(trace)
    return b"\n".join(line for line in lines if b'{"kind":"blob"' not in line)


def _repo(workspace) -> None:
    def git(*args):
        subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True)

    git("-c", "init.defaultBranch=main", "init", "-q")
    git("config", "user.name", "T")
    git("config", "user.email", "t@example.com")
    (workspace / "t.txt").write_text("t\n")
    git("add", "-A")
    git("commit", "-qm", "init")


# ------------------------------------------------------------------------------ §1 the environment on purpose


def test_a_command_cannot_read_a_withheld_credential_from_its_parents_environment(tmp_path, workspace):
    """`env` shows no ATTACK_API_KEY (withheld), but the reaper that starts the command was started by
    `subprocess.Popen` without `env=`: `/proc/$PPID/environ` holds the whole environment, the key included (and
    the agent's own process above it too). Read as it is, the value redactor catches it; reversed, base64'd or
    split it is kept in the ledger as it is and handed to the model."""
    steal = (
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null"
        " | grep -a '^ATTACK_API_KEY=' | sort -u | rev"
    )
    run_in_a_fresh_process(tmp_path, workspace, ["env > env.out", steal], ATTACK_API_KEY=PLANTED)
    assert "ATTACK_API_KEY" not in (workspace / "env.out").read_text()  # withheld from `env`, as promised
    stored = _store_bytes(workspace)
    assert PLANTED.encode() not in stored
    assert PLANTED[::-1].encode() not in stored, "the withheld key, reversed, is in the ledger"


def test_the_providers_key_never_reaches_the_store_whatever_its_variables_name(workspace):
    """The README: commands run "minus the model's key variable (`--api-key-env`, whatever its name)", and the
    redactor hunts "the values of the credential variables ... (passed or not: a command given one may still print
    it)". A user hands the key to a command that calls the same API (`--pass-env LLM`); the command prints it; a key
    with no known shape in a variable with no credential-like name is not redacted. (Without --pass-env the same
    happens through /proc/$PPID/environ: the test above.)"""
    from tests.openai_server import FakeOpenAI

    key = "llmkey-" + "0123456789abcdefXYZ"
    call = {"id": "call_1", "name": "run_command", "arguments": {"command": 'echo "calling with $LLM"'}}
    with FakeOpenAI([{"tool_calls": [call]}, {"text": "ok"}]) as server:
        done = safepoint_in_process(
            "run", "--task", "t", "--model", "m", "--base-url", server.base_url, "--api-key-env", "LLM",
            "--pass-env", "LLM", "-w", workspace, "--run-id", "r", env=cli_env(LLM=key),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"calling with" in _store_bytes(workspace)
    assert key.encode() not in _store_bytes(workspace)


def test_a_database_url_with_a_password_parameter_never_reaches_the_store(workspace, monkeypatch):
    """`DATABASE_URL=postgresql://app@db/prod?password=...` (libpq takes the password either way, and issue 11
    names `?password=`): `env` hands it to the command, and the ledger keeps it whole; `history`/`ledger --json`
    print `password=***` (masked on the way out), so the leak does not show until one reads the store's files.
    The same text written by the model or a command output is not redacted either."""
    monkeypatch.setenv("DATABASE_URL", f"postgresql://app@db.internal/prod?password={PLANTED}")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call_result("run_command", {"command": "env > env.out; grep DATABASE_URL env.out"}, call_id="c1")
        run.call_result("run_command", {"command": f"echo mysql://root@db/x?password={PLANTED[::-1]}"}, call_id="c2")
    assert "DATABASE_URL" not in (workspace / "env.out").read_text()
    stored = _store_bytes(workspace)
    assert PLANTED.encode() not in stored, "the URL's password is in the ledger"
    assert PLANTED[::-1].encode() not in stored, "a ?password= in command output is not redacted"


# ------------------------------------------------------------------------------ §4 the store and .git out of reach

BYPASSES = [
    "rm -rf .{git,agent-runtime}",  # brace expansion: the literal names, spelled once
    "find .agent-runtime -delete",
    "find .git -name config -exec rm {} ;",
    "tar -xf hooks.tar -C .git",
    "unzip -o hooks.zip -d .git",
    "rsync -a --delete empty/ .agent-runtime/",
    "patch -p0 -d .git < hook.patch",
    "git init --template=evil-template",  # re-init copies the template's hooks into .git/hooks
    "rename s/runtime/x/ .agent-runtime",
    "git stash --all",  # like `git clean -x` (held): ignored files go, the store (and the user's .env) with them
    "git stash push -a -m wip",
]


@pytest.mark.parametrize("command", BYPASSES)
def test_a_command_that_names_git_or_the_store_is_held(command):
    """Promise: "Held: a path the line writes (...) with a part named `.git` or `.agent-runtime`". Each of these
    names one literally (or plants a hook through git itself) and runs without a decision."""
    from safepoint.core.command_reach import classify_with_reach

    assert "store_or_git" in classify_with_reach(command).side_effects


def test_a_git_program_set_through_the_global_config_file_is_held():
    """Held: `git config --global core.hooksPath hooks` ("sets a program git runs"). Not held: writing the same
    setting into ~/.gitconfig, which sets it for every repository of the user (hooks, filters, fsmonitor)."""
    from safepoint.core.command_reach import classify_with_reach

    assert "store_or_git" in classify_with_reach("git config --global core.hooksPath hooks").side_effects
    line = "printf '[core]\\n\\thooksPath = hooks\\n' >> ~/.gitconfig"
    assert "store_or_git" in classify_with_reach(line).side_effects


def test_an_archive_extracted_into_git_never_plants_a_hook(tmp_path, workspace):
    """End to end, with `--approval none` as the held-commands test runs it: an archive the agent wrote (or the
    workspace shipped) is extracted into `.git`; the next `git commit` the user makes runs the model's code."""
    _repo(workspace)
    payload = b"#!/bin/sh\necho pwned\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("hooks/pre-commit")
        info.size, info.mode = len(payload), 0o755
        archive.addfile(info, io.BytesIO(payload))
    (workspace / "hooks.tar").write_bytes(buffer.getvalue())
    before = tree(workspace / ".git")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval="none", approval_timeout_s=0.2) as run:
        run.call_result("run_command", {"command": "tar -xf hooks.tar -C .git"}, call_id="c1")
    assert tree(workspace / ".git") == before


def test_safepoints_git_commands_never_run_a_filter_the_agent_planted(tmp_path, workspace, monkeypatch):
    """Two commands nobody holds (`>> ~/.gitconfig`, `> .gitattributes`) configure a clean filter; from then on
    safepoint's own `git status`/`update-index --add` run it at every capture, and `safepoint commit` runs it when
    the user reviews the agent's work: the model's code runs through safepoint, as the user."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    _repo(workspace)
    mark = tmp_path / "ran"
    plant = f'printf \'[filter "x"]\\n\\tclean = "sh -c \\\\"echo ran >> {mark}; cat\\\\""\\n\' >> ~/.gitconfig'
    # Since the fix, the agent's line is held (git's configuration outside the repository); a person who approves
    # it, or a filter of the user's own, leaves the same file: written here directly.
    from safepoint.core.command_reach import classify_with_reach

    assert "store_or_git" in classify_with_reach(plant).side_effects
    (home / ".gitconfig").write_text(f'[filter "x"]\n\tclean = "sh -c \\"echo ran >> {mark}; cat\\""\n')
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        attrs = run.call_result("run_command", {"command": "echo '* filter=x' > .gitattributes"}, call_id="c2")
        assert attrs.status == "succeeded", attrs.observation
        mark.unlink(missing_ok=True)
        subprocess.run(["git", "-C", str(workspace), "hash-object", "t.txt"], capture_output=True, check=True)
        assert mark.exists(), "the plant does not work with a plain git"
        mark.unlink()
        run.call_result("run_command", {"command": "echo changed > t.txt"}, call_id="c3")
    ran = mark.read_text() if mark.exists() else ""
    done = safepoint_in_process("commit", "r", "--yes", "-m", "the agent's work", "-w", workspace, env=cli_env())
    assert done.returncode == 0, done.stderr
    ran += mark.read_text() if mark.exists() else ""
    assert not ran, "safepoint's own git ran the agent's filter"


# ------------------------------------------------------------------------------ §5 fsck


def test_fsck_mends_a_bit_flipped_in_a_newline(workspace):
    """One flipped bit in the newline between two log lines (0x0a -> 0x0b) joins them: fsck says both records are
    "lost for good" and quarantines them, where flipping the one bit back gives two lines that check out. The
    promise: "a line hit by one flipped bit is mended when the mended record proves itself"."""
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call_result("write_file", {"path": "a.txt", "content": "a\n"}, call_id="c1")
        run.call_result("write_file", {"path": "b.txt", "content": "b\n"}, call_id="c2")
    log = workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl"
    data = bytearray(log.read_bytes())
    lines = data.count(b"\n")
    at = [i for i, byte in enumerate(data) if byte == 0x0A][lines // 2]
    data[at] ^= 0x01
    log.write_bytes(bytes(data))
    result = tm.fsck("r", repair=True)
    assert all("lost for good" not in p.repair and "missing" not in p.problem for p in result.problems), result
    assert log.read_bytes().count(b"\n") == lines


# ------------------------------------------------------------------------------ private modes


def test_the_note_of_a_running_command_is_private(workspace):
    """Promise: "Store files are created 0600 and folders 0700 ... whatever the umask". `ProcessNotes.started`
    writes `tmp/proc-<pid>` with a plain `open(..., "w")`."""
    old = os.umask(0o022)
    try:
        tm = safepoint.open(workspace=str(workspace))
        with tm.start("t", run_id="r") as run:
            seen = run.call_result(
                "run_command", {"command": "stat -c '%a %n' .agent-runtime/runs/r/tmp/proc-*"}, call_id="c1"
            )
    finally:
        os.umask(old)
    assert "proc-" in seen.observation, seen.observation
    assert " 644 " not in seen.observation.replace("\n", " \n "), seen.observation
    assert "600 " in seen.observation, seen.observation


def test_a_scratch_folder_the_run_recreates_is_private(workspace):
    """`os.makedirs(scratch, exist_ok=True)` in `Workspace.for_run`: a resume after `tmp/` went (a cleanup of
    temporary files) makes it 0755, and the capture state written into it lists the workspace's files."""
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call_result("run_command", {"command": "echo x > a.txt"}, call_id="c1")
    scratch = workspace / ".agent-runtime" / "runs" / "r" / "tmp"
    for item in scratch.iterdir():
        item.unlink()
    scratch.rmdir()
    old = os.umask(0o022)
    try:
        with tm.resume("r") as run:
            run.call_result("run_command", {"command": "echo y > b.txt"}, call_id="c2")
    finally:
        os.umask(old)
    assert stat.S_IMODE(scratch.stat().st_mode) == 0o700, oct(scratch.stat().st_mode)


def test_a_folder_fsck_recreates_is_private(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.checkpoint()
        run.call_result("write_file", {"path": "a.txt", "content": "a\n"}, call_id="c1")
    folder = workspace / ".agent-runtime" / "runs" / "r" / "checkpoints"
    for item in folder.iterdir():
        item.unlink()
    folder.rmdir()
    old = os.umask(0o022)
    try:
        tm.fsck("r", repair=True)
    finally:
        os.umask(old)
    assert folder.is_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700, oct(folder.stat().st_mode)


# ------------------------------------------------------------------------------ §2 redaction


def test_a_url_password_holding_an_at_sign_is_redacted_whole(workspace):
    """A careless user's `.env` (`postgresql://app:S3cr@t-...@db/prod`; drivers that split on the last '@' take
    it); the agent runs `cat .env`, as agents do. The ledger keeps `app:[REDACTED:password]@t-Passw0rd-4411@db`:
    all but four characters of the password."""
    (workspace / ".env").write_text("DATABASE_URL=postgresql://app:S3cr@t-Passw0rd-4411@db.internal/prod\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call_result("run_command", {"command": "cat .env"}, call_id="c1")
    assert b"Passw0rd-4411" not in _records(workspace)


def test_the_start_of_a_private_key_is_redacted(workspace):
    """`head -n 5 ~/.ssh/id_rsa` (to see what kind of key it is) shows the BEGIN line and 4 lines of key
    material; the pattern needs `-----END ... PRIVATE KEY-----` within 20,000 characters, so nothing is redacted."""
    body = "\n".join("MIIEpAIBAAKCAQEA7Zq1" + f"{i:02d}" + "x" * 40 for i in range(12))
    (workspace / "id_rsa").write_text(f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\n")
    tm = safepoint.open(workspace=str(workspace), exclude=["id_rsa"])
    with tm.start("t", run_id="r") as run:
        shown = run.call_result("run_command", {"command": "head -n 5 id_rsa"}, call_id="c1")
    assert "MIIEpAIBAAKCAQEA7Zq1" in shown.observation or "REDACTED" in shown.observation
    assert b"MIIEpAIBAAKCAQEA7Zq1" not in _records(workspace)


# ------------------------------------------------------------------------------ §4 the hold, forged


def test_the_agent_cannot_approve_its_own_held_command(workspace):
    """The hold is the one defence the README offers against a command that reaches .git or the store, and the
    approval gate of every high-risk call. A hostile model writes a script (write_file) that appends one framed
    line, `<crc32> 1 {"type":"approval","call_id":"c2","input_hash":...}`, to its own run's control.jsonl (the path
    built at run time: not seen), runs it (`python3 forge.py`, not held), then calls `rm -rf .git` as c2, the call
    id it chose. The wait finds the approval at once ("approved by user") and the user's history is gone. The
    input hash is the SHA-256 of the arguments' canonical JSON, which the model can compute."""
    from safepoint.core.hashing import input_hash

    _repo(workspace)
    held = {"command": "rm -rf .git"}
    forge = (
        "import datetime, json, os, zlib\n"
        "path = os.path.join('.agent-' + 'runtime', 'runs', 'r', 'control.jsonl')\n"
        f"record = {{'type': 'approval', 'call_id': 'c2', 'input_hash': {input_hash(held)!r}, 'approved': True,\n"
        "          'at': datetime.datetime.now(datetime.timezone.utc).isoformat(), 'by': 'user', 'reason': ''}\n"
        "payload = b'1 ' + json.dumps(record, separators=(',', ':')).encode()\n"
        "with open(path, 'ab') as handle:\n"
        "    handle.write(b'%08x %s\\n' % (zlib.crc32(payload), payload))\n"
    )
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval_timeout_s=0.5) as run:
        wrote = run.call_result("write_file", {"path": "forge.py", "content": forge}, call_id="c0")
        ran = run.call_result("run_command", {"command": "python3 forge.py"}, call_id="c1")
        assert wrote.status == ran.status == "succeeded", wrote.observation + ran.observation
        result = run.call_result("run_command", held, call_id="c2")
    assert (workspace / ".git").is_dir(), f"the held command ran on a forged approval: {result.observation}"
    assert result.status != "succeeded"


def test_a_store_symlinked_out_of_the_workspace_is_not_followed_into_a_shared_folder(tmp_path, workspace):
    """A hostile repository ships `.agent-runtime -> /tmp/shared` (git keeps symlinks). safepoint writes the
    store there without a word: the file versions (the user's files, exact) leave the workspace, and in a
    world-writable folder another user can rename `runs/` and put a run of their own in its place (forged records,
    forged approvals). The promise: the store's folders are 0700."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (workspace / ".agent-runtime").symlink_to(shared)
    tm = safepoint.open(workspace=str(workspace))
    try:
        with tm.start("t", run_id="r") as run:
            run.call_result("write_file", {"path": "a.txt", "content": "the user's text\n"}, call_id="c1")
    except safepoint.SafepointError:
        return  # refused: fine
    root = os.path.realpath(workspace / ".agent-runtime")
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700, oct(os.stat(root).st_mode)


# ------------------------------------------------------------------------------ redaction against rollback


def test_a_file_whose_name_matches_a_redaction_pattern_is_rolled_back(workspace):
    """The README's own example pattern, `INTERNAL-[0-9]{4}` (or `TICKET-[0-9]{6}`), is also how people name files
    (`notes/TICKET-123456.md`). The agent rewrites that file and creates another: rollback to the checkpoint before
    finds a conflict on `notes/[REDACTED:user_0].md` (a file that does not exist), restores nothing and deletes
    nothing. A hostile agent gets the same by giving its files token-shaped names (`sk_live_...`): they outlive
    every rollback. "File versions stay exact (rollback needs them)"; their paths do not."""
    (workspace / ".safepoint").mkdir()
    (workspace / ".safepoint" / "redact.toml").write_text('patterns = ["TICKET-[0-9]{6}"]\n')
    (workspace / "notes").mkdir()
    (workspace / "notes" / "TICKET-123456.md").write_text("the user's notes\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call_result("write_file", {"path": "notes/TICKET-123456.md", "content": "overwritten\n"}, call_id="c1")
        run.call_result("write_file", {"path": "notes/TICKET-654321.md", "content": "new\n"}, call_id="c2")
    plan = tm.rollback_files("r", start)
    assert (workspace / "notes" / "TICKET-123456.md").read_text() == "the user's notes\n", plan
    assert not (workspace / "notes" / "TICKET-654321.md").exists(), plan


# ------------------------------------------------------------------------------ §7 masked passwords


def test_a_malformed_store_url_is_one_line(tmp_path):
    """A typo in the store URL (`[::1` without its `]`): `safe_url`, which masks the password for the message,
    calls `urlsplit`, which raises ValueError("Invalid IPv6 URL"): a Python traceback instead of one line."""
    done = safepoint_in_process("status", "--store", "postgresql://u:Sekr3tPw@[::1:1/db", env=cli_env())
    assert "Traceback" not in done.stderr, done.stderr[-400:]
    assert "Sekr3tPw" not in done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_store_password_holding_an_at_sign_never_shows(tmp_path):
    """`postgresql://u:Sek@r3tPw@127.0.0.1:1/db` (an unescaped '@', as people write it): the message reads
    `failed to resolve host 'r3tPw@127.0.0.1'`: the password's tail, in `status` and `status --json` alike."""
    url = "postgresql://u:Sek@r3tPw@127.0.0.1:1/db"
    for args in (("status",), ("status", "--json")):
        done = safepoint_in_process(*args, "--store", url, env=cli_env())
        assert done.returncode != 0
        assert "r3tPw" not in done.stdout + done.stderr, done.stderr


def test_fsck_mends_a_bit_flipped_in_the_runs_header(workspace):
    """The header is framed like every log line (CRC-32 and JSON), so the mending that saves a log line or the
    rebuilt owner record applies; instead `fsck r` stops at it in one error line, `fsck` lists it as unrepairable
    and `--repair` leaves it as it was, while its summary says "found and handled as shown". The run's file
    versions are intact and out of reach: the agent's changes can no longer be rolled back."""
    tm = safepoint.open(workspace=str(workspace))
    (workspace / "a.txt").write_text("the user's\n")
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call_result("write_file", {"path": "a.txt", "content": "the agent's\n"}, call_id="c1")
    header = workspace / ".agent-runtime" / "runs" / "r" / "run.json"
    data = bytearray(header.read_bytes())
    data[len(data) // 2] ^= 0x04
    header.write_bytes(bytes(data))
    tm = safepoint.open(workspace=str(workspace))
    tm.fsck(repair=True)
    tm.rollback_files("r", start)
    assert (workspace / "a.txt").read_text() == "the user's\n"


def test_a_scheduled_jobs_secrets_never_reach_the_store(workspace):
    """`safepoint schedule add --task "... ghp_..." --base-url https://user:PASSWORD@llm/v1`: the run it fires keeps
    its task redacted (run.json), but the job itself is kept as typed. (Firing needs the real text: the job could
    refuse a secret in its task and take the URL's password from the environment, or keep it encrypted.)"""
    token = "ghp_" + "Pp1Qq2Rr3Ss4Tt5Uu6Vv7Ww8Xx9Yy0Zz1Aa2Bb"
    added = safepoint_in_process(
        "schedule", "add", "nightly", "--cron", "0 3 * * *", "--task", f"deploy with {token}", "--model", "m",
        "--base-url", f"https://user:{PLANTED}@llm.internal/v1", "-w", workspace, env=cli_env(),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    listed = safepoint_in_process("schedule", "list", "-w", workspace, "--json", env=cli_env())
    assert token not in listed.stdout + listed.stderr
    stored = _store_bytes(workspace)
    assert token.encode() not in stored and PLANTED.encode() not in stored


REACHING = [
    "shopt -s dotglob; rm -rf *",  # the README: "`rm -rf *` matches no dot-folder in bash"; with dotglob it does
    "GLOBIGNORE=x; rm -rf *",  # setting GLOBIGNORE turns dotglob on
    "rm -rf .[^.]*",  # `.[!.]*` is held; bash's other spelling of the same class is not
    "rm -rf ./{*,.*}",
    "find . -mindepth 1 -delete",
    "chmod -R a+rX .",  # the next test: the store becomes readable by others
]


@pytest.mark.parametrize("command", REACHING)
def test_a_command_that_takes_in_git_or_the_store_by_glob_or_ancestor_is_held(command):
    """Promise: held are "a dot-glob that matches one (`rm -rf .[a-z]*`, `.*`...)". These reach them all the same."""
    from safepoint.core.command_reach import classify_with_reach

    assert "store_or_git" in classify_with_reach(command).side_effects


def test_a_recursive_chmod_of_the_workspace_leaves_the_store_private(workspace):
    """Promise: store files 0600 and folders 0700. After the command, the ledger (and the exact file versions
    it holds: the user's files, secrets included) is 0644 for the rest of the run and after it."""
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval_timeout_s=0.2) as run:  # the chmod is held: nobody answers
        run.call_result("write_file", {"path": ".env", "content": "KEY=the user's secret\n"}, call_id="c1")
        run.call_result("run_command", {"command": "chmod -R a+rX ."}, call_id="c2")
        run.call_result("write_file", {"path": "a.txt", "content": "more\n"}, call_id="c3")
    root = workspace / ".agent-runtime"
    loose = [
        (str(p.relative_to(root)), oct(stat.S_IMODE(p.stat().st_mode)))
        for p in [root, *root.rglob("*")]
        if stat.S_IMODE(p.stat().st_mode) & 0o077
    ]
    assert loose == []


def test_the_agent_cannot_blind_the_record_through_redact_toml(workspace):
    """A hostile model writes `patterns = ["[a-z]+\\\\.py"]` into `.safepoint/redact.toml` (write_file refuses the
    store and .git, not safepoint's own configuration). After the next resume (a crash, a restart, the daemon),
    what it does to any .py file is kept under `[REDACTED:user_0]`: `ledger` and `explain` no longer say what it
    touched, and rollback restores nothing (the test above)."""
    (workspace / "main.py").write_text("the user's code\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call_result(
            "write_file", {"path": ".safepoint/redact.toml", "content": 'patterns = ["[a-z]+\\\\.py"]\n'}, call_id="c1"
        )
    with tm.resume("r") as run:
        start = run.checkpoint()
        run.call_result("write_file", {"path": "main.py", "content": "the agent's code\n"}, call_id="c2")
    tm.rollback_files("r", start)
    assert (workspace / "main.py").read_text() == "the user's code\n"
