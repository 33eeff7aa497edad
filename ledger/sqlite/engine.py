"""The SQLite engine of a store: the pragmas every connection gets, and the migrations.

Durability is not assumed: every connection is put in WAL mode with
``synchronous=FULL`` and foreign keys on, and the pragmas are read back; a
connection where one did not take is refused. Writers begin with ``BEGIN
IMMEDIATE`` (a deferred transaction that upgrades to a write lock bypasses SQLite's
busy handler). The schema is Alembic's, from the scripts shipped with the package.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.pool import ConnectionPoolEntry

from ledger._chain import sha3
from ledger._paths import DB_NAME
from ledger.errors import (
    EffectPersistenceError,
    SchemaTooNewError,
    StoreCorruptError,
    StoreFileRefusedError,
    StoreUnavailableError,
)
from ledger.sqlite.schema import WRITER_SOURCE_ID

# Alembic (a third of a reading command's start-up, most of it the DDL of every
# database it supports) is imported by what migrates: readers only need the revisions.
if TYPE_CHECKING:
    from alembic.config import Config

BUSY_TIMEOUT_MS = 60_000
READ_ONLY = "ledger_read_only"

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


def _on_connect(
    dbapi_connection: Any, _record: ConnectionPoolEntry, synchronous: int = FULL
) -> None:
    prepare(dbapi_connection, synchronous)


def prepare(dbapi_connection: Any, synchronous: int = FULL) -> None:
    """Give a stdlib ``sqlite3`` connection what every connection of a store gets.

    WAL, ``synchronous``, foreign keys, recursive triggers, the functions the guards
    call and the writer's ``sqlite_source_id``; the pragmas are read back, and a
    connection where one did not take is closed and refused.
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
        source_id = WRITER_SOURCE_ID + cursor.execute("SELECT sqlite_source_id()").fetchone()[0]
        dbapi_connection.create_function(
            "sqlite_source_id", 0, lambda: source_id, deterministic=True
        )
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


