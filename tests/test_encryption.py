"""Encryption at rest on the file store (issue 11 §3): the conformance suite on the sealed store; a whole run with a
crash, a resume and a rollback whose store holds no byte of what it was told; a wrong, missing or unneeded key, a
tampered record, a record moved between runs or swapped between two places: each one line with its exit code."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import safepoint
from safepoint.errors import CorruptRecordError, ExitCode, StoreKeyError, TamperedRecordError
from safepoint.records import LogRecord
from safepoint.store.conformance import CONFORMANCE_CHECKS, check_id, restart_checkpoint, terminal_event, validate
from safepoint.store.crypt import StoreKey, load_key, parse_key
from safepoint.store.file_store import FileStore
from safepoint.store.sealed import SealedStore
from safepoint.store.url import open_store

from .conftest import cli_env, safepoint_in_process

KEY = "a1" * 32  # hex
OTHER = base64.b64encode(bytes(range(32))).decode()  # base64
PLANTED = {
    "task": "PLANTED-TASK-5d1c",
    "text": "PLANTED-MODEL-TEXT-8e2f",
    "file": "PLANTED-FILE-CONTENT-3b9a",
    "second": "PLANTED-SECOND-VERSION-77c0",
    "output": "PLANTED-COMMAND-OUTPUT-e4d1",
    "message": "PLANTED-NOTIFICATION-0a6b",
}


def key(text: str = KEY) -> StoreKey:
    return parse_key(text.encode(), "a test")


@pytest.fixture
def make_store(tmp_path):
    def make(existing=None):
        if existing is not None:
            return SealedStore(FileStore(existing.inner.root), key())
        return SealedStore(FileStore(str(tmp_path / f"store{len(os.listdir(tmp_path))}")), key())

    return make


@pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=check_id)
def test_conformance_of_the_encrypted_file_store(check, make_store):
    check(make_store)


def test_validate_passes_every_part_of_the_encrypted_file_store(make_store):
    report = validate(make_store, name="encrypted files")
    assert report.passed_all(), report.render()


# a whole run -----------------------------------------------------------------------------------------------------
def scenario() -> dict[str, object]:
    return {
        "task": f"write the notes {PLANTED['task']}",
        "model": "scripted-v1",
        "turns": [
            {
                "text": PLANTED["text"],
                "tool_calls": [
                    {"tool": "write_file", "args": {"path": "notes.txt", "content": PLANTED["file"] + "\n"}}
                ],
            },
            {"tool_calls": [{"tool": "run_command", "args": {"command": f"echo {PLANTED['output']}"}}]},
            {"tool_calls": [{"tool": "send_notification", "args": {"to": "#dev", "message": PLANTED["message"]}}]},
            {"tool_calls": [{"tool": "write_file", "args": {"path": "notes.txt", "content": PLANTED["second"]}}]},
            {"text": "done"},
        ],
    }


def forms(text: str) -> list[bytes]:
    """``text`` as it could sit in a store unencrypted: itself, hex (a bytea), and base64 at each alignment."""
    raw = text.encode()
    found = [raw, raw.hex().encode()]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw)[4 if shift else 0 :]
        found.append(encoded[: len(encoded) - 4])  # the middle: free of padding and of the leading zeros
    return found


def store_bytes(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file())


def crashed_then_resumed(tmp_path: Path, store: list[str], env: dict[str, str]) -> Path:
    """The scenario run in a real process killed right after its notification was sent, then resumed to its end
    and rolled back to its first checkpoint after the first write; the workspace."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "s.json").write_text(json.dumps(scenario()))
    outbox = tmp_path / "outbox.jsonl"
    env = {**env, "SAFEPOINT_OUTBOX": str(outbox), "PLANTED_API_TOKEN": "tok-" + PLANTED["task"]}
    killed = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", tmp_path / "s.json", "-w", workspace, "--run-id", "r", *store],
        env={**env, "SAFEPOINT_FAILPOINT": "after_tool:send_notification"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr
    assert len(outbox.read_text().splitlines()) == 1
    resumed = safepoint_in_process("resume", "r", "-w", workspace, *store, "--json", env=env)
    assert resumed.returncode == ExitCode.OK, resumed.stderr
    assert len(outbox.read_text().splitlines()) == 1  # sent once, not again after the crash
    assert (workspace / "notes.txt").read_text() == PLANTED["second"]
    ledger = json.loads(safepoint_in_process("ledger", "r", "-w", workspace, *store, "--json", env=env).stdout)
    assert [row["tool_name"] for row in ledger] == ["write_file", "run_command", "send_notification", "write_file"]
    assert all(row["status"] != "started" for row in ledger), ledger
    history = safepoint_in_process("history", "r", "-w", workspace, *store, "--json", env=env)
    assert PLANTED["text"] in history.stdout and PLANTED["output"] in history.stdout  # read back through the key
    points = json.loads(safepoint_in_process("checkpoints", "r", "-w", workspace, *store, "--json", env=env).stdout)
    after_first = next(p["checkpoint_id"] for p in points if (p["step"], p["kind"]) == (1, "after_step"))
    rolled = safepoint_in_process("rollback", "r", "--to", after_first, "-w", workspace, *store, env=env)
    assert rolled.returncode == ExitCode.OK, rolled.stderr
    assert (workspace / "notes.txt").read_text() == PLANTED["file"] + "\n"  # the first version, from the store
    return workspace


def test_a_run_crashed_resumed_and_rolled_back_leaves_no_byte_of_what_it_was_told(tmp_path):
    workspace = crashed_then_resumed(tmp_path, [], cli_env(SAFEPOINT_KEY=KEY))
    stored = store_bytes(workspace / ".agent-runtime")
    assert b'"kind":"blob"' in stored and b"sp1:" in stored  # the records are there, sealed
    for name, text in PLANTED.items():
        for form in forms(text):
            assert form not in stored, f"{name} ({form!r}) is in the store"
    assert KEY.encode() not in stored and bytes.fromhex(KEY) not in stored
    marker = json.loads((workspace / ".agent-runtime" / "encryption.json").read_text().split(" ", 1)[1])
    assert marker == {"cipher": "AES-256-GCM", "key_id": key().key_id, "format": 1}


def test_the_same_run_unencrypted_does_show_them(tmp_path):
    """The check above can fail: without a key the store holds the file versions and the model's text."""
    workspace = crashed_then_resumed(tmp_path, [], cli_env())
    stored = store_bytes(workspace / ".agent-runtime")
    assert PLANTED["text"].encode() in stored
    assert any(form in stored for form in forms(PLANTED["file"]))


# the key, wrong or missing or not wanted -------------------------------------------------------------------------
@pytest.fixture
def encrypted(tmp_path) -> Path:
    """A workspace whose encrypted store holds two finished runs, ``a`` and ``b``."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": [
        {"tool_calls": [{"tool": "write_file", "args": {"path": "f.txt", "content": "x\n"}}]},
        {"tool_calls": [{"tool": "run_command", "args": {"command": "echo hello"}}]},
        {"text": "done"},
    ]}))  # fmt: skip
    for run_id in ("a", "b"):
        done = safepoint_in_process("run", tmp_path / "s.json", "-w", workspace, "--run-id", run_id, env=with_key())
        assert done.returncode == ExitCode.OK, done.stderr
    return workspace


def with_key(text: str | None = KEY, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in cli_env().items() if k not in ("SAFEPOINT_KEY", "SAFEPOINT_KEY_FILE")}
    env.update(extra)
    return env if text is None else {**env, "SAFEPOINT_KEY": text}


def one_line(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr
    for secret in (KEY, OTHER, bytes.fromhex(KEY).hex().upper()):
        assert secret not in done.stderr + done.stdout
    return done.stderr


def test_a_missing_key_is_one_line_naming_the_key_id(encrypted):
    done = safepoint_in_process("ledger", "a", "-w", encrypted, env=with_key(None))
    one_line(done, ExitCode.USAGE, "is encrypted", key().key_id, "--key-file")
    status = safepoint_in_process("status", "-w", encrypted, "--json", env=with_key(None))
    one_line(status, ExitCode.USAGE, "is encrypted")
    error = json.loads(status.stdout)  # under --json the error is a JSON object as well, never the key
    assert error["exit_code"] == ExitCode.USAGE and "is encrypted" in error["error"] and KEY not in status.stdout


def test_a_wrong_key_is_recognised_before_any_record_is_read(encrypted, monkeypatch):
    read = []
    monkeypatch.setattr(FileStore, "read_log", lambda self, run_id: read.append(run_id))
    done = safepoint_in_process("ledger", "a", "-w", encrypted, env=with_key(OTHER))
    one_line(done, ExitCode.USAGE, "another key", key().key_id, key(OTHER).key_id, "SAFEPOINT_KEY")
    assert read == []
    checked = safepoint_in_process("fsck", "-w", encrypted, env=with_key(OTHER))
    one_line(checked, ExitCode.USAGE, "another key")
    with pytest.raises(StoreKeyError, match="another key"):
        safepoint.open(workspace=str(encrypted), key=OTHER).status()


def test_a_key_for_a_store_that_is_not_encrypted_says_so_and_encrypts_nothing(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": [{"text": "done"}]}))
    plain = safepoint_in_process("run", tmp_path / "s.json", "-w", workspace, "--run-id", "p", env=with_key(None))
    assert plain.returncode == ExitCode.OK, plain.stderr
    before = store_bytes(workspace / ".agent-runtime")
    for args in (("status",), ("run", tmp_path / "s.json", "--run-id", "q"), ("resume", "p")):
        done = safepoint_in_process(*args, "-w", workspace, env=with_key())
        one_line(done, ExitCode.USAGE, "is not encrypted", "SAFEPOINT_KEY")
    checked = safepoint_in_process("fsck", "-w", workspace, env=with_key())
    one_line(checked, ExitCode.USAGE, "is not encrypted")  # not every record "failing authentication"
    assert not (workspace / ".agent-runtime" / "encryption.json").exists()
    assert store_bytes(workspace / ".agent-runtime") == before
    assert safepoint_in_process("ledger", "p", "-w", workspace, env=with_key(None)).returncode == ExitCode.OK


def test_a_key_file_opens_the_store_by_option_and_by_variable(encrypted, tmp_path):
    hex_file, raw_file, b64_file = tmp_path / "k.hex", tmp_path / "k.raw", tmp_path / "k.b64"
    hex_file.write_text(KEY + "\n")
    raw_file.write_bytes(bytes.fromhex(KEY))
    b64_file.write_text(base64.b64encode(bytes.fromhex(KEY)).decode())
    for path in (hex_file, raw_file, b64_file):
        done = safepoint_in_process("ledger", "a", "-w", encrypted, "--key-file", path, "--json", env=with_key(None))
        assert done.returncode == ExitCode.OK, done.stderr
        by_env = safepoint_in_process("ledger", "a", "-w", encrypted, env=with_key(None, SAFEPOINT_KEY_FILE=str(path)))
        assert by_env.returncode == ExitCode.OK, by_env.stderr
    wrong = tmp_path / "wrong"
    wrong.write_text("not a key at all")
    done = safepoint_in_process("ledger", "a", "-w", encrypted, "--key-file", wrong, env=with_key(None))
    one_line(done, ExitCode.USAGE, f"key file {wrong}", "64 hex digits")
    assert "not a key at all" not in done.stderr
    gone = safepoint_in_process("ledger", "a", "-w", encrypted, "--key-file", tmp_path / "nope", env=with_key(None))
    one_line(gone, ExitCode.USAGE, "cannot read key file")
    both = safepoint_in_process("ledger", "a", "-w", encrypted, env=with_key(KEY, SAFEPOINT_KEY_FILE=str(hex_file)))
    one_line(both, ExitCode.USAGE, "both SAFEPOINT_KEY_FILE and SAFEPOINT_KEY")


def test_the_key_is_never_shown(tmp_path):
    assert KEY not in repr(key()) and KEY not in str(key())
    for bad in ("zz" * 32, "a1" * 31, base64.b64encode(b"x" * 31).decode()):
        with pytest.raises(StoreKeyError) as info:
            load_key(environ={"SAFEPOINT_KEY": bad})
        assert bad not in str(info.value) and "SAFEPOINT_KEY" in str(info.value)
    assert load_key(environ={}) is None
    assert load_key(environ={"SAFEPOINT_KEY": OTHER}).key_id == key(OTHER).key_id


# tampered, moved, swapped ----------------------------------------------------------------------------------------
def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def reframed(line: bytes, change) -> bytes:
    """``line`` with its record changed by ``change`` and its checksum made right again: damage that only
    authentication can see."""
    payload = change(line.rstrip(b"\n")[9:])
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def body_of(line: bytes) -> bytes:
    return json.loads(line[9:])["body"].encode()


def with_body(body: bytes):
    def change(payload: bytes) -> bytes:
        record = json.loads(payload)
        record["body"] = body.decode()
        return json.dumps(record, separators=(",", ":")).encode()

    return change


def test_a_tampered_log_record_is_reported_never_loaded_and_fsck_quarantines_it(encrypted):
    log = encrypted / ".agent-runtime" / "runs" / "a" / "ledger.jsonl"
    lines = lines_of(log)
    at = next(i for i, line in enumerate(lines) if b'"kind":"message"' in line)
    body = body_of(lines[at])
    flipped = body[:-6] + (b"A" if body[-6:-5] != b"A" else b"B") + body[-5:]
    lines[at] = reframed(lines[at], with_body(flipped))
    log.write_bytes(b"".join(lines))
    explained = json.loads(safepoint_in_process("explain", "a", "-w", encrypted, "--json", env=with_key()).stdout)
    assert any("fails authentication" in p["detail"] for p in explained["problems"]), explained["problems"]
    keyless = safepoint_in_process("fsck", "a", "-w", encrypted, env=with_key(None))
    assert keyless.returncode == ExitCode.OK, keyless.stdout  # every checksum holds: only the key sees the change
    found = safepoint_in_process("fsck", "a", "-w", encrypted, env=with_key())
    assert found.returncode == ExitCode.DAMAGED and "fails authentication" in found.stdout, found.stdout
    repaired = safepoint_in_process("fsck", "a", "--repair", "-w", encrypted, env=with_key())
    assert repaired.returncode == ExitCode.DAMAGED, repaired.stdout
    assert lines[at] not in log.read_bytes()
    quarantine = encrypted / ".agent-runtime" / "runs" / "a" / "quarantine"
    assert any(lines[at].rstrip(b"\n") in p.read_bytes() for p in quarantine.iterdir())
    again = safepoint_in_process("fsck", "a", "-w", encrypted, env=with_key())
    assert again.returncode == ExitCode.OK and "fails authentication" not in again.stdout, again.stdout


def test_a_header_moved_from_another_run_is_one_line_naming_the_run(encrypted):
    runs = encrypted / ".agent-runtime" / "runs"
    (runs / "b" / "run.json").write_bytes((runs / "a" / "run.json").read_bytes())
    done = safepoint_in_process("ledger", "b", "-w", encrypted, env=with_key())
    one_line(done, ExitCode.FAILED, "header of run 'b'", "fails authentication")
    with pytest.raises(TamperedRecordError):
        open_store(str(encrypted / ".agent-runtime"), key()).run_header("b")
    assert issubclass(TamperedRecordError, CorruptRecordError)
    found = safepoint_in_process("fsck", "b", "-w", encrypted, env=with_key())
    assert found.returncode == ExitCode.DAMAGED and "run.json" in found.stdout, found.stdout


def test_a_log_record_moved_from_another_run_at_the_same_seq_fails(encrypted):
    runs = encrypted / ".agent-runtime" / "runs"
    a, b = lines_of(runs / "a" / "ledger.jsonl"), lines_of(runs / "b" / "ledger.jsonl")
    at = next(i for i, line in enumerate(a) if b'"kind":"message"' in line)
    assert a[at] != b[at] and a[at][9:].split(b'"body"')[0] == b[at][9:].split(b'"body"')[0]
    b[at] = a[at]  # a whole, well-framed line of run a, at the same seq in run b
    (runs / "b" / "ledger.jsonl").write_bytes(b"".join(b))
    read = open_store(str(encrypted / ".agent-runtime"), key()).read_log("b")
    seq = json.loads(a[at][9:])["seq"]
    assert seq not in [r.seq for r in read.records]
    assert [p.kind for p in read.problems if p.position == seq] == ["corrupt"], read.problems
    found = safepoint_in_process("fsck", "b", "-w", encrypted, env=with_key())
    assert found.returncode == ExitCode.DAMAGED and "fails authentication" in found.stdout, found.stdout


def test_two_records_swapped_between_their_seqs_both_fail(encrypted):
    log = encrypted / ".agent-runtime" / "runs" / "a" / "ledger.jsonl"
    lines = lines_of(log)
    first, second = [i for i, line in enumerate(lines) if b'"kind":"message"' in line][:2]
    one, two = body_of(lines[first]), body_of(lines[second])
    lines[first], lines[second] = reframed(lines[first], with_body(two)), reframed(lines[second], with_body(one))
    log.write_bytes(b"".join(lines))
    read = open_store(str(encrypted / ".agent-runtime"), key()).read_log("a")
    bad = {p.position for p in read.problems if "fails authentication" in p.detail}
    assert bad == {json.loads(lines[first][9:])["seq"], json.loads(lines[second][9:])["seq"]}
    explained = safepoint_in_process("explain", "a", "-w", encrypted, "--json", env=with_key())
    assert "Traceback" not in explained.stderr and "fails authentication" in explained.stdout
    found = safepoint_in_process("fsck", "a", "-w", encrypted, env=with_key())
    assert found.returncode == ExitCode.DAMAGED, found.stdout
    said = [line for line in found.stdout.splitlines() if "fails authentication" in line]
    assert len(said) == 2 and all(line.startswith("run a: ledger.jsonl") for line in said), found.stdout
    for seq in bad:
        assert any(f"seq {seq} " in line for line in said), found.stdout
    resumed = safepoint_in_process("resume", "a", "-w", encrypted, env=with_key())
    assert "Traceback" not in resumed.stderr and resumed.stderr.count("\n") <= 1, resumed.stderr


def test_every_other_sealed_part_refuses_what_was_moved_or_changed(tmp_path):
    store = open_store(str(tmp_path / "store"), key())
    for run_id in ("a", "b"):
        store.create_run(run_id, b'{"run":"%s"}' % run_id.encode())
        claim = store.claim(run_id, "me")
        store.append(claim, [LogRecord(kind="event", body=msgspec.Raw(b'{"n":1}'), seq=1)])
        store.upsert_restart_checkpoint(claim, restart_checkpoint(run_id))
        store.record_terminal_event(claim, terminal_event(claim, store, payload='{"why":"secret-reason"}'))
        store.post_control(run_id, b'{"kind":"cancel"}')
        store.put_artifact(claim, "out", b"artifact " + run_id.encode())
        store.trace(run_id, [b'{"event":"x"}'])
    store.put_schedule("job", b'{"cron":"* * * * *"}')
    root = tmp_path / "store" / "runs"
    # the restart checkpoint of a in b's place: not intact (recovery reports it, nothing loads it)
    (root / "b" / "restart_checkpoint.json").write_bytes((root / "a" / "restart_checkpoint.json").read_bytes())
    stored = store.read_restart_checkpoint("b")
    assert stored is not None and not stored.intact and "fails authentication" in stored.detail
    assert store.read_restart_checkpoint("a").intact
    # terminal events, control lines, artifacts: a's in b's place
    (root / "b" / "terminal_events.jsonl").write_bytes((root / "a" / "terminal_events.jsonl").read_bytes())
    with pytest.raises(TamperedRecordError, match="terminal event"):
        store.terminal_events("b")
    (root / "b" / "control.jsonl").write_bytes((root / "a" / "control.jsonl").read_bytes())
    assert store.read_control("b") == [] and store.read_control("a") == [(1, b'{"kind":"cancel"}')]
    [name_a] = os.listdir(root / "a" / "artifacts")
    [name_b] = os.listdir(root / "b" / "artifacts")
    (root / "b" / "artifacts" / name_b).unlink()
    os.link(root / "a" / "artifacts" / name_a, root / "b" / "artifacts" / name_a)
    ref = (
        f"artifact:{name_a}:sha256:"
        + __import__("hashlib").sha256((root / "a" / "artifacts" / name_a).read_bytes()).hexdigest()
    )
    assert store.get_artifact("a", ref) == b"artifact a"
    with pytest.raises(TamperedRecordError, match="artifact"):
        store.get_artifact("b", ref)
    (root / "b" / "trace.jsonl").write_bytes((root / "a" / "trace.jsonl").read_bytes())
    assert list(store.read_trace("b")) == [] and list(store.read_trace("a")) == [b'{"event":"x"}']
    schedule = tmp_path / "store" / "schedules" / "job.json"
    os.rename(schedule, schedule.with_name("other.json"))
    with pytest.raises(TamperedRecordError, match="schedule 'other'"):
        store.list_schedules()
    # with the key, fsck finds each of them in b, and nothing in a
    result = safepoint.open(str(tmp_path / "store"), workspace=str(tmp_path), key=KEY).fsck()
    files = {(p.run_id, p.file.split("/")[0]) for p in result.problems}
    assert files == {("b", "restart_checkpoint.json"), ("b", "terminal_events.jsonl"), ("b", "control.jsonl"),
                     ("b", "artifacts")}, result.problems  # fmt: skip


# the key's path: never to a command, never on a worker's command line ---------------------------------------------
def test_commands_never_get_the_key_even_when_passed_by_name(tmp_path, workspace):
    key_file = tmp_path / "store.key"
    key_file.write_text(KEY)
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": [
        {"tool_calls": [{"tool": "run_command", "args": {"command": "env > env.out; cat env.out"}}]},
        {"text": "done"},
    ]}))  # fmt: skip
    env = with_key(None, SAFEPOINT_KEY_FILE=str(key_file))
    done = safepoint_in_process(
        "run", tmp_path / "s.json", "-w", workspace, "--run-id", "r",
        "--pass-env", "SAFEPOINT_KEY_FILE", "--pass-env", "SAFEPOINT_KEY", env=env,
    )  # fmt: skip
    assert done.returncode == ExitCode.OK, done.stderr
    seen = (workspace / "env.out").read_text()
    assert "SAFEPOINT_KEY" not in seen and KEY not in seen and str(key_file) not in seen
    inline = safepoint_in_process("run", tmp_path / "s.json", "-w", workspace, "--run-id", "s", env=with_key())
    assert inline.returncode == ExitCode.OK, inline.stderr
    assert "SAFEPOINT_KEY" not in (workspace / "env.out").read_text() and KEY not in (workspace / "env.out").read_text()


def test_the_daemon_passes_its_key_to_workers_by_its_pipe_only(tmp_path, workspace, monkeypatch):
    from safepoint.supervisor import daemon as daemon_module

    key_file = tmp_path / "store.key"
    key_file.write_text(KEY)
    sp = safepoint.open(workspace=str(workspace), key_file=str(key_file))
    started: list[tuple[list[str], dict[str, str]]] = []

    class Started:
        pid = 1

        def __init__(self, command, **options):
            started.append((command, options["env"]))

    sent: list[dict[str, str]] = []

    def send(fd, secret):
        sent.append(dict(secret))
        os.close(fd)

    monkeypatch.setattr(daemon_module.subprocess, "Popen", Started)
    monkeypatch.setattr(daemon_module.handoff, "send", send)
    monkeypatch.setenv("SAFEPOINT_KEY_FILE", str(key_file))
    worker = daemon_module.Daemon(sp.store, daemon_module.DaemonOptions(workspace=str(workspace)), lambda _: None)
    worker.start_worker("r", "resume", "test", ["resume", "r"], str(workspace), ())
    [(command, env)] = started
    assert not [part for part in command if KEY in part or "--key-file" in part or str(key_file) in part], command
    # neither its command line nor its environment (what ps and /proc show): the pipe (supervisor/handoff.py)
    assert "SAFEPOINT_KEY" not in env and "SAFEPOINT_KEY_FILE" not in env
    assert [secret["SAFEPOINT_KEY"] for secret in sent] == [KEY]
    sp.close()


def test_a_daemon_given_a_key_file_resumes_an_encrypted_run(tmp_path, workspace):
    key_file = tmp_path / "store.key"
    key_file.write_text(KEY)
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": [
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "one\n"}}]},
        {"tool_calls": [{"tool": "run_command", "args": {"command": "env > env.out"}}]},
        {"text": "done"},
    ]}))  # fmt: skip
    crash = with_key(None, SAFEPOINT_KEY_FILE=str(key_file), SAFEPOINT_FAILPOINT="after_outcome:write_file")
    crashed = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", tmp_path / "s.json", "-w", workspace, "--run-id", "r"],
        env=crash, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert crashed.returncode == -9, crashed.stderr
    daemon = subprocess.run(
        [sys.executable, "-m", "safepoint", "daemon", "--once", "--json", "-w", workspace, "--key-file", key_file],
        env=with_key(None), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert daemon.returncode == 0, daemon.stderr
    events = [json.loads(line) for line in daemon.stdout.splitlines() if line.strip()]
    assert any(e["event"] == "worker_exited" and e.get("status") == "completed" for e in events), events
    assert KEY not in daemon.stdout + daemon.stderr
    seen = (workspace / "env.out").read_text()
    assert "SAFEPOINT_KEY" not in seen and KEY not in seen


def test_a_lost_encryption_record_is_said_and_the_right_key_records_it_again(encrypted):
    record = encrypted / ".agent-runtime" / "encryption.json"
    kept = record.read_bytes()
    record.unlink()  # a command deleted it, or a backup left it out
    for args in (("status",), ("ledger", "a")):
        done = safepoint_in_process(*args, "-w", encrypted, env=with_key(None))
        one_line(done, ExitCode.USAGE, "encryption record is missing", "SAFEPOINT_KEY")
    wrong = safepoint_in_process("ledger", "a", "-w", encrypted, env=with_key(OTHER))
    one_line(wrong, ExitCode.USAGE, "encryption record is missing", "SAFEPOINT_KEY does not open them")
    assert not record.exists()
    done = safepoint_in_process("ledger", "a", "-w", encrypted, "--json", env=with_key())
    assert done.returncode == ExitCode.OK, done.stderr
    assert record.read_bytes() == kept


# the cipher alone --------------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=600), run=st.text("abc", min_size=1, max_size=3), seq=st.integers(1, 9), at=st.data())
def test_sealing_round_trips_and_any_change_or_other_place_fails(data, run, seq, at):
    from safepoint.store.crypt import Cipher, place

    cipher = Cipher(key())
    where = place(run, "log", "message", seq)
    sealed = cipher.seal(data, where)
    assert sealed.startswith(b"sp1:") and b"\n" not in sealed
    assert cipher.open(sealed, where) == data
    assert cipher.open(sealed, place(run, "log", "message", seq + 1)) is None
    assert cipher.open(sealed, place(run + "x", "log", "message", seq)) is None
    assert Cipher(key(OTHER)).open(sealed, where) is None
    raw = bytearray(base64.b64decode(sealed[4:]))
    i = at.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= 1 << at.draw(st.integers(0, 7))
    assert cipher.open(b"sp1:" + base64.b64encode(bytes(raw)), where) is None
    assert cipher.seal(data, where) != sealed  # a fresh nonce each time
    assert cipher.seal(data, where, deterministic=True) == cipher.seal(data, where, deterministic=True)


def test_a_keyless_and_a_keyed_process_making_one_store_never_leave_it_half_encrypted(tmp_path):
    # the keyless one's run came first: the keyed one's record is taken back, and it is refused
    first = FileStore(str(tmp_path / "one"))
    first.create_run("plain", b'{"run":"plain"}')
    first.record_encryption(b'{"cipher":"AES-256-GCM","key_id":"x","format":1}')  # as if it had looked too early
    assert first.encryption_record() is None
    with pytest.raises(StoreKeyError, match="not encrypted"):
        open_store(str(tmp_path / "one"), key()).create_run("sealed", b"{}")
    # the keyed one's record came first: the keyless one's run is taken back, and it is refused
    keyless = FileStore(str(tmp_path / "two"))  # opened while the store was empty
    open_store(str(tmp_path / "two"), key()).create_run("sealed", b'{"run":"sealed"}')
    with pytest.raises(StoreKeyError, match="is encrypted"):
        keyless.create_run("plain", b'{"run":"plain"}')
    assert sorted(os.listdir(tmp_path / "two" / "runs")) == ["sealed"]
