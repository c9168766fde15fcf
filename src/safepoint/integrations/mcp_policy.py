"""What an MCP tool's annotations are worth to the ledger, and the local trust file that overrides them.

The MCP specification calls ``ToolAnnotations`` *hints* that a client must not trust from an untrusted server. So
the mapping believes a hint only where believing it cannot repeat an effect in the world outside:

=========================================================  ==============  =============  ======
annotations (missing ones take the spec's defaults:         idempotency     replay_policy  risk
readOnly false, destructive true, idempotent false,
openWorld true)
=========================================================  ==============  =============  ======
readOnly, closed world (``openWorldHint: false``)           idempotent      auto           low
readOnly, open world                                        conditional     ask            medium
not destructive, idempotent, closed world                   idempotent      auto           medium
not destructive, idempotent, open world                     idempotent      ask            medium
destructive, idempotent, closed world                       idempotent      auto           medium
destructive, idempotent, open world                         idempotent      ask            high
not destructive, not idempotent                             non_idempotent  ask            medium
destructive, not idempotent (also: no annotations at all)   non_idempotent  ask            high
=========================================================  ==============  =============  ======

So a tool that claims to be read-only but talks to the world is not replayed blindly after a crash (its "read"
may be a GET that sends mail), and a tool with no annotations gets the strictest row. ``ask`` means an
interrupted call waits for a person (``--replay``/``--skip``); ``auto`` re-sends it.

The trust file (``--trust FILE``, TOML) is the user's word and wins over every hint::

    [tools.append_line]            # an MCP tool's name
    idempotency = "non_idempotent"
    replay_policy = "never"        # an interrupted call is reported to the client, never re-sent nor asked about
    risk_level = "high"            # waits for `safepoint approve` when the run's approval mode is "high"

    [tools.search]
    idempotency = "idempotent"     # I know this server: its search only reads
    replay_policy = "auto"
    risk_level = "low"

A field left out of an entry comes from the table. The file is read once, when the proxy starts, from where the
user put it (rejected: a default path inside the workspace, which the agent could edit to allow its own replays).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any, get_args

import msgspec

from safepoint.core.classify import Classification, normalize
from safepoint.errors import ConfigError
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel


class ToolHints(msgspec.Struct, frozen=True, kw_only=True):
    """A tool's annotations with the specification's defaults applied (a missing hint is the cautious value)."""

    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True

    @classmethod
    def of(cls, annotations: Any) -> ToolHints:
        """From a ``tools/list`` entry's ``annotations`` (camelCase on the wire); anything malformed counts as
        missing, so a server cannot make a tool look safer by sending a string where a boolean goes."""
        given = annotations if isinstance(annotations, Mapping) else {}

        def flag(key: str, default: bool) -> bool:
            value = given.get(key)
            return value if isinstance(value, bool) else default

        return cls(
            read_only=flag("readOnlyHint", False),
            destructive=flag("destructiveHint", True),
            idempotent=flag("idempotentHint", False),
            open_world=flag("openWorldHint", True),
        )


class TrustEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    idempotency: Idempotency | None = None
    replay_policy: ReplayPolicy | None = None
    risk_level: RiskLevel | None = None


class TrustFile(msgspec.Struct, frozen=True, kw_only=True):
    tools: dict[str, TrustEntry] = {}
    source: str = ""


def from_hints(hints: ToolHints) -> Classification:
    """The table in the module docstring."""
    if hints.read_only:
        if hints.open_world:
            return Classification(
                idempotency="conditional",
                replay_policy="ask",
                risk_level="medium",
                reasons=("annotated read-only but open-world: not replayed blindly",),
            )
        return Classification(
            idempotency="idempotent", replay_policy="auto", risk_level="low", reasons=("annotated read-only",)
        )
    if hints.idempotent:
        risk: RiskLevel = "high" if hints.destructive and hints.open_world else "medium"
        policy: ReplayPolicy = "ask" if hints.open_world else "auto"
        return Classification(
            idempotency="idempotent", replay_policy=policy, risk_level=risk, reasons=("annotated idempotent",)
        )
    return Classification(
        idempotency="non_idempotent",
        replay_policy="ask",
        risk_level="high" if hints.destructive else "medium",
        reasons=("annotated destructive" if hints.destructive else "annotated not idempotent",),
    )


def classify(name: str, annotations: Any, trust: TrustFile) -> Classification:
    """A tool's classification: the annotations' row, then the trust file's entry over it. A combination the
    ledger forbids (non_idempotent with ``auto``) is refused when the file is read, not here."""
    found = from_hints(ToolHints.of(annotations))
    entry = trust.tools.get(name)
    if entry is None:
        return found
    return normalize(
        Classification(
            idempotency=entry.idempotency or found.idempotency,
            replay_policy=entry.replay_policy or found.replay_policy,
            risk_level=entry.risk_level or found.risk_level,
            reasons=(f"trusted: {trust.source}",),
        )
    )


def load_trust(path: str | None) -> TrustFile:
    """Read and check the trust file (``ConfigError`` naming the file and the fix, never a traceback)."""
    if path is None:
        return TrustFile()
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"--trust {path}: no such file; give the path of a TOML file with [tools.NAME] entries"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"--trust {path}: cannot read it ({exc}); fix it or leave --trust out") from None
    unknown = sorted(set(data) - {"tools"})
    if unknown:
        raise ConfigError(f"--trust {path}: unknown section {unknown[0]!r}; entries go under [tools.NAME]")
    try:
        tools = msgspec.convert(data.get("tools", {}), type=dict[str, TrustEntry])
    except msgspec.ValidationError as exc:
        choices = "; ".join(
            f"{field}: {', '.join(get_args(kind))}"
            for field, kind in (
                ("idempotency", Idempotency),
                ("replay_policy", ReplayPolicy),
                ("risk_level", RiskLevel),
            )
        )
        raise ConfigError(f"--trust {path}: {exc} (allowed: {choices})") from None
    for name, entry in tools.items():
        if entry.idempotency == "non_idempotent" and entry.replay_policy == "auto":
            raise ConfigError(
                f"--trust {path}: tool {name!r} is non_idempotent with replay_policy 'auto': a crash could repeat "
                "its effect; say 'ask' or 'never'"
            )
    return TrustFile(tools=tools, source=path)
