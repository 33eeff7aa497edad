"""Storage errors on the PostgreSQL backend become the error tree's leaves, at one boundary.

Every class of psycopg's, SQLAlchemy's, Alembic's and the OS's errors is translated; each
SQLSTATE psycopg knows is classified by what PostgreSQL's documentation says its class
means (Appendix A, "PostgreSQL Error Codes"). The same for SQLite's result codes is in
``tests/sqlite/test_errors.py``; the leaves any backend raises for real, in
``tests/contract``.
"""

from __future__ import annotations

import inspect

import psycopg
import psycopg.errors
import pytest
import sqlalchemy.exc
from alembic.util import CommandError

from ledger.errors import (
    EffectPersistenceError,
    SchemaTooNewError,
    StoreCorruptError,
    StoreUnavailableError,
)
from ledger.postgresql.errors import classify, storage_errors, translate
from tests.builders import subclasses

# The store may work later: a connection exception, insufficient resources (a full disk,
# too many connections), an operator's intervention (shutdown, cancel, timeout), a
# system error (I/O)...
UNAVAILABLE_CLASSES = {"08", "53", "57", "58"}
# ... a lock not available, a serialization failure, a deadlock, an object in use.
UNAVAILABLE_CODES = {"55P03", "40001", "40P01", "55006"}
# The server found its data or an index corrupted.
CORRUPT_CODES = {"XX001", "XX002"}


def _expected(sqlstate: str) -> type[EffectPersistenceError]:
    if sqlstate in CORRUPT_CODES:
        return StoreCorruptError
    if sqlstate in UNAVAILABLE_CODES or sqlstate[:2] in UNAVAILABLE_CLASSES:
        return StoreUnavailableError
    return EffectPersistenceError  # a constraint, a guard, a programming error: still the store's


def _coded() -> list[type[psycopg.Error]]:
    found = [
        c
        for c in subclasses(psycopg.Error)
        if issubclass(c, psycopg.Error) and getattr(c, "sqlstate", None)
    ]
    return sorted(found, key=lambda c: str(c.sqlstate))


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, sqlalchemy.exc.DBAPIError):
        return cls("SELECT 1", {}, psycopg.errors.DiskFull("no space"))
    if issubclass(cls, sqlalchemy.exc.StatementError):
        return cls("boom", "SELECT 1", {}, psycopg.errors.DiskFull("no space"))
    try:
        return cls("boom")
    except TypeError:
        return cls.__new__(cls)


def test_psycopg_knows_every_sqlstate_class_the_mapping_names() -> None:
    """The classes and codes the mapping names exist in the driver: none is a typo."""
    states = {str(c.sqlstate) for c in _coded()}
    assert {s[:2] for s in states} >= UNAVAILABLE_CLASSES
    assert states >= UNAVAILABLE_CODES | CORRUPT_CODES


@pytest.mark.parametrize("cls", _coded(), ids=lambda c: f"{c.sqlstate}-{c.__name__}")
def test_every_sqlstate_maps_to_its_leaf(cls: type[psycopg.Error]) -> None:
    """Each SQLSTATE psycopg knows becomes the leaf its class means, bare or wrapped."""
    error = cls("boom")
    leaf = _expected(str(cls.sqlstate))
    assert classify(error) is leaf
    assert classify(sqlalchemy.exc.DBAPIError("SELECT 1", {}, error)) is leaf
    with pytest.raises(EffectPersistenceError) as caught, storage_errors("doing a thing"):
        raise error
    assert type(caught.value) is leaf
    assert caught.value.__cause__ is error
    assert str(caught.value).startswith("doing a thing: ")


@pytest.mark.parametrize(
    "root",
    [sqlalchemy.exc.SQLAlchemyError, psycopg.Error, CommandError, OSError],
    ids=lambda c: c.__name__,
)
def test_every_storage_error_class_is_translated(root: type[BaseException]) -> None:
    """Every subclass of each storage error family becomes EffectPersistenceError, chained."""
    classes = [c for c in subclasses(root) if not inspect.isabstract(c)]
    assert classes
    for cls in classes:
        error = _instance(cls)
        with pytest.raises(EffectPersistenceError) as caught, storage_errors("doing a thing"):
            raise error
        assert caught.value.__cause__ is error


@pytest.mark.parametrize(
    ("error", "leaf"),
    [
        # No server answered (refused, gone, timed out): no SQLSTATE, the store may come back.
        (psycopg.OperationalError("connection refused"), StoreUnavailableError),
        (psycopg.InterfaceError("the connection is closed"), EffectPersistenceError),
        (sqlalchemy.exc.TimeoutError("QueuePool limit reached"), StoreUnavailableError),
        (OSError(28, "No space left on device"), StoreUnavailableError),
        (CommandError("Can't locate revision identified by 'ffffffffffff'"), SchemaTooNewError),
        (CommandError("Multiple heads are present"), EffectPersistenceError),
    ],
    ids=str,
)
def test_errors_without_a_sqlstate_are_classified_by_what_they_mean(
    error: BaseException, leaf: type[EffectPersistenceError]
) -> None:
    """The driver's own, the pool's, the OS's and Alembic's errors become their leaves."""
    assert classify(error) is leaf


@pytest.mark.parametrize("error", [ValueError("bad"), TypeError("bad"), KeyError("k")])
def test_caller_mistakes_are_not_translated(error: Exception) -> None:
    """A caller's ValueError or TypeError (or a bug) passes through untouched."""
    with pytest.raises(type(error)), storage_errors("doing a thing"):
        raise error
    assert translate("doing a thing", error) is error


def test_an_error_already_translated_is_retold_with_its_leaf() -> None:
    """Re-told as part of a larger action, an error keeps its leaf and its cause."""
    first = StoreCorruptError("index corrupted")
    told = translate("loading run r", first)
    assert type(told) is StoreCorruptError
    assert str(told) == "loading run r: index corrupted"
    assert told.__cause__ is first
