"""Storage errors on the SQLite backend become the error tree's leaves, at one boundary.

Every class of the driver's, Alembic's and the OS's errors is translated, classified by
what it means (a result code, a message); and the leaves only SQLite's files lead to are
met for real: refused or garbage files, a newer schema, a planted trigger, a real limit
on file size. The tree itself is in ``tests/pure/test_errors.py``; the leaves any
backend raises, in ``tests/contract/test_errors.py``.
"""

from __future__ import annotations

import inspect
import os
import resource
import sqlite3
import textwrap
import urllib.request  # noqa: F401 - its OSError subclasses are among those translated
from pathlib import Path

import pytest
import sqlalchemy
import sqlalchemy.exc
from alembic import command
from alembic.util import CommandError

from ledger.effect_log import EffectLog
from ledger.errors import (
    EffectPersistenceError,
    SchemaTooNewError,
    StoreCorruptError,
    StoreFileRefusedError,
    StoreTamperedError,
    StoreUnavailableError,
)
from ledger.sqlite.engine import alembic_config
from ledger.sqlite.errors import classify, storage_errors
from ledger.sqlite.store import Store
from tests.builders import orphan_run, python_stdout, subclasses
from tests.sqlite.driver import execute

DB = "ledger.sqlite3"


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, sqlalchemy.exc.DBAPIError):
        return cls("SELECT 1", {}, sqlite3.OperationalError("disk I/O error"))
    if issubclass(cls, sqlalchemy.exc.StatementError):
        return cls("boom", "SELECT 1", {}, sqlite3.OperationalError("disk I/O error"))
    try:
        return cls("boom")
    except TypeError:
        return cls.__new__(cls)


@pytest.mark.parametrize(
    "root",
    [sqlalchemy.exc.SQLAlchemyError, sqlite3.Error, CommandError, OSError],
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


# --------------------------------------------------------------------------- the tree


@pytest.mark.parametrize(
    ("error", "leaf"),
    [
        (OSError(28, "No space left on device"), StoreUnavailableError),
        (OSError(2, "No such file or directory"), StoreUnavailableError),
        (OSError(40, "Too many levels of symbolic links"), StoreFileRefusedError),
        (sqlite3.OperationalError("database is locked"), StoreUnavailableError),
        (sqlite3.OperationalError("database or disk is full"), StoreUnavailableError),
        (sqlite3.DatabaseError("database disk image is malformed"), StoreCorruptError),
        (sqlite3.DatabaseError("file is not a database"), StoreCorruptError),
        (sqlite3.IntegrityError("UNIQUE constraint failed: claims.seq"), EffectPersistenceError),
        (CommandError("Can't locate revision identified by 'ffffffffffff'"), SchemaTooNewError),
        (CommandError("Multiple heads are present"), EffectPersistenceError),
    ],
    ids=str,
)
def test_driver_errors_are_classified_by_what_they_mean(
    error: BaseException, leaf: type[EffectPersistenceError]
) -> None:
    """A driver, Alembic or OS error becomes the leaf that says what kind of trouble it is."""
    with pytest.raises(EffectPersistenceError) as caught, storage_errors("doing a thing"):
        raise error
    assert type(caught.value) is leaf
    assert caught.value.__cause__ is error


def test_sqlite_result_codes_choose_the_leaf(tmp_path: Path) -> None:
    """A real sqlite3 error carries its result code, and the code decides the leaf."""
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"this is not a database, not even close " * 200)
    conn = sqlite3.connect(garbage)
    try:
        with pytest.raises(sqlite3.DatabaseError) as caught:
            conn.execute("SELECT * FROM sqlite_master")
    finally:
        conn.close()
    assert caught.value.sqlite_errorcode == sqlite3.SQLITE_NOTADB
    assert classify(caught.value) is StoreCorruptError
    wrapped = sqlalchemy.exc.DatabaseError("SELECT 1", {}, caught.value)
    assert classify(wrapped) is StoreCorruptError


# --------------------------------------------------------------------------- each leaf, for real


@pytest.mark.parametrize("what", ["directory writable by others", "symlinked database"])
def test_a_refused_store_file_raises_store_file_refused(
    store_dir: Path, run_id: str, tmp_path: Path, what: str
) -> None:
    """A store that fails the trust checks is refused at load with StoreFileRefusedError."""
    orphan_run(store_dir, run_id)
    db = store_dir / DB
    if what == "directory writable by others":
        store_dir.chmod(0o777)
    else:
        real = tmp_path / "elsewhere.sqlite3"
        db.rename(real)
        db.symlink_to(real)
    with pytest.raises(StoreFileRefusedError, match=r"refusing|chmod go-w"):
        EffectLog.load(run_id, store_dir)


def test_garbage_bytes_as_the_database_raise_store_corrupt(store_dir: Path, run_id: str) -> None:
    """A database file that is not a database is refused with StoreCorruptError."""
    store_dir.mkdir(mode=0o700)
    db = store_dir / DB
    db.write_bytes(os.urandom(8192))
    db.chmod(0o600)
    with pytest.raises(StoreCorruptError, match="not a database") as caught:
        EffectLog.load(run_id, store_dir)
    assert isinstance(caught.value.__cause__, sqlalchemy.exc.DBAPIError | sqlite3.Error)


def test_a_store_from_a_newer_library_raises_schema_too_new(store_dir: Path, run_id: str) -> None:
    """A store at a schema revision this library does not ship is refused with SchemaTooNewError."""
    orphan_run(store_dir, run_id)
    db = store_dir / DB
    execute(db, "UPDATE alembic_version SET version_num = 'ffffffffffff'")
    with pytest.raises(SchemaTooNewError, match="ffffffffffff"):
        EffectLog.load(run_id, store_dir)


def test_a_planted_trigger_raises_store_tampered(store_dir: Path, run_id: str) -> None:
    """A trigger that drops claims, planted in the store, is refused with StoreTamperedError."""
    orphan_run(store_dir, run_id)
    db = store_dir / DB
    execute(db, "CREATE TRIGGER eat BEFORE INSERT ON claims BEGIN SELECT RAISE(IGNORE); END")
    with pytest.raises(StoreTamperedError, match="trigger eat"):
        EffectLog.load(run_id, store_dir)


FULL = textwrap.dedent(
    """
    import resource, signal, sys
    from ledger import effects as fx
    from ledger.effect_log import EffectLog, EffectPersistenceError

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
    op = fx.OperationRef("write_file", "test/1", "0" * 64)
    with EffectLog(sys.argv[1], sys.argv[2]) as log:
        try:
            log.claim(effect_id="e1", action_id="a1", operation=op, impact_scope=())
        except EffectPersistenceError as e:
            print(type(e).__name__, e)
        else:
            print("written")
    """
)


def test_a_full_disk_raises_store_unavailable(store_dir: Path, run_id: str) -> None:
    """A claim that cannot be written because files may not grow raises StoreUnavailableError."""
    assert resource.RLIMIT_FSIZE  # the limit exists on this platform
    orphan_run(store_dir, "0" * 32)
    out = python_stdout(FULL, run_id, store_dir)
    assert out.startswith(f"{StoreUnavailableError.__name__} "), out
    with EffectLog.load(run_id, store_dir) as log:
        assert log.history().claims == ()
