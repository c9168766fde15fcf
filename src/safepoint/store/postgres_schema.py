"""The PostgreSQL store's schema: an ordered list of migrations, the version table that records them, and the
rule for opening a database at another version.

Schema ``safepoint``::

    schema_migrations               version pk, description, applied_at: one row per migration applied
    runs                            run_id pk, header (framed line), created_at, control_at (the database's
                                    time of its last control post: what a supervisor pass looks at besides
                                    held owners); indexed by run_id in byte order (a job's occurrences)
    recovery_owners                 seed 003 §1.1's columns, pk (recovery_class, owner_id), unique agent_id (the
                                    run), + holder_state (the encoded OwnerState; NULL until the first claim),
                                    last_seq (the log's end: an append checks and moves it in the statement that
                                    inserts), released, lease_until (heartbeat + lease, on the database's clock),
                                    summary_seq and summary (framed): what ``status`` shows, as of summary_seq (a
                                    cache: read only while the log still ends there), written by the append;
                                    view_snapshot (which ``view_snapshots`` row is read: set by a fenced swap);
                                    a partial index on the held rows (not released, not closed) for passes; no
                                    index holds a column an append or a heartbeat changes (last_seq, lease_until,
                                    holder_state, summary_seq, summary), so their updates are HOT (measured: 98 %
                                    of all the table's updates at 8 writers, the rest first claims; a fillfactor of
                                    80 changed nothing, pruning frees the page's previous version)
    runtime_restart_checkpoints     seed 003 §1.2's columns, pk agent_id, + descriptor (the bytes as written) and
                                    checksum (sha256 of them)
    recovery_owner_terminal_events  seed 003 §1.3's columns, pk (recovery_class, owner_id, generation, event_type)
    log                             (run_id, seq) pk, line: the same framed, checksummed line the file store writes
                                    (compressed with lz4 over 2 KB where the server has it, not pglz);
                                    no foreign key (an append would lock the run's row for each line it inserts):
                                    ``delete_run`` deletes the run's log in its own transaction
    control                         (run_id, position) pk, line (framed)
    schedules                       job_id pk, line (framed)
    artifacts                       (run_id, name) pk, sha256, data
    trace                           id bigserial, run_id, line (framed)
    blobs                           name pk, data (stored as written: already compressed, so EXTERNAL storage,
                                    not TOAST's second compression), quarantined (fsck set it aside), created_at
    settings                        name pk, value (framed): the store's own facts; 'encryption' in an encrypted
                                    store (its cipher and key id, never the key)
    blob_refs                       (name, run_id) pk: that run's log references that blob (``postgres_blob_refs``)
    view_snapshots                  (run_id, snapshot_id) pk, seq, data: the run's folded log up to a position
                                    (``core.view_snapshot``); the one read is the owner row's ``view_snapshot``

Opening a store migrates a fresh database (nothing in it to break) but never upgrades one that already holds a
schema: other hosts may be running an older safepoint on it, whose queries a change would break under them, so an
upgrade is a person's decision (``safepoint db migrate``, or ``migrate()``). A schema newer than the code is
always refused: this code does not know what the newer one promises. Migrations run in one transaction under an
advisory lock, so two processes never apply one twice and a failed migration leaves the database as it was.

A database made before versioning (its tables, no version table) is at version 1: migration 1 is that schema.
A migration is appended, never edited: a database that applied it must stay what the list says it is.
"""

from __future__ import annotations

import msgspec
import psycopg

from safepoint.errors import StoreError

SCHEMA = "safepoint"
VERSION_TABLE = f"{SCHEMA}.schema_migrations"


class Migration(msgspec.Struct, frozen=True):
    version: int
    description: str
    sql: str


