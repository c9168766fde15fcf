"""The artifacts part: large outputs addressed by checksum, written only by the current owner; and the trace."""

from __future__ import annotations

from safepoint.errors import CorruptRecordError
from safepoint.store.conformance.support import StoreFactory, fail, refused
from safepoint.store.names import artifact_file, artifact_ref


def check_artifacts(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    ref = store.put_artifact(claim, "call_1.stdout.txt", b"out" * 1000)
    if store.get_artifact("r", ref) != b"out" * 1000:
        fail("artifact bytes changed")
    if store.put_artifact(claim, "call_1.stdout.txt", b"out" * 1000) != ref:
        fail("the same artifact stored twice must give the same ref")


def check_trace(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    store.trace("r", [b'{"event":"a"}', b'{"event":"b"}'])
    if list(store.read_trace("r")) != [b'{"event":"a"}', b'{"event":"b"}']:
        fail("trace lines changed")


def check_a_stale_artifact_is_refused_and_never_stored(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    old = store.claim("r", "first")
    other = make_store(store)
    new = other.claim("r", "second", takeover=True)
    refused("a stale put_artifact", lambda: store.put_artifact(old, "late.txt", b"late"))
    ref = other.artifact_ref_for("r", "late.txt", b"late")
    refused("reading what a stale writer was refused", lambda: other.get_artifact("r", ref), CorruptRecordError)
    if ref != artifact_ref(*artifact_file("late.txt", b"late")) and not getattr(other, "sealed", False):
        fail("an artifact's ref is its name and the SHA-256 of its bytes (an encrypted store's: of the sealed ones)")
    if other.put_artifact(new, "late.txt", b"late") != ref or other.get_artifact("r", ref) != b"late":
        fail("the current owner must store the artifact the stale writer could not")
