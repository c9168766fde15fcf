"""Every byte safepoint persists, except file versions, goes through the run's redactor (issue 11 §2): not only the
log writer's records but a person's control records (a submission's text and prompts, an approval's reason, who
cancelled), an internal tool's result (``safepoint:KIND:N``, kept as a blob), the restart checkpoint (a queued
submission's text), a restart's own records and terminal events, what a parent is told; a scheduled job that holds
a secret is refused (it would be kept, or run redacted). Planted secrets are looked for in every write the store
receives (a spy over its write methods, blobs decompressed) and in every byte it holds, on both stores."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import safepoint
from safepoint import supervision
from safepoint.core.blobs import open_blob, unpack
from safepoint.engine.tools import ToolContext
from safepoint.records import Blob
from safepoint.restart.judge import tell_parent
from safepoint.standins.scenario import parse_scenario
from safepoint.store.base import Store
from tests.store_text import every_store_byte

from .test_protocol import NOTIFY, Cli, scenario
from .test_secrets import _dump

OPENAI = "sk-proj-" + "Lq3Rt5Yu7Io9Pa1Sd2Fg" * 2
GITHUB = "ghp_" + "Hh1Jj2Kk3Ll4Zz5Xx6Cc7Vv8Bb9Nn0Mm1Qq2W"
AWS = "AKIA" + "LEFTQ7X2Y4W6V8U0"
BEARER = "eyJhbGciOiJIUzI1NiJ9.leftBearerToken9921"
URL_PASSWORD = "Url-Pw-77Zq-left"
ENV_VALUE = "envonly-Credential-5531"  # no shape of its own: found only as the value of a credential variable
SECRETS = (OPENAI, GITHUB, AWS, BEARER, URL_PASSWORD, ENV_VALUE)
TEXT = (
    f"key {OPENAI} token {GITHUB} aws {AWS} Authorization: Bearer {BEARER} "
    f"https://deploy:{URL_PASSWORD}@git.example.com/repo.git service {ENV_VALUE}"
)
WRITES = (
    "create_run", "create_claimed_run", "append", "claim", "close_owner", "upsert_restart_checkpoint",
    "record_terminal_event",
    "post_control", "put_schedule", "put_artifact", "trace", "put_blobs",
)  # fmt: skip


class Spy:
    """Every byte a store's write methods receive (a log's blobs decompressed: a secret must not hide in zstd)."""

    def __init__(self, store: Store) -> None:
        self.written: list[tuple[str, bytes]] = []
        for name in WRITES:
            setattr(store, name, self._wrap(name, getattr(store, name)))

    def _wrap(self, name: str, method: Any) -> Any:
        def spied(*args: Any, **kwargs: Any) -> Any:
            for value in (*args, *kwargs.values()):
                self.written += [(name, data) for data in _bytes(value)]
            return method(*args, **kwargs)

        return spied

    def leaks(self) -> list[str]:
        return [
            f"{name}: {secret[:10]}..." for name, data in self.written for secret in SECRETS if secret.encode() in data
        ]


def _bytes(value: Any) -> Iterator[bytes]:
    if isinstance(value, bytes):
        yield value
        if value.startswith(b"spb1 "):  # a store blob (core.blobs): what it holds, unpacked
            head, _, payload = value.partition(b"\n")
            _, codec, size = head.split(b" ")
            yield unpack(codec.decode(), payload, int(size))
    elif isinstance(value, str):
        yield value.encode()
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _bytes(item)
    elif isinstance(value, msgspec.Struct):
        if type(value).__name__ == "LogRecord":
            body = bytes(value.body)  # type: ignore[attr-defined]  # a LogRecord's body is Raw JSON
            yield body
            if value.kind == "blob":  # type: ignore[attr-defined]
                blob = msgspec.json.decode(body, type=Blob)
                if not blob.stored:  # a reference's content is written by put_blobs, spied too
                    yield open_blob(blob)
        else:
            yield msgspec.json.encode(value)


@pytest.fixture(params=["file", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("fresh_url") if request.param == "postgres" else None


def _held(url: str | None, ws: Path) -> str:
    """Every byte the store holds: its files, or every row of every table."""
    if url is not None:
        return _dump(url)
    return every_store_byte(ws / ".agent-runtime").decode(errors="replace")  # compressed history expanded


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", ENV_VALUE)


def _closed_with(ctx: ToolContext, args: dict[str, Any], result: str) -> str:
    return f"closed {result}; the tracker said: {TEXT}"


@safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="medium", compensator=_closed_with)
def open_ticket(ctx: ToolContext, title: str) -> str:
    return "TICKET-1"


def test_no_write_of_a_run_carries_a_planted_secret(tmp_path, planted, store_url):
    ws = tmp_path / "ws"
    ws.mkdir()
    sp = safepoint.open(store_url, workspace=str(ws))
    spy = Spy(sp.store)
    try:
        with sp.start(f"deploy with {TEXT}", tools=[open_ticket], run_id="r") as run:
            run.call("run_command", {"command": f"echo '{TEXT}'"}, call_id="c1")
            run.call("run_command", {"command": f"yes '{TEXT}' | head -n 2000"}, call_id="c2")  # an artifact
            run.call("open_ticket", {"title": "x"}, call_id="c3")
        compensated = sp.compensate("r", "c3", tools=[open_ticket])  # an internal call: its result is a blob
        assert compensated.startswith("closed TICKET-1") and OPENAI in compensated  # the caller gets it as it is
        sp.submit("r", f"also {TEXT}", append_system_prompt=f"remember {TEXT}")
        script = parse_scenario(msgspec.json.encode({"task": "t", "turns": [{"text": "done"}]}))
        with sp.resume("r", tools=[open_ticket]) as run:  # admits the submission: a queued_submission checkpoint
            assert sp.run_agent(run, safepoint.ScriptedProvider(script)) == "completed"
        tell_parent(sp.store, "r", "r.child", "c9", "closed", f"the child said {TEXT}")
        written = {name for name, _ in spy.written}
        assert written & {"create_run", "create_claimed_run"}  # the header: on its own or with the first owner
        assert written >= {
            "append",
            "upsert_restart_checkpoint",
            "post_control",
            "put_artifact",
            "trace",
        }
        assert spy.leaks() == []
        held = _held(store_url, ws)
        assert "[REDACTED:" in held
        assert [s for s in SECRETS if s in held] == []
        submitted = [m for m in sp.history("r").current if (m.name or "").startswith("submission:")]
        assert "[REDACTED:openai_key]" in submitted[0].content  # what the model was given, and what is kept
    finally:
        sp.close()


def test_a_scheduled_jobs_secret_becomes_a_variable_or_is_refused_and_nothing_is_kept(tmp_path, planted, store_url):
    ws = tmp_path / "ws"
    ws.mkdir()
    sp = safepoint.open(store_url, workspace=str(ws))
    spy = Spy(sp.store)
    try:
        # A task's secret has a variable to come from at fire time: it is kept as a placeholder, never as typed.
        job = supervision.add_job(
            sp, "nightly", cron="0 3 * * *", task=f"deploy {TEXT}", provider={"model": "m", "base_url": "x"}
        )
        assert job.needs_env and all(name.startswith("SAFEPOINT_JOB_NIGHTLY_") for name in job.needs_env)
        assert spy.leaks() == []
        sp.store.put_schedule("nightly", None)
        spy.written.clear()
        command = {"task": "t", "turns": [{"tool_calls": [{"tool": "run_command", "args": {"command": ENV_VALUE}}]}]}
        with pytest.raises(safepoint.ConfigError, match="its scenario holds a secret"):
            supervision.add_job(sp, "hourly", cron="0 * * * *", scenario=parse_scenario(msgspec.json.encode(command)))
        assert sp.store.list_schedules() == {} and spy.written == []
        fine = supervision.add_job(sp, "ok", cron="0 3 * * *", task="deploy", provider={"model": "m", "base_url": "x"})
        assert fine.job_id == "ok" and list(sp.store.list_schedules()) == ["ok"]
    finally:
        sp.close()


def test_an_approval_and_a_cancel_by_a_person_and_the_restart_that_closes_the_run_are_redacted(
    tmp_path, planted, store_url
):
    """A run killed while it waits for approval; a person answers with a reason and cancels it, naming themselves:
    the control records, the restart's report and run event, the terminal event are all written redacted."""
    cli = Cli(tmp_path, ["--store", store_url] if store_url else None)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok"}])
    crashed = cli("run", sc, "--run-id", "r", "--approval", "high", SAFEPOINT_FAILPOINT="approval_wait")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    sp = safepoint.open(store_url, workspace=str(cli.workspace))
    spy = Spy(sp.store)
    try:
        sp.deny("r", "call_1", by=f"ops {GITHUB}", reason=f"not with {TEXT}")
        assert sp.cancel("r", by=f"oncall {AWS} {ENV_VALUE}") == "closed"
        assert {"post_control", "append", "record_terminal_event"} <= {name for name, _ in spy.written}
        assert spy.leaks() == []
        held = _held(store_url, cli.workspace)
        assert "[REDACTED:" in held and [s for s in SECRETS if s in held] == []
        [status] = sp.status("r")
        assert status.status == "cancelled" and "[REDACTED:aws_access_key_id]" in (status.terminal_status or "")
    finally:
        sp.close()
