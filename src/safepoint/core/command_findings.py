"""One finding about one part of a command line, and the rule that the most dangerous finding wins.

A finding is a grade from :data:`safepoint.core.command_rules.GRADES` (idempotency, replay policy, risk) with
the effects seen and a one-sentence reason; the classifier collects them while it walks a line and the line's
verdict is the worst of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from safepoint.core.command_rules import GRADES, IDEMPOTENCY_RANK, POLICY_RANK, RISK_RANK
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel

__all__ = ["PROTECTED_EFFECT", "Finding", "danger", "finding"]

# The effect of a command that reaches safepoint's store or a repository's .git: held for a person's decision
# whatever the approval mode (core/command_reach.py).
PROTECTED_EFFECT = "store_or_git"


class Finding(NamedTuple):
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    risk_level: RiskLevel
    side_effects: tuple[str, ...]
    reason: str


def finding(grade: str, effects: Iterable[str], reason: str, risk: RiskLevel | None = None) -> Finding:
    idempotency, policy, base_risk = GRADES[grade]
    return Finding(idempotency, policy, risk or base_risk, tuple(effects), reason)


def danger(findings: Sequence[Finding]) -> tuple[int, int, int]:
    return (
        max(POLICY_RANK[f.replay_policy] for f in findings),
        max(IDEMPOTENCY_RANK[f.idempotency] for f in findings),
        max(RISK_RANK[f.risk_level] for f in findings),
    )
