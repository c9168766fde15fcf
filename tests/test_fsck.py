"""`safepoint fsck [RUN] [--repair]` (issue 11 §5): every planted corruption is found, each in one line; what
--repair says it repairs is repaired, what it moves aside is kept in quarantine/ with a note, and the run goes on.

Each case damages a run killed right after a non-idempotent call ran (the worst moment: the call took effect and
nothing after it was written), as a bad sector, a careless hand or a sort would."""

from __future__ import annotations

import json
import os
import random
import shutil
import zlib

import pytest

from safepoint.errors import ExitCode
from safepoint.store.framing import frame
from safepoint.store.mend import one_bit_candidates
from tests.conftest import cli_env, safepoint_in_process
from tests.test_ledger_damage import APPEND, NOTIFY, RUN, _effects, _killed_run


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """One run killed after send_notification ran, copied for each test (a killed run costs a process)."""
    base = tmp_path_factory.mktemp("killed")
    _killed_run(base, NOTIFY)
    return base


@pytest.fixture
def run(killed, tmp_path):
    base = tmp_path / "run"
    shutil.copytree(killed, base)
    return base


def _dir(base):
    return base / "ws" / ".agent-runtime" / "runs" / RUN


def _fsck(base, *args):
    return safepoint_in_process("fsck", *args, "-w", base / "ws", env=_env(base))


def _env(base):
    return cli_env(SAFEPOINT_OUTBOX=str(base / "outbox.jsonl"))


def _resumes(base):
    """The run goes on, and its call that must not repeat did not."""
    done = safepoint_in_process("resume", RUN, "-w", base / "ws", env=_env(base))
    if done.returncode == ExitCode.WAITING_DECISION:
        done = safepoint_in_process("resume", RUN, "-w", base / "ws", "--skip", "call_2", env=_env(base))
    assert done.returncode == ExitCode.OK, done.stderr
    assert _effects(base, "send_notification") == 1


def _lines(base):
    return (_dir(base) / "ledger.jsonl").read_bytes().splitlines(keepends=True)


def _store_bytes(base):
    out = {}
    for dirpath, _, names in os.walk(_dir(base)):
        for name in names:
            if name not in ("lock", "control.lock"):
                out[os.path.join(dirpath, name)] = (open(os.path.join(dirpath, name), "rb")).read()  # noqa: SIM115
    return out


def _quarantined(base):
    folder = _dir(base) / "quarantine"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def test_a_clean_run_is_clean(run):
    done = _fsck(run, RUN)
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    assert done.stdout.strip().endswith("clean"), done.stdout
    every = _fsck(run)  # every run of the store
    assert every.returncode == ExitCode.OK, every.stdout


def test_a_duplicated_ledger_line_wedges_no_run(run):
    """The issue's example: one duplicated line made every resume refuse, --takeover too."""
    lines = _lines(run)
    at = len(lines) // 2
    (_dir(run) / "ledger.jsonl").write_bytes(b"".join([*lines[: at + 1], lines[at], *lines[at + 1 :]]))
    before = _store_bytes(run)
    found = _fsck(run, RUN)
    assert found.returncode == ExitCode.DAMAGED
    assert "a duplicated line" in found.stdout and "--repair" in found.stdout, found.stdout
    assert _store_bytes(run) == before  # without --repair nothing changes
    repaired = _fsck(run, RUN, "--repair")
    assert repaired.returncode == ExitCode.DAMAGED, repaired.stderr
    assert b"".join(_lines(run)) == b"".join(lines)  # exactly the log as it was written
    assert _fsck(run, RUN).returncode == ExitCode.OK  # and it stays repaired
    assert any(name.endswith("ledger.jsonl.note") for name in _quarantined(run))
    _resumes(run)


def test_every_duplicated_line_is_repaired(killed, tmp_path):
    lines = (_dir(killed) / "ledger.jsonl").read_bytes().splitlines(keepends=True)
    for at in range(len(lines)):
        base = tmp_path / f"d{at}"
        shutil.copytree(killed, base)
        (_dir(base) / "ledger.jsonl").write_bytes(b"".join([*lines[: at + 1], lines[at], *lines[at + 1 :]]))
        assert _fsck(base, RUN, "--repair").returncode == ExitCode.DAMAGED
        assert _lines(base) == lines, at


