"""Optional integrations, each behind its own extra; nothing here is imported by ``import safepoint``."""
