"""The review page in process (issue 13, the review page): every page and JSON endpoint on real runs, hostile text
shown as text, large diffs capped, a long timeline paged, library errors as their one line with an HTTP code, and
the guard: loopback only, the Host header (DNS rebinding), the token, and writes from another site refused."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

import safepoint
import safepoint.timeline
from safepoint import errors
from safepoint.errors import ConfigError, ExitCode
from safepoint.ui.app import create_app, http_status
from safepoint.ui.guard import loopback_hosts
from safepoint.ui.serve import bind, loopback

from .conftest import safepoint_in_process
from .ui_runs import BIDI, SCRIPT_TAG, conflicted_run, hostile_run, uncertain_run, waiting_run

TOKEN = "t0ken-of-this-server"
PORT = 8780
BASE = f"http://127.0.0.1:{PORT}"
ESCAPED_TAG = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    ws = tmp / "ws"
    ws.mkdir()
    hostile_run(ws)
    conflicted_run(ws)
    waiting_run(ws, tmp)
    return ws


@pytest.fixture
def own(tmp_path):
    """A workspace of this test's own, for a test that writes: a conflicted run."""
    ws = tmp_path / "ws"
    ws.mkdir()
    conflicted_run(ws)
    return ws


@pytest.fixture
def sp(request):
    where = request.getfixturevalue("own" if "own" in request.fixturenames else "ws")
    opened = safepoint.open(workspace=str(where))
    yield opened
    opened.close()


def program(sp):
    """A program's client: the token in its header, the Host this server answers to."""
    app = create_app(sp, token=TOKEN, hosts=loopback_hosts(PORT))
    return TestClient(app, base_url=BASE, headers={"x-safepoint-token": TOKEN}, follow_redirects=False)


@pytest.fixture
def client(sp):
    return program(sp)


