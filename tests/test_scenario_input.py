"""Scenario files and tool arguments that nest absurdly deep are refused in one line, never a RecursionError."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safepoint.core.nesting import MAX_DEPTH, deeper_than
from safepoint.errors import ScenarioError
from safepoint.standins.scenario import parse_scenario


def _scenario(args_json: str) -> bytes:
    return ('{"task": "t", "turns": [{"tool_calls": [{"tool": "write_file", "args": ' + args_json + "}]}]}").encode()


def _nested(depth: int) -> str:
    return '{"path": "a", "content": "x", "deep": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("depth", [MAX_DEPTH, 2_000, 100_000])
def test_deeply_nested_arguments_are_refused_in_one_line(depth):
    with pytest.raises(ScenarioError, match="deep") as caught:
        parse_scenario(_scenario(_nested(depth)), "deep.json")
    assert "\n" not in str(caught.value)


def test_arguments_of_ordinary_depth_are_taken():
    scenario = parse_scenario(_scenario(_nested(10)), "ok.json")
    assert scenario.turns[0].tool_calls[0].args["path"] == "a"


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=30,
)


@given(json_values, st.integers(0, 8))
def test_deeper_than_agrees_with_a_recursive_count(value, limit):
    assert deeper_than(value, limit) == (_depth(value) > limit)
    assert json.loads(json.dumps(value)) == value


# the same through the CLI: one line on stderr, exit 2, no RecursionError and no run created ----------------------
@pytest.mark.parametrize(
    "text",
    [
        '{"task": "t", "turns": ' + "[" * 50_000 + "]" * 50_000 + "}",  # deep where turns are
        "[" * 50_000 + "]" * 50_000,  # a deep file that is no scenario at all
        '{"task": "t", "turns": [{"text": "x", "expect_in_context": ' + "[" * 50_000 + "]" * 50_000 + "}]}",
        _scenario(_nested(5_000)).decode(),  # deep tool arguments
        '{"task": "t", "turns": [{"text": "x"}], "model_config": ' + '{"a": ' * 5_000 + "1" + "}" * 5_000 + "}",
    ],
    ids=["turns", "top", "expect_in_context", "arguments", "model_config"],
)
def test_a_deep_scenario_file_is_one_line_through_the_cli(tmp_path, text):
    from safepoint.errors import ExitCode

    from .conftest import safepoint_in_process

    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "deep.json").write_text(text)
    done = safepoint_in_process("run", tmp_path / "deep.json", "-w", ws, "--run-id", "r")
    assert done.returncode == ExitCode.USAGE, (done.returncode, done.stderr[-500:])
    assert done.stderr.count("\n") == 1 and "deep.json" in done.stderr, done.stderr[-500:]
    assert "Recursion" not in done.stderr and "Traceback" not in done.stderr
    assert safepoint_in_process("status", "-w", ws, "--json").stdout.strip() == "[]", "a run was created"
