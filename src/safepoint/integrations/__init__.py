"""Optional adapters to the frameworks agents already run on (each behind its own extra)."""
