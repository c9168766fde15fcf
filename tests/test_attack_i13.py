"""Attacks on the review page (issue 13) beside where ``test_ui_api`` looked: what the JSON API and the page say
for hostile model text and file content, and the Host forms a browser really sends.

The ``xfail(strict=True)`` tests are broken promises (each reason says which); they turn into failures the day a
fix lands, and the mark is dropped then."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

import safepoint
from safepoint.ui.app import create_app
from safepoint.ui.guard import loopback_hosts

TOKEN = "t0ken-of-this-server"
PORT = 8780
BASE = f"http://127.0.0.1:{PORT}"


def program(sp: safepoint.Safepoint, port: int = PORT, base: str = BASE) -> TestClient:
    app = create_app(sp, token=TOKEN, hosts=loopback_hosts(port))
    return TestClient(app, base_url=base, headers={"x-safepoint-token": TOKEN}, follow_redirects=False)


@pytest.fixture
def sp(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    opened = safepoint.open(workspace=str(ws))
    yield opened
    opened.close()


# The JSON API: masking passwords over the serialized text ------------------------------------------------------
def test_the_api_tells_every_message_the_page_shows(sp):
    """A model that writes ``password='`` in one turn and an apostrophe in a later one (any English text: "it's")
    makes ``/api/runs/RUN`` drop every timeline item in between: the regex of ``mask_passwords`` runs over the JSON
    text, and a quoted value may span ``", {...}, "``. A program reading the API sees fewer items than ``total``
    says and than the page shows, and the text of the items it does see is rewritten."""
    with sp.start("t", run_id="talk") as run:
        run.add_message("assistant", "set the password='x' later")  # a quote that closes: masked in place
        run.checkpoint()
        run.add_message("assistant", "then password='y")  # opens a quote ...
        run.checkpoint()
        run.add_message("assistant", "the deploy step ran")
        run.checkpoint()
        run.add_message("assistant", "and it's done")  # ... closed here, three items later
        run.checkpoint()
    client = program(sp)
    told = client.get("/api/runs/talk").json()
    texts = [item["text"] for item in told["items"] if item["kind"] == "message"]
    assert len(told["items"]) == told["total"], texts
    assert "the deploy step ran" in texts and "and it's done" in texts
    page = client.get("/runs/talk").text
    assert "the deploy step ran" in page  # the page shows it: the two faces disagree today


# The page: a diff line is a line of the diff, not of Python's splitlines ---------------------------------------
@pytest.mark.parametrize("separator", ["\u2028", "\r", "\x0c", "\x1e", "\x85"])
def test_an_added_line_never_shows_as_a_deleted_one(sp, separator):
    """The agent only adds a file; its one line carries a line separator Python's ``splitlines`` honours but a
    diff does not. The page then shows a red "deleted" line (``- check_signature(request)``) that no change
    deleted: a reviewer approving the diff is shown a change that did not happen (and misses the one that did)."""
    with sp.start("t", run_id="forged") as run:
        run.call(
            "write_file",
            {"path": "auth.py", "content": f"ok = 1{separator}- check_signature(request)\n"},
            call_id="c1",
        )
        run.checkpoint()
    page = program(sp).get("/runs/forged").text
    diff = re.search(r'<pre class="diff">.*?</pre>', page, re.S)
    assert diff is not None
    assert '<span class="del">' not in diff.group(0), diff.group(0)


# The guard: Host forms ---------------------------------------------------------------------------------------------
def test_a_page_served_on_port_80_answers_the_browsers_host(sp):
    """``safepoint ui --port 80`` (a container, a root shell): the printed link opens a page saying the host
    '127.0.0.1' is refused, because browsers leave the default port out of ``Host`` and ``Origin``."""
    client = program(sp, port=80, base="http://127.0.0.1")
    assert client.get("/api/runs").status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        f"127.0.0.1.:{PORT}",  # a trailing dot: the same name to a resolver, another to the guard
        f"localhost.:{PORT}",
        f"127.0.0.1:{PORT}.",
        f"127.1:{PORT}",  # short and hex forms resolve to loopback too
        f"0x7f.0.0.1:{PORT}",
        f"[::ffff:127.0.0.1]:{PORT}",
        f"127.0.0.1:0{PORT}",
        f"127.0.0.1:{PORT}@evil.example",
        f"evil.example#@127.0.0.1:{PORT}",
    ],
)
def test_odd_forms_of_a_loopback_host_are_refused(sp, host):
    """Held: only the exact names the guard lists pass (a rebinding page cannot reach them with an odd spelling
    of loopback either); a refusal is cheap, a browser typing these is rare."""
    client = program(sp)
    assert client.get("/api/runs", headers={"host": host}).status_code == 403
    posted = client.post("/api/runs/r/approve", json={"call_id": "c"}, headers={"host": host})
    assert posted.status_code == 403


def test_upper_case_names_of_this_server_are_served(sp):
    """Held: Host names are case-insensitive (a browser lower-cases them, a program may not)."""
    client = program(sp)
    for host in (f"LOCALHOST:{PORT}", f"LocalHost:{PORT}"):
        assert client.get("/api/runs", headers={"host": host}).status_code == 200


def test_a_form_from_another_loopback_port_is_refused_without_origin_too(sp, tmp_path):
    """Held: a page of another local server (``127.0.0.1:9999``, same site, so a SameSite=Strict cookie goes with
    it) posting a form without ``Origin`` but saying ``Sec-Fetch-Site: same-site`` is refused even with a right
    form token; a form with ``Origin: null`` (a sandboxed frame) too."""
    app = create_app(sp, token=TOKEN, hosts=loopback_hosts(PORT))
    tab = TestClient(app, base_url=BASE, follow_redirects=False)
    assert tab.get(f"/?token={TOKEN}").status_code == 303
    for headers in ({"sec-fetch-site": "same-site"}, {"origin": "null", "sec-fetch-site": "same-origin"}):
        got = tab.post("/runs/r/approve", data={"csrf": TOKEN, "call_id": "c"}, headers=headers)
        assert got.status_code == 403, (headers, got.text)
        assert TOKEN not in got.text


def test_a_wrong_token_in_the_link_sets_no_cookie_and_is_not_echoed(sp):
    """Held: a guessed ``?token=`` is answered 401 with no cookie and without the guess in the page."""
    app = create_app(sp, token=TOKEN, hosts=loopback_hosts(PORT))
    tab = TestClient(app, base_url=BASE, follow_redirects=False)
    guess = "<b>guess</b>"
    got = tab.get("/", params={"token": guess})
    assert got.status_code == 401 and "set-cookie" not in got.headers
    assert guess not in got.text and "guess" not in got.text


# Two people answering at once ------------------------------------------------------------------------------------
def test_an_approve_and_a_deny_at_once_are_not_both_accepted(tmp_path, monkeypatch):
    """A reviewer clicks Approve on the page while a colleague runs ``safepoint deny`` on the same call. Both are
    told their answer was recorded (the denier reads "tells the model it was denied"), and the control log holds an
    approval and a denial of one call: whichever the run honours, one person was told something false about a
    high-risk call. The window is forced open here (both read the control log before either posts); in life it is
    the time between ``controls`` and ``post_control``."""
    import threading

    from safepoint.restart import control

    from .ui_runs import waiting_run

    ws = tmp_path / "ws"
    ws.mkdir()
    waiting_run(ws, tmp_path)
    page_sp = safepoint.open(workspace=str(ws))
    cli_sp = safepoint.open(workspace=str(ws))
    try:
        client = program(page_sp)
        both_read = threading.Barrier(2, timeout=30)
        real = control.controls

        def read_then_wait(store, run_id):
            seen = list(real(store, run_id))
            both_read.wait()
            return seen

        monkeypatch.setattr(control, "controls", read_then_wait)
        told: dict[str, object] = {}

        def click() -> None:
            told["page"] = client.post("/api/runs/waiting/approve", json={"call_id": "call_1"}).status_code

        def command() -> None:
            try:
                told["cli"] = cli_sp.deny("waiting", "call_1", by="colleague").approved
            except safepoint.errors.SafepointError as exc:
                told["cli"] = type(exc).__name__

        threads = [threading.Thread(target=click), threading.Thread(target=command)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        monkeypatch.setattr(control, "controls", real)
        answers = [r for _, r in control.controls(cli_sp.store, "waiting") if getattr(r, "call_id", None) == "call_1"]
        assert len(answers) == 1, (told, answers)
        assert (told["page"] == 200) != (told["cli"] is False), told  # exactly one was told it decided
    finally:
        page_sp.close()
        cli_sp.close()


# The conflicts page: what the file now is ------------------------------------------------------------------------
def test_a_file_the_user_replaced_by_a_symlink_is_said_to_be_a_symlink(tmp_path):
    """The user replaced the agent's ``f.txt`` with a link to a config file; the conflicts page says "the file now
    is binary (32 bytes): not shown", so the reviewer picks keep_user or apply_agent believing a binary blob sits
    there. It should name the link and its target (``safepoint conflicts`` knows it is a link)."""
    import os

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("a\n")
    sp = safepoint.open(workspace=str(ws))
    try:
        with sp.start("t", run_id="c") as run:
            start = run.checkpoint()
            run.call("write_file", {"path": "f.txt", "content": "agent\n"}, call_id="w1")
        (ws / "f.txt").unlink()
        os.symlink("settings.toml", ws / "f.txt")
        assert len(sp.rollback_files("c", start).conflicts) == 1
        sides = program(sp).get("/api/runs/c/conflicts").json()
        assert len(sides) == 1
        said = f"{sides[0]['now']} {sides[0]['note']}"
        assert "binary" not in said and "settings.toml" in said, said
    finally:
        sp.close()


# One unreadable run -----------------------------------------------------------------------------------------------
def test_one_unreadable_run_does_not_take_the_runs_page_down(tmp_path):
    """One run of the store cannot be read (its log is a folder here; in life a run written under sudo, or a
    file on a failing disk). The runs page and ``GET /api/runs`` answer "Internal Server Error" with nothing else,
    so no run can be reviewed from the list; ``safepoint status`` prints a traceback. The run summary already has
    a status for this, ``unreadable``: the page should list it so and show the others."""
    ws = tmp_path / "ws"
    ws.mkdir()
    sp = safepoint.open(workspace=str(ws))
    try:
        for run_id in ("good", "broken"):
            with sp.start("t", run_id=run_id) as run:
                run.call("write_file", {"path": f"{run_id}.txt", "content": "x\n"}, call_id="c1")
                run.checkpoint()
    finally:
        sp.close()
    log = ws / ".agent-runtime" / "runs" / "broken" / "ledger.jsonl"
    log.unlink()
    log.mkdir()
    sp = safepoint.open(workspace=str(ws))
    try:
        app = create_app(sp, token=TOKEN, hosts=loopback_hosts(PORT))
        client = TestClient(app, base_url=BASE, headers={"x-safepoint-token": TOKEN}, raise_server_exceptions=False)
        listed = client.get("/api/runs")
        assert listed.status_code == 200, listed.text
        statuses = {row["summary"]["run_id"]: row["summary"]["status"] for row in listed.json()}
        assert statuses["broken"] == "unreadable" and statuses["good"] != "unreadable"
        one = client.get("/api/runs/broken")
        assert one.status_code != 500 or "error" in one.json()
    finally:
        sp.close()
