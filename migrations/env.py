"""Alembic environment of the ledger store, driven from code.

The library passes its own connection in ``config.attributes["connection"]``, already
inside a ``BEGIN IMMEDIATE`` transaction, so migrations run under the write lock and
commit or roll back as one. After any revision is applied, every trigger and view is
re-created by the store's backend (``ledger.sqlite.schema`` or ``ledger.postgresql.guards``,
from the guards and views of ``ledger._sql``): a
batch migration on SQLite rebuilds tables and drops their triggers silently, and this
keeps the store guarded whatever a migration does. On PostgreSQL the library holds an
advisory lock around the migration instead of SQLite's write lock.
"""

from alembic import context
from sqlalchemy import Connection, create_engine

from ledger._sql import tables


def _install_derived(connection: Connection) -> None:
    # Each backend's, imported for its stores only: neither loads the other (nor, for
    # SQLite users, the PostgreSQL driver).
    if connection.dialect.name == "postgresql":
        from ledger.postgresql.guards import install_derived  # noqa: PLC0415 - see above
    else:
        from ledger.sqlite.schema import install_derived  # noqa: PLC0415 - see above
    install_derived(connection)


config = context.config


def _run(connection: Connection) -> None:
    applied: list[str] = []

    def note(*, step: object, **_: object) -> None:
        applied.append(str(step))

    context.configure(
        connection=connection,
        target_metadata=tables.metadata,
        render_as_batch=True,
        compare_type=True,
        on_version_apply=note,
    )
    # A batch migration rebuilds a table and renames it into place; with the modern
    # ALTER TABLE that rename re-parses the triggers and views of *other* tables that
    # name it, which fails mid-rebuild. They are re-created by the backend
    # afterwards anyway. (The library turns foreign keys off around the migration and
    # runs PRAGMA foreign_key_check before it commits, as SQLite prescribes.)
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        connection.exec_driver_sql("PRAGMA legacy_alter_table = ON")
    try:
        with context.begin_transaction():
            context.run_migrations()
            if applied:
                _install_derived(connection)
    finally:
        if sqlite:
            connection.exec_driver_sql("PRAGMA legacy_alter_table = OFF")


def run_migrations_online() -> None:
    """Run against the caller's connection, or a URL from the configuration."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite://")
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("the ledger store is migrated online only")
run_migrations_online()