def test_a_reordered_log_is_put_back_in_order(run):
    """Records out of order anywhere (a sort by another key), not only two neighbours."""
    lines = _lines(run)
    shuffled = list(lines)
    random.Random(7).shuffle(shuffled)
    (_dir(run) / "ledger.jsonl").write_bytes(b"".join(shuffled))
    done = _fsck(run, RUN, "--repair")
    assert done.returncode == ExitCode.DAMAGED and "put back in sequence order" in done.stdout, done.stdout
    assert _lines(run) == lines
    _resumes(run)


def test_a_flipped_bit_in_any_record_is_mended(killed, tmp_path):
    lines = (_dir(killed) / "ledger.jsonl").read_bytes().splitlines(keepends=True)
    for at, line in enumerate(lines):
        base = tmp_path / f"f{at}"
        shutil.copytree(killed, base)
        flipped = bytearray(line)
        flipped[9 + (len(line) - 10) // 3] ^= 0x10
        (_dir(base) / "ledger.jsonl").write_bytes(b"".join([*lines[:at], bytes(flipped), *lines[at + 1 :]]))
        done = _fsck(base, RUN, "--repair")
        assert done.returncode == ExitCode.DAMAGED and "one flipped bit" in done.stdout, done.stdout
        assert _lines(base) == lines, at


def test_a_record_beyond_mending_is_quarantined_and_reported(run):
    lines = _lines(run)
    at = next(i for i, line in enumerate(lines) if b'"kind":"message"' in line)
    damaged = bytearray(lines[at])
    damaged[20] ^= 0xFF
    damaged[30] ^= 0xFF  # two bytes: beyond what a checksum can locate
    (_dir(run) / "ledger.jsonl").write_bytes(b"".join([*lines[:at], bytes(damaged), *lines[at + 1 :]]))
    done = _fsck(run, RUN, "--repair")
    assert done.returncode == ExitCode.DAMAGED
    assert "checksum does not match" in done.stdout and "quarantine" in done.stdout, done.stdout
    assert "missing" in done.stdout  # the hole it leaves is said, never filled in
    kept = [name for name in _quarantined(run) if name.endswith("ledger.jsonl")]
    assert any((_dir(run) / "quarantine" / name).read_bytes() == bytes(damaged).rstrip(b"\n") for name in kept)
    assert bytes(damaged) not in (_dir(run) / "ledger.jsonl").read_bytes()
    again = _fsck(run, RUN)
    assert "checksum" not in again.stdout, again.stdout  # what is left is the hole only


def test_a_torn_tail_is_reported(run):
    data = (_dir(run) / "ledger.jsonl").read_bytes()
    (_dir(run) / "ledger.jsonl").write_bytes(data[:-7])
    done = _fsck(run, RUN)
    assert done.returncode == ExitCode.DAMAGED and "has no end" in done.stdout, done.stdout


def test_a_damaged_owner_record_is_rebuilt_above_every_generation(run):
    from safepoint.api import open as open_safepoint
    from safepoint.errors import StaleGenerationError
    from safepoint.records import Claim, LogRecord

    owner = _dir(run) / "owner.json"
    old = json.loads(owner.read_bytes()[9:])
    raw = bytearray(owner.read_bytes())
    raw[len(raw) // 2] ^= 0x55
    owner.write_bytes(bytes(raw))
    done = _fsck(run, RUN, "--repair")
    assert done.returncode == ExitCode.DAMAGED and "owner.json" in done.stdout, done.stdout
    rebuilt = json.loads(owner.read_bytes()[9:])
    assert rebuilt["generation"] > old["generation"] and rebuilt["released"] is True
    assert (rebuilt["owner_id"], rebuilt["agent_id"], rebuilt["recovery_class"]) == (RUN, RUN, "root")
    assert zlib.crc32(owner.read_bytes()[9:-1]) == int(owner.read_bytes()[:8], 16)
    sp = open_safepoint(workspace=str(run / "ws"))
    try:  # the killed process's generation can no longer append
        stale = Claim(run_id=RUN, holder=old["holder"], generation=old["generation"])
        end = len(_lines(run))
        with pytest.raises(StaleGenerationError):
            sp.store.append(stale, [LogRecord(kind="event", body=b"{}", seq=end + 1, gen=old["generation"])])
    finally:
        sp.close()
    _resumes(run)


def test_a_missing_owner_record_is_no_problem(run):
    (_dir(run) / "owner.json").unlink()
    assert _fsck(run, RUN).returncode == ExitCode.OK


def test_a_checkpoint_index_out_of_step_is_rebuilt(run):
    index = _dir(run) / "checkpoints" / "index.jsonl"
    good = index.read_bytes()
    assert good
    index.write_bytes(frame(b'{"seq":3,"offset":12345}') + good[: len(good) // 2])
    done = _fsck(run, RUN, "--repair")
    assert done.returncode == ExitCode.DAMAGED and "index.jsonl" in done.stdout, done.stdout
    assert index.read_bytes() == good
    _resumes(run)


def test_damaged_terminal_events_control_restart_checkpoint_and_artifacts_are_quarantined(run):
    folder = _dir(run)
    (folder / "terminal_events.jsonl").write_bytes(b"00000000 {}\n")
    (folder / "control.jsonl").write_bytes(frame(b'1 {"x":1}') + b"deadbeef 2 nothing\n")
    restart = folder / "restart_checkpoint.json"
    restart.write_bytes(b"garbage")
    artifact = folder / "artifacts" / "out.txt.0123456789abcdef"
    artifact.write_bytes(b"not what the name says")
    done = _fsck(run, RUN, "--repair")
    assert done.returncode == ExitCode.DAMAGED, done.stdout
    for name in ("terminal_events.jsonl", "control.jsonl", "restart_checkpoint.json", "artifacts/out.txt"):
        assert name in done.stdout, (name, done.stdout)
    assert (folder / "control.jsonl").read_bytes() == frame(b'1 {"x":1}')
    assert (folder / "terminal_events.jsonl").read_bytes() == b""
    assert not restart.exists() and not artifact.exists()
    assert any(name.endswith("restart_checkpoint.json") for name in _quarantined(run))
    assert _fsck(run, RUN).returncode == ExitCode.OK


def test_repair_waits_for_no_live_owner(run):
    from safepoint.api import open as open_safepoint

    sp = open_safepoint(workspace=str(run / "ws"))
    try:
        sp.store.claim(RUN, "a live holder", takeover=True)
        lines = _lines(run)
        (_dir(run) / "ledger.jsonl").write_bytes(b"".join([*lines, lines[-1]]))
        done = _fsck(run, RUN, "--repair")
        assert done.returncode == ExitCode.LOCKED, done.stdout + done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert len(_lines(run)) == len(lines) + 1  # nothing changed under the live owner
    finally:
        sp.close()


def test_an_unknown_run_is_named(run):
    done = _fsck(run, "nope")
    assert done.returncode == ExitCode.NOT_FOUND and "nope" in done.stderr, done.stderr


def test_json_lists_each_problem(run):
    lines = _lines(run)
    (_dir(run) / "ledger.jsonl").write_bytes(b"".join([*lines, lines[-1]]))
    done = _fsck(run, RUN, "--json")
    assert done.returncode == ExitCode.DAMAGED
    data = json.loads(done.stdout)
    assert data["repaired"] is False and data["runs"] == [RUN]
    assert [(p["file"], p["problem"]) for p in data["problems"]] == [("ledger.jsonl", "a duplicated line")]


def test_a_command_run_killed_then_damaged_resumes_after_repair(tmp_path):
    """run_command's capture: a duplicated blob line and a flipped bit in another at once."""
    log = _killed_run(tmp_path, APPEND)
    lines = log.read_bytes().splitlines(keepends=True)
    blobs = [i for i, line in enumerate(lines) if b'"kind":"blob"' in line]
    flipped = bytearray(lines[blobs[-1]])
    flipped[len(flipped) // 2] ^= 0x04
    new = [*lines]
    new[blobs[-1]] = bytes(flipped)
    new.insert(blobs[0], lines[blobs[0]])
    log.write_bytes(b"".join(new))
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "outbox.jsonl"))
    assert safepoint_in_process("fsck", RUN, "-w", tmp_path / "ws", "--repair", env=env).returncode == 12
    assert log.read_bytes().splitlines(keepends=True) == lines
    done = safepoint_in_process("resume", RUN, "-w", tmp_path / "ws", env=env)
    if done.returncode == ExitCode.WAITING_DECISION:
        done = safepoint_in_process("resume", RUN, "-w", tmp_path / "ws", "--skip", "call_2", env=env)
    assert done.returncode == ExitCode.OK, done.stderr
    assert _effects(tmp_path, "run_command") == 1


@pytest.mark.parametrize("size", [1, 50, 3000, 40000])
def test_one_bit_candidates_find_every_single_flip(size):
    rng = random.Random(size)
    payload = bytes(rng.choice(b'abcdefghij{}:,"0123456789') for _ in range(size))
    line = frame(payload)[:-1]
    # Every bit at 24 places of small lines; at 40,000 bytes (one pass costs ~60 ms) the ends and a few places.
    spots = 20 if size <= 3000 else 2
    positions = sorted({0, 7, 9, len(line) - 1, *(rng.randrange(len(line)) for _ in range(spots))})
    for position in positions:
        for bit in range(8) if size <= 3000 else (0, 3, 7):
            damaged = bytearray(line)
            damaged[position] ^= 1 << bit
            assert payload in list(one_bit_candidates(bytes(damaged))), (position, bit)


def test_one_bit_candidates_refuse_a_line_that_is_not_framed():
    assert list(one_bit_candidates(b"not a framed line")) == []
    assert list(one_bit_candidates(b"")) == []


def test_a_postgres_store_is_checked_and_never_changed(pg_server):
    """The same references through the database's own reads (each row's checksum and seq): a damaged row is
    reported; --repair says in one line that it changes file stores only, and changes nothing."""
    import msgspec
    import psycopg

    from safepoint.api import Safepoint
    from safepoint.errors import ConfigError
    from safepoint.records import LogRecord
    from safepoint.store.postgres import PostgresStore
    from tests.conftest import database_names

    store = PostgresStore(pg_server.create_database(f"t{next(database_names)}"))
    try:
        store.create_run("r", b"{}")
        claim = store.claim("r", "me")
        body = [msgspec.Raw(msgspec.json.encode({"text": t})) for t in ("a", "bbbb", "c")]
        store.append(claim, [LogRecord(kind="event", body=b, seq=i + 1) for i, b in enumerate(body)])
        sp = Safepoint(store, os.getcwd())
        assert sp.fsck().clean
        with psycopg.connect(store.url, autocommit=True) as conn:
            (line,) = conn.execute("SELECT line FROM safepoint.log WHERE run_id = 'r' AND seq = 2").fetchone()
            conn.execute(
                "UPDATE safepoint.log SET line = %s WHERE run_id = 'r' AND seq = 2", (line.replace(b"bbbb", b"bxbb"),)
            )
        found = sp.fsck("r")
        assert [(p.where, p.problem.split(":")[0]) for p in found.problems] == [("seq 2", "corrupt"), ("seq 3", "gap")]
        with pytest.raises(ConfigError, match="repairs file stores only"):
            sp.fsck("r", repair=True)
        with psycopg.connect(store.url, autocommit=True) as conn:
            (after,) = conn.execute("SELECT line FROM safepoint.log WHERE run_id = 'r' AND seq = 2").fetchone()
        assert bytes(after) == line.replace(b"bbbb", b"bxbb")
    finally:
        store.close()


def test_a_store_wide_repair_leaves_a_live_run_alone(run):
    from safepoint.api import open as open_safepoint

    sp = open_safepoint(workspace=str(run / "ws"))
    try:
        sp.store.claim(RUN, "a live holder", takeover=True)
        lines = _lines(run)
        (_dir(run) / "ledger.jsonl").write_bytes(b"".join([*lines, lines[-1]]))
        done = _fsck(run, "--repair")
        assert done.returncode == ExitCode.DAMAGED and "a duplicated line" in done.stdout, done.stdout
        assert "->" not in done.stdout  # reported, not repaired
        assert len(_lines(run)) == len(lines) + 1
    finally:
        sp.close()
