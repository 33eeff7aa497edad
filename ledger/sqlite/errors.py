"""The one place where the SQLite backend's failures become the caller's errors.

SQLAlchemy, sqlite3, Alembic and OS errors met while using a store become the leaves
of :class:`~ledger.errors.EffectPersistenceError`, chained to their cause, by the
translation both backends share (``ledger._sql.errors``); :func:`classify` chooses the
leaf, from SQLite's result codes here. Anything else (a bug, a caller's mistake) passes
through as it is.
"""

from __future__ import annotations

import errno
import sqlite3

from ledger._sql.errors import Translator
from ledger.errors import (
    EffectPersistenceError,
    StoreCorruptError,
    StoreFileRefusedError,
    StoreUnavailableError,
)

# SQLite's primary result codes (the low byte of an extended one) by the leaf they mean.
_SQLITE_CORRUPT = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
# SQLITE_BUSY, SQLITE_LOCKED (the busy timeout ran out), SQLITE_NOMEM, SQLITE_READONLY,
# SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_PROTOCOL: the store may work later.
_SQLITE_UNAVAILABLE = {5, 6, 7, 8, 10, 13, 14, 15}
# For an error raised without its code (older drivers, errors built by hand).
_SQLITE_MESSAGES = (
    ("file is not a database", StoreCorruptError),
    ("database disk image is malformed", StoreCorruptError),
    ("database or disk is full", StoreUnavailableError),
    ("database is locked", StoreUnavailableError),
    ("database table is locked", StoreUnavailableError),
    ("disk i/o error", StoreUnavailableError),
    ("unable to open database file", StoreUnavailableError),
)


def _classify_sqlite(error: BaseException) -> type[EffectPersistenceError] | None:
    if isinstance(error, sqlite3.Error):
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(code, int):
            if code & 0xFF in _SQLITE_CORRUPT:
                return StoreCorruptError
            if code & 0xFF in _SQLITE_UNAVAILABLE:
                return StoreUnavailableError
            return EffectPersistenceError
        text = str(error).lower()
        return next(
            (leaf for words, leaf in _SQLITE_MESSAGES if words in text), EffectPersistenceError
        )
    if isinstance(error, OSError) and error.errno == errno.ELOOP:
        return StoreFileRefusedError  # O_NOFOLLOW met a symlink: the trust checks refuse those
    return None


def _describe(error: BaseException) -> str:
    orig = getattr(error, "orig", None)
    if isinstance(orig, BaseException):
        return f"{type(orig).__name__}: {orig}"
    if isinstance(error, OSError) and error.filename:
        return f"{error.strerror or type(error).__name__}: {error.filename}"
    return f"{type(error).__name__}: {error}"


_TRANSLATOR = Translator((sqlite3.Error,), _classify_sqlite, _describe)
storage_errors = _TRANSLATOR.storage_errors
classify = _TRANSLATOR.classify
translate = _TRANSLATOR.translate
