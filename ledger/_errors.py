"""The library's errors.

Two kinds of trouble, two roots::

    ValueError / TypeError      the caller's mistake, raised before anything is written
    EffectPersistenceError      the store could not do what was asked: it is missing,
                                refused, corrupt, full, locked too long, or it holds a
                                record that does not validate

Every SQLAlchemy, sqlite3, Alembic and OS error met while touching a store is
translated into :class:`EffectPersistenceError` in one place
(:func:`ledger._store.storage_errors`), chained with ``from`` so the cause stays
visible.
"""

from __future__ import annotations

__all__ = ["EffectPersistenceError"]


class EffectPersistenceError(Exception):
    """The store could not persist or load records; nothing half-done is believed."""


EffectPersistenceError.__module__ = "ledger.effect_log"
