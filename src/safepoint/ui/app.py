"""The review page's routes: the pages (server-rendered, autoescaped Jinja2) and the JSON API, each a thin call
into ``safepoint.api``. A library error is its one-line message with an HTTP code (``http_status``); the JSON
API says it as ``{"error", "exit_code"}``, as ``--json`` does on the command line.

One request at a time reaches the library (``_lock``): a person reviewing clicks one button at a time, and the
store handle was not made to be shared by threads (rejected: a handle per request, which would open the store
per click)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from safepoint.errors import ExitCode, RunNotFoundError, SafepointError, StoreError, UnknownReferenceError
from safepoint.records import to_plain
from safepoint.ui.guard import FIELD, Guard

if TYPE_CHECKING:
    import jinja2

    from safepoint.api import Safepoint
    from safepoint.records import ConflictResolution

HERE = Path(__file__).parent
RESOLUTIONS = ("keep_user", "apply_agent", "manual_merge")

# What a person is shown is never acted on by the browser either: control characters and bidirectional
# overrides (a file name that reads backwards, a command that hides its end) are shown as escapes.
_INVISIBLE = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in (
        *range(0x00, 0x09),
        *range(0x0B, 0x20),
        *range(0x7F, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x200E,
        0x200F,
        0x2028,  # line and paragraph separators: a diff line is a line of the diff, these are its content
        0x2029,
    )
}


def shown(value: object) -> str:
    return "" if value is None else str(value).translate(_INVISIBLE)


def one_line(message: str) -> str:
    from safepoint.api import mask_passwords

    return mask_passwords(" ".join(message.split()))


def http_status(exc: SafepointError) -> int:
    """A library error's HTTP code: unknown things 404, bad input 400, a run in another state or hands 409, a
    full disk 507, a store that cannot do what was asked 500."""
    if isinstance(exc, RunNotFoundError | UnknownReferenceError) or exc.exit_code == ExitCode.NOT_FOUND:
        return 404
    if exc.exit_code == ExitCode.USAGE:
        return 400
    if exc.exit_code == ExitCode.DISK_FULL:
        return 507
    if isinstance(exc, StoreError) and exc.exit_code not in (ExitCode.LOCKED, ExitCode.STALE):
        return 500
    return 409


def _templates() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name: model text, file names and diffs are hostile
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shown"] = shown
    env.filters["seg"] = lambda value: quote(str(value), safe="")  # one path segment of a link
    env.filters["line_class"] = _line_class
    env.filters["diff_lines"] = diff_lines
    env.filters["when"] = _when
    return env


def _when(iso: str | None) -> str:
    """An ISO time as people read it: to the second, in UTC."""
    from datetime import UTC, datetime

    if not iso:
        return ""
    try:
        return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return shown(iso)


def diff_lines(text: str) -> list[str]:
    """A diff's lines: split at "\\n" only, as a diff is (rejected: ``str.splitlines``, which also breaks at
    "\\r", U+2028, "\\x0c", "\\x1c"-"\\x1e" and "\\x85" and so showed a line the agent added, holding one, as a
    forged "-" line). What those characters are is shown by ``shown``."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _line_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "head"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")


