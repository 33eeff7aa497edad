"""The PostgreSQL engine of a store: its URL, its connections' settings, its migrations.

Durability is not assumed: a connection whose ``synchronous_commit`` is weaker than
``on`` (its commits could return before the WAL is flushed) or whose server runs with
``fsync`` off is refused, naming the setting. Migrations are the same Alembic history as
SQLite's; many workers opening a new store at once take a transaction-level advisory
lock first, so that one migrates and the others find the schema current.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import ConnectionPoolEntry

from ledger._sql.revisions import (
    alembic_config,
    check_known,
    create_at_head,
    head_revision,
    revision_mismatch,
)
from ledger._sql.tables import metadata
from ledger.errors import StoreCorruptError, StoreFileRefusedError
from ledger.postgresql.errors import storage_errors
from ledger.postgresql.guards import install_derived
from ledger.storage import describe

SCHEMES = ("postgresql", "postgresql+psycopg")
# synchronous_commit levels at which a COMMIT returns only once the WAL is flushed
# locally (and, with synchronous standbys, on them): "on" and the stronger remote_apply.
DURABLE_COMMIT = frozenset({"on", "remote_apply"})
CONNECT_TIMEOUT_S = 10
# How long a statement may wait for a lock (another writer's run, a migration) before
# the store is called unavailable: generous, as SQLite's busy timeout.
LOCK_TIMEOUT_MS = 60_000


def _key(name: str) -> int:
    """A signed 64-bit advisory lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


MIGRATION_LOCK = _key("ledger: migrations")


def parse(location: str) -> URL:
    """The SQLAlchemy URL of a store named by ``location`` (``postgresql[+psycopg]://...``)."""
    try:
        url = make_url(location)
    except ArgumentError as e:
        raise ValueError(f"not a PostgreSQL URL: {display(location)}") from e
    if url.drivername not in SCHEMES:
        raise ValueError(f"a PostgreSQL store is named postgresql://..., not {url.drivername}://")
    return url.set(drivername="postgresql+psycopg")


def display(location: str) -> str:
    """The store's URL as given, with its password removed: safe to print and log."""
    return describe(location)


def check_settings(dbapi_connection: Any) -> None:
    """Refuse a connection whose commits are not durable when they return."""
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit'), current_setting('fsync')")
        synchronous_commit, fsync = cursor.fetchone()
    dbapi_connection.rollback()
    if synchronous_commit not in DURABLE_COMMIT:
        raise StoreFileRefusedError(
            f"synchronous_commit is {synchronous_commit!r} where 'on' (or remote_apply) is "
            "required: a claim could be acknowledged before it is on disk; refusing to use it"
        )
    if fsync != "on":
        raise StoreFileRefusedError(
            f"the server runs with fsync {fsync!r}: nothing it commits survives a crash; "
            "refusing to use it"
        )


def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    try:
        check_settings(dbapi_connection)
        with dbapi_connection.cursor() as cursor:
            cursor.execute(f"SET lock_timeout = {LOCK_TIMEOUT_MS}")
            # The views' queries are many small index lookups whose plan the server
            # over-estimates: above jit_above_cost it compiles them to machine code
            # first, which took 20 s and more here for a query that runs in 10 ms.
            cursor.execute("SET jit = off")
        dbapi_connection.commit()
    except BaseException:
        dbapi_connection.close()
        raise


def engine(location: str, *, pool_size: int = 4) -> Engine:
    """An engine on the store at ``location``, every connection checked on connect."""
    found = create_engine(
        parse(location),
        pool_size=pool_size,
        max_overflow=8,
        pool_timeout=LOCK_TIMEOUT_MS / 1000,
        # A pooled connection the server dropped (a restart) is replaced, not handed out.
        pool_pre_ping=True,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "ledger"},
    )
    event.listen(found, "connect", _on_connect)
    return found


def has_schema(conn: Connection) -> bool:
    """Whether the database holds a ledger store (its Alembic version table)."""
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415 - as in sqlite

    return MigrationContext.configure(conn).get_current_revision() is not None


def _tables(conn: Connection) -> int:
    """How many tables the current schema holds: none in a store yet to be created."""
    found = conn.exec_driver_sql(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
    ).scalar()
    return int(found or 0)


def upgrade(engine_: Engine, store: object = "") -> bool:
    """Bring the schema to head, once however many processes ask at once; True if it changed.

    A store at a revision this library does not know is refused; one whose migration
    meets objects its revision lacks is refused too, the migration rolled back whole.
    """
    # Alembic is imported by what migrates, never by a reader (see ledger._sql.revisions).
    from alembic import command  # noqa: PLC0415
    from alembic.autogenerate import compare_metadata  # noqa: PLC0415
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415

    head = head_revision()
    with engine_.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
        conn.rollback()
    check_known(current, store)
    if current == head:
        return False
    failed: tuple[str | None, str] | None = None
    try:
        with engine_.begin() as conn:
            # Held to the end of the transaction: the next opener waits, then finds head.
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
            current = MigrationContext.configure(conn).get_current_revision()
            check_known(current, store)
            if current == head:
                return False
            if current is None and not _tables(conn):
                create_at_head(conn, install_derived)
                return True
            try:
                command.upgrade(alembic_config(conn), "head")
            except DBAPIError as e:
                if _already_there(e):
                    failed = (current, str(e.orig).splitlines()[0])
                raise
    except DBAPIError as e:
        if failed is None:
            raise
        with engine_.connect() as conn:
            drift = compare_metadata(MigrationContext.configure(conn), metadata)
            conn.rollback()
        raise revision_mismatch(
            store,
            *failed,
            tables_are=None if drift else head,
            with_="psql",
        ) from e
    return True


# PostgreSQL's codes for what a migration was to create already being there: a column,
# a table (or index, or sequence), a schema, any other object.
_ALREADY_THERE = {"42701", "42P07", "42P06", "42710"}


def _already_there(error: DBAPIError) -> bool:
    return getattr(error.orig, "sqlstate", None) in _ALREADY_THERE


def migrate(location: str) -> tuple[str | None, str]:
    """Create the store at ``location``, or bring its schema to head: (revision before, after).

    The revision before is ``None`` for a store created now. Refused, with nothing
    changed: a schema holding tables but no ledger schema (not a store), and a store at
    a revision this library does not know. Run it as the role that owns the schema.
    """
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415 - as in upgrade

    store = display(location)
    found = engine(location, pool_size=1)
    try:
        with storage_errors(f"cannot migrate the store {store}"):
            with found.connect() as conn:
                before = MigrationContext.configure(conn).get_current_revision()
                tables = _tables(conn)
                conn.rollback()
            if before is None and tables:
                raise StoreCorruptError(
                    f"the database {store} holds tables but no ledger schema: it is not a "
                    "store; nothing was changed"
                )
            upgrade(found, store)
    finally:
        found.dispose()
    return before, head_revision()
