"""The one place where the PostgreSQL backend's failures become the caller's errors.

SQLAlchemy, psycopg, Alembic and OS errors met while using a store become the leaves of
:class:`~ledger.errors.EffectPersistenceError`, chained to their cause; :func:`classify`
chooses the leaf from the server's SQLSTATE. Anything else (a bug, a caller's mistake)
passes through as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import sqlalchemy.exc

from ledger.errors import (
    EffectPersistenceError,
    SchemaTooNewError,
    StoreCorruptError,
    StoreUnavailableError,
)
from ledger.sqlite.errors import _command_error

# Alembic's CommandError too, found without importing Alembic (see ledger.sqlite.errors).
_STORAGE_ERRORS = (sqlalchemy.exc.SQLAlchemyError, psycopg.Error, OSError)


def _storage_error(error: BaseException) -> bool:
    return isinstance(error, _STORAGE_ERRORS) or _command_error(error)


# SQLSTATE classes and codes by the leaf they mean. The store may work later after a
# connection exception, insufficient resources (a full disk, too many connections), an
# operator's intervention (a shutdown, a cancel, a statement timeout), a system error
# (I/O), a lock not available, a serialization failure or a deadlock.
_UNAVAILABLE_CLASSES = ("08", "53", "57", "58")
_UNAVAILABLE = frozenset({"55P03", "40001", "40P01", "55006"})
# The server found data or an index corrupted.
_CORRUPT = frozenset({"XX001", "XX002"})
# Alembic's words for a revision its scripts do not hold: the store's is newer than ours.
_UNKNOWN_REVISION = "can't locate revision"


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


def classify(error: BaseException) -> type[EffectPersistenceError]:
    """The leaf of :mod:`ledger.errors` that a driver, Alembic or OS ``error`` means.

    :class:`EffectPersistenceError` itself when no leaf fits (a constraint or guard the
    store enforced, a programming error): it is still storage trouble.
    """
    if isinstance(error, EffectPersistenceError):
        return type(error)
    orig = getattr(error, "orig", None)
    if isinstance(orig, BaseException):  # SQLAlchemy wraps the driver's error
        return classify(orig)
    if isinstance(error, sqlalchemy.exc.TimeoutError):  # no pooled connection came free
        return StoreUnavailableError
    if isinstance(error, psycopg.Error):
        code = error.sqlstate or ""
        if code in _CORRUPT:
            return StoreCorruptError
        if code in _UNAVAILABLE or code[:2] in _UNAVAILABLE_CLASSES:
            return StoreUnavailableError
        if not code and isinstance(error, psycopg.OperationalError):
            return StoreUnavailableError  # no server answered: refused, gone, timed out
        return EffectPersistenceError
    if isinstance(error, sqlalchemy.exc.DBAPIError) and error.connection_invalidated:
        return StoreUnavailableError
    if _command_error(error):
        return (
            SchemaTooNewError if _UNKNOWN_REVISION in str(error).lower() else EffectPersistenceError
        )
    if isinstance(error, OSError):
        return StoreUnavailableError
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


def _translated(error: BaseException, action: str) -> EffectPersistenceError:
    try:
        return classify(error)(f"{action}: {_describe(error)}")
    except Exception:  # an error object too broken to read
        return EffectPersistenceError(f"{action}: {type(error).__name__}")


def _describe(error: BaseException) -> str:
    # The server's primary message, without SQLAlchemy's echo of the statement and its
    # parameters (which may be long, and hold a record's fields).
    try:
        orig = getattr(error, "orig", None)
        cause = orig if isinstance(orig, BaseException) else error
        if isinstance(cause, psycopg.Error) and cause.diag.message_primary:
            return f"{type(cause).__name__}: {cause.diag.message_primary}"
        return f"{type(cause).__name__}: {str(cause).strip()}"
    except Exception:  # any failure here would hide the storage error
        return f"{type(error).__name__}: {error.args!r}"
