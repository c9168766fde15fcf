"""The review page in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by Selenium
through that chromedriver: nothing downloaded): the pages render (screenshots taken and checked non-blank),
hostile text stays text, a conflict is resolved and an approval approved by clicking, and the library then says
so. One browser for the module; few tests (each page load is a real round trip).

Without chromium these tests fail in CI (``CI`` set: ``make test`` installs it) and are skipped elsewhere."""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from collections import Counter

import pytest

import safepoint
from safepoint.errors import ResumeError
from safepoint.ui.app import create_app
from safepoint.ui.guard import loopback_hosts
from safepoint.ui.serve import bind

from .ui_runs import SCRIPT_TAG, conflicted_run, hostile_run, waiting_run

CHROMIUM = os.environ.get("SAFEPOINT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SAFEPOINT_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # this machine's closed network refuses its connections: none are made
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)
TOKEN = "browser-test-token"


def _missing(paths: tuple[str, ...] = (CHROMIUM, CHROMEDRIVER)) -> str | None:
    for path in paths:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"{path} is missing (Debian: apt-get install chromium chromium-driver; `make test` does it)"
    return None


def _require_browser(paths: tuple[str, ...] = (CHROMIUM, CHROMEDRIVER)) -> None:
    """Chromium missing: a failure in CI (it must have run there), a skip saying why elsewhere."""
    missing = _missing(paths)
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests need chromium in CI: {missing}")
        pytest.skip(missing)


def test_a_missing_chromium_fails_in_ci_and_skips_elsewhere(monkeypatch, tmp_path):
    gone = (str(tmp_path / "chromium"), CHROMEDRIVER)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="need chromium in CI"):
        _require_browser(gone)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="chromium is missing"):
        _require_browser(gone)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    _require_browser()
    import uvicorn
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    tmp = tmp_path_factory.mktemp("ui_browser")
    ws = tmp / "ws"
    ws.mkdir()
    hostile_run(ws)
    conflicted_run(ws)
    waiting_run(ws, tmp)
    sp = safepoint.open(workspace=str(ws))
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    app = create_app(sp, token=TOKEN, hosts=loopback_hosts(port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.get(f"http://127.0.0.1:{port}/?token={TOKEN}")  # as a person opens the printed address
    try:
        yield driver, f"http://127.0.0.1:{port}", ws, sp
    finally:
        driver.quit()
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        sp.close()


def _pixels(png: bytes) -> Counter[bytes]:
    """The colours of a PNG screenshot's pixels (8-bit RGB or RGBA, as Chromium writes them)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = data
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6)
    size = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * size
    previous = bytearray(stride)
    seen: Counter[bytes] = Counter()
    for y in range(height):
        kind, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):  # PNG's five row filters, undone
            left = row[i - size] if i >= size else 0
            up, corner = previous[i], previous[i - size] if i >= size else 0
            if kind == 1:
                row[i] = (row[i] + left) & 0xFF
            elif kind == 2:
                row[i] = (row[i] + up) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                row[i] = (row[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        previous = row
        for x in range(width):
            seen[bytes(row[x * size : x * size + 3])] += 1
    return seen


def _not_blank(driver, name: str, tmp) -> None:
    """A screenshot of the window at a quarter scale (decoding it here in Python costs 1/16 of the full one)."""
    import base64

    clip = {"x": 0, "y": 0, "width": 1280, "height": 900, "scale": 0.25}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "clip": clip})
    png = base64.b64decode(shot["data"])
    (tmp / f"{name}.png").write_bytes(png)
    colours = _pixels(png)
    most = colours.most_common(1)[0][1]
    assert len(colours) >= 8, f"{name}: a screenshot of {len(colours)} colour(s) is blank"
    assert most < 0.97 * sum(colours.values()), f"{name}: one colour covers the screenshot"


def _wait(condition, what: str) -> None:
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + 30
    while True:
        try:
            if condition():
                return
        except StaleElementReferenceException:
            pass  # the page was replaced between finding an element and reading it (the click's redirect): again
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_pages_render_and_hostile_text_stays_text(site, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    driver, base, _, _ = site
    driver.get(f"{base}/?token={TOKEN}")
    assert driver.current_url == f"{base}/"  # the token went into the cookie, out of the address
    rows = driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    assert {r.find_element(By.TAG_NAME, "a").text for r in rows} == {"hostile", "conflicted", "waiting"}
    _not_blank(driver, "runs", tmp_path)
    driver.get(f"{base}/runs/hostile")
    timeline = driver.find_element(By.ID, "timeline").text
    assert f"model says {SCRIPT_TAG} & <b>bold</b>" in timeline  # shown as the text it is
    assert "planned → started → succeeded" in timeline and "a resume would take outcome" in timeline
    assert driver.execute_script("return document.querySelectorAll('script, b.injected, img').length") == 0
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018  # reading it is the check: no alert() ran
    diff = driver.find_element(By.CSS_SELECTOR, "#call-c1 .diff").text
    assert f"+{SCRIPT_TAG}" in diff
    _not_blank(driver, "run", tmp_path)
    driver.get(f"{base}/runs/conflicted/conflicts")
    assert "the file now" in driver.page_source
    _not_blank(driver, "conflicts", tmp_path)
    driver.get("about:blank")
    with pytest.raises(AssertionError, match="blank"):  # the check itself can fail
        _not_blank(driver, "blank", tmp_path)


def test_a_conflict_is_resolved_by_clicking(site):
    from selenium.webdriver.common.by import By

    driver, base, ws, sp = site
    driver.get(f"{base}/runs/conflicted/conflicts")
    section = next(
        s
        for s in driver.find_elements(By.CSS_SELECTOR, "section.conflict")
        if s.find_element(By.TAG_NAME, "h2").text == "f.txt"
    )
    section.find_element(By.CSS_SELECTOR, "button.manual_merge").click()
    _wait(
        lambda: "f.txt" not in [h.text for h in driver.find_elements(By.CSS_SELECTOR, "section.conflict h2")],
        "the page",
    )
    assert driver.current_url == f"{base}/runs/conflicted/conflicts"
    assert (ws / "f.txt").read_text() == "line1\nline2\nline3\nuser tail\n"  # the agent's line out, the user's kept
    left = sp.conflicts("conflicted")
    assert len(left) == 1 and left[0].path != "f.txt"


def test_an_approval_is_approved_by_clicking(site):
    from selenium.webdriver.common.by import By

    driver, base, _, sp = site
    driver.get(f"{base}/approvals")
    assert [a.call_id for a in sp.approvals()] == ["call_1"]
    driver.find_element(By.ID, "approve-waiting-call_1").click()
    _wait(lambda: driver.find_elements(By.ID, "no-approvals"), "the approval to be taken")
    assert sp.approvals() == []
    with pytest.raises(ResumeError, match=r"approved already by .* \(safepoint ui\)"):
        sp.deny("waiting", "call_1")
