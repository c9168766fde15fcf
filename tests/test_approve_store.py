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
