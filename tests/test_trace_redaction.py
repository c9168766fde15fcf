"""Trace lines written without a session (a person's cancel, a restart's cleanup) are redacted as the run's own
session redacts: the workspace's patterns and the provider's key variable, whatever its name, included. They were
redacted with the built-in patterns only."""

from __future__ import annotations

import safepoint
from tests.store_text import trace_lines

TICKET = "TICKET-483920"
KEY = "zz-provider-key-7391-plain"  # no shape of its own: found only as the value of the provider's key variable


def test_a_cancel_by_a_person_is_traced_redacted_by_the_runs_own_rules(workspace, monkeypatch):
    (workspace / ".safepoint").mkdir()
    (workspace / ".safepoint" / "redact.toml").write_text('patterns = ["TICKET-[0-9]{6}"]\n')
    monkeypatch.setenv("LLM", KEY)
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start("t", run_id="r", provider={"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "LLM"})
    run.call_result("write_file", {"path": "a.txt", "content": "a\n"}, call_id="c1")
    run.close()
    assert tm.cancel("r", by=f"{TICKET} {KEY}") == "closed"
    requested = [e for e in tm.trace("r") if e.event == "cancel_requested"]
    assert requested and TICKET not in str(requested[0].data) and KEY not in str(requested[0].data)
    stored = (workspace / ".agent-runtime" / "runs" / "r" / "trace.jsonl").read_bytes()
    kept = stored + b"\n".join(trace_lines(stored))  # packed batches expanded: compression would hide a secret
    assert TICKET.encode() not in kept and KEY.encode() not in kept
