"""The store's own defences: every URL shown goes through one safe function, and the store's root is refused when
it is a symlink, someone else's, or open to group/others (as ssh refuses a loose key file)."""

from __future__ import annotations

import os
import stat

import pytest

import safepoint
from safepoint.store.names import mask_passwords, safe_url, url_secrets
from tests.conftest import cli_env, safepoint_in_process

MALFORMED = [  # (url, the password's pieces that must never show)
    ("postgresql://u:Sekr3tPw@[::1:1/db", ["Sekr3tPw"]),  # an unclosed IPv6 bracket: urlsplit raised
    ("postgresql://u:Sekr3tPw@[zz]:1/db", ["Sekr3tPw"]),
    ("postgresql://u:Sekr3tPw@host:99999999/db", ["Sekr3tPw"]),
    ("postgresql://u:Sek@r3tPw@127.0.0.1:1/db", ["r3tPw"]),  # an unescaped '@': libpq quotes 'r3tPw@127.0.0.1'
    ("postgresql://u:Sek@r3t@Pw99@db/x?sslmode=require", ["r3t@Pw99", "Pw99"]),
    ("postgresql://u:Sekr3tPw@db/x?password=Sekr3tPw&sslmode=require", ["Sekr3tPw"]),
    ("postgresql://u@db/x?sslmode=require&password=Sekr3tPw#frag", ["Sekr3tPw"]),
    ("postgresql://u:Sekr3tPw@", ["Sekr3tPw"]),
    ("postgresql://:Sekr3tPw@db", ["Sekr3tPw"]),
    ("postgresql://u:Sekr3tPw@db\n/x", ["Sekr3tPw"]),
    ("postgresql://u:Sek%40r3tPw@db/x", ["Sek%40r3tPw", "Sek@r3tPw"]),
]


@pytest.mark.parametrize(("url", "pieces"), MALFORMED)
def test_a_url_is_shown_without_any_piece_of_its_password_and_never_raises(url, pieces):
    shown = safe_url(url)
    message = mask_passwords(f"could not connect to {url}: host 'r3tPw@db' {pieces[-1]}", url)
    for piece in pieces:
        assert piece not in shown, shown
        assert piece not in message, message


def test_url_secrets_are_the_password_whole_and_its_pieces():
    assert url_secrets("postgresql://u:Sek@r3tPw@db/x") == ["Sek@r3tPw", "r3tPw", "Sek"]
    assert url_secrets("not a url [") == []


def test_a_store_password_at_sign_in_a_query_never_shows_in_json(tmp_path):
    url = "postgresql://u@127.0.0.1:1/db?password=Sek@r3tPw&connect_timeout=1"
    done = safepoint_in_process("status", "--json", "--store", url, env=cli_env())
    assert done.returncode != 0
    assert "r3tPw" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------------------ the store's root


def _write_a_run(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call_result("write_file", {"path": "a.txt", "content": "the user's text\n"}, call_id="c1")


def _refused_in_one_line(workspace, *words):
    done = safepoint_in_process(
        "run", "--task", "t", "--model", "scripted", "-w", workspace, "--run-id", "r2", env=cli_env()
    )
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775, 0o757])
def test_a_store_root_others_can_write_is_refused(workspace, mode):
    root = workspace / ".agent-runtime"
    root.mkdir()
    root.chmod(mode)
    with pytest.raises(safepoint.SafepointError, match=r"writable by others.*chmod go-rwx"):
        _write_a_run(workspace)
    assert not (root / "runs").exists()  # nothing was written into it
    _refused_in_one_line(workspace, "writable by others", "chmod go-rwx")


def test_a_symlinked_store_root_is_refused_in_one_line(tmp_path, workspace):
    private = tmp_path / "elsewhere"
    private.mkdir(mode=0o700)
    (workspace / ".agent-runtime").symlink_to(private)
    with pytest.raises(safepoint.SafepointError, match="symbolic link"):
        _write_a_run(workspace)
    assert list(private.iterdir()) == []
    _refused_in_one_line(workspace, "symbolic link", "--store file:")


def test_a_symlinked_runs_folder_inside_the_store_is_refused(tmp_path, workspace):
    """A repository can ship a real .agent-runtime whose runs/ points elsewhere: the same refusal."""
    shared = tmp_path / "shared"
    shared.mkdir()
    root = workspace / ".agent-runtime"
    root.mkdir(mode=0o700)
    (root / "runs").symlink_to(shared)
    with pytest.raises(safepoint.SafepointError, match="runs is a symbolic link"):
        _write_a_run(workspace)
    assert list(shared.iterdir()) == []


def test_a_store_root_of_another_user_is_refused(tmp_path, workspace):
    root = workspace / ".agent-runtime"
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534) if os.geteuid() == 0 else pytest.skip("needs root to give a folder away")
    with pytest.raises(safepoint.SafepointError, match="belongs to user id 65534"):
        _write_a_run(workspace)


def test_a_store_root_readable_by_others_is_made_private(workspace):
    """A store made by an older safepoint under the umask (0755): ours, so closed, not refused."""
    root = workspace / ".agent-runtime"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    _write_a_run(workspace)
    for folder in (root, root / "runs"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


def test_a_store_safepoint_creates_is_private_under_any_umask(workspace):
    old = os.umask(0)
    try:
        _write_a_run(workspace)
    finally:
        os.umask(old)
    root = workspace / ".agent-runtime"
    assert not root.is_symlink()
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