class SchemaChange(msgspec.Struct, frozen=True):
    """What a migration did: the version found, the version left, and the migrations applied in between."""

    before: int
    after: int
    applied: list[str]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the tables of seed 003 §1 and the run's log, control channel, schedules, artifacts and trace",
        f"""
CREATE TABLE IF NOT EXISTS {SCHEMA}.runs (
    run_id text PRIMARY KEY,
    header bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.recovery_owners (
    recovery_class text NOT NULL,
    owner_id text NOT NULL,
    generation bigint NOT NULL DEFAULT 1,
    agent_id text UNIQUE REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    message_id text,
    active_at timestamptz NOT NULL DEFAULT now(),
    terminal_at timestamptz,
    terminal_status text,
    holder_state bytea,
    PRIMARY KEY (recovery_class, owner_id)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.runtime_restart_checkpoints (
    agent_id text PRIMARY KEY REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    mode text NOT NULL,
    payload_json text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    recovery_class text,
    recovery_owner_id text,
    execution_config_json text,
    descriptor bytea NOT NULL,
    checksum text NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.recovery_owner_terminal_events (
    recovery_class text NOT NULL,
    owner_id text NOT NULL,
    generation bigint NOT NULL,
    event_type text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    payload_json text,
    PRIMARY KEY (recovery_class, owner_id, generation, event_type)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.control (
    run_id text NOT NULL REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    position bigint NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (run_id, position)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.schedules (
    job_id text PRIMARY KEY,
    line bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.log (
    run_id text NOT NULL REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    seq bigint NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.artifacts (
    run_id text NOT NULL REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    name text NOT NULL,
    sha256 text NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.trace (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    line bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS trace_run_id ON {SCHEMA}.trace (run_id, id);
""",
    ),
    Migration(
        2,
        "index runs by creation order (list_runs and list_restart_checkpoints read them oldest first)",
        f"CREATE INDEX runs_created_at ON {SCHEMA}.runs (created_at, run_id);",
    ),
    Migration(
        3,
        "a settings table: whether the store is encrypted at rest, and with which key id",
        f"CREATE TABLE IF NOT EXISTS {SCHEMA}.settings (name text PRIMARY KEY, value bytea NOT NULL);",
    ),
    Migration(
        4,
        "content-addressed blobs, store-wide (file versions and large payloads out of the runs' logs)",
        f"""
CREATE TABLE IF NOT EXISTS {SCHEMA}.blobs (
    name text PRIMARY KEY,
    data bytea NOT NULL,
    quarantined boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE {SCHEMA}.blobs ALTER COLUMN data SET STORAGE EXTERNAL;
""",
    ),
    Migration(
        5,
        "a summary per run (what status shows), written with the log group it describes and stamped with its seq",
        f"CREATE TABLE IF NOT EXISTS {SCHEMA}.run_summaries (run_id text PRIMARY KEY REFERENCES {SCHEMA}.runs "
        "ON DELETE CASCADE, log_seq bigint NOT NULL, line bytea NOT NULL);",
    ),
    Migration(
        6,
        "the owner row keeps the log's end, whether it is released and its lease on the database's clock (a write "
        "is one fenced statement); a run keeps its last control post's time; partial indexes on open work",
        f"""
ALTER TABLE {SCHEMA}.recovery_owners
    ADD COLUMN IF NOT EXISTS last_seq bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS released boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS lease_until timestamptz;
UPDATE {SCHEMA}.recovery_owners o
   SET last_seq = coalesce((SELECT max(seq) FROM {SCHEMA}.log l WHERE l.run_id = o.agent_id), 0),
       released = coalesce((convert_from(holder_state, 'UTF8')::jsonb ->> 'released')::boolean, false),
       lease_until = CASE WHEN holder_state IS NULL THEN NULL ELSE
           ((convert_from(holder_state, 'UTF8')::jsonb ->> 'heartbeat_at')::timestamptz
            + make_interval(secs => coalesce((convert_from(holder_state, 'UTF8')::jsonb ->> 'lease_ms')::bigint,
                                             30000) / 1000.0)) END;
CREATE INDEX IF NOT EXISTS recovery_owners_held ON {SCHEMA}.recovery_owners (agent_id)
    WHERE NOT released AND terminal_at IS NULL;
ALTER TABLE {SCHEMA}.runs ADD COLUMN IF NOT EXISTS control_at timestamptz;
UPDATE {SCHEMA}.runs r SET control_at = clock_timestamp()
 WHERE EXISTS (SELECT 1 FROM {SCHEMA}.control c WHERE c.run_id = r.run_id);
CREATE INDEX IF NOT EXISTS runs_control_at ON {SCHEMA}.runs (control_at) WHERE control_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_run_id_c ON {SCHEMA}.runs (run_id COLLATE "C");
""",
    ),
    Migration(
        7,
        "which runs reference each blob (forget frees a run's blobs reading that run alone), deleted with the run",
        f"""
CREATE TABLE IF NOT EXISTS {SCHEMA}.blob_refs (
    name text NOT NULL,
    run_id text NOT NULL REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    PRIMARY KEY (name, run_id)
);
CREATE INDEX IF NOT EXISTS blob_refs_run ON {SCHEMA}.blob_refs (run_id);
INSERT INTO {SCHEMA}.settings (name, value) SELECT 'blob_refs', 'complete'::bytea
 WHERE NOT EXISTS (SELECT 1 FROM {SCHEMA}.blobs) ON CONFLICT DO NOTHING;
""",
    ),
    Migration(
        8,
        "a view snapshot per run (its folded log up to a position: an open reads it and the log after it)",
        f"CREATE TABLE IF NOT EXISTS {SCHEMA}.view_snapshots (run_id text PRIMARY KEY REFERENCES {SCHEMA}.runs "
        "ON DELETE CASCADE, seq bigint NOT NULL, data bytea NOT NULL);",
    ),
    Migration(
        9,
        "the log without a foreign key to runs (delete_run deletes a run's log itself, in its transaction): an "
        "append no longer locks the run's row for each line it inserts",
        f"""
DO $$
DECLARE name text;
BEGIN
    FOR name IN SELECT conname FROM pg_constraint
                 WHERE conrelid = '{SCHEMA}.log'::regclass AND contype = 'f'
    LOOP
        EXECUTE format('ALTER TABLE {SCHEMA}.log DROP CONSTRAINT %I', name);
    END LOOP;
END $$;
""",
    ),
    Migration(
        10,
        "the run's summary kept on its owner row (an append updates one row, not two): summary_seq and summary "
        "columns, filled from run_summaries, which goes; log lines and summaries over 2 KB compressed with lz4 "
        "where the server has it",
        f"""
ALTER TABLE {SCHEMA}.recovery_owners
    ADD COLUMN IF NOT EXISTS summary_seq bigint,
    ADD COLUMN IF NOT EXISTS summary bytea;
UPDATE {SCHEMA}.recovery_owners o SET summary_seq = s.log_seq, summary = s.line
  FROM {SCHEMA}.run_summaries s WHERE s.run_id = o.agent_id;
DROP TABLE {SCHEMA}.run_summaries;
DO $$
BEGIN
    -- A value over 2 KB is compressed before it is stored, on every insert: pglz took about twice lz4's server
    -- CPU (a 3 KB line: 93 against 53 us; 5.5 KB of base64, which neither compresses: 108 against 58). New
    -- values only; PostgreSQL 14 and later, built with lz4 (otherwise pglz stays).
    IF current_setting('server_version_num')::int >= 140000 THEN
        BEGIN
            EXECUTE 'ALTER TABLE {SCHEMA}.log ALTER COLUMN line SET COMPRESSION lz4';
            EXECUTE 'ALTER TABLE {SCHEMA}.recovery_owners ALTER COLUMN summary SET COMPRESSION lz4';
        EXCEPTION WHEN feature_not_supported THEN NULL;
        END;
    END IF;
END $$;
""",
    ),
    Migration(
        11,
        "view snapshots staged, then swapped in fenced (the owner row names the one read: view_snapshot), so a "
        "snapshot's write never holds the owner row while its bytes travel (store.postgres_snapshots)",
        f"""
ALTER TABLE {SCHEMA}.view_snapshots ADD COLUMN IF NOT EXISTS snapshot_id bigint NOT NULL DEFAULT 0;
ALTER TABLE {SCHEMA}.view_snapshots ALTER COLUMN snapshot_id DROP DEFAULT;
ALTER TABLE {SCHEMA}.view_snapshots DROP CONSTRAINT view_snapshots_pkey, ADD PRIMARY KEY (run_id, snapshot_id);
ALTER TABLE {SCHEMA}.recovery_owners ADD COLUMN IF NOT EXISTS view_snapshot bigint;
UPDATE {SCHEMA}.recovery_owners o SET view_snapshot = 0 FROM {SCHEMA}.view_snapshots v WHERE v.run_id = o.agent_id;
""",
    ),
)
LATEST = MIGRATIONS[-1].version

