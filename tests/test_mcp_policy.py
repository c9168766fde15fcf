"""The MCP annotation table and the trust file (``safepoint.integrations.mcp_policy``): pure, no processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from safepoint.errors import ConfigError
from safepoint.integrations.mcp_policy import TrustFile, classify, load_trust

NONE = TrustFile()


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"readOnlyHint": True, "openWorldHint": False}, ("idempotent", "auto", "low")),
        ({"readOnlyHint": True}, ("conditional", "ask", "medium")),  # read-only but open-world: not blindly
        ({"readOnlyHint": True, "openWorldHint": True}, ("conditional", "ask", "medium")),
        ({"destructiveHint": False, "idempotentHint": True, "openWorldHint": False}, ("idempotent", "auto", "medium")),
        ({"destructiveHint": False, "idempotentHint": True}, ("idempotent", "ask", "medium")),
        ({"idempotentHint": True, "openWorldHint": False}, ("idempotent", "auto", "medium")),
        ({"idempotentHint": True}, ("idempotent", "ask", "high")),
        ({"destructiveHint": False}, ("non_idempotent", "ask", "medium")),
        ({"destructiveHint": True, "idempotentHint": False}, ("non_idempotent", "ask", "high")),
        (None, ("non_idempotent", "ask", "high")),  # no annotations: the strictest row
        ({}, ("non_idempotent", "ask", "high")),
    ],
)
def test_the_annotation_table(annotations: object, expected: tuple[str, str, str]) -> None:
    found = classify("t", annotations, NONE)
    assert (found.idempotency, found.replay_policy, found.risk_level) == expected


@pytest.mark.parametrize(
    "annotations",
    [
        {"readOnlyHint": "true", "openWorldHint": "false"},  # strings where booleans go: the defaults
        {"readOnlyHint": 1, "openWorldHint": 0},
        "read-only",
        ["readOnlyHint"],
    ],
)
def test_malformed_hints_never_make_a_tool_look_safer(annotations: object) -> None:
    found = classify("t", annotations, NONE)
    assert (found.idempotency, found.replay_policy, found.risk_level) == ("non_idempotent", "ask", "high")


def test_the_trust_file_wins_field_by_field(tmp_path: Path) -> None:
    trust = tmp_path / "trust.toml"
    trust.write_text(
        '[tools.search]\nidempotency = "idempotent"\nreplay_policy = "auto"\nrisk_level = "low"\n'
        '[tools.send]\nreplay_policy = "never"\n'
        '[tools.wipe]\nidempotency = "idempotent"\nreplay_policy = "auto"\nrisk_level = "high"\n'
    )
    loaded = load_trust(str(trust))
    search = classify("search", {"readOnlyHint": True}, loaded)  # open-world, but the user vouches for it
    assert (search.idempotency, search.replay_policy, search.risk_level) == ("idempotent", "auto", "low")
    send = classify("send", {"readOnlyHint": True, "openWorldHint": False}, loaded)  # the hint says read-only
    assert (send.idempotency, send.replay_policy, send.risk_level) == ("idempotent", "never", "low")
    wipe = classify("wipe", None, loaded)  # high risk is never replayed on its own, trusted or not
    assert (wipe.idempotency, wipe.replay_policy, wipe.risk_level) == ("idempotent", "ask", "high")
    other = classify("other", None, loaded)
    assert (other.idempotency, other.replay_policy) == ("non_idempotent", "ask")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[tools.x]\nidempotency = "non_idempotent"\nreplay_policy = "auto"\n', "non_idempotent with replay_policy"),
        ('[tools.x]\nreplay_policy = "sometimes"\n', "allowed: "),
        ('[tools.x]\nrisk = "low"\n', "risk"),
        ('[tool.x]\nrisk_level = "low"\n', "unknown section 'tool'"),
        ("[tools.x\n", "cannot read it"),
    ],
)
def test_a_bad_trust_file_is_refused_with_one_line(tmp_path: Path, text: str, words: str) -> None:
    trust = tmp_path / "trust.toml"
    trust.write_text(text)
    with pytest.raises(ConfigError, match="--trust") as caught:
        load_trust(str(trust))
    assert words in str(caught.value) and "\n" not in str(caught.value)