@pytest.fixture
def browser(sp):
    """A browser's client: it came in by the printed link, so it holds the cookie (and no header)."""
    app = create_app(sp, token=TOKEN, hosts=loopback_hosts(PORT))
    tab = TestClient(app, base_url=BASE, follow_redirects=False)
    entered = tab.get(f"/?token={TOKEN}")
    assert entered.status_code == 303 and entered.headers["location"] == "/"
    cookie = entered.headers["set-cookie"]
    assert cookie.startswith(f"safepoint_ui_{PORT}={TOKEN};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    return tab


# pages and escaping ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/", "/approvals", "/runs/hostile", "/runs/conflicted/conflicts", "/runs/waiting"])
def test_every_page_shows_hostile_text_as_text_and_runs_no_script(browser, path):
    page = browser.get(path)
    assert page.status_code == 200, page.text
    assert "<script" not in page.text.lower()  # no markup of the model's, the task's or a file name's
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src" not in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"


def test_the_run_page_tells_the_model_text_calls_states_verdicts_and_diffs(browser):
    text = browser.get("/runs/hostile").text
    assert f"model says {ESCAPED_TAG} &amp; &lt;b&gt;bold&lt;/b&gt;" in text
    assert "read\\u202etxt.exe" in text and BIDI not in text  # a bidi override is shown, not obeyed
    assert "planned → started → succeeded" in text
    assert "a resume would <b>take outcome</b>" in text  # explain's verdict, per call
    assert f'<span class="add">+{ESCAPED_TAG}</span>' in text  # the diff's line, escaped
    assert "&#34;&gt;&lt;script&gt;alert(&#39;name&#39;)" in text  # the hostile file name, escaped
    # a diff of 3,000 lines is cut to 400 on the page and says where the rest is
    assert text.count('<span class="add">+x</span>') == 397
    assert "more lines: `safepoint diff hostile --call c2` shows them" in text


def test_the_runs_page_says_what_waits_for_a_person(browser):
    text = browser.get("/").text
    assert text.index("/runs/waiting") < text.index("/runs/hostile")  # the latest activity first
    assert '<a href="/approvals">1 approval(s)</a>' in text
    assert "waiting approval" in text and ESCAPED_TAG in text


def test_the_conflicts_page_shows_the_three_versions_and_the_three_buttons(browser):
    text = browser.get("/runs/conflicted/conflicts").text
    assert "before the agent" in text and "the agent's version" in text and "the file now" in text
    assert "<pre>line1\nline2\nline3\n</pre>" in text  # before the agent
    assert "<pre>line1\nAGENT\nline3\n</pre>" in text  # the agent's version
    assert "<pre>line1\nAGENT\nline3\nuser tail\n</pre>" in text  # the file now
    for what in ("keep_user", "apply_agent", "manual_merge"):
        assert text.count(f'name="resolution" value="{what}"') == 2
    # the hostile name goes back to the server in an attribute: escaped there too, never breaking out of it
    assert 'value="&#34;\\&#34;&gt;&lt;script&gt;' in text


def test_a_timeline_of_many_items_is_paged(browser, sp, monkeypatch):
    whole = sp.timeline("hostile")
    assert whole.pages == 1 and whole.total == len(whole.items) == 6
    second = sp.timeline("hostile", page=2, per_page=4)
    assert (second.page, second.pages, second.total) == (2, 2, 6)
    assert [i.call.call_id for i in second.items if i.call] == ["c3"]
    with pytest.raises(ConfigError, match="page 3 does not exist"):
        sp.timeline("hostile", page=3, per_page=4)
    monkeypatch.setattr(safepoint.timeline, "PER_PAGE", 2)
    page = browser.get("/runs/hostile?page=2").text
    assert "page 2 of 3 (6 items)" in page and 'href="?page=3" rel="next"' in page
    assert 'id="call-c1"' in page and 'id="call-c2"' in page and 'id="call-c3"' not in page
    assert browser.get("/runs/hostile?page=9").status_code == 400
    assert browser.get("/runs/hostile?page=x%3Cy").status_code == 400


def test_an_unknown_run_is_a_404_and_a_bad_id_a_400_with_the_librarys_line_escaped(browser, client):
    page = browser.get("/runs/%3Cscript%3Ex")
    assert page.status_code == 400
    assert "run id &#39;&lt;script&gt;x&#39; is not valid" in page.text and "<script>" not in page.text
    assert browser.get("/runs/nope").status_code == 404
    api = client.get("/api/runs/nope")
    assert api.status_code == 404
    body = api.json()
    assert body["exit_code"] == ExitCode.NOT_FOUND and body["error"].startswith("run 'nope' not found in store")
    assert "\n" not in body["error"]


# the JSON API --------------------------------------------------------------------------------------------------
def test_the_api_lists_runs_and_tells_a_run_and_its_conflicts(client):
    runs = client.get("/api/runs").json()
    assert {r["summary"]["run_id"] for r in runs} == {"hostile", "conflicted", "waiting"}
    waiting = next(r for r in runs if r["summary"]["run_id"] == "waiting")
    assert [a["call_id"] for a in waiting["approvals"]] == ["call_1"]
    run = client.get("/api/runs/hostile").json()
    assert run["total"] == 6 and run["items"][1]["text"].startswith(f"model says {SCRIPT_TAG}")
    call = next(i["call"] for i in run["items"] if i["kind"] == "call" and i["call"]["call_id"] == "c1")
    assert call["states"] == ["planned", "started", "succeeded"] and call["verdict"]["action"] == "take_outcome"
    assert call["diffs"][0]["diff"].endswith(f"+{SCRIPT_TAG}\n")
    sides = client.get("/api/runs/conflicted/conflicts").json()
    merged = next(s for s in sides if s["conflict"]["path"] == "f.txt")
    assert (merged["before"], merged["agent"], merged["now"]) == (
        "line1\nline2\nline3\n",
        "line1\nAGENT\nline3\n",
        "line1\nAGENT\nline3\nuser tail\n",
    )


def test_the_api_resolves_a_conflict_and_refuses_what_is_wrong(own, client, sp):
    ws = own
    bad = client.post("/api/runs/conflicted/resolve", json={"path": "f.txt", "resolution": "overwrite"})
    assert bad.status_code == 400 and "keep_user, apply_agent, manual_merge" in bad.json()["error"]
    unknown = client.post("/api/runs/conflicted/resolve", json={"path": "nope.txt", "resolution": "keep_user"})
    assert unknown.status_code == 404 and "has no pending conflict" in unknown.json()["error"]
    assert client.post("/api/runs/conflicted/resolve", json=["f.txt"]).status_code == 400
    assert client.post("/api/runs/conflicted/resolve", json={"path": 3, "resolution": "x"}).status_code == 400
    done = client.post("/api/runs/conflicted/resolve", json={"path": "f.txt", "resolution": "manual_merge"})
    assert done.status_code == 200, done.text
    assert done.json()["resolution"] == "manual_merge"
    assert (ws / "f.txt").read_text() == "line1\nline2\nline3\nuser tail\n"  # the agent's change out, the user's kept
    assert len(sp.conflicts("conflicted")) == 1 and "f.txt" not in {c.path for c in sp.conflicts("conflicted")}
    again = client.post("/api/runs/conflicted/resolve", json={"path": "f.txt", "resolution": "keep_user"})
    assert again.status_code == 404


def test_the_api_approves_once_and_the_run_reflects_it(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    waiting_run(ws, tmp_path)
    sp = safepoint.open(workspace=str(ws))
    client = program(sp)
    unknown = client.post("/api/runs/waiting/deny", json={"call_id": "call_9"})
    assert unknown.status_code == 404 and unknown.json()["exit_code"] == ExitCode.USAGE
    done = client.post("/api/runs/waiting/approve", json={"call_id": "call_1"})
    assert done.status_code == 200, done.text
    assert done.json()["approved"] is True and done.json()["attended"] is False
    assert sp.approvals() == []
    twice = client.post("/api/runs/waiting/deny", json={"call_id": "call_1"})
    assert (
        twice.status_code == 409
        and "approved already by " in twice.json()["error"]
        and "(safepoint ui)" in twice.json()["error"]
    )
    sp.close()


# the guard -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["evil.example", f"evil.example:{PORT}", "127.0.0.1:9999", "", "127.0.0.1"])
def test_a_foreign_host_header_is_refused_for_reads_and_writes(client, host):
    """DNS rebinding: a page of evil.example resolved to 127.0.0.1 sends its own name; the token does not help."""
    got = client.get("/api/runs", headers={"host": host})
    assert got.status_code == 403 and "is refused" in got.json()["error"]
    posted = client.post("/api/runs/waiting/approve", json={"call_id": "call_1"}, headers={"host": host})
    assert posted.status_code == 403


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_the_loopback_names_of_this_port_are_served(client, host):
    assert client.get("/api/runs", headers={"host": f"{host}:{PORT}"}).status_code == 200


def test_without_the_token_nothing_is_shown(sp):
    app = create_app(sp, token=TOKEN, hosts=loopback_hosts(PORT))
    stranger = TestClient(app, base_url=BASE, follow_redirects=False)
    assert stranger.get("/").status_code == 401
    assert stranger.get("/api/runs").status_code == 401
    assert stranger.get("/api/runs", headers={"x-safepoint-token": "guess"}).status_code == 401
    assert stranger.get("/?token=guess").status_code == 401
    stranger.cookies.set(f"safepoint_ui_{PORT}", "guess")
    assert stranger.get("/").status_code == 401
    stranger.cookies.clear()
    entered = stranger.get(f"/runs/hostile?page=1&token={TOKEN}")
    assert entered.status_code == 303 and entered.headers["location"] == "/runs/hostile?page=1"
    for sneaky in ("//evil.example/x", "/\\evil.example/x"):  # never a redirect to another host
        away = stranger.get(f"{BASE}{sneaky}?token={TOKEN}")
        assert away.status_code == 303 and away.headers["location"] == "/evil.example/x"


def test_the_cookie_alone_never_writes(browser, ws):
    """A forged form from another tab carries the cookie (when the browser sends it) but not the form's token."""
    form = browser.post("/runs/conflicted/resolve", data={"path": "f.txt", "resolution": "apply_agent"})
    assert form.status_code == 403 and "stale or forged" in form.text
    api = browser.post("/api/runs/conflicted/resolve", json={"path": "f.txt", "resolution": "apply_agent"})
    assert api.status_code == 403 and "X-Safepoint-Token" in api.json()["error"]
    assert (ws / "f.txt").exists()


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "http://127.0.0.1:9999"},  # another program on this machine: same site, another origin
        {"origin": "null"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ],
)
def test_a_write_from_another_site_is_refused_even_with_the_token(browser, client, headers):
    form = browser.post(
        "/runs/waiting/deny", data={"csrf": TOKEN, "call_id": "call_1", "back": "approvals"}, headers=headers
    )
    assert form.status_code == 403, form.text
    api = client.post("/api/runs/waiting/deny", json={"call_id": "call_1"}, headers=headers)
    assert api.status_code == 403


