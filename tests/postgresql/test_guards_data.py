"""Both backends' guards come from one list (ledger._sql.guards), rendered twice.

What PostgreSQL checks on insert is what SQLite checks, in PL/pgSQL, with the same
messages; only the guards SQLite alone can evaluate (those that tell the library's
writers from others, and the hash guards, which call ``sha3()``) are SQLite's. No server
is needed: these compare the definitions.
"""

from __future__ import annotations

from ledger._sql.guards import OTHER_WRITER, insert_guards
from ledger._sql.tables import RECORD_TABLES
from ledger.postgresql import guards as pg
from ledger.sqlite import schema as sqlite_schema


def test_postgresql_checks_what_sqlite_checks_with_the_same_words() -> None:
    """Every guard of SQLite's list that PostgreSQL can evaluate is PostgreSQL's, same message."""
    sqlite, postgresql = insert_guards("sqlite"), insert_guards("postgresql")
    # The hash guards call sha3(); the scope index's tells the library's writer from others.
    sqlite_only = {f"{table}_guard_hash" for table in RECORD_TABLES} | {"scope_index_guard_claim"}
    assert set(postgresql) == set(sqlite) - sqlite_only
    for name, guard in postgresql.items():
        assert (guard.table, guard.message) == (sqlite[name].table, sqlite[name].message)
        assert OTHER_WRITER not in guard.condition  # PostgreSQL has no sqlite_source_id()


def test_each_guard_is_rendered_by_each_backend() -> None:
    """SQLite has a trigger per table, a statement per guard raising its message, in the
    order SQLite fired them as triggers of their own (newest first); PostgreSQL a
    function and a trigger per guard."""
    for guard in insert_guards("sqlite").values():
        ddl = sqlite_schema.SQLITE_TRIGGERS[f"{guard.table}_guard"]
        assert ddl.startswith(
            f"CREATE TRIGGER {guard.table}_guard BEFORE INSERT ON {guard.table}\n"
        )
        assert f"\nSELECT RAISE(ABORT, 'ledger: {guard.message}') WHERE {guard.condition};\n" in ddl
    for table in RECORD_TABLES:
        created = [g.message for g in insert_guards("sqlite").values() if g.table == table]
        ddl = sqlite_schema.SQLITE_TRIGGERS[f"{table}_guard"]
        assert sorted(created, key=ddl.index) == created[::-1]
    for name, guard in insert_guards("postgresql").items():
        assert f"RAISE EXCEPTION 'ledger: {guard.message}'" in pg.FUNCTIONS[f"ledger_{name}"]
        assert f"IF ({guard.condition}) THEN" in pg.FUNCTIONS[f"ledger_{name}"]
        assert pg.TRIGGER_TABLE[name] == guard.table


def test_the_chain_guard_compares_null_safely_on_each_backend() -> None:
    """The link guard's comparison is NULL-safe: IS NOT on SQLite, IS DISTINCT FROM on PostgreSQL."""
    sqlite = insert_guards("sqlite")["claims_guard_chain"].condition
    postgresql = insert_guards("postgresql")["claims_guard_chain"].condition
    assert sqlite.startswith("NEW.prev_hash IS NOT (CASE")
    assert postgresql.startswith("NEW.prev_hash IS DISTINCT FROM (CASE")
    assert postgresql.replace(" IS DISTINCT FROM ", " IS NOT ", 1) == sqlite


def test_the_approval_guards_are_on_both_backends() -> None:
    """The guards of approval requests, decisions and claims under an approval: on both,
    the store's clock read by each backend's own SQL."""
    expected = {
        "approval_requests_guard_key",
        "approval_requests_guard_run",
        "approval_requests_guard_claimed",
        "approval_decisions_guard_key",
        "approval_decisions_guard_request",
        "approval_decisions_guard_expired",
        "approval_decisions_guard_self",
        "claims_guard_approval_used",
        "claims_guard_approval",
        "claims_guard_approval_expired",
    }
    sqlite, postgresql = insert_guards("sqlite"), insert_guards("postgresql")
    assert expected <= set(sqlite)
    assert expected <= set(postgresql)
    for name in ("approval_decisions_guard_expired", "claims_guard_approval_expired"):
        assert "strftime(" in sqlite[name].condition
        assert "clock_timestamp()" in postgresql[name].condition
