"""The one place where the PostgreSQL backend's failures become the caller's errors.

SQLAlchemy, psycopg, Alembic and OS errors met while using a store become the leaves of
:class:`~ledger.errors.EffectPersistenceError`, chained to their cause, by the
translation both backends share (``ledger._sql.errors``); :func:`classify` chooses the
leaf, from the server's SQLSTATE here. Anything else (a bug, a caller's mistake) passes
through as it is.
"""

from __future__ import annotations

import psycopg

from ledger._sql.errors import Translator
from ledger.errors import (
    EffectPersistenceError,
    StoreCorruptError,
    StoreUnavailableError,
)

# SQLSTATE classes and codes by the leaf they mean. The store may work later after a
# connection exception, insufficient resources (a full disk, too many connections), an
# operator's intervention (a shutdown, a cancel, a statement timeout), a system error
# (I/O), a lock not available, a serialization failure or a deadlock.
_UNAVAILABLE_CLASSES = ("08", "53", "57", "58")
_UNAVAILABLE = frozenset({"55P03", "40001", "40P01", "55006"})
# The server found data or an index corrupted.
_CORRUPT = frozenset({"XX001", "XX002"})


def _classify_psycopg(error: BaseException) -> type[EffectPersistenceError] | None:
    if not isinstance(error, psycopg.Error):
        return None
    code = error.sqlstate or ""
    if code in _CORRUPT:
        return StoreCorruptError
    if code in _UNAVAILABLE or code[:2] in _UNAVAILABLE_CLASSES:
        return StoreUnavailableError
    if not code and isinstance(error, psycopg.OperationalError):
        return StoreUnavailableError  # no server answered: refused, gone, timed out
    return EffectPersistenceError


def _describe(error: BaseException) -> str:
    # The server's primary message, without SQLAlchemy's echo of the statement and its
    # parameters (which may be long, and hold a record's fields).
    orig = getattr(error, "orig", None)
    cause = orig if isinstance(orig, BaseException) else error
    if isinstance(cause, psycopg.Error) and cause.diag.message_primary:
        return f"{type(cause).__name__}: {cause.diag.message_primary}"
    return f"{type(cause).__name__}: {str(cause).strip()}"


_TRANSLATOR = Translator((psycopg.Error,), _classify_psycopg, _describe)
storage_errors = _TRANSLATOR.storage_errors
classify = _TRANSLATOR.classify
translate = _TRANSLATOR.translate
