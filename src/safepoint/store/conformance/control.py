"""The control channel part: durable posts without a claim, positions 1, 2, ... per run."""

from __future__ import annotations

from safepoint.errors import RunNotFoundError, StoreError
from safepoint.store.conformance.support import StoreFactory, fail, refused


def check_control_channel(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    store.create_run("s", b"{}")
    if store.read_control("r") != []:
        fail("a new run has no control records")
    positions = [store.post_control("r", b'{"type":"cancel","n":%d}' % n) for n in range(3)]  # no claim needed
    if positions != [1, 2, 3]:
        fail(f"control positions must be 1, 2, 3, got {positions}")
    other = make_store(store)
    if other.post_control("r", b'{"n":"from another handle"}') != 4 or other.post_control("s", b"{}") != 1:
        fail("positions must continue across store handles and count per run")
    expected = [(n + 1, b'{"type":"cancel","n":%d}' % n) for n in range(3)]
    expected.append((4, b'{"n":"from another handle"}'))
    if make_store(store).read_control("r") != expected:
        fail(f"control records read back as {store.read_control('r')}")
    refused("posting to an unknown run", lambda: store.post_control("nope", b"{}"), RunNotFoundError)
    refused("reading control of an unknown run", lambda: store.read_control("nope"), RunNotFoundError)
    refused("a control record holding a newline", lambda: store.post_control("r", b"{\n}"), StoreError)
    # A conditional post (``after``): posted only while the last position is the one the caller read.
    if store.post_control("s", b'{"n":"stale"}', after=0) != 0 or len(store.read_control("s")) != 1:
        fail("a post after position 0 must be refused (return 0, post nothing) once position 1 exists")
    if other.post_control("s", b'{"n":"current"}', after=1) != 2:
        fail("a post after the last position must be posted at the next one")
