"""Durable storage, knowing nothing about agents.

::

    base.py             the interface in parts (RunLog, Ownership, RestartCheckpoints, ControlChannel, Schedules,
                        Artifacts), each with its durability and fencing promises; Store composes them
    fenced.py           what every backend does the same way: ownership and each fenced write, over a few hooks
    ownership.py        the ownership rules (who may claim, what a stale writer is); liveness.py: is an owner alive
    framing.py          checksummed lines, torn and corrupt ones reported; names.py: ids, artifact names and refs
    file_store.py       the file store (the default, the seed's .agent-runtime/ layout); file_encryption.py: its
                        record of being encrypted
    postgres.py         the PostgreSQL store; postgres_schema.py: its versioned migrations
    url.py              a store by URL (wrapped in sealed.py's layer when encrypted); migrate_store
    sealed.py           encryption at rest for every backend: SealedStore seals each payload, bound to its place
    crypt.py            the store's key (SAFEPOINT_KEY, a key file), its id, and the AES-256-GCM cipher
    conformance/        the suite every backend passes, one module per part; ``validate()`` reports part by part
"""
