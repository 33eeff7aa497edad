"""The SQLite backend: one WAL-mode database file per store directory, behind ledger.storage."""