def test_the_api_takes_json_only(client):
    plain = client.post(
        "/api/runs/waiting/deny", content=json.dumps({"call_id": "call_1"}), headers={"content-type": "text/plain"}
    )
    assert plain.status_code == 415


def test_a_form_of_the_page_resolves_and_comes_back(own, browser, sp):
    ws = own
    resolved = browser.post(
        "/runs/conflicted/resolve",
        data={"csrf": TOKEN, "path": "f.txt", "resolution": "keep_user"},
        headers={"origin": BASE, "sec-fetch-site": "same-origin"},
    )
    assert resolved.status_code == 303 and resolved.headers["location"] == "/runs/conflicted/conflicts"
    assert (ws / "f.txt").read_text() == "line1\nAGENT\nline3\nuser tail\n"
    assert "f.txt" not in {c.path for c in sp.conflicts("conflicted")}
    page = browser.get("/runs/conflicted/conflicts").text
    assert 'name="path" value="f.txt"' not in page


# serving -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com", "10.0.0.1", ""])
def test_only_loopback_is_served(host):
    with pytest.raises(ConfigError, match="loopback only"):
        loopback(host)


def test_loopback_names_are_taken_and_port_0_picks_a_free_one():
    assert loopback("localhost") == "127.0.0.1" and loopback("127.0.0.2") == "127.0.0.2"
    assert loopback("::1") == "::1" and loopback("[::1]") == "::1"
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.getsockname()[1] > 0
        with pytest.raises(ConfigError, match="pass another --port"):
            bind("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()


def test_the_command_refuses_another_address_in_one_line(tmp_path):
    done = safepoint_in_process("ui", "--host", "0.0.0.0", "-w", tmp_path)
    assert done.returncode == ExitCode.USAGE
    assert done.stderr.count("\n") == 1 and "loopback only" in done.stderr and "Traceback" not in done.stderr


def test_the_command_says_a_busy_port_in_one_line(tmp_path):
    sock = bind("127.0.0.1", 0)
    try:
        done = safepoint_in_process("ui", "--port", sock.getsockname()[1], "-w", tmp_path)
    finally:
        sock.close()
    assert done.returncode == ExitCode.USAGE and "pass another --port" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_the_command_serves_its_printed_address_until_ctrl_c(ws):
    """A real `safepoint ui`: the address it prints (with the token) answers, another Host does not; Ctrl-C ends it."""
    import signal
    import subprocess
    import urllib.error
    import urllib.request

    from .conftest import PY, cli_env, read_until

    served = subprocess.Popen(
        [PY, "-m", "safepoint", "ui", "--port", "0", "--host", "127.0.0.2", "-w", str(ws)],  # any loopback address
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = next(ln for ln in read_until(served, "Ctrl-C").splitlines() if ln.startswith("safepoint ui: "))
        address = line.removeprefix("safepoint ui: ")
        assert address.startswith("http://127.0.0.2:") and "/?token=" in address
        base, token = address.split("/?token=")
        ask = urllib.request.Request(f"{base}/api/runs", headers={"X-Safepoint-Token": token})
        with urllib.request.urlopen(ask, timeout=30) as answer:
            assert {r["summary"]["run_id"] for r in json.load(answer)} == {"hostile", "conflicted", "waiting"}
        rebound = urllib.request.Request(
            f"{base}/api/runs", headers={"X-Safepoint-Token": token, "Host": "attacker.example"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(rebound, timeout=30)
        assert refused.value.code == 403
    finally:
        served.send_signal(signal.SIGINT)
        _, err = served.communicate(timeout=60)
    assert served.returncode == 0 and "Traceback" not in err, err


def test_the_ui_command_adds_nothing_to_start_up(tmp_path):
    """`--help` and `status` never import the page's stack (Starlette, uvicorn, Jinja2) nor the page itself."""
    import subprocess

    from .conftest import PY, cli_env

    probe = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from safepoint.cli.app import app\n"
        "codes = [CliRunner().invoke(app, argv).exit_code for argv in (['--help'], ['ui', '--help'], "
        f"['status', '-w', {str(tmp_path)!r}])]\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn', 'jinja2')"
        " or m.startswith(('safepoint.ui', 'safepoint.timeline')))\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    done = subprocess.run([PY, "-c", probe], env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"codes": [0, 0, 0], "heavy": []}


def test_a_large_conflict_is_capped_on_its_page(tmp_path):
    """A conflict over a file of 3,000 long lines: its two diffs cut at 400 lines, its versions at 200,000
    characters, each saying so; the page stays small."""
    ws = tmp_path / "ws"
    ws.mkdir()
    before = "".join(f"{i:04d} {'b' * 95}\n" for i in range(3000))
    agent = "".join(f"{i:04d} {'a' * 95}\n" for i in range(3000))
    (ws / "big.txt").write_text(before)
    sp = safepoint.open(workspace=str(ws))
    with sp.start("t", run_id="big") as run:
        start = run.checkpoint()
        run.call("write_file", {"path": "big.txt", "content": agent}, call_id="w1")
    (ws / "big.txt").write_text(agent + "user\n")
    sp.rollback_files("big", start)
    [sides] = sp.conflict_sides("big")
    assert sides.conflict.agent_change.count("\n") == 401
    assert sides.conflict.agent_change.endswith("more lines: `safepoint conflicts big` shows them\n")
    assert len(sides.before) < 201_000 and sides.before.endswith("more characters not shown")
    page = program(sp).get("/runs/big/conflicts")
    assert page.status_code == 200 and len(page.text) < 900_000
    sp.close()


def test_the_page_works_on_a_postgresql_store(tmp_path, fresh_url):
    """The same pages and writes on the other backend (its pool's connections used from the server's threads)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("one\n")
    sp = safepoint.open(fresh_url, workspace=str(ws))
    with sp.start("t", run_id="pg") as run:
        start = run.checkpoint()
        run.add_message("assistant", f"on postgres {SCRIPT_TAG}")
        run.call("write_file", {"path": "f.txt", "content": "agent\n"}, call_id="w1")
    (ws / "f.txt").write_text("agent\nuser\n")
    sp.rollback_files("pg", start)
    client = program(sp)
    page = client.get("/runs/pg")
    assert page.status_code == 200 and f"on postgres {ESCAPED_TAG}" in page.text
    assert [r["summary"]["run_id"] for r in client.get("/api/runs").json()] == ["pg"]
    done = client.post("/api/runs/pg/resolve", json={"path": "f.txt", "resolution": "apply_agent"})
    assert done.status_code == 200, done.text
    assert (ws / "f.txt").read_text() == "one\n" and sp.conflicts("pg") == []
    sp.close()


def test_without_the_ui_extra_the_command_says_how_to_get_it(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if it were not installed
    done = safepoint_in_process("ui", "-w", tmp_path)
    assert done.returncode == ExitCode.USAGE and "pip install 'safepoint[ui]'" in done.stderr
    assert "uvicorn is missing" in done.stderr and done.stderr.count("\n") == 1


def test_an_uncertain_call_is_settled_from_the_page(tmp_path):
    """A call whose process died after it ran waits for a decision: the run page offers to settle it (what
    `safepoint settle` does), and the API does the same."""
    ws = tmp_path / "ws"
    ws.mkdir()
    uncertain_run(ws, tmp_path)
    sp = safepoint.open(workspace=str(ws))
    app = create_app(sp, token=TOKEN, hosts=loopback_hosts(PORT))
    tab = TestClient(app, base_url=BASE, follow_redirects=False, headers={"x-safepoint-token": TOKEN})
    assert [d.call_id for d in sp.explain("crashed").needs_decision] == ["call_1"]
    page = tab.get("/runs/crashed").text
    assert 'id="settle-yes-call_1"' in page and 'id="settle-no-call_1"' in page
    rows = {r["summary"]["run_id"]: r for r in tab.get("/api/runs").json()}
    assert rows["crashed"]["waiting_decision"] is True
    bad = tab.post("/api/runs/crashed/settle", json={"call_id": "call_1", "happened": "yes"})
    assert bad.status_code == 400
    vague = tab.post("/runs/crashed/settle", data={"csrf": TOKEN, "call_id": "call_1", "happened": "maybe"})
    assert vague.status_code == 400 and [d.call_id for d in sp.explain("crashed").needs_decision] == ["call_1"]
    settled = tab.post("/runs/crashed/settle", data={"csrf": TOKEN, "call_id": "call_1", "happened": "yes"})
    assert settled.status_code == 303 and settled.headers["location"] == "/runs/crashed"
    assert sp.explain("crashed").needs_decision == []
    [entry] = sp.ledger("crashed")
    assert entry.status == "succeeded" and "(safepoint ui)" in (entry.decision_reason or "")
    assert 'id="settle-yes-call_1"' not in tab.get("/runs/crashed").text
    again = tab.post("/api/runs/crashed/settle", json={"call_id": "call_1", "happened": False})
    assert again.status_code == 400 and "\n" not in again.json()["error"]
    sp.close()


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.RunNotFoundError("x"), 404),
        (errors.UnknownReferenceError("x"), 404),
        (errors.ConfigError("x"), 400),
        (errors.StoreKeyError("x"), 400),
        (errors.ResumeOptionError("x"), 400),
        (errors.RunLockedError("x"), 409),
        (errors.StaleGenerationError("x"), 409),
        (errors.DecisionNeeded("x"), 409),
        (errors.ResumeError("x"), 409),
        (errors.RecoveryClosedError("x"), 409),
        (errors.DiskFullError("x"), 507),
        (errors.CorruptRecordError("x"), 500),
        (errors.StoreError("x"), 500),
    ],
)
def test_a_library_error_has_its_http_code(error, status):
    assert http_status(error) == status


def test_a_full_disk_under_the_workspace_is_one_line_with_507(own, client, sp, monkeypatch):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "f.txt")

    monkeypatch.setattr(sp, "resolve", full)
    answer = client.post("/api/runs/conflicted/resolve", json={"path": "f.txt", "resolution": "keep_user"})
    assert answer.status_code == 507
    assert answer.json() == {
        "error": "no space left on the disk (f.txt); free space, then try again",
        "exit_code": ExitCode.DISK_FULL,
    }
