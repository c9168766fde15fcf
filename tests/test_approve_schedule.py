"""A scheduled job keeps no secret (finding 13): the task's secrets and the base URL's password become variables
the job takes from the environment when it fires; the user is told their names; a missing one is one line."""

from __future__ import annotations

import json
import os
import time

from safepoint.supervisor import schedule
from tests.conftest import cli_env, safepoint_in_process
from tests.openai_server import FakeOpenAI
from tests.store_text import every_store_byte

TOKEN = "ghp_" + "Pp1Qq2Rr3Ss4Tt5Uu6Vv7Ww8Xx9Yy0Zz1Aa2Bb"
PASSWORD = "Url-Pa55word-" + "61xq"
TASK_VAR = "SAFEPOINT_JOB_NIGHTLY_1_SECRET_1"
URL_VAR = "SAFEPOINT_JOB_NIGHTLY_1_PASSWORD"


def _store_bytes(workspace) -> bytes:
    return every_store_byte(workspace / ".agent-runtime")  # compressed history expanded


def _add(workspace, base_url: str, task: str = f"deploy with {TOKEN} then report", cron: str = "0 3 * * *"):
    return safepoint_in_process(
        "schedule", "add", "nightly.1", "--cron", cron, "--task", task, "--model", "m",
        "--base-url", base_url, "-w", workspace, env=cli_env(),
    )  # fmt: skip


def test_a_jobs_secrets_become_variables_it_names(workspace):
    added = _add(workspace, f"https://user:{PASSWORD}@llm.internal/v1")
    assert added.returncode == 0, added.stderr
    assert TASK_VAR in added.stdout and URL_VAR in added.stdout, added.stdout
    stored = _store_bytes(workspace)
    assert TOKEN.encode() not in stored and PASSWORD.encode() not in stored
    listed = safepoint_in_process("schedule", "list", "-w", workspace, "--json", env=cli_env())
    row = json.loads(listed.stdout)[0]
    assert row["needs_env"] == [TASK_VAR, URL_VAR]
    assert "${" + TASK_VAR + "}" in row["what"] and TOKEN not in listed.stdout


def test_a_job_without_a_secret_needs_no_variable(workspace):
    added = _add(workspace, "https://llm.internal/v1", task="tidy the ${HOME} notes")
    assert added.returncode == 0, added.stderr
    job = schedule.get_job(__import__("safepoint").open(workspace=str(workspace)).store, "nightly.1")
    assert job.secret_env == () and job.task == "tidy the ${HOME} notes"


def test_a_job_fires_with_its_secrets_from_the_environment_and_says_which_is_missing(workspace):
    with FakeOpenAI([{"text": "done"}]) as server:
        url = server.base_url.replace("://", f"://user:{PASSWORD}@", 1)
        assert _add(workspace, url, cron="* * * * * *").returncode == 0  # every second
        job = schedule.get_job(__import__("safepoint").open(workspace=str(workspace)).store, "nightly.1")
        at = schedule.next_occurrence(job.cron, job.created_at_ms)
        while schedule.now_ms() < at + 10:
            time.sleep(0.05)
        missing = safepoint_in_process(
            "schedule", "fire", "nightly.1", "--at", str(at), "-w", workspace, env=cli_env(OPENAI_API_KEY="k" * 20)
        )
        assert missing.returncode != 0
        assert len(missing.stderr.strip().splitlines()) == 1 and TASK_VAR in missing.stderr, missing.stderr
        fired = safepoint_in_process(
            "schedule", "fire", "nightly.1", "--at", str(at), "-w", workspace,
            env=cli_env(OPENAI_API_KEY="k" * 20, **{TASK_VAR: TOKEN, URL_VAR: PASSWORD}),
        )  # fmt: skip
        assert fired.returncode == 0, fired.stderr
        sent = json.dumps(server.requests)
    assert TOKEN in sent  # the model is given the real task
    stored = _store_bytes(workspace)
    assert TOKEN.encode() not in stored and PASSWORD.encode() not in stored
    assert os.environ.get(TASK_VAR) is None