Connection = psycopg.Connection[tuple[object, ...]]


def stored_version(conn: Connection) -> int:
    """The database's schema version: 0 when it holds no safepoint schema, 1 for one made before versioning."""
    row = conn.execute("SELECT to_regclass(%s), to_regclass(%s)", (VERSION_TABLE, f"{SCHEMA}.runs")).fetchone()
    if row is None or row[0] is None:
        return 1 if row is not None and row[1] is not None else 0
    found = conn.execute(f"SELECT coalesce(max(version), 0) FROM {VERSION_TABLE}").fetchone()
    version = found[0] if found is not None else 0
    if not isinstance(version, int):
        raise StoreError(f"{VERSION_TABLE} holds a version that is not a number: {version!r}")
    return version


def ensure_schema(conn: Connection, shown: str, *, upgrade: bool, to: int = LATEST) -> SchemaChange:
    """Bring the database to version ``to`` inside the caller's transaction, or refuse with one line: a newer
    schema always, an older one unless ``upgrade`` (a fresh database is always set up)."""
    if not 1 <= to <= LATEST:
        raise StoreError(f"schema version {to} does not exist; this safepoint knows versions 1 to {LATEST}")
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('safepoint schema'))")
    found = stored_version(conn)
    if found > LATEST:
        raise StoreError(
            f"PostgreSQL store {shown} is at schema version {found}, newer than this safepoint's {LATEST}; upgrade "
            "safepoint here (`safepoint db migrate` never downgrades)"
        )
    if found > to:
        raise StoreError(
            f"PostgreSQL store {shown} is at schema version {found}, past {to}; `safepoint db migrate` never downgrades"
        )
    if 0 < found < to and not upgrade:
        raise StoreError(
            f"PostgreSQL store {shown} is at schema version {found} and this safepoint needs {LATEST}; upgrade it with "
            "`safepoint db migrate --store URL` once every safepoint using it is this version"
        )
    applied = []
    if found < to:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version integer PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        if found == 1 and not conn.execute(f"SELECT 1 FROM {VERSION_TABLE}").fetchone():
            # Made before versioning: its tables are migration 1's; record that, so the history starts at 1.
            first = MIGRATIONS[0]
            conn.execute(f"INSERT INTO {VERSION_TABLE} (version, description) VALUES (1, %s)", (first.description,))
        for migration in MIGRATIONS[found:to]:
            conn.execute(migration.sql.encode())
            conn.execute(
                f"INSERT INTO {VERSION_TABLE} (version, description) VALUES (%s, %s)",
                (migration.version, migration.description),
            )
            applied.append(f"{migration.version}: {migration.description}")
    return SchemaChange(before=found, after=max(found, to), applied=applied)
