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
        self.contexts: list[Context] = []

    def complete(self, context: Context, turn: int, stream: OutputStream | None = None) -> ModelTurn:
        self.contexts.append(context)
        if turn >= len(self.scenario.turns):
            return ModelTurn(text="(end of script)", tool_calls=[])
        scripted = self.scenario.turns[turn]
        seen = context.system + "\n" + "\n".join(message.content for message in context.messages)
        for expected in scripted.expect_in_context:
            if expected not in seen:
                raise ScenarioError(f"turn {turn + 1} expects {expected!r} in the model's context, and it is not there")
        if stream is not None and scripted.streamed and scripted.text:
            # A streamed turn shows its text in two pieces, so a fault point can fall between them.
            half = max(1, len(scripted.text) // 2)
            stream.text(scripted.text[:half])
            stream.text(scripted.text[half:])
        return ModelTurn(text=scripted.text, tool_calls=self.scenario.calls(turn))
