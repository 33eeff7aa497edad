"""Storage errors become EffectPersistenceError at one boundary, and nothing else does."""

from __future__ import annotations

import inspect
import os
import sqlite3

import pytest
import sqlalchemy
import sqlalchemy.exc
from alembic import command
from alembic.util import CommandError

from ledger._store import Store, alembic_config, storage_errors
from ledger.effect_log import EffectPersistenceError as PublicError
from ledger.errors import EffectPersistenceError


def _subclasses(root: type[BaseException]) -> list[type[BaseException]]:
    seen: list[type[BaseException]] = []
    todo = [root]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return seen


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, sqlalchemy.exc.DBAPIError):
        return cls("SELECT 1", {}, sqlite3.OperationalError("disk I/O error"))
    if issubclass(cls, sqlalchemy.exc.StatementError):
        return cls("boom", "SELECT 1", {}, sqlite3.OperationalError("disk I/O error"))
    try:
        return cls("boom")
    except TypeError:
        return cls.__new__(cls)


def test_public_name_is_the_same_class() -> None:
    """ledger.effect_log.EffectPersistenceError is the one error class, shown under its public module."""
    assert PublicError is EffectPersistenceError
    assert EffectPersistenceError.__module__ == "ledger.effect_log"


@pytest.mark.parametrize(
    "root",
    [sqlalchemy.exc.SQLAlchemyError, sqlite3.Error, CommandError, OSError],
    ids=lambda c: c.__name__,
)
def test_every_storage_error_class_is_translated(root: type[BaseException]) -> None:
    """Every subclass of each storage error family becomes EffectPersistenceError, chained."""
    classes = [c for c in _subclasses(root) if not inspect.isabstract(c)]
    assert classes
    for cls in classes:
        error = _instance(cls)
        with pytest.raises(EffectPersistenceError) as caught, storage_errors("doing a thing"):
            raise error
        assert caught.value.__cause__ is error
        assert str(caught.value).startswith("doing a thing: ")


@pytest.mark.parametrize("error", [ValueError("bad"), TypeError("bad"), KeyError("k")])
def test_caller_mistakes_are_not_translated(error: Exception) -> None:
    """A caller's ValueError or TypeError (or a bug) passes through untouched."""
    with pytest.raises(type(error)), storage_errors("doing a thing"):
        raise error


def test_real_driver_error_is_translated_with_its_cause(tmp_path) -> None:
    """A real sqlite3 failure (the database path is a directory) arrives as EffectPersistenceError."""
    (tmp_path / "ledger.sqlite3").mkdir()
    store = Store(tmp_path)
    with pytest.raises(EffectPersistenceError, match="not a regular file"):
        store.open_for_writing()
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    with pytest.raises(EffectPersistenceError) as caught, storage_errors("opening"):
        engine.connect()
    assert isinstance(caught.value.__cause__, sqlalchemy.exc.OperationalError)
    engine.dispose()


def test_real_alembic_error_is_translated(tmp_path) -> None:
    """Alembic refusing an unknown revision arrives as EffectPersistenceError."""
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with (
        pytest.raises(EffectPersistenceError) as caught,
        storage_errors("migrating"),
        engine.begin() as conn,
    ):
        command.upgrade(alembic_config(conn), "no-such-revision")
    assert isinstance(caught.value.__cause__, CommandError)
    engine.dispose()


def test_real_os_error_is_translated(tmp_path) -> None:
    """An OS error (a missing path) arrives as EffectPersistenceError naming the file."""
    with (
        pytest.raises(EffectPersistenceError, match="missing-file") as caught,
        storage_errors("checking"),
    ):
        os.lstat(tmp_path / "missing-file")
    assert isinstance(caught.value.__cause__, FileNotFoundError)
