"""The SQLite engine of a store: the pragmas every connection gets, and the migrations.

Durability is not assumed: every connection is put in WAL mode with
``synchronous=FULL`` and foreign keys on, and the pragmas are read back; a
connection where one did not take is refused. Writers begin with ``BEGIN
IMMEDIATE`` (a deferred transaction that upgrades to a write lock bypasses SQLite's
busy handler). The schema is Alembic's, from the scripts shipped with the package.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.pool import ConnectionPoolEntry

from ledger._chain import sha3
from ledger._sql.guards import IMPORT_SOURCE_ID, WRITER_SOURCE_ID

# The schema's history is both backends'; tests and tools still find it here.
from ledger._sql.revisions import (  # noqa: F401
    PACKAGE,
    _migrations_dir,
    _read_revisions,
    _walk_revisions,
    alembic_config,
    check_known,
    head_revision,
    known_revisions,
    revision_mismatch,
    revisions,
)
from ledger.errors import (
    StoreFileRefusedError,
    StoreUnavailableError,
)

BUSY_TIMEOUT_MS = 60_000
READ_ONLY = "ledger_read_only"
SOURCE = "ledger_source"  # the key of a pooled connection's Source in its record's info

# PRAGMA synchronous levels. FULL, always, but for the scratch stores of ``ledger bench``
# (see unsynchronised), which is the one caller that may take the disk out.
FULL = 2
OFF = 0


def _wal(cursor: sqlite3.Cursor) -> Any:
    """Put the database in WAL mode, waiting out other processes doing the same.

    Switching a new database to WAL takes an exclusive lock from a shared one; when
    several processes create a store at the same moment, SQLite reports the deadlock
    at once (SQLITE_BUSY) instead of calling the busy handler, so wait here instead.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.001
    while True:
        try:
            return cursor.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as e:
            if getattr(e, "sqlite_errorcode", None) != sqlite3.SQLITE_BUSY:
                raise
            if time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class Source:
    """What one of the library's connections answers ``sqlite_source_id()`` with.

    The library's prefix and SQLite's own id; while ``importing`` (the statements of a
    run ``ledger import`` replays, see ledger.sqlite.commit), the import's prefix, on
    which the guards leave the store's clock out of judging the run's approvals.
    """

    __slots__ = ("_imported", "_written", "importing")

    def __init__(self, sqlite_id: str) -> None:
        self._written = WRITER_SOURCE_ID + sqlite_id
        self._imported = IMPORT_SOURCE_ID + sqlite_id
        self.importing = False

    def __call__(self) -> str:
        """The answer, as SQLite asks for it in each statement that calls the function."""
        return self._imported if self.importing else self._written


def _on_connect(
    dbapi_connection: Any, record: ConnectionPoolEntry, synchronous: int = FULL
) -> None:
    record.info[SOURCE] = prepare(dbapi_connection, synchronous)


def prepare(dbapi_connection: Any, synchronous: int = FULL) -> Source:
    """Give a stdlib ``sqlite3`` connection what every connection of a store gets.

    WAL, ``synchronous``, foreign keys, recursive triggers, the functions the guards
    call and the writer's ``sqlite_source_id``; the pragmas are read back, and a
    connection where one did not take is closed and refused. Returns what the
    connection's ``sqlite_source_id()`` answers.
    """
    # SQLAlchemy emits BEGIN itself (see _on_begin); pysqlite must not.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = _wal(cursor)
        cursor.execute(f"PRAGMA synchronous = {synchronous}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA recursive_triggers = ON")
        # The guards check each record's hash with sha3(), as the stock shell has it. A
        # function the application registers may run in triggers only with a trusted
        # schema; the schema is checked whole before anything is written (foreign
        # triggers and views are refused), and sha3 is the only function registered.
        dbapi_connection.create_function("sha3", 1, sha3, deterministic=True)
        dbapi_connection.create_function("sha3", 2, sha3, deterministic=True)
        # It hashes every record it writes in Python: the guards need not hash it again.
        # Not declared deterministic: its answer changes between statements (while an
        # imported run is written), which that declaration would deny; SQLite reads it
        # afresh in every statement either way, and it is called in triggers only.
        source = Source(cursor.execute("SELECT sqlite_source_id()").fetchone()[0])
        dbapi_connection.create_function("sqlite_source_id", 0, source)
        cursor.execute("PRAGMA trusted_schema = ON")
        readings = {
            "journal_mode": (str(mode[0]).lower() if mode else None, "wal"),
            "synchronous": (cursor.execute("PRAGMA synchronous").fetchone()[0], synchronous),
            "foreign_keys": (cursor.execute("PRAGMA foreign_keys").fetchone()[0], 1),
        }
    finally:
        cursor.close()
    for pragma, (actual, wanted) in readings.items():
        if actual != wanted:
            dbapi_connection.close()
            raise StoreFileRefusedError(
                f"PRAGMA {pragma} is {actual!r} where {wanted!r} is required; refusing to write"
            )
    return source


def _on_begin(conn: Connection) -> None:
    read_only = conn.get_execution_options().get(READ_ONLY, False)
    conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


@contextlib.contextmanager
def _foreign_keys_off(conn: Connection) -> Iterator[None]:
    """Foreign keys off around a migration, as SQLite prescribes for rebuilding tables.

    Rebuilding a parent table (a batch migration) drops and renames it, which foreign
    keys would refuse mid-way; the pragma is a no-op inside a transaction, so it is set
    before BEGIN and ``PRAGMA foreign_key_check`` stands in for it before COMMIT.
    """
    raw = conn.connection.driver_connection
    if raw is None:  # pragma: no cover - a checked-out connection always has one
        raise StoreUnavailableError("the database connection is closed")
    raw.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        raw.execute("PRAGMA foreign_keys = ON")
        if raw.execute("PRAGMA foreign_keys").fetchone() != (1,):  # pragma: no cover
            conn.invalidate()  # never hand a connection without foreign keys to a writer
