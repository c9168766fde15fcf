"""The scripted model: plays a scenario's turns, for the demo, the tests and benchmarks (no model server)."""

from __future__ import annotations

from safepoint.errors import ScenarioError
from safepoint.providers.base import Context, ModelTurn, OutputStream
from safepoint.standins.scenario import Scenario


class ScriptedProvider:
    """Plays a scenario turn by turn; after a resume it continues with the turn after the last completed one."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.model = scenario.model
        self.contexts: list[Context] = []  # what the model was shown at each turn (snapshots: no copies)

    def complete(self, context: Context, turn: int, stream: OutputStream | None = None) -> ModelTurn:
        self.contexts.append(context)
        if turn >= len(self.scenario.turns):
            return ModelTurn(text="(end of script)", tool_calls=[])
        scripted = self.scenario.turns[turn]
        for expected in scripted.expect_in_context:
            if not _in_context(expected, context):
                raise ScenarioError(f"turn {turn + 1} expects {expected!r} in the model's context, and it is not there")
        if stream is not None and scripted.streamed and scripted.text:
            # A streamed turn shows its text in two pieces, so a fault point can fall between them.
            half = max(1, len(scripted.text) // 2)
            stream.text(scripted.text[:half])
            stream.text(scripted.text[half:])
        return ModelTurn(text=scripted.text, tool_calls=self.scenario.calls(turn))


def _in_context(expected: str, context: Context) -> bool:
    """Whether ``expected`` is in the context as the model reads it (the system region, then each message, joined
    by newlines). Only a turn that expects something reads the context, newest message first (what a turn expects
    is mostly recent); the joined text is built only for a string that spans messages, so the answer stays the
    same as searching the joined text."""
    if expected in context.system or any(expected in message.content for message in reversed(context.messages)):
        return True
    if "\n" not in expected:
        return False  # a match across messages would cross the newline between them
    return expected in context.system + "\n" + "\n".join(message.content for message in context.messages)
