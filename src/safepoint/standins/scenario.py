"""Scenario files for the scripted provider: a deterministic model, for the demo, tests and users' regressions.

``{"task": "...", "model": "scripted-v1", "turns": [{"text": "...", "tool_calls": [{"tool": "write_file",
"args": {...}}]}, {"text": "done"}]}``. A turn without tool calls ends the run. Call ids are given or numbered
``call_1, call_2, ...`` in scenario order, so they are the same on every replay of the script.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from typing import Any

import msgspec

from safepoint.core.nesting import MAX_DEPTH, deeper_than
from safepoint.errors import ScenarioError
from safepoint.records import ToolCall


class ScenarioCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tool: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    call_id: str | None = None


class ScenarioTurn(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    text: str = ""
    tool_calls: list[ScenarioCall] = msgspec.field(default_factory=list)
    expect_in_context: list[str] = msgspec.field(default_factory=list)
    streamed: bool = False  # the text is shown to the user as it is generated (visible_output_started)


# ``dict=True``: room for the cached numbering below (it is not a field: never encoded, never compared).
class Scenario(msgspec.Struct, frozen=True, forbid_unknown_fields=True, dict=True):
    task: str
    turns: list[ScenarioTurn]
    model: str = "scripted-v1"
    system: str = ""
    model_config: dict[str, Any] = msgspec.field(default_factory=dict)

    @functools.cached_property
    def _calls_before(self) -> list[int]:
        """How many calls the turns before each turn make: counted once, so a turn's call ids cost what the turn
        holds (summing the turns before it at every turn made a long script quadratic to play and to load)."""
        return [0, *itertools.accumulate(len(turn.tool_calls) for turn in self.turns)]

    def calls(self, turn: int) -> list[ToolCall]:
        number = self._calls_before[turn]
        found = []
        for call in self.turns[turn].tool_calls:
            number += 1
            found.append(ToolCall(call_id=call.call_id or f"call_{number}", tool=call.tool, args=call.args))
        return found


def parse_scenario(data: bytes, source: str = "scenario") -> Scenario:
    try:
        scenario = msgspec.json.decode(data, type=Scenario)
    except msgspec.ValidationError as exc:
        raise ScenarioError(f"{source}: {exc}; see the scenario format in the README") from None
    except msgspec.DecodeError as exc:
        raise ScenarioError(f"{source} is not valid JSON ({exc}); fix the file and run again") from None
    except RecursionError:
        raise ScenarioError(f"{source} nests too deep to read; keep tool arguments under {MAX_DEPTH} levels") from None
    if not scenario.turns:
        raise ScenarioError(f"{source} has no turns; add at least one turn")
    seen: set[str] = set()
    for index in range(len(scenario.turns)):
        for call in scenario.calls(index):
            if deeper_than(call.args):
                raise ScenarioError(
                    f"{source}: the arguments of call {call.call_id!r} nest deeper than {MAX_DEPTH} levels; "
                    "flatten them"
                )
            if call.call_id in seen:
                raise ScenarioError(f"{source}: call id {call.call_id!r} is used twice; call ids must be unique")
            seen.add(call.call_id)
    return scenario


def load_scenario(path: str) -> Scenario:
    if not os.path.isfile(path):
        raise ScenarioError(f"scenario file {path!r} does not exist; pass the path of a JSON scenario")
    with open(path, "rb") as handle:
        return parse_scenario(handle.read(), path)


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(msgspec.json.encode(scenario))
    return result
