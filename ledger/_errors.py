"""The library's errors.

Two kinds of trouble, two roots::

    ValueError / TypeError      the caller's mistake, raised before anything is written
    EffectPersistenceError      the store could not do what was asked: it is missing,
                                refused, corrupt, full, locked too long, or it holds a
                                record that does not validate
        StoreTamperedError      its schema is not the library's, or a row it was given
                                did not land

Every SQLAlchemy, sqlite3, Alembic and OS error met while touching a store is
translated into :class:`EffectPersistenceError` in one place
(:func:`ledger._store.storage_errors`), chained with ``from`` so the cause stays
visible.
"""

from __future__ import annotations

__all__ = ["EffectPersistenceError", "StoreTamperedError"]


class EffectPersistenceError(Exception):
    """The store could not persist or load records; nothing half-done is believed."""


class StoreTamperedError(EffectPersistenceError):
    """The store does not behave as its schema promises: it was tampered with.

    A row that an insert did not write (a trigger that is not the library's dropped it),
    or a schema holding objects the library did not install. A log that meets it
    degrades: nothing more is written to a store that may be lying.
    """


EffectPersistenceError.__module__ = "ledger.effect_log"
