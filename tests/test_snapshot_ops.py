"""What goes over a whole run reads the same through a snapshot (whose view holds the finished calls packed and
reads every ledger state and checkpoint from the log when first asked: ``core.run_view.PastView``) as through the
whole log: the ledger, the checkpoints, ``explain`` (every call and a page), the history, and a rollback to an
early checkpoint restores the same files."""

from __future__ import annotations

import os

import safepoint
from safepoint.engine.session import load_view
from safepoint.engine.tools import tool
from safepoint.store import view_index


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0) -> str:
    return "ok"


def _reads(tm, run_id):
    return (
        tm.ledger(run_id),
        tm.checkpoints(run_id),
        tm.explain(run_id),
        tm.explain(run_id, limit=7, offset=5),
        tm.history(run_id),
    )


def test_a_snapshot_s_view_reads_as_the_whole_log(tmp_path, workspace, monkeypatch):
    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 40)
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    run = tm.start("t", tools=[noop], run_id="r")
    for n in range(30):
        if n % 5 == 0:
            run.step()
        if n % 4 == 0:
            run.call("write_file", {"path": f"f{n % 3}.txt", "content": f"v{n}"}, call_id=f"w{n}")
        run.call("noop", {"n": n}, call_id=f"c{n}")
    run.close()
    view = load_view(tm.store, "r")
    assert type(view).__name__ == "PastView" and getattr(view, "_entries", None) is None  # from the snapshot
    through_snapshot = _reads(tm, "r")
    os.remove(tmp_path / "store" / "runs" / "r" / "view_snapshot.bin")
    assert type(load_view(tm.store, "r")).__name__ == "RunView"
    assert _reads(tm, "r") == through_snapshot
    # before step 3: the writes of steps 1 and 2 made, the later ones not
    early = next(c.checkpoint_id for c in tm.checkpoints("r") if c.step == 3 and c.kind == "before_step")
    tm.close()
    # a rollback through a fresh snapshot (the close above wrote none: nothing came since) restores what it did
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    again = tm.resume("r", tools=[noop])
    for n in range(30, 60):
        again.call("noop", {"n": n}, call_id=f"c{n}")
    again.close()
    assert type(load_view(tm.store, "r")).__name__ == "PastView"
    tm.rollback_files("r", early)
    expected = {f"f{n % 3}.txt": f"v{n}" for n in range(0, 10, 4)}  # the writes of steps 1 and 2 (calls 0-9)
    for path in ("f0.txt", "f1.txt", "f2.txt"):
        file = workspace / path
        assert (file.read_text() if file.exists() else None) == expected.get(path)
    tm.close()
