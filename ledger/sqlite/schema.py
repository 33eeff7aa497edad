"""The schema's derived objects on SQLite: the guards as triggers, and the views.

The tables are ``ledger._sql.tables`` (the migrations build exactly them); the guards
are ``ledger._sql.guards``, rendered here as one ``BEFORE INSERT`` trigger per table
whose statements each raise one guard's message; the views are ``ledger._sql.views``.
:func:`install_derived` drops and re-creates all of them at the end of every upgrade,
so a batch migration (which rebuilds a table on SQLite and silently drops its
triggers) can never leave the store unguarded.

The names of the floor below stay importable from here, where SQLite's callers and
tests found them.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

from sqlalchemy import Connection

from ledger._sql.guards import (  # noqa: F401 - named here too
    ENTRY_GUARDS,
    OTHER_WRITER,
    WRITER_SOURCE_ID,
    Guard,
    by_table,
    entries_message,
    entries_refused,
    insert_guards,
)
from ledger._sql.tables import (  # noqa: F401 - named here too
    APPEND_ONLY_TABLES,
    NAMING_CONVENTION,
    RECORD_TABLES,
    claims,
    has_every_column,
    indexes,
    metadata,
    observations,
    outcomes,
    resolutions,
    run_writers,
    runs,
    scope_index,
)
from ledger._sql.views import (  # noqa: F401 - named here too
    EFFECT_STATUS_VIEW,
    STATUS_QUERY,
    VIEW_QUERIES,
    VIEWS,
    with_views,
)


def _message(message: str) -> str:
    if "'" in message:
        raise ValueError("trigger messages are SQL string literals: no quotes")
    return message


def _raise(message: str) -> str:
    return f"SELECT RAISE(ABORT, 'ledger: {_message(message)}');"


# The claim's scope entries into scope_index, in the claim's own statement: the library
# writes one row per claim, and the shell's claims are indexed the same way.
# A claim with one resource (most of them) inserts it with VALUES: an INSERT ... SELECT
# into a table with triggers goes through a temporary table (a fortieth of a claim's
# instructions).
SCOPE_INDEX_TRIGGER = {
    "claims_scope_index": (
        "CREATE TRIGGER claims_scope_index AFTER INSERT ON claims\n"
        "WHEN NEW.scope_count > 1\n"
        "BEGIN INSERT INTO scope_index (run_id, kind, locator, effect_id, position)"
        " SELECT NEW.run_id, json_extract(j.value, '$.kind'), json_extract(j.value, '$.locator'),"
        " NEW.effect_id, j.key FROM json_each(NEW.impact_scope) AS j; END"
    ),
    "claims_scope_index_one": (
        "CREATE TRIGGER claims_scope_index_one AFTER INSERT ON claims\n"
        "WHEN NEW.scope_count = 1\n"
        "BEGIN INSERT INTO scope_index (run_id, kind, locator, effect_id, position)"
        " VALUES (NEW.run_id, json_extract(NEW.impact_scope, '$[0].kind'),"
        " json_extract(NEW.impact_scope, '$[0].locator'), NEW.effect_id, 0); END"
    ),
}


def guard_check(guard: Guard) -> str:
    """The statement of ``guard`` in its table's trigger (one line)."""
    return f"SELECT RAISE(ABORT, 'ledger: {_message(guard.message)}') WHERE {guard.condition};"


def guard_trigger(table: str, guards: Iterable[Guard]) -> str:
    """The ``CREATE TRIGGER`` statement of ``table``'s guards: each a statement, in turn."""
    checks = "\n".join(guard_check(g) for g in guards)
    return f"CREATE TRIGGER {table}_guard BEFORE INSERT ON {table}\nBEGIN\n{checks}\nEND"


def _reads(ddl: str) -> frozenset[str]:
    """The library's tables that SQL ``ddl`` fires on or reads."""
    return frozenset(re.findall(r"\b(?:ON|FROM|JOIN) (\w+)", ddl)) & set(metadata.tables)


def sqlite_triggers(tables: Mapping[str, Collection[str]] | None = None) -> dict[str, str]:
    """Every trigger of the store, by name: its ``CREATE TRIGGER`` statement.

    The guards of a table are one trigger, ``<table>_guard``, with one statement per
    guard (see ``ledger._sql.guards.by_table``). ``tables`` (each table's columns) is a
    store at an older revision, on its way to head: it gets the guards whose tables and
    columns it has; None is the store at head.
    """

    def fits(ddl: str, table: str) -> bool:
        return tables is None or (
            _reads(ddl) <= tables.keys()
            and frozenset(re.findall(r"\bNEW\.(\w+)", ddl)) <= set(tables[table])
        )

    triggers: dict[str, str] = {}
    for table in APPEND_ONLY_TABLES:
        for event in ("UPDATE", "DELETE"):
            name = f"{table}_no_{event.lower()}"
            ddl = (
                f"CREATE TRIGGER {name} BEFORE {event} ON {table}\n"
                f"BEGIN {_raise(f'{table} is append-only, {event} is refused')} END"
            )
            if fits(ddl, table):
                triggers[name] = ddl
    for table, guards in by_table(insert_guards("sqlite").values()).items():
        present = [g for g in guards if fits(f"ON {table}\n{g.condition}", table)]
        if present:
            triggers[f"{table}_guard"] = guard_trigger(table, present)
    triggers.update((n, ddl) for n, ddl in SCOPE_INDEX_TRIGGER.items() if fits(ddl, "claims"))
    return triggers


SQLITE_TRIGGERS = sqlite_triggers()


def install_derived(connection: Connection) -> None:
    """Drop and re-create every trigger and view, and create missing indexes, at head.

    Runs inside the migration's transaction, so no other connection ever sees
    the tables unguarded.
    """
    if connection.dialect.name != "sqlite":  # pragma: no cover - PostgreSQL comes later
        raise NotImplementedError(f"no derived objects for {connection.dialect.name}")
    existing = connection.exec_driver_sql(
        "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')"
    ).all()
    for kind, name in existing:
        if name in SQLITE_TRIGGERS or name in VIEWS:
            connection.exec_driver_sql(f'DROP {kind.upper()} "{name}"')
    # A store on its way up (an older revision, in a test of each step) may lack a table
    # a later revision adds: the guards of the tables it has are installed all the same.
    tables = {
        table: set(
            connection.exec_driver_sql(f'SELECT name FROM pragma_table_info("{table}")').scalars()
        )
        for table in connection.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
        ).scalars()
    }
    for ddl in sqlite_triggers(tables).values():
        connection.exec_driver_sql(ddl)
    if has_every_column(tables):
        for ddl in VIEWS.values():
            connection.exec_driver_sql(ddl)
    # Indexes belong to the migrations; one dropped by hand (the unique index that allows
    # one terminal outcome per claim, say) is put back, and fails if forged rows forbid it.
    for index in indexes().values():
        table = index.table.name  # type: ignore[union-attr]
        if tables.get(table, set()) >= {c.name for c in index.columns}:
            index.create(connection, checkfirst=True)
