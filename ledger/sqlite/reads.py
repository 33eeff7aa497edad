"""Read-only snapshots of a store for the forensic reads, creating no file it can avoid."""

from __future__ import annotations

import logging
import os
import sqlite3
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import sqlalchemy.exc
from sqlalchemy import Connection, create_engine, event
from sqlalchemy.pool import NullPool

from ledger import _paths
from ledger.errors import (
    EffectPersistenceError,
    StoreUnavailableError,
)
from ledger.sqlite import rows as _rows
from ledger.sqlite import trust as _trust
from ledger.sqlite.engine import BUSY_TIMEOUT_MS, READ_ONLY, _on_begin
from ledger.sqlite.errors import storage_errors

T = TypeVar("T")

log = logging.getLogger("ledger")


def read_only_uri(db: Path, *, immutable: bool) -> str:
    """The SQLite URI that opens ``db`` read-only; ``immutable`` also takes no lock.

    ``immutable`` reads create and change no file at all (not even ``-wal``/``-shm``,
    which a ``mode=ro`` reader creates when it may), but see nothing that is still in a
    WAL and are not protected from a checkpoint that lands while they read. The path is
    percent-encoded from its bytes, so that a path that is not UTF-8 opens too.
    """
    path = urllib.parse.quote(os.fsencode(db.absolute()), safe="/")
    return f"file:{path}?mode=ro" + ("&immutable=1" if immutable else "")


def _reader_connect(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.isolation_level = None
    conn.execute("PRAGMA query_only = ON")
    return conn


def wal_size(db: Path) -> int:
    """The size of ``db``'s ``-wal``: -1 when there is none, 0 when it holds no commit."""
    try:
        return os.lstat(db.with_name(db.name + "-wal")).st_size
    except FileNotFoundError:
        return -1


def _fingerprint(db: Path) -> tuple[int, int, int, int, int]:
    st = db.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, wal_size(db))


def check_readable(directory: Path) -> _trust.Checked:
    """The reader's checks on a store (see ledger.sqlite.trust): refuse, or say what was seen."""
    db = directory / _paths.DB_NAME
    if not os.path.lexists(db):
        raise StoreUnavailableError(f"there is no store at {directory}")
    return _trust.check_store(directory, db, writer=False)


def needs_copy(checked: _trust.Checked) -> bool:
    """Whether SQLite must read a private copy instead of the store's own files.

    Always for a store this user does not own: SQLite would map, rewrite, and as root
    chown its ``-shm``, and create files in it. Always for a store under a directory that
    another user could swap (``checked.exposure``): SQLite opens the store by path again,
    which may by then lead to that user's files; the copy reads the very directory checked.
    Also for a crashed store of ours (a ``-wal`` without its ``-shm``) in a directory we
    cannot write: SQLite cannot build the missing index there.
    """
    if not checked.ours or checked.exposure is not None:
        return True
    return (
        checked.wal_size > 0 and not checked.has_shm and not os.access(checked.directory, os.W_OK)
    )


def read(directory: Path, query: Callable[[Connection], T]) -> T:
    """Run ``query`` on one read-only snapshot of a store, for forensics.

    It never writes, and creates no file when it can avoid it. The store's files are
    checked first, as a writer's are, except that the store may be another user's.
    Another user's store, and one under a directory another user could swap, is read
    from a private copy (see :mod:`ledger.sqlite.trust`), so that no file of it is opened
    by SQLite. With no ``-wal`` no connection has the store open and every commit is in
    the database file: it is read ``immutable`` (no lock, no file created; works for a
    user who may read the store but not write its directory), and if the file changed or
    a ``-wal`` appeared while it read, the result is discarded and the query runs again
    ``mode=ro``. With a ``-wal`` (a writer is active, or crashed) it runs ``mode=ro``, so
    that commits still in the WAL are read.
    """
    db = directory / _paths.DB_NAME
    with storage_errors(f"cannot read the store {directory}"):
        checked = check_readable(directory)
        if needs_copy(checked):
            with _trust.private_copy(checked) as copy:
                return _read_once(read_only_uri(copy, immutable=False), query, directory)
        before = _fingerprint(db)
        if before[-1] <= 0:  # no -wal, or an empty one: every commit is in the file
            try:
                result = _read_once(read_only_uri(db, immutable=True), query, directory)
            except (sqlalchemy.exc.SQLAlchemyError, EffectPersistenceError):
                if _fingerprint(db) == before:
                    raise  # the store did not change: the failure is real
            else:
                if _fingerprint(db) == before:
                    return result
            log.info("store %s changed during an immutable read; reading it again", db)
        return _read_once(read_only_uri(db, immutable=False), query, directory)


def _read_once(uri: str, query: Callable[[Connection], T], directory: Path) -> T:
    engine = create_engine(
        "sqlite+pysqlite://", creator=lambda: _reader_connect(uri), poolclass=NullPool
    )
    event.listen(engine, "begin", _on_begin)
    try:
        with engine.execution_options(**{READ_ONLY: True}).begin() as conn:
            _rows.check_readable(conn, directory)
            return query(conn)
    finally:
        engine.dispose()
