"""The blobs part: content-addressed, store-wide, kept once, durable when put; gc and writers exclude each other."""

from __future__ import annotations

import threading

from safepoint.core.blobs import open_stored, stored_form
from safepoint.store.conformance.support import StoreFactory, fail, refused


def check_blobs_put_get_list_delete(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")  # an encrypted store records its key with its first write
    one_ref, one = stored_form(b"one " * 500)
    two_ref, two = stored_form(b"two")
    name_one, name_two = store.blob_name(one_ref.hash), store.blob_name(two_ref.hash)
    if name_one == name_two or store.blob_name(one_ref.hash) != name_one:
        fail("a blob's name must be a function of its content, one name per content")
    if store.put_blobs([(name_one, one), (name_two, two)]) <= 0:
        fail("put_blobs must say it wrote the blobs it stored")
    other = make_store(store)
    if other.get_blob(name_one) != one or open_stored(other.get_blob(name_two) or b"", two_ref.hash) != b"two":
        fail("a blob must read back as it was put, from another handle too")
    if set(other.list_blobs()) != {name_one, name_two}:
        fail(f"list_blobs gave {sorted(other.list_blobs())}")
    if store.put_blobs([(name_one, one)]) != 0 or store.get_blob(name_one) != one:
        fail("a blob stored again must be kept as it is, and nothing written")
    with store.blobs_exclusive():
        clock = store.blob_clock()
    store.put_blobs([(name_two, two)])
    if other.list_blobs()[name_two].written < clock or other.list_blobs()[name_two].size <= 0:
        fail("a blob stored again must show a time of writing no earlier than a blob_clock read before")
    store.delete_run("r", force=True)
    if other.get_blob(name_one) != one:
        fail("blobs are store-wide: deleting a run must not remove them (gc does, once nothing references them)")
    with store.blobs_exclusive():
        freed = store.delete_blobs([name_one, name_one])
    if freed <= 0 or other.get_blob(name_one) is not None or set(other.list_blobs()) != {name_two}:
        fail(f"delete_blobs must remove the blob once and say what it freed (freed {freed})")
    refused("a blob name that is not a hash", lambda: store.put_blobs([("../../etc/x", b"x")]), ValueError)


def check_gc_and_writers_exclude_each_other(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    other = make_store(store)
    entered = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with other.blobs_shared():
                entered.set()
        except BaseException as exc:  # reported below: a thread's failure must fail the check
            errors.append(exc)
            entered.set()

    with store.blobs_shared(), other.blobs_shared():  # writers share it among themselves
        pass
    with store.blobs_exclusive():
        thread = threading.Thread(target=writer)
        thread.start()
        if entered.wait(0.3):
            fail("a writer entered blobs_shared while gc held blobs_exclusive")
    thread.join(60)
    if errors or not entered.is_set():
        fail(f"the writer did not enter once gc let go: {errors}")
