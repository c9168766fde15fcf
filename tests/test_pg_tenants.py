"""Issue 14 §7: a PostgreSQL store restricted to a recovery identity (``--tenant CLASS[/OWNER]``) recovers only its
own runs: a claim of another's is refused with recovery_identity_mismatch, and its passes and startup recovery do
not list them; a daemon restricted so leaves the other tenant's crashed run exactly as it was."""

from __future__ import annotations

import pytest

from safepoint.errors import ConfigError, StoreError
from safepoint.records import RecoveryIdentity
from safepoint.store.postgres import PostgresStore
from safepoint.store.postgres_tenant import Tenant, parse_tenant

from .conftest import cli_env
from .test_daemon import call, daemon_once, done, opened, write_scenario


def test_a_restricted_store_claims_only_its_own_runs(fresh_url):
    admin = PostgresStore(fresh_url)
    scheduled = PostgresStore(fresh_url)
    roots = PostgresStore(fresh_url)
    try:
        for run_id in ("a", "b", "n1"):
            admin.create_run(run_id, b"{}")
        nightly = RecoveryIdentity(recovery_class="scheduled", owner_id="nightly", agent_id="n1")
        admin.release(admin.claim("n1", "admin", identity=nightly))
        admin.release(admin.claim("b", "admin"))
        scheduled.restrict(parse_tenant("scheduled"))
        roots.restrict(parse_tenant("root/a"))

        assert roots.claim("a", "me").generation == 1  # its own, even before any claim gave it an identity
        with pytest.raises(StoreError, match="recovery_identity_mismatch") as refused:
            roots.claim("b", "me", takeover=True)  # a takeover is no way around it
        assert "root/b" in str(refused.value) and "restricted to root/a" in str(refused.value)
        with pytest.raises(StoreError, match="recovery_identity_mismatch"):
            roots.try_claim("n1", "me")
        with pytest.raises(StoreError, match="recovery_identity_mismatch"):
            scheduled.claim("b", "me")
        assert scheduled.claim("n1", "me").generation == 2
        assert admin.owner("b").generation == 1  # refused claims changed nothing

        for run_id in ("a", "b", "n1"):
            admin.post_control(run_id, b'{"type": "x"}')
        assert roots.pass_runs(None) == ["a"]
        assert scheduled.pass_runs(None) == ["n1"]
        assert admin.pass_runs(None) == ["a", "b", "n1"]
    finally:
        for store in (admin, scheduled, roots):
            store.close()


def test_a_tenant_is_a_class_the_seed_names_and_an_owner(fresh_url):
    assert parse_tenant("subagent") == Tenant("subagent")
    assert parse_tenant("scheduled/nightly") == Tenant("scheduled", "nightly")
    for bad in ("tenant-a", "root/", ""):
        with pytest.raises(ConfigError):
            parse_tenant(bad)


def test_a_restricted_daemon_leaves_another_tenants_crashed_run_alone(tmp_path, workspace, fresh_url):
    store_args = ["--store", fresh_url]
    outbox = tmp_path / "outbox.jsonl"
    scenario = write_scenario(
        tmp_path,
        [
            {"text": "writing", "tool_calls": [call("write_file", path="a.txt", content="one\n")]},
            {"text": "telling", "tool_calls": [call("send_notification", to="#dev", message="written")]},
            {"text": "done"},
        ],
    )
    crash = cli_env(SAFEPOINT_OUTBOX=str(outbox), SAFEPOINT_FAILPOINT="after_outcome:write_file")
    for run_id in ("a", "b"):
        assert done(workspace, "run", str(scenario), "--run-id", run_id, env=crash, store=store_args).returncode == -9
    store = opened(workspace, store_args)
    before = store.owner("b")

    events = daemon_once(workspace, "--tenant", "root/a", env=cli_env(SAFEPOINT_OUTBOX=str(outbox)), store=store_args)
    assert [e["run_id"] for e in events if e["event"] == "worker_started"] == ["a"]
    assert not [e for e in events if e.get("run_id") == "b"]  # never looked at
    after = store.owner("b")
    assert after is not None and before is not None
    assert (after.generation, after.holder, after.terminal_at) == (before.generation, before.holder, None)
    assert "b" in store.list_restart_checkpoints()
    store.close()

    file_store = done(workspace, "daemon", "--once", "--tenant", "root")
    assert file_store.returncode != 0 and "--tenant needs a PostgreSQL store" in file_store.stderr
    assert len(file_store.stderr.strip().splitlines()) == 1
