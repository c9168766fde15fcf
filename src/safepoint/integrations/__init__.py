"""Optional integrations and adapters to the frameworks agents already run on, each behind its own extra; nothing
here is imported by ``import safepoint``."""
