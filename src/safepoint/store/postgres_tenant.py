"""A PostgreSQL store restricted to one recovery identity (``--tenant CLASS[/OWNER]``): what it may recover.

Daemons sharing one database can split the work by the seed's recovery identity: a pool of daemons for the
``scheduled`` class, another for ``root`` runs, or one for a single owner. A restricted store refuses to claim a
run whose recovery owner is another's, naming ``recovery_identity_mismatch`` (seed 003 §3.1: recovery is blocked,
so one tenant never takes over another's run), and its passes and startup recovery list only its own runs.

Why at the claim and not only in the judge: a run that fails an assertion is closed by whoever judged it, and closing
another tenant's run is as much a takeover as resuming it. Reading is not restricted (``status`` and ``explain``
show every run the database role may read; the database's own roles are the boundary for that).
"""

from __future__ import annotations

import msgspec
import psycopg

from safepoint.errors import ConfigError, StoreError
from safepoint.protocol import RecoveryClass
from safepoint.records import OwnerState, RecoveryIdentity
from safepoint.store.postgres_schema import SCHEMA

Connection = psycopg.Connection[tuple[object, ...]]

CLASSES: tuple[RecoveryClass, ...] = ("root", "subagent", "scheduled")


class Tenant(msgspec.Struct, frozen=True):
    recovery_class: str
    owner_id: str | None = None  # None: every owner of the class

    def __str__(self) -> str:
        return self.recovery_class + (f"/{self.owner_id}" if self.owner_id is not None else "")

    def allows(self, recovery_class: str, owner_id: str) -> bool:
        return recovery_class == self.recovery_class and self.owner_id in (None, owner_id)


def parse_tenant(text: str) -> Tenant:
    """``CLASS`` or ``CLASS/OWNER``; a class the seed does not name is refused in one line."""
    recovery_class, _, owner_id = text.partition("/")
    if recovery_class not in CLASSES:
        raise ConfigError(f"--tenant {text!r}: the recovery class must be one of {', '.join(CLASSES)}")
    if "/" in text and not owner_id:
        raise ConfigError(f"--tenant {text!r}: name an owner after the slash, or leave the slash out")
    return Tenant(recovery_class, owner_id or None)


def mismatch(run_id: str, recovery_class: str, owner_id: str, tenant: Tenant) -> StoreError:
    return StoreError(
        f"run {run_id!r}: recovery_identity_mismatch: its recovery owner is {recovery_class}/{owner_id} but this "
        f"store is restricted to {tenant}; recover it from a store restricted to its own identity"
    )


def check_tenant(tenant: Tenant, run_id: str, current: OwnerState | None, identity: RecoveryIdentity | None) -> None:
    """Refuse a claim of another tenant's run. The identity is the first claim's (``identity``, default a root run
    that owns itself) and never changes after, so the one stored is the one to judge."""
    kept = identity or RecoveryIdentity(owner_id=run_id, agent_id=run_id)
    recovery_class, owner_id = (
        (current.recovery_class, current.owner_id) if current else (kept.recovery_class, kept.owner_id)
    )
    if not tenant.allows(recovery_class, owner_id):
        raise mismatch(run_id, recovery_class, owner_id, tenant)


def own_runs(conn: Connection, tenant: Tenant, run_ids: list[str]) -> list[str]:
    """The runs of ``run_ids`` whose recovery owner is the tenant's, in the same order. A run never claimed has the
    identity a first claim without one gives it (a root run owning itself)."""
    if not run_ids:
        return run_ids
    rows = conn.execute(
        f"SELECT agent_id, holder_state IS NULL, recovery_class, owner_id FROM {SCHEMA}.recovery_owners "
        "WHERE agent_id = ANY(%s)",
        (run_ids,),
    ).fetchall()
    own = {
        str(agent_id)
        for agent_id, unclaimed, recovery_class, owner_id in rows
        if (tenant.allows("root", str(agent_id)) if unclaimed else tenant.allows(str(recovery_class), str(owner_id)))
    }
    return [run_id for run_id in run_ids if run_id in own]
