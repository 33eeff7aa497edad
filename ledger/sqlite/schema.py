"""The store's schema: SQLAlchemy Core tables, and the triggers and views derived from them.

Tables change only through Alembic migrations (``migrations/``); ``alembic check``
in the tests proves the migrations build exactly these tables. Triggers and views
are *derived* objects: :func:`install_derived` drops and re-creates all of them at
the end of every upgrade, so a batch migration (which rebuilds a table on SQLite
and silently drops its triggers) can never leave the store unguarded.

Enum columns hold the lowercase words of :mod:`ledger.effects`; CHECK constraints
refuse any other word, so a forensic user with the ``sqlite3`` shell cannot forge
an execution state. Every constraint is named through the naming convention, so
migrations can refer to them on every backend.
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    Connection,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from ledger._chain import GENESIS, sql_hash
from ledger.effects import (
    RESOURCE_KINDS,
    Coverage,
    ExecutionOutcome,
    Impact,
    ObservationMechanism,
    Predicate,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _words(column: str, words: object) -> str:
    values = ", ".join(f"'{w}'" for w in words)  # type: ignore[attr-defined]
    return f"{column} IN ({values})"


def _enum_words(column: str, enum_cls: type[object]) -> str:
    return _words(column, (m.value for m in enum_cls))  # type: ignore[attr-defined]


def _hex(column: str, length: int) -> str:
    # ltrim with a character set exists in SQLite and PostgreSQL alike.
    return f"length({column}) = {length} AND ltrim({column}, '0123456789abcdef') = ''"


def _identifier(column: str) -> str:
    return f"length({column}) BETWEEN 1 AND 200"


runs = Table(
    "runs",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    PrimaryKeyConstraint("run_id"),
    CheckConstraint(_hex("run_id", 32), name="run_id"),
    sqlite_strict=True,
)

claims = Table(
    "claims",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("effect_id", Text, nullable=False),
    Column("action_id", Text, nullable=False),
    Column("operation", Text, nullable=False),
    Column("backend", Text, nullable=False),
    Column("args_sha256", Text, nullable=False),
    # How many impact_scope and obligations rows the claim has: a row added to a
    # committed claim later (from the sqlite3 shell) is refused, and load checks them.
    Column("scope_count", Integer, nullable=False),
    Column("obligation_count", Integer, nullable=False),
    Column("recorded_at", Text, nullable=False),
    # The run's hash chain (ledger._chain): the previous record's hash, and this one's.
    Column("prev_hash", Text, nullable=False),
    Column("hash", Text, nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
    UniqueConstraint("run_id", "effect_id"),
    CheckConstraint(_hex("prev_hash", 64), name="prev_hash"),
    CheckConstraint(_hex("hash", 64), name="hash"),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
    CheckConstraint("seq >= 1", name="seq"),
    CheckConstraint(_identifier("effect_id"), name="effect_id"),
    CheckConstraint(_identifier("action_id"), name="action_id"),
    CheckConstraint(_identifier("operation"), name="operation"),
    CheckConstraint(_hex("args_sha256", 64), name="args_sha256"),
    CheckConstraint("scope_count >= 0", name="scope_count"),
    CheckConstraint("obligation_count >= 0", name="obligation_count"),
    sqlite_strict=True,
)

impact_scope = Table(
    "impact_scope",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("effect_id", Text, nullable=False),
    Column("position", Integer, nullable=False),
    Column("kind", Text, nullable=False),
    Column("locator", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("revision", Text, nullable=True),
    PrimaryKeyConstraint("run_id", "effect_id", "position"),
    ForeignKeyConstraint(["run_id", "effect_id"], ["claims.run_id", "claims.effect_id"]),
    CheckConstraint("position >= 0", name="position"),
    CheckConstraint(_words("kind", RESOURCE_KINDS), name="kind"),
    sqlite_strict=True,
)
Index(None, impact_scope.c.run_id, impact_scope.c.kind, impact_scope.c.locator)

obligations = Table(
    "obligations",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("effect_id", Text, nullable=False),
    Column("position", Integer, nullable=False),
    Column("target_kind", Text, nullable=False),
    Column("target_locator", Text, nullable=False),
    Column("target_role", Text, nullable=False),
    Column("target_revision", Text, nullable=True),
    Column("predicate", Text, nullable=False),
    Column("expected", Text, nullable=True),
    PrimaryKeyConstraint("run_id", "effect_id", "position"),
    ForeignKeyConstraint(["run_id", "effect_id"], ["claims.run_id", "claims.effect_id"]),
    CheckConstraint("position >= 0", name="position"),
    CheckConstraint(_words("target_kind", RESOURCE_KINDS), name="target_kind"),
    CheckConstraint(_enum_words("predicate", Predicate), name="predicate"),
    CheckConstraint(
        "(predicate IN ('exists', 'absent') AND expected IS NULL)"
        " OR (predicate IN ('sha256', 'revision') AND expected IS NOT NULL)",
        name="expected",
    ),
    sqlite_strict=True,
)

outcomes = Table(
    "outcomes",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("effect_id", Text, nullable=False),
    Column("execution", Text, nullable=False),
    Column("impact", Text, nullable=False),
    Column("execution_id", Text, nullable=True),
    Column("replayed", Integer, nullable=False),
    Column("recorded_at", Text, nullable=False),
    # The run's hash chain (ledger._chain): the previous record's hash, and this one's.
    Column("prev_hash", Text, nullable=False),
    Column("hash", Text, nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
    ForeignKeyConstraint(["run_id", "effect_id"], ["claims.run_id", "claims.effect_id"]),
    CheckConstraint("seq >= 1", name="seq"),
    CheckConstraint(_enum_words("execution", ExecutionOutcome), name="execution"),
    CheckConstraint(_hex("prev_hash", 64), name="prev_hash"),
    CheckConstraint(_hex("hash", 64), name="hash"),
    CheckConstraint(_enum_words("impact", Impact), name="impact"),
    CheckConstraint("replayed IN (0, 1)", name="replayed"),
    CheckConstraint("replayed = 0 OR execution = 'interrupted'", name="replayed_interrupted"),
    CheckConstraint("execution <> 'interrupted' OR impact = 'possible'", name="interrupted_impact"),
    CheckConstraint("execution_id IS NULL OR " + _identifier("execution_id"), name="execution_id"),
    sqlite_strict=True,
)
Index(None, outcomes.c.run_id, outcomes.c.effect_id)
# One terminal outcome per claim: the database itself refuses a second.
Index(
    "uq_outcomes_terminal",
    outcomes.c.run_id,
    outcomes.c.effect_id,
    unique=True,
    sqlite_where=text("execution <> 'running'"),
    postgresql_where=text("execution <> 'running'"),
)

observations = Table(
    "observations",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("observation_id", Text, nullable=False),
    Column("resource_kind", Text, nullable=False),
    Column("resource_locator", Text, nullable=False),
    Column("resource_role", Text, nullable=False),
    Column("resource_revision", Text, nullable=True),
    Column("mechanism", Text, nullable=False),
    Column("coverage", Text, nullable=False),
    Column("source_action_id", Text, nullable=False),
    # "exists" is an SQL keyword; this name keeps forensic queries readable.
    Column("resource_exists", Integer, nullable=True),
    Column("sha256", Text, nullable=True),
    Column("revision", Text, nullable=True),
    Column("recorded_at", Text, nullable=False),
    # The run's hash chain (ledger._chain): the previous record's hash, and this one's.
    Column("prev_hash", Text, nullable=False),
    Column("hash", Text, nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
    UniqueConstraint("run_id", "observation_id"),
    CheckConstraint(_hex("prev_hash", 64), name="prev_hash"),
    CheckConstraint(_hex("hash", 64), name="hash"),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
    CheckConstraint("seq >= 1", name="seq"),
    CheckConstraint(_identifier("observation_id"), name="observation_id"),
    CheckConstraint(_words("resource_kind", RESOURCE_KINDS), name="resource_kind"),
    CheckConstraint(_enum_words("mechanism", ObservationMechanism), name="mechanism"),
    CheckConstraint(_enum_words("coverage", Coverage), name="coverage"),
    CheckConstraint("resource_exists IN (0, 1)", name="resource_exists"),
    CheckConstraint("sha256 IS NULL OR (" + _hex("sha256", 64) + ")", name="sha256"),
    sqlite_strict=True,
)
Index(None, observations.c.run_id, observations.c.resource_kind, observations.c.resource_locator)

# Who writes each run now: host, boot and process. Not history: a run continued by
# another process after a restart changes writer, so this table is updated in place.
run_writers = Table(
    "run_writers",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("boot_id", Text, nullable=True),
    Column("pid", Integer, nullable=False),
    Column("process_started", Text, nullable=True),
    Column("since", Text, nullable=False),
    PrimaryKeyConstraint("run_id"),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
    CheckConstraint("pid > 0", name="pid"),
    sqlite_strict=True,
)

RECORD_TABLES = ("claims", "outcomes", "observations")
APPEND_ONLY_TABLES = ("runs", "claims", "impact_scope", "obligations", "outcomes", "observations")


# --------------------------------------------------------------------------- derived objects


def _raise(message: str) -> str:
    if "'" in message:
        raise ValueError("trigger messages are SQL string literals: no quotes")
    return f"SELECT RAISE(ABORT, 'ledger: {message}');"


def _guard(
    table: str, name: str, condition: str, message: str, when: str = "BEFORE"
) -> tuple[str, str]:
    trigger = f"{table}_{name}"
    return trigger, (
        f"CREATE TRIGGER {trigger} {when} INSERT ON {table}\n"
        f"WHEN {condition}\nBEGIN {_raise(message)} END"
    )


def _seq_taken() -> str:
    return " OR ".join(
        f"EXISTS (SELECT 1 FROM {other} WHERE run_id = NEW.run_id AND seq = NEW.seq)"
        for other in RECORD_TABLES
    )


def _sqlite_triggers() -> dict[str, str]:
    triggers: dict[str, str] = {}
    for table in APPEND_ONLY_TABLES:
        for event in ("UPDATE", "DELETE"):
            name = f"{table}_no_{event.lower()}"
            triggers[name] = (
                f"CREATE TRIGGER {name} BEFORE {event} ON {table}\n"
                f"BEGIN {_raise(f'{table} is append-only, {event} is refused')} END"
            )
    # INSERT OR REPLACE deletes the old row without firing DELETE triggers, so every
    # key is also guarded before INSERT: a taken key aborts instead of being replaced.
    guards = [
        _guard(
            "runs",
            "guard_key",
            "EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id)",
            "runs is append-only, that run_id is already recorded",
        ),
        _guard(
            "claims",
            "guard_key",
            "EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id AND effect_id = NEW.effect_id)",
            "claims is append-only, that effect_id is already claimed in the run",
        ),
        _guard(
            "observations",
            "guard_key",
            "EXISTS (SELECT 1 FROM observations"
            " WHERE run_id = NEW.run_id AND observation_id = NEW.observation_id)",
            "observations is append-only, that observation_id is already recorded in the run",
        ),
        _guard(
            "outcomes",
            "guard_settled",
            "EXISTS (SELECT 1 FROM outcomes WHERE run_id = NEW.run_id"
            " AND effect_id = NEW.effect_id AND execution <> 'running')",
            "outcomes is append-only, the effect already has a terminal outcome",
        ),
        _guard(
            "outcomes",
            "guard_order",
            "EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id"
            " AND effect_id = NEW.effect_id AND seq >= NEW.seq)",
            "an outcome must come after its claim",
        ),
    ]
    guards.extend(
        _guard(
            table,
            "guard_run",
            "NOT EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id)",
            f"{table} rows need their run in runs",
        )
        for table in ("claims", "observations")
    )
    guards.append(
        _guard(
            "outcomes",
            "guard_claim",
            "NOT EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id"
            " AND effect_id = NEW.effect_id)",
            "an outcome needs its claim",
        )
    )
    guards.extend(
        _guard(
            table,
            "guard_claim",
            "NOT EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id"
            f" AND effect_id = NEW.effect_id AND NEW.position < {count})",
            f"{table} is append-only, the rows of a claim are written with it and no more",
        )
        for table, count in (("impact_scope", "scope_count"), ("obligations", "obligation_count"))
    )
    # Each record must carry the hash of its own fields. A claim's hash covers its
    # impact-scope and obligation rows, written after it in the same transaction: it is
    # checked when the last of them lands (or at once, for a claim that has none). sha3()
    # is the stock shell's; the library registers the same function on its connections.
    # (Created before the link guards, so that those fire first: SQLite fires a table's
    # triggers newest first, and a record that does not extend the chain says so.)
    guards.extend(
        _guard(
            table,
            "guard_hash",
            f"NEW.hash IS NOT {sql_hash(kind, 'NEW')}",
            f"{table} is append-only, the record hash does not match its fields",
        )
        for table, kind in (("outcomes", "outcome"), ("observations", "observation"))
    )
    guards.append(
        _guard(
            "claims",
            "guard_hash",
            "NEW.scope_count = 0 AND NEW.obligation_count = 0"
            f" AND NEW.hash IS NOT {sql_hash('claim', 'NEW')}",
            "claims is append-only, the record hash does not match its fields",
        )
    )
    guards.extend(
        _guard(
            table,
            "guard_hash",
            "EXISTS (SELECT 1 FROM claims AS c WHERE c.run_id = NEW.run_id"
            f" AND c.effect_id = NEW.effect_id AND {last}"
            f" AND c.hash IS NOT {sql_hash('claim', 'c')})",
            "claims is append-only, the claim hash does not match its fields and rows",
            when="AFTER",
        )
        for table, last in (
            ("impact_scope", "NEW.position = c.scope_count - 1 AND c.obligation_count = 0"),
            ("obligations", "NEW.position = c.obligation_count - 1"),
        )
    )
    # ... and extend the run's chain: its prev_hash is the hash of the record just before
    # it (by seq), or the genesis value for the first.
    previous = " UNION ALL ".join(
        f"SELECT hash FROM {t} WHERE run_id = NEW.run_id AND seq = NEW.seq - 1"
        for t in RECORD_TABLES
    )
    guards.extend(
        _guard(
            table,
            "guard_chain",
            f"NEW.prev_hash IS NOT (CASE WHEN NEW.seq = 1 THEN '{GENESIS}' ELSE ({previous}) END)",
            f"{table} is append-only, the record does not extend the chain of its run",
        )
        for table in RECORD_TABLES
    )
    guards.extend(
        _guard(
            table,
            "guard_seq",
            _seq_taken(),
            f"{table} is append-only, that seq is already recorded in the run",
        )
        for table in RECORD_TABLES
    )
    guards.extend(
        _guard(
            table,
            "guard_key",
            f"EXISTS (SELECT 1 FROM {table} WHERE run_id = NEW.run_id"
            " AND effect_id = NEW.effect_id AND position = NEW.position)",
            f"{table} is append-only, that position is already recorded for the claim",
        )
        for table in ("impact_scope", "obligations")
    )
    triggers.update(guards)
    return triggers


# effect_status computes each claim's verdict by correlated lookups that follow the
# indexes (by run and effect, by run and resource), so that asking for one run or one
# effect reads only the rows the rules consult, never the whole store. The rules are
# those of docs/concepts.md#verdicts; tests/contract/test_view.py holds this view to
# ledger.effects.assess.

# Whether another claim c2 (through its scope row sc) may still land an effect after the
# observation ob: claimed after it, or not terminally settled before it; and not
# settled clean (FAILED with impact NONE is the one terminal outcome that did nothing).
_IN_FLIGHT = """
       sc.effect_id <> p.effect_id
   AND (c2.seq > ob.seq OR NOT EXISTS (
          SELECT 1 FROM outcomes AS t
           WHERE t.run_id = c2.run_id AND t.effect_id = c2.effect_id
             AND t.execution <> 'running' AND t.seq < ob.seq))
   AND NOT EXISTS (
          SELECT 1 FROM outcomes AS t
           WHERE t.run_id = c2.run_id AND t.effect_id = c2.effect_id
             AND t.execution = 'failed' AND t.impact = 'none')"""


def _scopes(where: str) -> str:
    return f"""EXISTS (
        SELECT 1 FROM impact_scope AS sc
          JOIN claims AS c2 ON c2.run_id = sc.run_id AND c2.effect_id = sc.effect_id
         WHERE sc.run_id = p.run_id AND sc.kind = p.target_kind
           AND {where}
           AND {_IN_FLIGHT})"""


# The locators a scope may have to overlap the target by equality: the target itself and,
# for fs, "/" (everyone's ancestor) and each ancestor A (the target starts with A || '/').
# One IN list, so that each is one index lookup. Never LIKE: file names hold % and _.
_AT_OR_ABOVE = """sc.locator IN (
            WITH RECURSIVE pos(i) AS (
                SELECT 1 UNION ALL SELECT i + 1 FROM pos WHERE i < length(p.target_locator))
            SELECT p.target_locator
            UNION ALL SELECT '/' WHERE p.target_kind = 'fs'
            UNION ALL SELECT substr(p.target_locator, 1, i - 1) FROM pos
             WHERE p.target_kind = 'fs' AND substr(p.target_locator, i, 1) = '/')"""

# A candidate observation is stale when an overlapping claim is in flight: one scoped at
# or above the target, or (fs) below it (a range of the index), or anywhere if the target
# is "/".
_STALE = " OR ".join(
    (
        _scopes(_AT_OR_ABOVE),
        "(p.target_kind = 'fs' AND "
        + _scopes("sc.locator >= p.target_locator || '/' AND sc.locator < p.target_locator || '0'")
        + ")",
        "(p.target_kind = 'fs' AND p.target_locator = '/' AND " + _scopes("1") + ")",
    )
)

# The evidence for obligation p: the newest complete observation of its target after the
# claim's current outcome o that decides p and is not stale: 1 satisfied, 0 violated,
# NULL when there is none. (The unary + keeps the planner on the resource index rather
# than walking every later observation of the run in seq order.)
_DECISION = """CASE p.predicate
             WHEN 'exists' THEN ob.resource_exists
             WHEN 'absent' THEN 1 - ob.resource_exists
             WHEN 'sha256' THEN CASE WHEN ob.resource_exists = 0 THEN 0
                                     WHEN ob.sha256 IS NULL THEN NULL
                                     ELSE ob.sha256 = p.expected END
             ELSE CASE WHEN ob.resource_exists = 0 THEN 0
                       WHEN ob.revision IS NULL THEN NULL
                       ELSE ob.revision = p.expected END
           END"""

_EVIDENCE = f"""(
        SELECT {_DECISION}
          FROM observations AS ob
         WHERE ob.run_id = p.run_id
           AND ob.resource_kind = p.target_kind
           AND ob.resource_locator = p.target_locator
           AND ob.coverage = 'complete'
           AND +ob.seq > o.seq
           AND {_DECISION} IS NOT NULL
           AND NOT ({_STALE})
         ORDER BY +ob.seq DESC
         LIMIT 1)"""

_DUTIES = "FROM obligations AS p WHERE p.run_id = c.run_id AND p.effect_id = c.effect_id"

EFFECT_STATUS = f"""
SELECT run_id, seq, effect_id, action_id, operation, backend, claimed_at,
       execution, impact, verdict,
       CASE WHEN verdict IN ('pending', 'unverified', 'contradicted')
             AND coalesce(impact, 'possible') <> 'none' THEN 1 ELSE 0 END AS unresolved_impact
  FROM (
    SELECT c.run_id, c.seq, c.effect_id, c.action_id, c.operation, c.backend,
           c.recorded_at AS claimed_at, o.execution, o.impact,
           CASE
             WHEN o.execution IS NULL OR o.execution = 'running' THEN 'pending'
             WHEN o.execution = 'failed' AND o.impact = 'none' THEN 'failed'
             WHEN EXISTS (SELECT 1 {_DUTIES} AND {_EVIDENCE} = 0) THEN 'contradicted'
             WHEN EXISTS (SELECT 1 {_DUTIES})
              AND NOT EXISTS (SELECT 1 {_DUTIES} AND {_EVIDENCE} IS NOT 1) THEN 'verified'
             ELSE 'unverified'
           END AS verdict
      FROM claims AS c
      -- the current outcome: the terminal one, else the last RUNNING one
      LEFT JOIN outcomes AS o
        ON o.run_id = c.run_id
       AND o.seq = (SELECT x.seq FROM outcomes AS x
                     WHERE x.run_id = c.run_id AND x.effect_id = c.effect_id
                     ORDER BY (x.execution <> 'running') DESC, x.seq DESC
                     LIMIT 1)
  )
