"""workspace.files: paths no filesystem takes and files that are not files fail the tool's call, never the run; a
FIFO is never opened for a blocking read."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safepoint.errors import ToolFailure
from safepoint.workspace.files import Workspace, read_state
from safepoint.workspace.names import quote_name, quote_path, real_path


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(str(root))


def _finishes(fn, *args):
    """Run ``fn`` in a thread and give back what it returned or raised; fails if it is still blocked after 20 s
    (a hang guard, not a speed check)."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), f"{fn.__name__} blocked"
    return box


@pytest.mark.parametrize(
    "path",
    [
        "a" * 256,
        "dir/" + "b" * 300 + "/file.txt",
        "é" * 128 + ".txt",  # 256 bytes in UTF-8, 129 characters
        "x/" * 2100,
    ],
)
def test_a_name_no_filesystem_takes_is_the_tools_failure(ws, path):
    for method in (ws.resolve, ws.locate, ws.snapshot, ws.read):
        with pytest.raises(ToolFailure, match="bytes, over the"):
            method(path)
    with pytest.raises(ToolFailure, match="bytes, over the"):
        ws.write(path, b"x")


def test_the_longest_allowed_name_still_works(ws):
    name = "n" * 255
    ws.write(name, b"data")
    assert ws.read(name) == b"data"
    assert ws.snapshot(name)[0] == b"data"


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_fifo_or_socket_is_refused_by_readers_and_recorded_as_no_file(ws, kind):
    path = os.path.join(ws.root, "special")
    if kind == "fifo":
        os.mkfifo(path)
    else:
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path)
    box = _finishes(ws.read, "special")
    assert isinstance(box.get("error"), ToolFailure)
    assert "not a regular file" in str(box["error"])
    box = _finishes(ws.snapshot, "special")
    assert box.get("value") == (None, None)


def test_a_fifo_swapped_in_after_the_check_never_blocks(ws, monkeypatch):
    """The check is made on the opened descriptor: a regular file replaced by a FIFO between lstat and open is
    still not read."""
    path = os.path.join(ws.root, "swap")
    with open(path, "wb") as handle:
        handle.write(b"file")
    real_lstat = os.lstat

    def lstat_then_swap(p, *args, **kwargs):
        info = real_lstat(p, *args, **kwargs)
        if p == path and os.path.isfile(p):
            os.unlink(p)
            os.mkfifo(p)
        return info

    monkeypatch.setattr(os, "lstat", lstat_then_swap)
    box = _finishes(read_state, path)
    assert box.get("value") == (None, None)


def test_a_folder_is_refused_as_a_file(ws):
    os.mkdir(os.path.join(ws.root, "sub"))
    with pytest.raises(ToolFailure, match="directory"):
        ws.read("sub")
    assert ws.snapshot("sub") == (None, None)


# file names in recorded form (workspace/names.py) -----------------------------------------------------------------
@given(st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\0" not in b))
def test_any_name_round_trips_through_its_recorded_form(raw):
    name = os.fsdecode(raw)
    recorded = quote_name(name)
    recorded.encode("utf-8")  # a record (JSON, msgpack) can hold it
    assert recorded.isprintable()  # and a person or a model can read it
    assert os.fsencode(real_path(recorded)) == raw


def test_recorded_paths_keep_their_folders_as_prefixes():
    folder = os.fsdecode(b"d\xff")
    assert quote_path(folder + "/x\ny") == '"d\\377"/"x\\ny"'
    assert quote_path(folder + "/x").startswith(quote_path(folder) + "/")
    assert quote_path("plain/path.txt") == "plain/path.txt"  # old records read the same
    assert real_path('"\\"quoted\\""') == '"quoted"'
