"""A cancel or a reset that judges the owner gone while it is live after all (its heartbeat late under load, or it
came back between the look and the claim): the request was posted before, so the live owner acts on it. It was a
"locked: pass --takeover" error, which asked a person to fence off a healthy run."""

from __future__ import annotations

import json

import pytest

import safepoint
from safepoint.restart import control


@pytest.mark.parametrize("how", ["cancel", "reset"])
def test_a_request_to_an_owner_live_after_all_is_left_to_it(workspace, monkeypatch, how):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call_result("write_file", {"path": "a.txt", "content": "a\n"}, call_id="c1")
        monkeypatch.setattr(control, "owner_is_live", lambda store, run_id: False)  # the late heartbeat
        outcome = control.cancel(tm.store, "r") if how == "cancel" else control.reset_context(tm.store, "r")
        assert outcome == "requested"
        posted = [json.loads(data) for _, data in tm.store.read_control("r")]
        assert posted and posted[-1]["type"] == {"cancel": "cancel", "reset": "context_reset"}[how], posted
