"""A provider's rejection names the variable the key came from (``--api-key-env``), and a server's echo of the key,
whole or cut, is masked (finding 17)."""

from __future__ import annotations

import pytest

from safepoint.providers.openai_compat import masked
from tests.conftest import cli_env, safepoint_in_process
from tests.openai_server import FakeOpenAI

KEY = "llmkey-" + "0123456789abcdefXYZ"


@pytest.mark.parametrize(
    "echo",
    [f"Incorrect API key provided: {KEY}.", f"bad key {KEY[:12]}...", f"key ending {KEY[-9:]} is revoked"],
)
def test_a_rejection_names_the_keys_variable_and_masks_its_echo(workspace, echo):
    with FakeOpenAI([{"status": 401, "error": echo}]) as server:
        done = safepoint_in_process(
            "run", "--task", "t", "--model", "m", "--base-url", server.base_url, "--api-key-env", "LLM",
            "-w", workspace, "--run-id", "r", env=cli_env(LLM=KEY),
        )  # fmt: skip
    assert done.returncode == 8, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and line.endswith("check LLM"), line
    for piece in (KEY, KEY[:12], KEY[-9:]):
        assert piece not in done.stdout + done.stderr, line


def test_masked_leaves_text_without_the_key_alone():
    assert masked("invalid api key", KEY) == "invalid api key"
    assert masked(f"x{KEY[3:15]}y", KEY) == "x***y"
    assert masked("not-needed", "not-needed") == "not-needed"  # the local placeholder is no secret