"""

UNSETTLED_CLAIMS = """
SELECT c.run_id, c.seq, c.effect_id, c.action_id, c.operation, c.recorded_at AS claimed_at,
       EXISTS (SELECT 1 FROM outcomes AS o
                WHERE o.run_id = c.run_id AND o.effect_id = c.effect_id) AS running
  FROM claims AS c
 WHERE NOT EXISTS (SELECT 1 FROM outcomes AS o
                    WHERE o.run_id = c.run_id AND o.effect_id = c.effect_id
                      AND o.execution <> 'running')
"""

SQLITE_TRIGGERS = _sqlite_triggers()
# The views' queries: the stored views are made of them, and the library's own reads use
# them directly (as common table expressions), so that no report is computed from a view
# someone replaced in the store.
VIEW_QUERIES = {"effect_status": EFFECT_STATUS, "unsettled_claims": UNSETTLED_CLAIMS}
VIEWS = {name: f"\nCREATE VIEW {name} AS{query}" for name, query in VIEW_QUERIES.items()}
EFFECT_STATUS_VIEW = VIEWS["effect_status"]


def with_views(sql: str) -> str:
    """``sql`` with the library's views defined in front of it: never the store's."""
    ctes = ",\n".join(f"{name} AS ({query})" for name, query in VIEW_QUERIES.items())
    return f"WITH {ctes}\n{sql}"


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
    for ddl in SQLITE_TRIGGERS.values():
        connection.exec_driver_sql(ddl)
    for ddl in VIEWS.values():
        connection.exec_driver_sql(ddl)
    # Indexes belong to the migrations; one dropped by hand (the unique index that allows
    # one terminal outcome per claim, say) is put back, and fails if forged rows forbid it.
    for index in _indexes().values():
        index.create(connection, checkfirst=True)


def _indexes() -> dict[str, Index]:
    return {str(index.name): index for table in metadata.tables.values() for index in table.indexes}
