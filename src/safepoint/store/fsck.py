"""``safepoint fsck``: check every checksum and reference of a file store's run, and repair what can be repaired
without guessing.

What is checked, per run: the header, every framed line of the log (checksum, record, blob content against its
SHA-256), the order of sequence numbers (a duplicated line, swapped records, a hole), the checkpoint index against
the log, the owner record, the restart checkpoint, the terminal events and control lines, and every artifact
against the digest its name holds; and the store's blobs (``safepoint.store.fsck_blobs``): each one a log
references is there and whole, each stored one whole. In an encrypted store (``safepoint.store.sealed``) the
checksums are of the sealed bytes and are checked as before, key or not; with the key, every sealed record must
also authenticate in its place (run, kind, seq), and one that does not is reported and, with ``--repair``,
quarantined like a corrupt one.

What ``--repair`` does, under the run's lock and only while no live process owns the run:

- a line hit by one flipped bit is mended when the mended record proves itself (its checksum, its decoding and, for
  a blob, its SHA-256); so are lines a flipped newline joined (split only where every part proves itself: the
  alternative, quarantining the joined line, lost two good records to one bit) and the same in the header, the
  owner record, the restart checkpoint, the terminal events and the control lines; a line that cannot be mended is
  moved to quarantine, and a header that cannot be is said, left as it is, and never counted as handled;
- the log is written again in sequence order, each seq once (a duplicate of a record is dropped, a second record
  claiming a taken seq is quarantined), and the checkpoint index is rebuilt from it;
- a damaged owner record is quarantined and rebuilt, its generation raised above every generation the run has seen
  so that no stale writer can append;
- damaged lines of the terminal events and control files, a damaged restart checkpoint and a damaged artifact are
  moved to quarantine.

Nothing is deleted: everything replaced or removed goes to ``quarantine/`` in the run's folder, each with a
``.note`` saying what it was and why it was moved. A hole in the log (a record lost for good) is reported, never
invented; the run's loader already routes around it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import zstandard

from safepoint.core.blobs import open_blob
from safepoint.durable import atomic_write, fsync_dir, make_private_dirs
from safepoint.errors import ConfigError, CorruptRecordError, RunLockedError
from safepoint.protocol import RecoveryOwnerTerminalEvent
from safepoint.records import Blob, LogProblem, LogRecord, OwnerState, RunInfo, StoredDescriptor
from safepoint.results import FsckProblem, FsckResult
from safepoint.store.base import Store
from safepoint.store.crypt import Cipher, is_sealed
from safepoint.store.file_store import CONTROL, LOG, RESTART_CHECKPOINT, TERMINAL_EVENTS, FileStore
from safepoint.store.framing import check_line, frame, read_descriptor, unframe_all
from safepoint.store.fsck_blobs import check_blobs
from safepoint.store.liveness import owner_alive
from safepoint.store.mend import one_bit_candidates
from safepoint.store.names import safe_url
from safepoint.store.ownership import now
from safepoint.store.sealed import (
    open_artifact,
    open_control,
    open_event_payload,
    open_header,
    open_record,
    open_restart_checkpoint,
    unwrap,
)

_record_decoder = msgspec.json.Decoder(LogRecord)
_blob_decoder = msgspec.json.Decoder(Blob)
_owner_decoder = msgspec.json.Decoder(OwnerState)
_header_decoder = msgspec.json.Decoder(RunInfo)
_event_decoder = msgspec.json.Decoder(RecoveryOwnerTerminalEvent)
_encoder = msgspec.json.Encoder()
QUARANTINE = "quarantine"
_DIGEST = re.compile(r"\.([0-9a-f]{16})$")


@dataclass
class _Check:
    """The findings of one run, and (when repairing) the quarantine it moves things into."""

    store: FileStore
    run_id: str
    repair: bool
    problems: list[FsckProblem] = field(default_factory=list)
    quarantined: bool = False
    count: int = 0  # names two things quarantined within one clock tick apart
    cipher: Cipher | None = None  # an encrypted store's, when fsck has the key: every record must authenticate

    def open_body(self, record: LogRecord) -> LogRecord | None:
        return record if self.cipher is None else open_record(self.cipher, self.run_id, record)

    @property
    def run_dir(self) -> str:
        return self.store.run_dir(self.run_id)

    def found(self, file: str, where: str, problem: str, repair: str = "") -> None:
        self.problems.append(
            FsckProblem(
                run_id=self.run_id, file=file, where=where, problem=problem, repair=repair if self.repair else ""
            )
        )

    def quarantine(self, name: str, data: bytes, why: str) -> str:
        """Keep ``data`` (what ``name`` held) in the quarantine folder with a note; its path, relative to the run."""
        folder = os.path.join(self.run_dir, QUARANTINE)
        created = not os.path.isdir(folder)
        make_private_dirs(folder)
        if created:
            fsync_dir(self.run_dir)
        stamp = now().replace(":", "").replace("+", "Z")
        self.count += 1
        base = f"{stamp}-{self.count}-{name.replace('/', '_')}"
        atomic_write(os.path.join(folder, base), data)  # before anything that depends on it is changed
        note = f"{name} of run {self.run_id!r}: {why}; moved here by `safepoint fsck --repair` at {now()}\n"
        atomic_write(os.path.join(folder, f"{base}.note"), note.encode())
        self.quarantined = True
        return f"{QUARANTINE}/{base}"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _proven(payload: bytes, open_body: Callable[[LogRecord], LogRecord | None] | None = None) -> LogRecord | None:
    """The record a payload holds, if it decodes, authenticates (``open_body``: an encrypted store's, with the key)
    and (a blob) its content matches its digest. A sealed blob without the key is taken on its checksum."""
    try:
        record = _record_decoder.decode(payload)
        content: LogRecord | None = record
        if open_body is not None:
            content = open_body(record)
        if content is None:
            return None
        if content.kind == "blob" and not bytes(content.body).startswith(b'"sp1:'):
            blob = _blob_decoder.decode(content.body)
            if not blob.stored:  # a reference to a store blob: checked with the store's blobs (fsck_blobs)
                open_blob(blob)
    except (msgspec.DecodeError, msgspec.ValidationError, CorruptRecordError, ValueError, zstandard.ZstdError):
        return None
    return record


def _mended(line: bytes, open_body: Callable[[LogRecord], LogRecord | None]) -> tuple[bytes, LogRecord] | None:
    for candidate in one_bit_candidates(line):
        record = _proven(candidate, open_body)
        if record is not None:
            return candidate, record
    return None


# Where a newline hit by one flipped bit joined two lines: a byte one bit away from "\n", then a frame's start.
_JOIN = re.compile(rb"(?=[\x0b\x08\x0e\x02\x1a\x2a\x4a\x8a][0-9a-f]{8} )")
_MAX_PARTS = 256  # a line is split into at most this many records (a runaway split is damage, not a join)


def _split(line: bytes, proves: Callable[[bytes], bool]) -> list[bytes] | None:
    """The payloads of two or more framed lines joined where a newline was hit by a flipped bit, each part proving
    itself (its checksum, then ``proves``); None when the line is not such a join. The candidates are the few places
    where a frame starts, found in one pass; each is checked at the cost of its part's checksum."""
    parts: list[bytes] = []
    start = 0
    while len(parts) < _MAX_PARTS:
        rest = line[start:]
        whole = check_line(rest)
        if whole is not None and proves(whole) and parts:
            return [*parts, whole]
        for match in _JOIN.finditer(rest):
            payload = check_line(rest[: match.start()])
            if payload is not None and proves(payload):
                parts.append(payload)
                start += match.start() + 1
                break
        else:
            return None
    return None


def _recovered(line: bytes, open_body: Callable[[LogRecord], LogRecord | None]) -> list[tuple[bytes, LogRecord]] | None:
    """The records a damaged log line still holds: one bit flipped back, or lines a flipped newline joined."""
    mended = _mended(line, open_body)
    if mended is not None:
        return [mended]
    payloads = _split(line, lambda payload: _proven(payload, open_body) is not None)
    if payloads is None:
        return None
    return [(payload, record) for payload in payloads if (record := _proven(payload, open_body)) is not None]


def mend_whole(raw: bytes, proves: Callable[[bytes], bool]) -> bytes | None:
    """The payload of a damaged whole-file record (one framed line) with one flipped bit put back, in its payload,
    its checksum or its final newline; None when no single bit explains the damage."""
    line = raw[:-1] if raw.endswith(b"\n") else raw
    if raw and raw[-1] != 0x0A and (raw[-1] ^ 0x0A).bit_count() == 1:
        payload = check_line(raw[:-1])  # the newline itself was hit
        if payload is not None and proves(payload):
            return payload
    for candidate in one_bit_candidates(line):
        if proves(candidate):
            return candidate
    return None


def check_log(check: _Check, data: bytes) -> list[tuple[LogRecord, bytes]] | None:
    """The log's trustworthy records in sequence order, each seq once, with their framed lines; None when the log
    needs no rewrite. Every problem is reported on the way."""
    kept: list[tuple[LogRecord, bytes]] = []
    changed = False
    for offset, item in unframe_all(data):
        end = data.find(b"\n", offset)
        line = data[offset : end if end >= 0 else len(data)]
        where = f"byte {offset}"
        if isinstance(item, LogProblem):
            if item.kind == "torn" and line and (line[-1] ^ 0x0A).bit_count() == 1:
                # The log's last newline hit by a flipped bit reads as a record never finished.
                body = line[:-1]
                whole = check_line(body)
                proven = _proven(whole, check.open_body) if whole is not None else None
                recovered = (
                    [(whole, proven)] if whole is not None and proven is not None else _recovered(body, check.open_body)
                )
                if recovered is not None:
                    check.found(LOG, where, "the last newline is damaged (one flipped bit)", "mended; checked")
                    if check.repair:
                        check.quarantine(LOG, line, "the log's last line with its damaged newline (mended)")
                    kept += [(record, frame(payload)) for payload, record in recovered]
                    changed = True
                    continue
            if item.kind == "torn":
                check.found(LOG, where, item.detail, "moved to quarantine (a record never finished)")
                if check.repair:
                    check.quarantine(LOG, line, "the torn tail of the log")
                changed = True
                continue
            recovered = _recovered(line, check.open_body)
            if recovered is not None:
                seqs = ", ".join(str(record.seq) for _, record in recovered)
                joined = f"{len(recovered)} lines joined by a damaged newline"
                how = "one flipped bit" if len(recovered) == 1 else joined
                check.found(LOG, where, f"{item.detail} (seq {seqs}, {how})", "mended; checked")
                if check.repair:
                    check.quarantine(LOG, line, f"the damaged line of seq {seqs} (mended in the log)")
                kept += [(record, frame(payload)) for payload, record in recovered]
                changed = True
                continue
            check.found(LOG, where, item.detail, "moved to quarantine (lost for good)")
            if check.repair:
                check.quarantine(LOG, line, "a log line that fails its checksum and could not be mended")
            changed = True
            continue
        proven = _proven(item, check.open_body)
        if proven is None:
            stored = _proven(item) if check.cipher is not None else None
            unsealed = stored is not None
            what = (
                f"the record of seq {stored.seq} ({stored.kind}) fails authentication ({_MOVED})"
                if stored is not None
                else "holds no valid record (or a blob whose content does not match its digest)"
            )
            check.found(LOG, where, what, "moved to quarantine" if unsealed else "")
            if check.repair:
                check.quarantine(LOG, line, "a log line whose record is not valid" if not unsealed else what)
            changed = True
            continue
        kept.append((proven, line + b"\n"))
    if changed or not _ordered(kept):
        return _in_order(check, kept)
    _holes(check, kept, rewritten=False)
    return None


def _ordered(kept: list[tuple[LogRecord, bytes]]) -> bool:
    return all(a.seq < b.seq for (a, _), (b, _) in itertools.pairwise(kept))


def _in_order(check: _Check, kept: list[tuple[LogRecord, bytes]]) -> list[tuple[LogRecord, bytes]]:
    last = 0
    for record, _ in kept:
        if record.seq < last:  # an equal seq is a second copy, said below
            check.found(LOG, f"seq {record.seq}", f"comes after seq {last}", "put back in sequence order")
        last = max(last, record.seq)
    by_seq: dict[int, tuple[LogRecord, bytes]] = {}
    for record, line in sorted(kept, key=lambda pair: pair[0].seq):
        first = by_seq.get(record.seq)
        if first is None:
            by_seq[record.seq] = (record, line)
        elif first[1] == line:
            check.found(LOG, f"seq {record.seq}", "a duplicated line", "the copy removed (kept in quarantine)")
            if check.repair:
                check.quarantine(LOG, line, f"a second copy of the line of seq {record.seq}")
        else:
            check.found(LOG, f"seq {record.seq}", "two different records claim this seq", "the later one quarantined")
            if check.repair:
                check.quarantine(LOG, line, f"a second, different record under seq {record.seq}")
    ordered = [by_seq[seq] for seq in sorted(by_seq)]
    _holes(check, ordered, rewritten=True)
    return ordered


def _holes(check: _Check, ordered: list[tuple[LogRecord, bytes]], *, rewritten: bool) -> None:
    """The runs of missing seqs (rejected: looking only when a line was damaged, which let a log cut cleanly
    between two lines pass as clean, and a repair bless it). A lost beginning (the log starts at seq N > 1) is said
    on every check, repaired or not: nothing brings the records back and resume refuses such a run. A hole further
    on is said while the log is rewritten, and on every check until a repair has put the log's old text in
    quarantine: that repair said it and kept what it dropped, and resume then treats the hole's calls as doubtful."""
    acknowledged = not rewritten and _log_repaired_before(check)
    expected = 1
    for record, _ in ordered:
        if record.seq != expected and not (acknowledged and expected > 1):
            check.found(LOG, f"seq {record.seq}", f"records {expected}..{record.seq - 1} are missing (lost for good)")
        expected = record.seq + 1


def _log_repaired_before(check: _Check) -> bool:
    """Whether an earlier ``--repair`` rewrote this run's log (its old text is in the quarantine folder)."""
    try:
        names = os.listdir(os.path.join(check.run_dir, QUARANTINE))
    except OSError:
        return False
    return any(name.endswith(f"-{LOG}") for name in names)


def check_index(check: _Check, log: bytes, *, rebuilt: bool) -> bytes:
    """The checkpoint index the log calls for; each entry the stored one holds is checked against the log."""
    want = []
    offset = 0
    for line in log.splitlines(keepends=True):
        payload = check_line(line.rstrip(b"\n"))
        if payload is not None:
            record = _record_decoder.decode(payload)
            if record.kind == "checkpoint":
                want.append(frame(b'{"seq":%d,"offset":%d}' % (record.seq, offset)))
        offset += len(line)
    expected = b"".join(want)
    path = os.path.join(check.run_dir, "checkpoints", "index.jsonl")
    stored = _read(path) or b""
    if stored != expected and not rebuilt:
        check.found("checkpoints/index.jsonl", "", "does not match the log's checkpoints", "rebuilt from the log")
    return expected


def check_header(check: _Check) -> bytes | None:
    """The header's payload to write again when one flipped bit damaged it; None when it is intact (or lost)."""
    raw = _read(os.path.join(check.run_dir, "run.json")) or b""
    stored = read_descriptor(raw)
    cipher = check.cipher
    if stored.intact:
        if cipher is not None and open_header(cipher, check.run_id, stored.data) is None:
            check.found("run.json", "", f"the run's header fails authentication ({_MOVED}); restore it from a backup")
        return None

    def proves(payload: bytes) -> bool:
        if cipher is not None:
            opened = open_header(cipher, check.run_id, payload)
            if opened is None:
                return False
            payload = opened
        elif is_sealed(payload):
            return True  # sealed, and no key to open it: its checksum is all there is to go on
        try:
            return _header_decoder.decode(payload).run_id == check.run_id
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False

    mended = mend_whole(raw, proves)
    if mended is None:
        check.found(
            "run.json",
            "",
            "the run's header fails its checksum and no single flipped bit explains it; restore run.json from a "
            "backup (left as it is)",
        )
        return None
    check.found("run.json", "", "the run's header fails its checksum (one flipped bit)", "mended; checked")
    return mended


def check_owner(check: _Check, records: list[LogRecord]) -> OwnerState | None:
    """The owner record to write again (rebuilt from what is known), or None when it is intact or missing."""
    raw = _read(os.path.join(check.run_dir, "owner.json"))
    if raw is None:
        return None
    stored = read_descriptor(raw)
    if stored.intact:
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            _owner_decoder.decode(stored.data)
            return None
    mended = mend_whole(raw, _is_owner)
    if mended is not None:
        check.found("owner.json", "", f"damaged ({stored.detail}, one flipped bit)", "mended; checked")
        if check.repair:
            check.quarantine("owner.json", raw, "a damaged owner record (mended)")
        return _owner_decoder.decode(mended)
    check.found("owner.json", "", f"damaged ({stored.detail or 'not an owner record'})", "rebuilt; generation raised")
    if check.repair:
        check.quarantine("owner.json", raw, "a damaged owner record (rebuilt)")
    return rebuilt_owner(check.run_id, stored.data, records, check.store.terminal_events_loose(check.run_id))


def _is_owner(payload: bytes) -> bool:
    try:
        _owner_decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return True


def rebuilt_owner(run_id: str, damaged: bytes, records: list[LogRecord], events: list[dict[str, object]]) -> OwnerState:
    """An owner record from what survives: the fields the damaged bytes still show, the recovery identity of the
    terminal events, a generation above every one seen. Released: the next resume claims it as any other."""
    loose: dict[str, object] = {}
    with contextlib.suppress(msgspec.DecodeError, ValueError):
        decoded = msgspec.json.decode(damaged)
        if isinstance(decoded, dict):
            loose = decoded

    def text(name: str, default: str | None) -> str | None:
        value = loose.get(name)
        return value if isinstance(value, str) else default

    seen = [record.gen for record in records]
    seen += [value for value in (event.get("generation") for event in events) if isinstance(value, int)]
    generation = loose.get("generation")
    if isinstance(generation, int):
        seen.append(generation)
    identity = next((event for event in events if isinstance(event.get("owner_id"), str)), {})
    recovery_class = identity.get("recovery_class") or text("recovery_class", "root")
    stamp = now()
    return OwnerState(
        recovery_class=recovery_class if recovery_class in ("subagent", "scheduled") else "root",
        owner_id=str(identity.get("owner_id") or text("owner_id", run_id)),
        generation=max(seen, default=0) + 1,
        agent_id=run_id,
        message_id=text("message_id", None),
        active_at=text("active_at", stamp) or stamp,
        terminal_at=text("terminal_at", None),
        terminal_status=text("terminal_status", None),
        holder="fsck",
        pid=0,
        host="fsck",
        claimed_at=stamp,
        heartbeat_at=stamp,
        released=True,
    )


def check_lines(
    check: _Check,
    name: str,
    why: str,
    proves: Callable[[bytes], bool],
    authentic: Callable[[bytes], bool] | None = None,
) -> bytes | None:
    """A file of framed lines (terminal events, control): its intact lines when some were damaged, else None.
    ``proves``: whether a mended line holds what such a line holds; ``authentic``: whether an intact line's sealed
    content authenticates (an encrypted store, with the key)."""
    data = _read(os.path.join(check.run_dir, name))
    if data is None:
        return None
    keep = []
    bad = False
    for offset, item in unframe_all(data):
        if isinstance(item, LogProblem):
            bad = True
            end = data.find(b"\n", offset)
            line = data[offset : end if end >= 0 else len(data)]
            mended = _mended_lines(line, torn=end < 0, proves=proves)
            if mended is not None:
                check.found(name, f"byte {offset}", f"{item.detail} (one flipped bit)", "mended; checked")
                if check.repair:
                    check.quarantine(name, line, "a damaged line (mended in the file)")
                keep += [frame(payload) for payload in mended]
                continue
            check.found(name, f"byte {offset}", item.detail, f"moved to quarantine ({why})")
            if check.repair:
                check.quarantine(name, line, f"a damaged line ({why})")
        elif authentic is not None and not authentic(item):
            bad = True
            check.found(name, f"byte {offset}", f"fails authentication ({_MOVED})", f"moved to quarantine ({why})")
            if check.repair:
                check.quarantine(name, frame(item).rstrip(b"\n"), f"a line that fails authentication ({why})")
        else:
            keep.append(frame(item))
    return b"".join(keep) if bad else None


def _is_json(payload: bytes) -> bool:
    try:
        msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return False
    return True


def _is_control(payload: bytes) -> bool:
    """A control line's payload: ``<position> <json>`` (or its sealed form, in an encrypted store)."""
    position, _, data = payload.partition(b" ")
    return position.isdigit() and (_is_json(data) or is_sealed(data))


_MOVED = "changed, moved from another run or place, or written with another key"


def _authentic_event(check: _Check) -> Callable[[bytes], bool] | None:
    cipher = check.cipher
    if cipher is None:
        return None

    def authentic(line: bytes) -> bool:
        try:
            event = _event_decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False
        return event.payload_json is None or open_event_payload(cipher, check.run_id, event) is not None

    return authentic


def _authentic_control(check: _Check) -> Callable[[bytes], bool] | None:
    cipher = check.cipher
    if cipher is None:
        return None
    return lambda line: open_control(cipher, check.run_id, line.partition(b" ")[2]) is not None


def _mended_lines(line: bytes, *, torn: bool, proves: Callable[[bytes], bool] = _is_json) -> list[bytes] | None:
    """The payloads of a damaged line of a file of JSON lines: one flipped bit put back (its final newline
    included), or lines a flipped newline joined."""
    if torn:
        if not line or (line[-1] ^ 0x0A).bit_count() != 1:
            return None
        whole = check_line(line[:-1])
        if whole is not None and proves(whole):
            return [whole]
        line = line[:-1]
    for candidate in one_bit_candidates(line):
        if proves(candidate):
            return [candidate]
    return _split(line, proves)


def check_artifacts(check: _Check) -> None:
    import hashlib

    folder = os.path.join(check.run_dir, "artifacts")
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(folder)):
            digest = _DIGEST.search(name)
            data = _read(os.path.join(folder, name))
            if name.startswith(".") or digest is None or data is None:
                continue
            if hashlib.sha256(data).hexdigest()[:16] != digest.group(1):
                what = "content does not match the digest in its name"
            elif check.cipher is not None and open_artifact(check.cipher, check.run_id, name, data) is None:
                what = f"fails authentication ({_MOVED})"
            else:
                continue
            check.found(f"artifacts/{name}", "", what, "quarantined")
            if check.repair:
                check.quarantine(f"artifacts/{name}", data, f"an artifact whose {what}")
                os.unlink(os.path.join(folder, name))


