"""fsck mends what one flipped bit broke, anywhere in a run's files: a log line, the newline between two lines (which
joins them), the log's last newline, the header, the owner record, the restart checkpoint, control and terminal
event lines. A mend gives back the very bytes that were written (checked here byte for byte), never a guess; and
nothing safepoint creates under the store is readable by others, whatever the umask."""

from __future__ import annotations

import os
import random
import stat

import pytest

import safepoint
from safepoint.store.framing import check_line, frame
from safepoint.store.fsck import _split, mend_whole
from tests.test_ledger_damage import NOTIFY, RUN, _killed_run


def _run(workspace):
    """A small run with every kind of line: file versions (blobs), commands, a checkpoint, a control post."""
    (workspace / "a.txt").write_text("the user's\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call_result("write_file", {"path": "a.txt", "content": "the agent's\n"}, call_id="c1")
        run.call_result("run_command", {"command": "echo made > b.txt"}, call_id="c2")
        run.checkpoint()
    tm.cancel("r")
    return tm, start, workspace / ".agent-runtime" / "runs" / "r"


def _flip(path, at, bit):
    data = bytearray(path.read_bytes())
    data[at] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_every_newline_and_a_sample_of_bytes_of_the_log_are_mended_exactly(workspace):
    tm, _, folder = _run(workspace)
    log = folder / "ledger.jsonl"
    original = log.read_bytes()
    newlines = [i for i, byte in enumerate(original) if byte == 0x0A]
    rng = random.Random(11)
    spots = [(at, bit) for at in newlines for bit in range(8)]  # the last newline included
    spots += [(rng.randrange(len(original)), rng.randrange(8)) for _ in range(60)]
    for at, bit in spots:
        log.write_bytes(original)
        _flip(log, at, bit)
        result = tm.fsck("r", repair=True)
        assert result.problems, (at, bit)
        assert all(p.repair for p in result.problems), (at, bit, result.problems)
        assert log.read_bytes() == original, (at, bit, result.problems)


@pytest.mark.parametrize("name", ["run.json", "owner.json", "control.jsonl", "terminal_events.jsonl"])
def test_one_flipped_bit_in_a_whole_file_record_is_mended_exactly(workspace, name):
    tm, start, folder = _run(workspace)
    path = folder / name
    original = path.read_bytes()
    rng = random.Random(name)
    spots = [(len(original) - 1, bit) for bit in range(8)]  # its newline
    spots += [(8, 0), (3, 1)]  # the separator, a checksum digit
    spots += [(rng.randrange(9, len(original) - 1), rng.randrange(8)) for _ in range(12)]
    for at, bit in spots:
        path.write_bytes(original)
        _flip(path, at, bit)
        result = tm.fsck("r", repair=True)
        assert result.problems and all(p.repair for p in result.problems), (at, bit, result.problems)
        if name == "owner.json":  # written again from the mended record: the same owner, not a rebuilt one
            assert check_line(path.read_bytes().rstrip(b"\n")) == check_line(original.rstrip(b"\n"))
        else:
            assert path.read_bytes() == original, (at, bit)
    assert tm.fsck("r").clean
    tm.rollback_files("r", start)  # the run is usable: its file versions are within reach
    assert (workspace / "a.txt").read_text() == "the user's\n"


def test_a_header_beyond_one_bit_is_said_and_never_called_handled(workspace):
    tm, _, folder = _run(workspace)
    header = folder / "run.json"
    data = bytearray(header.read_bytes())
    for at in (20, 40, 60):
        data[at] ^= 0x11
    header.write_bytes(bytes(data))
    result = tm.fsck("r", repair=True)
    problem = next(p for p in result.problems if p.file == "run.json")
    assert problem.repair == "" and "restore run.json from a backup" in problem.problem
    assert header.read_bytes() == bytes(data)  # left as it was: nothing guessed


def test_a_restart_checkpoint_hit_by_one_bit_is_mended(tmp_path):
    _killed_run(tmp_path, NOTIFY)  # killed in its agent loop: its restart checkpoint is at rest
    path = tmp_path / "ws" / ".agent-runtime" / "runs" / RUN / "restart_checkpoint.json"
    original = path.read_bytes()
    for at, bit in ((len(original) // 2, 3), (len(original) - 1, 0), (8, 5)):
        path.write_bytes(original)
        _flip(path, at, bit)
        result = safepoint.open(workspace=str(tmp_path / "ws")).fsck(RUN, repair=True)
        assert [(p.file, p.repair) for p in result.problems] == [("restart_checkpoint.json", "mended; checked")]
        assert path.read_bytes() == original


def test_joined_lines_are_split_only_where_every_part_checks_out():
    lines = [frame(b'{"n":%d}' % n) for n in range(5)]
    joined = b"".join(line[:-1] + b"\x0b" for line in lines[:-1]) + lines[-1][:-1]
    assert _split(joined, lambda payload: True) == [b'{"n":%d}' % n for n in range(5)]
    # a frame-looking run of text inside a payload is no place to split
    tricky = frame(b'{"t":"x\\u000b0123abcd y"}')[:-1] + b"\x0b" + lines[0][:-1]
    assert _split(tricky, lambda payload: True) == [b'{"t":"x\\u000b0123abcd y"}', b'{"n":0}']
    assert _split(lines[0][:-1] + b"\x0bgarbage", lambda payload: True) is None
    assert mend_whole(b"00000000 {}\n", lambda payload: True) is None  # two bits off: not mended


def test_nothing_under_the_store_is_readable_by_others_whatever_the_umask(workspace):
    old = os.umask(0)
    try:
        tm, start, folder = _run(workspace)
        (workspace / "a.txt").write_text("the user's again\n")
        tm.rollback_files("r", start)  # a conflict: the user changed a.txt after the agent
        tm.fsck(repair=True)
        data = bytearray((folder / "ledger.jsonl").read_bytes())
        data[30] ^= 0x01
        (folder / "ledger.jsonl").write_bytes(bytes(data))
        tm.fsck(repair=True)  # quarantine/ made
    finally:
        os.umask(old)
    store = workspace / ".agent-runtime"
    loose = []
    for root, dirs, files in os.walk(store):
        for name in dirs:
            mode = stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode)
            if mode != 0o700:
                loose.append((os.path.join(root, name), oct(mode)))
        for name in files:
            path = os.path.join(root, name)
            if name == "ledger.jsonl" and os.path.dirname(path) == str(folder):
                continue  # written back by the test itself
            mode = stat.S_IMODE(os.stat(path).st_mode)
            if mode != 0o600:
                loose.append((path, oct(mode)))
    assert not loose
    assert (folder / "quarantine").is_dir()
