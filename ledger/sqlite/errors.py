"""The one place where the SQLite backend's failures become the caller's errors.

SQLAlchemy, sqlite3, Alembic and OS errors met while using a store become the leaves
of :class:`~ledger.errors.EffectPersistenceError`, chained to their cause;
:func:`classify` chooses the leaf. Anything else (a bug, a caller's mistake) passes
through as it is.
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
import sys
from collections.abc import Iterator

import sqlalchemy.exc

from ledger.errors import (
    EffectPersistenceError,
    SchemaTooNewError,
    StoreCorruptError,
    StoreFileRefusedError,
    StoreUnavailableError,
)


@contextlib.contextmanager
def storage_errors(action: str) -> Iterator[None]:
    """Translate every storage failure inside the block into EffectPersistenceError."""
    try:
        yield
    except EffectPersistenceError:
        raise
    except Exception as e:
        if not _storage_error(e):
            raise
        raise _translated(e, action) from e


def _translated(error: BaseException, action: str) -> EffectPersistenceError:
    try:
        return classify(error)(f"{action}: {_describe(error)}")
    except Exception:  # an error object too broken to read (urllib's HTTPError built bare)
        return EffectPersistenceError(f"{action}: {type(error).__name__}")


_STORAGE_ERRORS = (sqlalchemy.exc.SQLAlchemyError, sqlite3.Error, OSError)


def _command_error(error: BaseException) -> bool:
    """Whether ``error`` is Alembic's CommandError, without importing Alembic.

    Alembic is imported only by what migrates (a reader never does): when it is not
    imported, nothing raised can be one of its errors.
    """
    exc = sys.modules.get("alembic.util.exc")
    command_error = getattr(exc, "CommandError", None)
    return isinstance(command_error, type) and isinstance(error, command_error)


def _storage_error(error: BaseException) -> bool:
    return isinstance(error, _STORAGE_ERRORS) or _command_error(error)


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
# Alembic's words for a revision its scripts do not hold: the store's is newer than ours.
_UNKNOWN_REVISION = "can't locate revision"


def classify(error: BaseException) -> type[EffectPersistenceError]:
    """The leaf of :mod:`ledger.errors` that a driver, Alembic or OS ``error`` means.

    :class:`EffectPersistenceError` itself when no leaf fits (a constraint the store
    refused, a programming error inside the driver): it is still storage trouble.
    """
    if isinstance(error, EffectPersistenceError):
        return type(error)
    orig = getattr(error, "orig", None)
    if isinstance(orig, BaseException):  # SQLAlchemy wraps the driver's error
        return classify(orig)
    if isinstance(error, sqlalchemy.exc.TimeoutError):  # no pooled connection came free
        return StoreUnavailableError
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
    if _command_error(error):
        return (
            SchemaTooNewError if _UNKNOWN_REVISION in str(error).lower() else EffectPersistenceError
        )
    if isinstance(error, OSError):
        # O_NOFOLLOW met a symlink: the trust checks refuse those.
        return StoreFileRefusedError if error.errno == errno.ELOOP else StoreUnavailableError
    return EffectPersistenceError


def translate(action: str, error: BaseException) -> BaseException:
    """The error a caller sees for ``error`` met while doing ``action``; a new one per caller."""
    if isinstance(error, EffectPersistenceError):
        translated = type(error)(f"{action}: {error}")  # the same kind of trouble
    elif _storage_error(error):
        translated = _translated(error, action)
    else:
        return error  # not the store's trouble: a bug, raised as it is
    translated.__cause__ = error
    return translated


def _describe(error: BaseException) -> str:
    # The message must not fail in turn: some exception classes read, in __str__ or even in
    # attribute lookups, what their constructor may not have set (urllib's errors built bare).
    try:
        orig = getattr(error, "orig", None)
        if isinstance(orig, BaseException):
            return f"{type(orig).__name__}: {orig}"
        if isinstance(error, OSError) and error.filename:
            return f"{error.strerror or type(error).__name__}: {error.filename}"
        return f"{type(error).__name__}: {error}"
    except Exception:  # any failure here would hide the storage error
        return f"{type(error).__name__}: {error.args!r}"
