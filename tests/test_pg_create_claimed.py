"""A run and its first claim in one commit on PostgreSQL (seed 003 §1: the generation is durable before its owner
acts; a created run's first claim shares the creating commit): what a new run's session does."""

from __future__ import annotations

from typing import Any

import pytest

import safepoint
from safepoint.engine.tools import tool
from safepoint.errors import RunExistsError, StoreError
from safepoint.records import RecoveryIdentity
from safepoint.store.postgres import PostgresStore


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx: Any) -> str:
    return "ok"


@pytest.fixture
def store(fresh_url: str):
    opened = PostgresStore(fresh_url)
    yield opened
    opened.close()


def test_created_and_claimed_as_a_claim_after_creating_would(store):
    claim = store.create_claimed_run("r", b'{"h":1}', "me")
    owner = store.owner("r")
    assert owner is not None and (owner.generation, owner.holder, owner.released) == (1, "me", False)
    assert (claim.run_id, claim.holder, claim.generation) == ("r", "me", 1)
    assert store.run_header("r") == b'{"h":1}'
    store.append(claim, [])  # the claim is current: a write goes through
    with pytest.raises(RunExistsError):
        store.create_claimed_run("r", b"{}", "other")
    assert store.owner("r") == owner
    child = RecoveryIdentity(recovery_class="tool", owner_id="parent#c1", agent_id="c")
    assert store.create_claimed_run("c", b"{}", "me", identity=child).generation == 1
    with pytest.raises(StoreError, match="already answers for another run"):  # the claim's own message
        store.create_claimed_run(
            "d", b"{}", "me", identity=RecoveryIdentity(recovery_class="tool", owner_id="parent#c1", agent_id="d")
        )


def test_one_transaction_a_failure_before_the_owner_is_written_leaves_no_run(store, monkeypatch):
    def broken(*args: object, **kwargs: object) -> None:
        raise StoreError("lost before the owner was written")

    monkeypatch.setattr(PostgresStore, "_write_owner", broken)
    with pytest.raises(StoreError, match="lost before"):
        store.create_claimed_run("r", b"{}", "me")
    assert store.list_runs() == []  # the run's row went with the transaction: never a run without its owner


def test_a_new_runs_session_creates_and_claims_in_one_call(fresh_url, workspace, monkeypatch):
    def no_claim(*args: object, **kwargs: object) -> None:
        raise AssertionError("a created run's first claim is the creating commit's")

    monkeypatch.setattr(PostgresStore, "claim", no_claim)
    tm = safepoint.open(fresh_url, workspace=workspace)
    try:
        run = tm.start("t", tools=[noop], run_id="r")
        assert run.call("noop", {}) == "ok"
        owner = tm.store.owner("r")
        assert owner is not None and owner.generation == 1
    finally:
        tm.close()
