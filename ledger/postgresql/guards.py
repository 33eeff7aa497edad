"""The schema's derived objects on PostgreSQL: PL/pgSQL guards and the views.

The tables are the migrations' (the same Alembic history as SQLite's). The guards are
``ledger._sql.guards``' PostgreSQL list, each rendered as a PL/pgSQL function raising
its message when its condition holds, so that both backends refuse the same rows with
the same words; the views are ``ledger._sql.views``' queries with SQLite's spellings
turned into PostgreSQL's. Each rewrite must match where it is expected, so a change of
the views' text that this module does not follow fails at import, not silently.

UPDATE, DELETE and TRUNCATE of a record table are refused by statement-level triggers
(so even a statement that matches no row is refused): "append-only". The hash guards
are SQLite's alone (they call ``sha3()``, which PostgreSQL lacks); on PostgreSQL the
chain's links are checked on insert and its hashes by every load.
"""

from __future__ import annotations

from sqlalchemy import Connection

from ledger._chain import OBLIGATION_COLUMNS, SCOPE_COLUMNS
from ledger._sql.guards import insert_guards, store_now
from ledger._sql.tables import APPEND_ONLY_TABLES, has_every_column
from ledger._sql.views import VIEW_QUERIES

INSERT_GUARDS = insert_guards("postgresql")
REFUSED = ("UPDATE", "DELETE", "TRUNCATE")


def _refusal_triggers() -> dict[str, str]:
    return {
        f"{table}_no_{event.lower()}": (
            f"CREATE TRIGGER {table}_no_{event.lower()} BEFORE {event} ON {table}"
            " FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse()"
        )
        for table in APPEND_ONLY_TABLES
        for event in REFUSED
    }


REFUSE_FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_refuse() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    RAISE EXCEPTION 'ledger: % is append-only, % is refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END
$body$"""


def _guard_function(name: str, condition: str, message: str) -> str:
    # In parentheses: PL/pgSQL ends an IF's condition at the first THEN outside them,
    # and a condition may hold a CASE.
    return f"""
CREATE OR REPLACE FUNCTION ledger_{name}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF ({condition}) THEN
        RAISE EXCEPTION '{message}' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$body$"""


# A claim's scope entries into scope_index, as SQLite's claims_scope_index trigger does.
# It runs as its owner (the store's owner role), so the writer role needs no INSERT on
# scope_index and cannot add rows of its own.
SCOPE_INDEX_FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_claims_scope_index() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT AS $body$
BEGIN
    INSERT INTO scope_index (run_id, kind, locator, effect_id, position)
    SELECT NEW.run_id, j.value ->> 'kind', j.value ->> 'locator', NEW.effect_id, j.n - 1
      FROM jsonb_array_elements(NEW.impact_scope::jsonb) WITH ORDINALITY AS j(value, n);
    RETURN NULL;
END
$body$"""

# The columns of its table the scope index's trigger reads (a claim's JSON scope: 0009).
_READS = {"claims_scope_index": {"run_id", "effect_id", "scope_count", "impact_scope"}}

FUNCTIONS = {
    "ledger_refuse": REFUSE_FUNCTION,
    "ledger_claims_scope_index": SCOPE_INDEX_FUNCTION,
} | {
    f"ledger_{name}": _guard_function(name, guard.condition, f"ledger: {guard.message}")
    for name, guard in INSERT_GUARDS.items()
}
TRIGGERS = (
    _refusal_triggers()
    | {
        "claims_scope_index": (
            "CREATE TRIGGER claims_scope_index AFTER INSERT ON claims FOR EACH ROW"
            " WHEN (NEW.scope_count > 0) EXECUTE FUNCTION ledger_claims_scope_index()"
        ),
    }
    | {
        name: (
            f"CREATE TRIGGER {name} BEFORE INSERT ON {guard.table}"
            f" FOR EACH ROW EXECUTE FUNCTION ledger_{name}()"
        )
        for name, guard in INSERT_GUARDS.items()
    }
)
TRIGGER_TABLE = {name: ddl.split(" ON ", 1)[1].split()[0] for name, ddl in TRIGGERS.items()}


# --------------------------------------------------------------------------- views

# SQLite's spellings, and PostgreSQL's: comparisons are booleans there, not 0 and 1;
# substr() takes no negative start; text compares by the database's collation unless
# told "C" (SQLite compares bytes), which the locator ranges rely on.
_VIEW_REWRITES = (
    ("ELSE ob.sha256 = p.expected END", "ELSE (ob.sha256 = p.expected)::integer END"),
    ("ELSE ob.revision = p.expected END", "ELSE (ob.revision = p.expected)::integer END"),
    ("ev.sha256 IS bf.sha256", "ev.sha256 IS NOT DISTINCT FROM bf.sha256"),
    (" IS NOT 1)", " IS DISTINCT FROM 1)"),
    ("substr(p.target_locator, -1) = '/'", "right(p.target_locator, 1) = '/'"),
    (
        "sc.locator >= p.target_locator || '/'",
        "sc.locator COLLATE \"C\" >= p.target_locator || '/'",
    ),
    ("sc.locator < p.target_locator || '0'", "sc.locator COLLATE \"C\" < p.target_locator || '0'"),
    ("sc.locator > p.target_locator AND", 'sc.locator COLLATE "C" > p.target_locator AND'),
    ("sc.locator <\n", 'sc.locator COLLATE "C" <\n'),
    ("claimed_at,\n       EXISTS (", "claimed_at,\n       CASE WHEN EXISTS ("),
    (
        "o.effect_id = c.effect_id) AS running",
        "o.effect_id = c.effect_id) THEN 1 ELSE 0 END AS running",
    ),
)