def _on_begin(conn: Connection) -> None:
    read_only = conn.get_execution_options().get(READ_ONLY, False)
    conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def _migrations_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # ledger/
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise EffectPersistenceError("the store migrations are not installed with the package")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration driven from code, sharing ``connection`` if given."""
    from alembic.config import Config  # noqa: PLC0415 - see the imports

    cfg = Config()
    cfg.set_main_option("script_location", str(_migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def _revisions(location: str) -> tuple[str | None, tuple[str, ...], frozenset[str]]:
    # Once per process, not per open.
    ordered = _read_revisions(Path(location) / "versions") or _walk_revisions(location)
    return (ordered[-1] if ordered else None), ordered, frozenset(ordered)


def _walk_revisions(location: str) -> tuple[str, ...]:
    """The revisions, oldest first, as Alembic finds them: it imports every script."""
    from alembic.config import Config  # noqa: PLC0415 - see the imports
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    cfg = Config()
    cfg.set_main_option("script_location", location)
    script = ScriptDirectory.from_config(cfg)
    return tuple(reversed([r.revision for r in script.walk_revisions()]))


def _read_revisions(versions: Path) -> tuple[str, ...] | None:
    """The revisions, oldest first, read from the scripts' text without running them.

    Each script names its ``revision`` and ``down_revision`` as string literals, one
    line of history from a single root to a single head: read so, they are what Alembic
    would find by importing every script (with SQLAlchemy and Alembic's DDL for every
    database). ``None`` for anything else (a branch, a merge, a name that is not a
    literal): Alembic's own walk then decides.
    """
    down: dict[str, str | None] = {}
    for path in sorted(versions.glob("*.py")):
        names: dict[str, object] = {}
        for node in ast.parse(path.read_bytes(), str(path)).body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
                if not isinstance(value, ast.Constant):
                    return None
                names[target.id] = value.value
        revision, parent = names.get("revision"), names.get("down_revision")
        if (
            not isinstance(revision, str)
            or not (parent is None or isinstance(parent, str))
            or revision in down
        ):
            return None
        down[revision] = parent
    children: dict[str | None, str] = {}
    for revision, parent in down.items():
        if parent in children or (parent is not None and parent not in down):
            return None  # a branch, or a parent no script holds
        children[parent] = revision
    ordered: list[str] = []
    current = children.get(None)
    while current is not None:
        ordered.append(current)
        current = children.get(current)
    return tuple(ordered) if len(ordered) == len(down) else None


def head_revision() -> str:
    """The newest schema revision this library ships."""
    head = _revisions(str(_migrations_dir()))[0]
    if head is None:  # pragma: no cover - the package always ships migrations
        raise EffectPersistenceError("no schema revision is shipped")
    return head


def known_revisions() -> frozenset[str]:
    """Every schema revision this library ships, the newest included."""
    return _revisions(str(_migrations_dir()))[2]


PACKAGE = "effect-ledger"


def _the_store(store: object) -> str:
    return f"the store {store}" if store else "the store"


def check_known(revision: str | None, store: object) -> None:
    """Refuse, in one line naming both revisions, a store at a revision this library lacks.

    Such a store was written by a newer version of the library (or its version row was
    forged): its tables may hold what this version would misread, or a migration it
    does not know may be half of what they are. Nothing is read from it or written to it.
    """
    if revision is None or revision in known_revisions():
        return
    raise SchemaTooNewError(
        f"{_the_store(store)} is at schema revision {revision}, which this version of the "
        f"library does not know (the newest it knows is {head_revision()}): a newer version "
        f"wrote it; upgrade the {PACKAGE} package to read or write it; nothing was changed"
    )


def revision_mismatch(
    store: object, recorded: str | None, failure: str, *, tables_are: str | None, with_: str
) -> StoreCorruptError:
    """The error for a store whose migration met objects its recorded revision lacks.

    Its ``alembic_version`` says ``recorded`` (or nothing) while its tables are already
    further on (the version row was set back or deleted by hand, or copied from another
    store): migrating it would apply again what is there. The migration was rolled back
    whole. When its tables are one revision's (``tables_are``), recording that revision
    is the repair, done with ``with_``; when none can be named, its runs are moved
    to a new store.
    """
    head = head_revision()
    if tables_are is not None:
        then = "the next write migrates it" if tables_are != head else "writes go on"
        record = (
            f"UPDATE alembic_version SET version_num = '{tables_are}'"
            if recorded
            else f"INSERT INTO alembic_version VALUES ('{tables_are}')"
        )
        advice = (
            f"its tables are revision {tables_are}'s: if ledger verify finds nothing else "
            f"wrong, record that revision (with {with_}: {record}) and {then}"
        )
    else:
        advice = (
            "its tables match no revision this library can name: see ledger verify, then "
            "move its runs to a new store (ledger export, ledger import)"
        )
    records = f"schema revision {recorded}" if recorded else "no schema revision"
    return StoreCorruptError(
        f"{_the_store(store)} records {records} but its tables do not match it (migrating "
        f"it to {head} failed: {failure}); nothing was changed; {advice}"
    )


def revisions() -> tuple[str, ...]:
    """Every schema revision this library ships, oldest first."""
    return _revisions(str(_migrations_dir()))[1]


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


# --------------------------------------------------------------------------- ledger migrate


def migrate(directory: Path) -> tuple[str | None, str]:
    """Create the store at ``directory``, or bring its schema to head: (revision before, after).

    The revision before is ``None`` for a store created now (or a database its creator
    left blank). The store is opened as a worker's first write opens it, with every check
    of its files and schema. Refused, with nothing changed: a database holding tables but
    no ledger schema (not a store), and a store at a revision this library does not know.
    """
    # store.py imports this module; ledger migrate is the one caller that needs both.
    from ledger.sqlite import store as _store  # noqa: PLC0415
    from ledger.sqlite.errors import storage_errors  # noqa: PLC0415

    opened = _store.acquire(directory)
    try:
        before = None
        db = directory / DB_NAME
        with storage_errors(f"cannot migrate the store {directory}"):
            if os.path.lexists(db):
                _store.check_files(directory, db)
                engine = opened._engine()  # noqa: SLF001 - the store's own, checked connections
                with engine.execution_options(**{READ_ONLY: True}).begin() as conn:
                    tables = {
                        name
                        for (name,) in conn.exec_driver_sql(
                            "SELECT name FROM sqlite_master WHERE type = 'table'"
                        )
                    }
                    if "alembic_version" in tables:
                        before = conn.exec_driver_sql(
                            "SELECT version_num FROM alembic_version"
                        ).scalar()
                if before is None and tables - {"alembic_version"}:
                    raise StoreCorruptError(
                        f"{db} holds tables but no ledger schema: it is not a store; "
                        "nothing was changed"
                    )
                check_known(before, directory)
        opened.open_for_writing()
    finally:
        _store.release(opened)
    return before, head_revision()