def check_restart_checkpoint(check: _Check) -> None:
    path = os.path.join(check.run_dir, RESTART_CHECKPOINT)
    raw = _read(path)
    if raw is None:
        return
    stored = read_descriptor(raw)
    cipher = check.cipher
    if stored.intact and cipher is not None and open_restart_checkpoint(cipher, check.run_id, stored.data) is None:
        stored = StoredDescriptor(data=stored.data, intact=False, detail=f"fails authentication: {_MOVED}")
        mended = None
    elif not stored.intact:

        def proves(payload: bytes) -> bool:
            if cipher is not None:
                return open_restart_checkpoint(cipher, check.run_id, payload) is not None
            return _is_json(payload) or is_sealed(payload)

        mended = mend_whole(raw, proves)
    else:
        mended = None
    if mended is not None:
        check.found(RESTART_CHECKPOINT, "", f"damaged ({stored.detail}, one flipped bit)", "mended; checked")
        if check.repair:
            check.quarantine(RESTART_CHECKPOINT, raw, "a damaged restart checkpoint (mended)")
            atomic_write(path, frame(mended))
        return
    if not stored.intact:
        check.found(RESTART_CHECKPOINT, "", f"damaged ({stored.detail})", "quarantined; resume works from the log")
        if check.repair:
            check.quarantine(RESTART_CHECKPOINT, raw, "a damaged restart checkpoint")
            os.unlink(path)
            fsync_dir(check.run_dir)