# The entries of a claim's JSON arrays, as SQLite's json_each() gives them.
def _entries_view(column: str, keys: tuple[str, ...]) -> str:
    fields = "".join(f",\n       j.value ->> '{k}' AS {k}" for k in keys)
    return (
        f"\nSELECT c.run_id, c.effect_id, j.n - 1 AS position{fields}\n  FROM claims AS c,"
        f" jsonb_array_elements(c.{column}::jsonb) WITH ORDINALITY AS j(value, n)\n"
    )


_ENTRY_VIEWS = {
    "impact_scope": _entries_view("impact_scope", SCOPE_COLUMNS),
    "obligations": _entries_view("obligations", OBLIGATION_COLUMNS),
}


def _postgresql(name: str, query: str) -> str:
    if name in _ENTRY_VIEWS:
        if "json_each(c." not in query:
            raise ValueError(f"the view {name} changed: cannot derive it")
        return _ENTRY_VIEWS[name]
    for old, new in _VIEW_REWRITES:
        if old in query:
            query = query.replace(old, new)
    if name == "effect_status":
        for must in ("::integer", "IS NOT DISTINCT FROM", "right(", 'COLLATE "C"'):
            if must not in query:
                raise ValueError(f"the view {name} changed: cannot derive it ({must})")
        # Rule 7's "same state" is a boolean there: no evidence counts as false.
        if "), 0))" not in query:
            raise ValueError(f"the view {name} changed: cannot derive it (rule 7)")
        query = query.replace("), 0))", "), false))")
    elif name == "approval_status":
        # The store's clock, in PostgreSQL's spelling: what expiry is judged by.
        if store_now("sqlite") not in query:
            raise ValueError(f"the view {name} changed: cannot derive it (the clock)")
        query = query.replace(store_now("sqlite"), store_now("postgresql"))
    elif "THEN 1 ELSE 0 END AS running" not in query:
        raise ValueError(f"the view {name} changed: cannot derive it")
    return query


VIEW_QUERIES_PG = {name: _postgresql(name, query) for name, query in VIEW_QUERIES.items()}
VIEWS = {name: f"CREATE VIEW {name} AS{query}" for name, query in VIEW_QUERIES_PG.items()}


def with_views(sql: str) -> str:
    """``sql`` with the library's views defined in front of it: never the store's."""
    ctes = ",\n".join(f"{name} AS ({query})" for name, query in VIEW_QUERIES_PG.items())
    return f"WITH {ctes}\n{sql}"


# --------------------------------------------------------------------------- install


def install_derived(connection: Connection) -> None:
    """Drop and re-create every guard and view of the library, inside the migration."""
    raw = connection.connection.driver_connection
    if raw is None:  # pragma: no cover - a connection in a transaction always has one
        raise RuntimeError("the database connection is closed")

    def run(ddl: str) -> None:
        # On the driver's cursor with no parameters: PL/pgSQL's own % placeholders pass.
        raw.execute(ddl)

    tables = set(
        connection.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).scalars()
    )
    views = set(
        connection.exec_driver_sql(
            "SELECT viewname FROM pg_views WHERE schemaname = current_schema()"
        ).scalars()
    )
    # Only views: before revision 0009, impact_scope and obligations are tables.
    for name in reversed(VIEWS):  # effect_status reads obligations
        if name in views:
            run(f'DROP VIEW "{name}"')
    for name, table in TRIGGER_TABLE.items():
        if table in tables:
            run(f'DROP TRIGGER IF EXISTS "{name}" ON "{table}"')
    columns: dict[str, set[str]] = {}
    for table, column in connection.exec_driver_sql(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema()"
    ):
        columns.setdefault(table, set()).add(column)
    for ddl in FUNCTIONS.values():
        run(ddl)
    for name, ddl in TRIGGERS.items():
        table = TRIGGER_TABLE[name]
        # A guard reading a column a later revision adds (a resolution's origin) waits
        # for it: PL/pgSQL would fail every insert of a store at an older revision.
        # So does one reading a table a later revision adds (the approvals').
        guard = INSERT_GUARDS.get(name)
        reads = guard.columns if guard is not None else _READS.get(name, set())
        if (
            table in tables
            and reads <= columns.get(table, set())
            and (guard is None or guard.tables <= tables)
        ):
            run(ddl)
    # The views read every table, and columns a later revision adds (a claim's step).
    if has_every_column(columns):
        for ddl in VIEWS.values():
            run(ddl)
