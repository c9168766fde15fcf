"""A call's effective classification: the tool's declaration, refined by the input where the tool says so (§8.7).

``run_command("ls")`` is idempotent and ``run_command("npm publish")`` is not: the classification belongs to the
call, so it is computed at planning time and stored in the call's ledger entry.
"""

from __future__ import annotations

from typing import get_args

import msgspec

from safepoint.errors import ToolRegistrationError
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel, ToolDefinition


class Classification(msgspec.Struct, frozen=True, kw_only=True):
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    risk_level: RiskLevel
    side_effects: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


def check_definition(definition: ToolDefinition) -> None:
    """Refuse a declaration with a value the ledger does not know (every record of the tool would then read as
    corrupt), or one that would let a repeat-unsafe tool be re-run without asking anyone."""
    for field, allowed in (
        ("idempotency", get_args(Idempotency)),
        ("replay_policy", get_args(ReplayPolicy)),
        ("risk_level", get_args(RiskLevel)),
    ):
        value = getattr(definition, field)
        if value not in allowed:
            raise ToolRegistrationError(
                f"tool {definition.name!r}: {field} {value!r} is not one of {', '.join(allowed)}; declare one of them"
            )
    if definition.idempotency == "non_idempotent" and definition.replay_policy == "auto":
        raise ToolRegistrationError(
            f"tool {definition.name!r} is non_idempotent with replay_policy 'auto': a crash could repeat its "
            "effect; declare replay_policy 'ask' or 'never' (or make it conditional with a probe)"
        )


def declared(definition: ToolDefinition) -> Classification:
    return Classification(
        idempotency=definition.idempotency,
        replay_policy=definition.replay_policy,
        risk_level=definition.risk_level,
        side_effects=definition.side_effects,
    )


def normalize(found: Classification) -> Classification:
    """An input classifier may not produce what registration forbids: non_idempotent or high risk with auto."""
    if found.replay_policy == "auto" and (found.idempotency == "non_idempotent" or found.risk_level == "high"):
        return msgspec.structs.replace(
            found, replay_policy="ask", reasons=(*found.reasons, "never replayed automatically: asks first")
        )
    return found
