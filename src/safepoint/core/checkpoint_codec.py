"""The checkpoint record's compact form on disk (issue 10 §5): the fields a checkpoint record repeats that its
place in the log already says are left out when written and put back when read, so a checkpoint costs its state,
not its names. ``checkpoint_id`` is ``ckpt_<its own seq>``, ``run_id`` the run's, ``ledger_seq`` the seq before
it: each is left out only when it is exactly that (a record that says otherwise keeps it), so what is read back is
always the record as it was made. Checkpoints written before keep every field and read as they are.
Rejected: a delta against the previous checkpoint, which the checkpoint index could no longer open on its own."""

from __future__ import annotations

import msgspec

from safepoint.records import Checkpoint


def checkpoint_id_at(seq: int) -> str:
    return f"ckpt_{seq:06d}"


def compact(checkpoint: Checkpoint, run_id: str, seq: int) -> Checkpoint:
    """``checkpoint`` as written at ``seq`` of run ``run_id``: what the place says, left out (empty)."""
    return msgspec.structs.replace(
        checkpoint,
        checkpoint_id="" if checkpoint.checkpoint_id == checkpoint_id_at(seq) else checkpoint.checkpoint_id,
        run_id="" if checkpoint.run_id == run_id else checkpoint.run_id,
        ledger_seq=0 if checkpoint.ledger_seq == seq - 1 else checkpoint.ledger_seq,
    )


def expand(checkpoint: Checkpoint, run_id: str, seq: int) -> Checkpoint:
    """The checkpoint a record at ``seq`` of run ``run_id`` holds, with what its place says put back."""
    if checkpoint.checkpoint_id and checkpoint.run_id and checkpoint.ledger_seq:
        return checkpoint  # written whole (before the compact form, or by a writer that said otherwise)
    return msgspec.structs.replace(
        checkpoint,
        checkpoint_id=checkpoint.checkpoint_id or checkpoint_id_at(seq),
        run_id=checkpoint.run_id or run_id,
        ledger_seq=checkpoint.ledger_seq or seq - 1,
    )