def check_run(
    store: FileStore, run_id: str, *, repair: bool, cipher: Cipher | None = None
) -> tuple[list[FsckProblem], bool]:
    """Every problem of one run (repaired when asked); whether anything went to quarantine. ``cipher``: an
    encrypted store's, to check that every record authenticates."""
    check = _Check(store, run_id, repair, cipher=cipher)
    run_dir = store.run_dir(run_id)
    header = check_header(check)
    section: Callable[[], contextlib.AbstractContextManager[None]] = (
        (lambda: store.held_for_repair(run_id)) if repair else contextlib.nullcontext
    )
    with section():
        if repair:
            _refuse_live_owner(store, run_id)
        log = _read(os.path.join(run_dir, LOG)) or b""
        ordered = check_log(check, log)
        new_log = b"".join(line for _, line in ordered) if ordered is not None else log
        records = [record for record, _ in ordered] if ordered is not None else _records(log)
        index = check_index(check, new_log, rebuilt=ordered is not None)
        owner = check_owner(check, records)
        if ordered is not None and owner is None:
            owner = _fenced_off(store, run_id, records)  # a live writer's view of the log is gone: fence it off
        events = check_lines(
            check, TERMINAL_EVENTS, "its event may be recorded again", _is_json, _authentic_event(check)
        )
        control = check_lines(
            check, CONTROL, "what was posted there is lost; post it again", _is_control, _authentic_control(check)
        )
        check_restart_checkpoint(check)
        check_artifacts(check)
        if repair:
            if ordered is not None:
                check.quarantine(LOG, log, "the whole log as it was before the repair")
                atomic_write(os.path.join(run_dir, LOG), new_log)
            if index != (_read(os.path.join(run_dir, "checkpoints", "index.jsonl")) or b""):
                make_private_dirs(os.path.join(run_dir, "checkpoints"))
                atomic_write(os.path.join(run_dir, "checkpoints", "index.jsonl"), index)
            for name, data in ((TERMINAL_EVENTS, events), (CONTROL, control)):
                if data is not None:
                    before = _read(os.path.join(run_dir, name)) or b""
                    check.quarantine(name, before, "the whole file before the repair")
                    atomic_write(os.path.join(run_dir, name), data)
            if header is not None:
                check.quarantine("run.json", _read(os.path.join(run_dir, "run.json")) or b"", "a damaged header")
                atomic_write(os.path.join(run_dir, "run.json"), frame(header))
            if owner is not None and check.problems:
                atomic_write(os.path.join(run_dir, "owner.json"), frame(_encoder.encode(owner)))
    return check.problems, check.quarantined


