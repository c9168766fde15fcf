"""LangGraph on safepoint's store: ``SafepointSaver`` (a checkpointer) and ``durable_tool`` (extra ``langgraph``).

::

    from safepoint.integrations.langgraph import SafepointSaver, durable_tool

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def charge(card: str, amount: int) -> str: ...          # called inside a node, or wrapped in a ToolNode

    with SafepointSaver("file:.agent-runtime") as saver:       # or "postgresql://..."; key=... for a sealed store
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "order-17"}}, durability="sync")

**A thread is a run of the store** (``langgraph_thread``: ``lg-<hash of the thread id>``), whose log holds the
thread's checkpoints, their pending writes and each channel value once per version; a durable tool's calls are
ledgered in a second run beside it (``langgraph_tools``). So a thread gets what every run has: records fsync'd (or
committed) and checksummed before ``put`` returns, sealed on an encrypted store, redacted (see
``langgraph_thread`` for what), and **fenced**: the first write claims the thread for this saver (the store's
``Ownership``), and another saver, in this process or another, is refused in one line (``RunLockedError``) while
it holds it, instead of both writing and the thread forking (LangGraph #8796). A saver whose claim was taken over
(``takeover=True`` after its process was presumed dead) is refused its next write (``StaleGenerationError``). The
claims are given up by ``close()``; a process that dies leaves them to the next one (a dead owner's claim is
taken without asking). Reading needs no claim: a saver that does not write a thread reads its log afresh.

**Storage grows with what changed**: ``put`` stores the values of the channels in ``new_versions`` only, and a list
that grew (``messages``) as its new items after the version it grew from; ``get_tuple`` reads the saver's index of
the thread (built from the log once, when the thread is first claimed), never the whole log again.

**One implementation, two faces**: every ``a*`` method runs its sync twin in a worker thread
(``asyncio.to_thread``), so the event loop never waits on an fsync or a PostgreSQL round-trip and there is one body
to get right (rejected: hand-written async twins, which drift; and the reverse, sync over an event loop, which
cannot be called from inside a running one, where LangGraph's sync ``invoke`` often is). A lock makes the saver
safe for LangGraph's background writer threads (``durability="async"``).

The versions it hands out are LangGraph's own form (``<n>.<random>``): a fork from an older checkpoint never
reuses a version a later step stored with another value. ``durability="sync"`` makes each step durable before the
next starts; with LangGraph's default (``"async"``) the writes lag behind the steps, and a crash loses those not
written yet (their steps run again; durable calls in them are taken from the ledger). ``settle`` decides a durable
call a crash left uncertain (``langgraph_tools``).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import random
import secrets
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import msgspec
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from safepoint.engine.heartbeat import HEARTBEAT_SECONDS
from safepoint.engine.log_writer import LogWriter, run_redactor
from safepoint.engine.session import holder_id
from safepoint.errors import (
    CorruptRecordError,
    RunExistsError,
    RunLockedError,
    RunNotFoundError,
    StaleGenerationError,
)
from safepoint.integrations.langgraph_thread import (
    EMPTY,
    LIST,
    MATCH_KEY,
    PREFIX,
    CheckpointRecord,
    DropRecord,
    ThreadIndex,
    ThreadRecord,
    Typed,
    ValueRecord,
    Version,
    WritesRecord,
    decode,
    encode,
    holds_thread,
    match_key_of,
    redact,
    thread_config,
    thread_of,
    thread_run_id,
)
from safepoint.integrations.langgraph_tools import DurableCall, OnUncertain, ToolNodeLedger, ToolRuns, durable_tool
from safepoint.records import RunInfo
from safepoint.store.base import Store

__all__ = ["DurableCall", "SafepointSaver", "ToolNodeLedger", "durable_tool"]

_header_encoder = msgspec.json.Encoder()


class _Owned:
    """A thread this saver writes: its index and the writer that holds its claim."""

    def __init__(self, index: ThreadIndex, writer: LogWriter) -> None:
        self.index = index
        self.writer = writer


class SafepointSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a safepoint store (see the module docstring)."""

    def __init__(
        self,
        store: str | Store,
        *,
        key: bytes | str | None = None,
        key_file: str | None = None,
        serde: SerializerProtocol | None = None,
        workspace: str = ".",
        on_uncertain: OnUncertain = "raise",
    ) -> None:
        super().__init__(serde=serde)
        self._closes_store = isinstance(store, str)  # a store handed in is its giver's to close
        if isinstance(store, str):
            from safepoint.store.crypt import load_key
            from safepoint.store.url import open_store

            store = open_store(store, load_key(key=key, key_file=key_file))
        self.store: Store = store
        self.workspace = os.path.abspath(workspace)  # where durable tools' runs act (its redaction patterns too)
        self.holder = holder_id()
        self._lock = threading.RLock()
        self._owned: dict[str, _Owned] = {}
        self._redactor = run_redactor(self.workspace, store=store)  # the workspace's own patterns too
        self._beating: threading.Thread | None = None
        self._stop = threading.Event()
        self.tools = ToolRuns(self.store, self.workspace, self.holder, on_uncertain)

    # claims ------------------------------------------------------------------------------------------------------
    def _load(self, thread_id: str) -> ThreadIndex | None:
        """The thread as its log says now (None: the store has no such thread)."""
        run_id = thread_run_id(thread_id)
        try:
            header = self.store.run_header(run_id)
        except RunNotFoundError:
            return None
        if not holds_thread(header, thread_id, self.store.blob_name):
            raise CorruptRecordError(
                f"run {run_id} does not hold LangGraph thread {thread_id!r} (its header names another); "
                f"check the store with `safepoint fsck {run_id}`"
            )
        log = self.store.read_log(run_id)
        # A torn last record was never acknowledged (the append did not return): it is not part of the thread.
        damaged = [p for p in log.problems if p.kind != "torn"]
        if damaged:
            raise CorruptRecordError(
                f"LangGraph thread {thread_id!r}: run {run_id} has a damaged record at {damaged[0].position} "
                f"({damaged[0].detail}); check it with `safepoint fsck {run_id}`"
            )
        index = ThreadIndex(thread_id=thread_id, run_id=run_id, match_key=match_key_of(header))
        for record in log.records:
            index.apply(decode(record), self.serde.loads_typed)
            index.last_seq = record.seq
        return index

    def _read(self, thread_id: str) -> ThreadIndex | None:
        owned = self._owned.get(thread_id)
        return owned.index if owned is not None else self._load(thread_id)

    def _claim(self, thread_id: str, match_key: bytes | None = None) -> _Owned:
        owned = self._owned.get(thread_id)
        if owned is not None:
            return owned
        run_id = thread_run_id(thread_id)
        info = RunInfo(
            run_id=run_id,
            task="LangGraph thread",
            model="langgraph",
            created_at=datetime.now(UTC).isoformat(timespec="microseconds"),
            workspace=self.workspace,
            # a copy keeps its source's key: the filter hashes it copies match there too
            model_config={
                **thread_config(thread_id, self._redactor, self.store.blob_name),
                MATCH_KEY: (match_key or secrets.token_bytes(32)).hex(),
            },
        )
        with contextlib.suppress(RunExistsError):  # made earlier, or by the saver whose claim comes first
            self.store.create_run(run_id, _header_encoder.encode(info))
        try:
            claim = self.store.claim(run_id, self.holder)
        except RunLockedError:
            raise RunLockedError(
                f"LangGraph thread {thread_id!r} is written by another saver (run {run_id}); one writer per "
                "thread: close that saver or wait for its process to end (a second writer would fork the thread)"
            ) from None
        index = self._load(thread_id)
        assert index is not None  # created above, and only its claim's holder deletes it
        owned = _Owned(index, LogWriter(self.store, claim, index.last_seq, self._redactor))
        self._owned[thread_id] = owned
        if self._beating is None:
            self._beating = threading.Thread(target=self._heartbeat, name="langgraph-saver-heartbeat", daemon=True)
            self._beating.start()
        return owned

    def _heartbeat(self) -> None:
        """Renew every claim this saver holds, busy or idle (another host takes an owner whose heartbeat is older
        than its lease for dead). One thread for all threads (rejected: ``engine.heartbeat``'s thread per run)."""
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with self._lock:
                claims = [owned.writer.claim for owned in self._owned.values()]
            for claim in claims:
                with contextlib.suppress(Exception):  # fenced off or unreachable: the next write says so
                    self.store.heartbeat(claim)

    def _commit(self, thread_id: str, records: Sequence[ThreadRecord]) -> None:
        """Make ``records`` durable under the thread's claim, then fold them into its index."""
        owned = self._claim(thread_id)
        for record in records:
            owned.writer.add(encode(record))
        try:
            owned.writer.commit()
        except StaleGenerationError:
            del self._owned[thread_id]
            raise StaleGenerationError(
                f"LangGraph thread {thread_id!r}: this saver lost the thread to a newer writer (run "
                f"{owned.index.run_id}); nothing was written; open a new saver to go on from what is stored"
            ) from None
        for record in records:
            owned.index.apply(record, self.serde.loads_typed)
        owned.index.last_seq = owned.writer.seq

    def close(self) -> None:
        """Give up every thread this saver claimed (another saver may write them then), and the store it opened."""
        self._stop.set()
        with self._lock:
            self.tools.close()
            for owned in self._owned.values():
                owned.writer.flush_trace()
                self.store.release(owned.writer.claim)
            self._owned.clear()
            if self._closes_store:
                self.store.close()

    def release(self, thread_id: str) -> None:
        """Give up one thread (and its calls' ledger): another saver may write it from now on. A server that
        keeps one saver for many threads releases each when its run is over."""
        thread_id = str(thread_id)
        with self._lock:
            owned = self._owned.pop(thread_id, None)
            if owned is not None:
                owned.writer.flush_trace()
                self.store.release(owned.writer.claim)
            self.tools.release(thread_id)

    def settle(self, thread_id: str, *, replay: Sequence[str] = (), skip: Sequence[str] = ()) -> None:
        """Decide the thread's durable calls a crash left uncertain: ``replay`` runs them again when the node
        calls them next, ``skip`` leaves them (the call raises ``ToolFailure``). Raises ``ResumeOptionError`` when a
        call named does not wait for that decision."""
        with self.tools.lock:
            self.tools.open(str(thread_id), replay=tuple(replay), skip=tuple(skip))

    def __enter__(self) -> SafepointSaver:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # values ------------------------------------------------------------------------------------------------------
    def _store_value(
        self, index: ThreadIndex, ns: str, channel: str, version: Version, value: Any, lists: dict[Any, Any]
    ) -> ValueRecord:
        """The record of a value; ``lists`` gets what ``index.lists`` becomes once the record is durable (a list
        compared to a version that a failed write never stored would make a delta of nothing)."""
        if type(value) is not list:
            kind, data = self.serde.dumps_typed(redact(self._redactor, value))
            lists[(ns, channel)] = None
            return ValueRecord(ns=ns, channel=channel, version=version, type=kind, data=data)
        last = index.lists.get((ns, channel))
        # An item that is the very object of the last list was serialized then: LangGraph's reducers (add_messages,
        # operator.add) keep the old items and add new ones, so a step serializes what it added, not the whole
        # list again (measured: 19 ms a step at 1,000 messages before). An item changed in place without a new
        # object is a change LangGraph itself does not see (no new version is written for it by any saver).
        known = last[1] if last is not None else []
        raw = [
            last[2][i] if last is not None and i < len(known) and item is known[i] else self.serde.dumps_typed(item)
            for i, item in enumerate(value)
        ]
        lists[(ns, channel)] = (version, list(value), raw)
        start, base = 0, None
        if last is not None and len(last[2]) <= len(raw) and raw[: len(last[2])] == last[2]:
            start, base = len(last[2]), last[0]  # grew from the last list stored: only its new items
        items: list[Typed] = []
        for item, typed in zip(value[start:], raw[start:], strict=True):
            redacted = redact(self._redactor, item)
            items.append(typed if redacted is item else self.serde.dumps_typed(redacted))
        return ValueRecord(ns=ns, channel=channel, version=version, type=LIST, base=base, items=items)

    def _value(self, index: ThreadIndex, ns: str, channel: str, version: Version) -> tuple[bool, Any]:
        record = index.values.get((ns, channel, version))
        if record is None or record.type == EMPTY:
            return False, None
        if record.type == LIST:
            return True, [self.serde.loads_typed(item) for item in index.items_of(ns, channel, version)]
        return True, self.serde.loads_typed((record.type, record.data))

    def _tuple(self, index: ThreadIndex, ns: str, checkpoint_id: str) -> CheckpointTuple:
        saved = index.checkpoints[ns][checkpoint_id]
        checkpoint: Checkpoint = self.serde.loads_typed(saved.record.checkpoint)
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            found, value = self._value(index, ns, channel, version)
            if found:
                values[channel] = value
        checkpoint["channel_values"] = values
        writes = index.writes.get((ns, checkpoint_id), {})
        thread = index.thread_id
        parent = saved.record.parent_id
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}},
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed(saved.record.metadata),
            parent_config=(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=[
                (task_id, channel, self.serde.loads_typed((kind, data)))
                for task_id, channel, kind, data, _ in writes.values()
            ],
        )

    # BaseCheckpointSaver -----------------------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config.get("configurable", {})
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        with self._lock:
            index = self._read(thread_id)
            if index is None or not index.checkpoints.get(ns):
                return None
            checkpoint_id = get_checkpoint_id(config) or max(index.checkpoints[ns])
            if checkpoint_id not in index.checkpoints[ns]:
                return None
            return self._tuple(index, ns, checkpoint_id)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        configurable = (config or {}).get("configurable", {})
        with self._lock:
            threads = [str(configurable["thread_id"])] if "thread_id" in configurable else self._threads()
            wanted_ns = configurable.get("checkpoint_ns")
            wanted_id = get_checkpoint_id(config) if config else None
            before_id = get_checkpoint_id(before) if before else None
            found: list[CheckpointTuple] = []
            for thread_id in threads:
                index = self._read(thread_id)
                if index is None:
                    continue
                for ns, saved in index.checkpoints.items():
                    if wanted_ns is not None and ns != wanted_ns:
                        continue
                    for checkpoint_id in sorted(saved, reverse=True):
                        if wanted_id and checkpoint_id != wanted_id:
                            continue
                        if before_id and checkpoint_id >= before_id:
                            continue
                        if filter and not index.matches(saved[checkpoint_id], filter):
                            continue
                        if limit is not None and len(found) >= limit:
                            return iter(found)
                        found.append(self._tuple(index, ns, checkpoint_id))
            return iter(found)

    def _threads(self) -> builtins.list[str]:
        threads: builtins.list[str] = []
        for run_id in self.store.list_runs():
            if run_id.startswith(PREFIX):
                thread = thread_of(self.store.run_header(run_id))
                if thread is not None:
                    threads.append(thread)
        return threads

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        stripped = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        values = checkpoint["channel_values"]
        with self._lock:
            index = self._claim(thread_id).index
            records: list[ThreadRecord] = []
            lists: dict[tuple[str, str], Any] = {}
            for channel, version in new_versions.items():
                if (ns, channel, version) in index.values:
                    continue  # stored already: a version is one value
                if channel in values:
                    records.append(self._store_value(index, ns, channel, version, values[channel], lists))
                else:
                    records.append(ValueRecord(ns=ns, channel=channel, version=version, type=EMPTY))
            plain = get_checkpoint_metadata(config, metadata)
            meta = redact(self._redactor, plain)
            records.append(
                CheckpointRecord(
                    ns=ns,
                    checkpoint_id=checkpoint["id"],
                    parent_id=configurable.get("checkpoint_id"),
                    checkpoint=self.serde.dumps_typed(stripped),
                    metadata=self.serde.dumps_typed(meta),
                    matches=index.matches_of(plain, meta),
                )
            )
            self._commit(thread_id, records)
            for key, latest in lists.items():  # durable now: the next list of the channel may build on it
                if latest is None:
                    index.lists.pop(key, None)
                else:
                    index.lists[key] = latest
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        checkpoint_id = configurable["checkpoint_id"]
        with self._lock:
            index = self._claim(thread_id).index
            fresh = [
                (idx, channel, *self.serde.dumps_typed(redact(self._redactor, value)))
                for idx, channel, value in index.new_writes(ns, checkpoint_id, task_id, writes)
            ]
            if fresh:
                record = WritesRecord(
                    ns=ns, checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path, writes=fresh
                )
                self._commit(thread_id, [record])

    def delete_thread(self, thread_id: str) -> None:
        """Remove the thread and its durable calls' ledger from the store (``Store.delete_run``, fenced by this
        saver's claim: a thread another saver writes is refused, not deleted under it)."""
        thread_id = str(thread_id)
        with self._lock:
            if self._read(thread_id) is not None:
                owned = self._claim(thread_id)
                del self._owned[thread_id]
                try:
                    self.store.delete_run(owned.index.run_id, claim=owned.writer.claim)
                except StaleGenerationError:
                    raise StaleGenerationError(
                        f"LangGraph thread {thread_id!r}: this saver lost the thread to a newer writer (run "
                        f"{owned.index.run_id}); nothing was deleted"
                    ) from None
            self.tools.delete(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        with self._lock:
            for thread_id in self._threads():
                index = self._read(thread_id)
                dropped = index.runs_of(wanted) if index is not None else []
                if dropped:
                    self._commit(thread_id, [DropRecord(checkpoints=dropped)])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        with self._lock:
            index = self._read(source)
            if index is None or source == target:
                return
            records = index.copy_records()
            if records:
                self._claim(target, index.match_key or None)
                self._commit(target, [DropRecord(everything=True), *records])
            self.tools.copy(source, target)  # and its durable calls: the copy never repeats one

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"prune: unknown strategy {strategy!r} (keep_latest or delete)")
        with self._lock:
            for thread_id in (str(t) for t in thread_ids):
                index = self._read(thread_id)
                if index is None:
                    continue
                if strategy == "delete":
                    self.delete_thread(thread_id)
                elif dropped := index.all_but_latest():
                    self._commit(thread_id, [DropRecord(checkpoints=dropped)])

    def get_next_version(self, current: str | None, channel: None) -> str:
        # LangGraph's own form: a fork from an older checkpoint gets a version no later step has used.
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # the async forms: the sync bodies in a worker thread ---------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