def create_app(sp: Safepoint, *, token: str, hosts: frozenset[str] | set[str]) -> Guard:
    """The page and the API for the store and workspace of ``sp``, behind ``Guard`` (``hosts``: the Host
    headers it answers to; ``token``: the server's)."""
    env = _templates()
    who = f"{_user()} (safepoint ui)"  # recorded with an answer: the person at this machine, through the page
    css = (HERE / "static" / "ui.css").read_bytes()
    lock = threading.Lock()

    def call(fn: Callable[[], Any]) -> Any:
        with lock:
            return fn()

    def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        text = env.get_template(name).render(token=token, field=FIELD, workspace=sp.root, store=sp.shown_url, **context)
        return HTMLResponse(text, status_code=status)

    def failed(request: Request, exc: SafepointError) -> Response:
        message = one_line(str(exc))
        status = http_status(exc)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message, "exit_code": int(exc.exit_code)}, status_code=status)
        return page(request, "error.html", status, message=message, code=status)

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def run(request: Request) -> Response:
            try:
                return handler(request)
            except SafepointError as exc:
                return failed(request, exc)
            except OSError as exc:
                return failed(request, _disk_full(exc))

        return run

    def api_json(value: Any, status: int = 200) -> Response:
        return Response(json.dumps(_masked(to_plain(value))), status_code=status, media_type="application/json")

    def page_number(request: Request) -> int:
        from safepoint.errors import ConfigError

        raw = request.query_params.get("page", "1")
        if not raw.isdigit() or len(raw) > 9:
            raise ConfigError(f"page {raw[:20]!r} is not a page number")
        return int(raw)

    def run_id_of(request: Request) -> str:
        return str(request.path_params["run_id"])

    # pages -------------------------------------------------------------------------------------------------------
    def runs_page(request: Request) -> Response:
        return page(request, "runs.html", rows=call(sp.runs_overview))

    def run_page(request: Request) -> Response:
        run_id, number = run_id_of(request), page_number(request)
        found = call(lambda: sp.timeline(run_id, page=number))
        return page(request, "run.html", t=found)

    def conflicts_page(request: Request) -> Response:
        run_id = run_id_of(request)
        return page(request, "conflicts.html", run_id=run_id, sides=call(lambda: sp.conflict_sides(run_id)))

    def approvals_page(request: Request) -> Response:
        return page(request, "approvals.html", waiting=call(sp.approvals))

    def form_of(request: Request) -> dict[str, str]:
        form: dict[str, str] = request.scope.get("state", {}).get("form", {})
        return form

    def resolve_form(request: Request) -> Response:
        run_id, form = run_id_of(request), form_of(request)
        resolve(run_id, form.get("path", ""), form.get("resolution", ""))
        return RedirectResponse(f"/runs/{quote(run_id, safe='')}/conflicts", status_code=303)

    def answer_form(approved: bool) -> Callable[[Request], Response]:
        def handler(request: Request) -> Response:
            run_id, form = run_id_of(request), form_of(request)
            answer(run_id, form.get("call_id", ""), approved)
            back = "/approvals" if form.get("back") == "approvals" else f"/runs/{quote(run_id, safe='')}"
            return RedirectResponse(back, status_code=303)

        return handler

    def settle_form(request: Request) -> Response:
        from safepoint.errors import ConfigError

        run_id, form = run_id_of(request), form_of(request)
        if form.get("happened") not in ("yes", "no"):  # never a default: "no" lets a resume run the call again
            raise ConfigError("say whether the call happened: yes or no")
        settle(run_id, form.get("call_id", ""), form["happened"] == "yes")
        return RedirectResponse(f"/runs/{quote(run_id, safe='')}", status_code=303)

    # the JSON API ----------------------------------------------------------------------------------------------------
    def api_runs(request: Request) -> Response:
        return api_json(call(sp.runs_overview))

    def api_run(request: Request) -> Response:
        run_id, number = run_id_of(request), page_number(request)
        return api_json(call(lambda: sp.timeline(run_id, page=number)))

    def api_conflicts(request: Request) -> Response:
        run_id = run_id_of(request)
        return api_json(call(lambda: sp.conflict_sides(run_id)))

    async def api_resolve(request: Request) -> Response:
        body = await _json_body(request)
        run_id = run_id_of(request)
        return api_json(await _in_thread(lambda: resolve(run_id, _text(body, "path"), _text(body, "resolution"))))

    def api_answer(approved: bool) -> Callable[[Request], Any]:
        async def handler(request: Request) -> Response:
            body = await _json_body(request)
            run_id = run_id_of(request)
            return api_json(await _in_thread(lambda: answer(run_id, _text(body, "call_id"), approved)))

        return handler

    async def api_settle(request: Request) -> Response:
        from safepoint.errors import ConfigError

        body = await _json_body(request)
        run_id = run_id_of(request)
        happened = body.get("happened")
        if not isinstance(happened, bool):
            raise ConfigError("the body needs 'happened', true or false")
        return api_json(await _in_thread(lambda: settle(run_id, _text(body, "call_id"), happened)))

    # the writes ------------------------------------------------------------------------------------------------------
    def resolve(run_id: str, path: str, resolution: str) -> Any:
        from safepoint.errors import ConfigError

        if resolution not in RESOLUTIONS:
            raise ConfigError(f"a resolution is one of {', '.join(RESOLUTIONS)}, not {resolution[:40]!r}")
        if not path:
            raise ConfigError("say which conflict to resolve: its path")
        chosen = cast("ConflictResolution", resolution)  # one of RESOLUTIONS, checked just above
        return call(lambda: sp.resolve(run_id, path, chosen))

    def answer(run_id: str, call_id: str, approved: bool) -> Any:
        from safepoint.errors import ConfigError

        if not call_id:
            raise ConfigError("say which call to answer: its call_id")
        if approved:
            return call(lambda: sp.approve(run_id, call_id, by=who))
        return call(lambda: sp.deny(run_id, call_id, by=who))

    def settle(run_id: str, call_id: str, happened: bool) -> Any:
        from safepoint.errors import ConfigError

        if not call_id:
            raise ConfigError("say which call to settle: its call_id")
        return call(lambda: sp.settle(run_id, call_id, happened=happened, by=who))

    async def _in_thread(fn: Callable[[], Any]) -> Any:
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(fn)

    def async_guarded(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def run(request: Request) -> Response:
            try:
                response: Response = await handler(request)
                return response
            except SafepointError as exc:
                return failed(request, exc)
            except OSError as exc:
                return failed(request, _disk_full(exc))

        return run

    def stylesheet(request: Request) -> Response:
        return Response(css, media_type="text/css")

    routes = [
        Route("/", guarded(runs_page)),
        Route("/approvals", guarded(approvals_page)),
        Route("/runs/{run_id}", guarded(run_page)),
        Route("/runs/{run_id}/conflicts", guarded(conflicts_page)),
        Route("/runs/{run_id}/resolve", guarded(resolve_form), methods=["POST"]),
        Route("/runs/{run_id}/approve", guarded(answer_form(True)), methods=["POST"]),
        Route("/runs/{run_id}/deny", guarded(answer_form(False)), methods=["POST"]),
        Route("/runs/{run_id}/settle", guarded(settle_form), methods=["POST"]),
        Route("/static/ui.css", stylesheet),
        Route("/api/runs", guarded(api_runs)),
        Route("/api/runs/{run_id}", guarded(api_run)),
        Route("/api/runs/{run_id}/conflicts", guarded(api_conflicts)),
        Route("/api/runs/{run_id}/resolve", async_guarded(api_resolve), methods=["POST"]),
        Route("/api/runs/{run_id}/approve", async_guarded(api_answer(True)), methods=["POST"]),
        Route("/api/runs/{run_id}/deny", async_guarded(api_answer(False)), methods=["POST"]),
        Route("/api/runs/{run_id}/settle", async_guarded(api_settle), methods=["POST"]),
    ]
    return Guard(Starlette(routes=routes), token=token, hosts=hosts)


async def _json_body(request: Request) -> dict[str, Any]:
    from safepoint.errors import ConfigError

    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError:
        raise ConfigError("the body is not JSON") from None
    if not isinstance(body, dict):
        raise ConfigError("the body is a JSON object")
    return body


def _text(body: dict[str, Any], key: str) -> str:
    from safepoint.errors import ConfigError

    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"the body needs {key!r}, a string")
    return value


def _masked(value: Any) -> Any:
    """Plain data with the passwords of each string masked, as ``--json`` does (no password shown, whatever field
    quotes one). Each string on its own: masking the encoded JSON let a quote opened in one message close in a
    later one and swallow the items between (rejected: the regex over ``json.dumps``'s text)."""
    from safepoint.api import mask_passwords

    if isinstance(value, str):
        return mask_passwords(value)
    if isinstance(value, dict):
        return {mask_passwords(str(key)): _masked(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(item) for item in value]
    return value


def _disk_full(exc: OSError) -> SafepointError:
    """A full disk outside the store (the workspace, where a resolve writes) is said as the CLI says it; any other
    OSError (a file of the workspace the page cannot read) is one line too, never a bare 500."""
    from safepoint.errors import DiskFullError, is_disk_full

    where = f" ({exc.filename})" if exc.filename else ""
    if not is_disk_full(exc):
        return StoreError(f"cannot read or write{where}: {exc.strerror or exc}; fix its permissions, then try again")
    return DiskFullError(f"no space left on the disk{where}; free space, then try again")


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): the page still says where it came from
        return "user"


def new_token() -> str:
    import secrets

    return secrets.token_urlsafe(32)


__all__ = ["create_app", "http_status", "new_token"]