def _records(log: bytes) -> list[LogRecord]:
    found = []
    for _, item in unframe_all(log):
        if not isinstance(item, LogProblem):
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                found.append(_record_decoder.decode(item))
    return found


def _refuse_live_owner(store: FileStore, run_id: str) -> None:
    with contextlib.suppress(CorruptRecordError):
        current = store.owner(run_id)
        if current is not None and not current.released and owner_alive(current):
            raise RunLockedError(
                f"run {run_id!r} is owned by live process {current.pid} on {current.host}; stop it (or let it "
                "finish), then run `safepoint fsck --repair` again"
            )


def _fenced_off(store: FileStore, run_id: str, records: list[LogRecord]) -> OwnerState | None:
    """The owner record one generation up, released: a writer that still holds the old generation cannot append
    to the log written again under it."""
    with contextlib.suppress(CorruptRecordError):
        current = store.owner(run_id)
        if current is not None:
            top = max([current.generation, *(record.gen for record in records)])
            return msgspec.structs.replace(current, generation=top + 1, released=True, heartbeat_at=now())
    return None


def fsck(store: Store, run_id: str | None, *, repair: bool) -> FsckResult:
    """Check one run, or every run of the store; repair when asked (a file store: see the module's docstring)."""
    backend, cipher = unwrap(store)  # an encrypted store: its files, and its key when given
    runs = [run_id] if run_id is not None else backend.list_runs()
    if run_id is not None:
        with contextlib.suppress(CorruptRecordError):  # a damaged header is fsck's to report, not to stop at
            backend.run_header(run_id)  # an unknown run is named (RunNotFoundError), not reported clean
    problems: list[FsckProblem] = []
    quarantine: list[str] = []
    for name in runs:
        if isinstance(backend, FileStore):
            try:
                found, moved = check_run(backend, name, repair=repair, cipher=cipher)
            except RunLockedError:
                if run_id is not None:
                    raise
                # A run at work while the whole store is checked: checked, left alone (its lines show no repair).
                found, moved = check_run(backend, name, repair=False, cipher=cipher)
            if moved:
                quarantine.append(os.path.join(backend.run_dir(name), QUARANTINE))
        else:
            if repair:
                raise ConfigError(
                    f"`fsck --repair` repairs file stores only; {safe_url(store.url)} is checked, not changed: "
                    "run `safepoint fsck` without --repair to see its problems"
                )
            found = check_through_the_store(store, name)
        problems += found
    if cipher is not None or not store.sealed:
        problems += check_blobs(store, runs, repair=repair, whole_store=run_id is None)
    return FsckResult(store=safe_url(store.url), runs=runs, problems=problems, repaired=repair, quarantine=quarantine)


def check_through_the_store(store: Store, run_id: str) -> list[FsckProblem]:
    """What any backend reports of a run through its own reads (a database checks each row's checksum and seq as
    it reads): damaged or missing records, a damaged owner, restart checkpoint or terminal events, blobs whose
    content does not match their digest."""
    found = []

    def problem(file: str, where: str, detail: str) -> None:
        found.append(FsckProblem(run_id=run_id, file=file, where=where, problem=detail))

    read = store.read_log(run_id)
    for item in read.problems:
        problem("log", f"seq {item.position}", f"{item.kind}: {item.detail}")
    for record in read.records:
        if record.kind == "blob" and _proven(_encoder.encode(record)) is None:
            problem("log", f"seq {record.seq}", "a blob whose content does not match its digest")
    for what, read_one in (("owner", store.owner), ("terminal events", store.terminal_events)):
        try:
            read_one(run_id)
        except CorruptRecordError as exc:
            problem(what, "", str(exc))
    stored = store.read_restart_checkpoint(run_id)
    if stored is not None and not stored.intact:
        problem("restart checkpoint", "", f"damaged ({stored.detail})")
    return found
