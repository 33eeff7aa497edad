"""The store's tables: SQLAlchemy Core, with the naming every constraint goes by.

Tables change only through Alembic migrations (``migrations/``); ``alembic check``
in the tests proves the migrations build exactly these tables, on SQLite and on
PostgreSQL. Triggers and views are *derived* objects (``ledger._sql.guards``,
``ledger._sql.views``), re-created by each backend at the end of every upgrade.

Enum columns hold the lowercase words of :mod:`ledger.effects`; CHECK constraints
refuse any other word, so a forensic user with a database shell cannot forge an
execution state. Every constraint is named through the naming convention, so
migrations can refer to them on every backend.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from sqlalchemy import (
    CheckConstraint,
    Column,
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

from ledger.effects import (
    RESOURCE_KINDS,
    ApprovalSource,
    Coverage,
    EffectKind,
    ExecutionOutcome,
    Impact,
    ObservationMechanism,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def words(column: str, words: object) -> str:
    values = ", ".join(f"'{w}'" for w in words)  # type: ignore[attr-defined]
    return f"{column} IN ({values})"


def _enumwords(column: str, enum_cls: type[object]) -> str:
    return words(column, (m.value for m in enum_cls))  # type: ignore[attr-defined]


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
    # How many entries the claim's impact_scope and obligations arrays hold (part of the
    # chain's encoding since version 1, when they were rows of their own tables).
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
    # What repeating the effect could do, the key handed to the system it calls, and
    # the earlier effect of the run it repeats (migration 0006).
    Column("kind", Text, nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("retry_of", Text, nullable=True),
    CheckConstraint(_enumwords("kind", EffectKind), name="kind"),
    # Empty only on a claim built by hand and written past the log, which keys every claim.
    CheckConstraint(
        "idempotency_key = '' OR (" + _hex("idempotency_key", 32) + ")", name="idempotency_key"
    ),
    CheckConstraint(
        "retry_of IS NULL OR (" + _identifier("retry_of") + " AND retry_of <> effect_id)",
        name="retry_of",
    ),
    # The claim's impact scope and postconditions, as JSON arrays of objects (migration
    # 0009; they were child tables, now the views of those names): one row per claim.
    # JSON is checked by every load, by the chain and, for other writers than the
    # library's, by guard triggers (ENTRY_GUARDS), not by a CHECK: the JSON functions are
    # not allowed in constraints on connections with trusted_schema off.
    Column("impact_scope", Text, nullable=False),
    Column("obligations", Text, nullable=False),
    # The call's step, its identity across restarts ('' for a claim made without one),
    # and its arguments as recorded, canonical JSON (NULL: not recorded) (migration 0012).
    Column("step", Text, nullable=False, server_default=""),
    Column("args", Text, nullable=True),
    # The caller's W3C trace context when it claimed (NULL: none known) (migration 0015),
    # checked by every load and chained.
    Column("traceparent", Text, nullable=True),
    # The approval the claim was made under (NULL: none) (migration 0016): a request of the
    # run, granted, unexpired and used by this claim alone, as a guard checks on insert.
    Column("approval_id", Text, nullable=True),
    sqlite_strict=True,
)
# One approval, one claim: the database itself refuses a second use.
Index(
    "uq_claims_approval",
    claims.c.run_id,
    claims.c.approval_id,
    unique=True,
    sqlite_where=text("approval_id IS NOT NULL"),
    postgresql_where=text("approval_id IS NOT NULL"),
)
# A claim's retries, for the views: claims that retry another only (0010).
Index(
    None,
    claims.c.run_id,
    claims.c.retry_of,
    sqlite_where=text("retry_of IS NOT NULL"),
    postgresql_where=text("retry_of IS NOT NULL"),
)

# A resource of a claim's impact scope, for the views' question "which claims may touch
# this resource": one row per scope entry, keyed so that the question is one index
# range. Derived: the claims_scope_index trigger writes it from the claim's own
# impact_scope column (the record, hashed in the chain) in the claim's statement.
scope_index = Table(
    "scope_index",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("locator", Text, nullable=False),
    Column("effect_id", Text, nullable=False),
    Column("position", Integer, nullable=False),
    PrimaryKeyConstraint("run_id", "kind", "locator", "effect_id", "position"),
    sqlite_strict=True,
    sqlite_with_rowid=False,
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
    CheckConstraint(_enumwords("execution", ExecutionOutcome), name="execution"),
    CheckConstraint(_hex("prev_hash", 64), name="prev_hash"),
    CheckConstraint(_hex("hash", 64), name="hash"),
    CheckConstraint(_enumwords("impact", Impact), name="impact"),
    CheckConstraint("replayed IN (0, 1)", name="replayed"),
    CheckConstraint("replayed = 0 OR execution = 'interrupted'", name="replayed_interrupted"),
    CheckConstraint("execution <> 'interrupted' OR impact = 'possible'", name="interrupted_impact"),
    CheckConstraint("execution_id IS NULL OR " + _identifier("execution_id"), name="execution_id"),
    # What the call returned, as recorded: canonical JSON (NULL: none recorded) (0012).
    Column("result", Text, nullable=True),
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
    CheckConstraint(words("resource_kind", RESOURCE_KINDS), name="resource_kind"),
    CheckConstraint(_enumwords("mechanism", ObservationMechanism), name="mechanism"),
    CheckConstraint(_enumwords("coverage", Coverage), name="coverage"),
    CheckConstraint("resource_exists IN (0, 1)", name="resource_exists"),
    CheckConstraint("sha256 IS NULL OR (" + _hex("sha256", 64) + ")", name="sha256"),
    sqlite_strict=True,
)
Index(None, observations.c.run_id, observations.c.resource_kind, observations.c.resource_locator)

# A person's word on an effect, after checking the world: it landed, or it did not.
resolutions = Table(
    "resolutions",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("effect_id", Text, nullable=False),
    Column("applied", Integer, nullable=False),
    # "by" is an SQL keyword.
    Column("resolved_by", Text, nullable=False),
    Column("note", Text, nullable=False),
    Column("recorded_at", Text, nullable=False),
    # The run's hash chain (ledger._chain): the previous record's hash, and this one's.
    Column("prev_hash", Text, nullable=False),
    Column("hash", Text, nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
    UniqueConstraint("run_id", "effect_id"),
    ForeignKeyConstraint(["run_id", "effect_id"], ["claims.run_id", "claims.effect_id"]),
    CheckConstraint("seq >= 1", name="seq"),
    CheckConstraint("applied IN (0, 1)", name="applied"),
    CheckConstraint(_identifier("resolved_by"), name="resolved_by"),
    CheckConstraint(_hex("prev_hash", 64), name="prev_hash"),
    CheckConstraint(_hex("hash", 64), name="hash"),
    # The process that wrote it (migration 0013): its origin (person: the ledger resolve
    # command; worker: a program's EffectLog.resolve; reconciler: one that said
    # allow_self=True), OS user, host, program and pid. All NULL in a resolution written
    # before (a guard refuses any other mix).
    Column("origin", Text, nullable=True),
    Column("os_user", Text, nullable=True),
    Column("host", Text, nullable=True),
    Column("program", Text, nullable=True),
    Column("pid", Integer, nullable=True),
    sqlite_strict=True,
)


def _process_and_chain() -> tuple[Column[object], ...]:
    """An approval record's last columns: the process that wrote it, and the run's chain."""
    return (
        Column("os_user", Text, nullable=False),
        Column("host", Text, nullable=False),
        Column("program", Text, nullable=False),
        Column("pid", Integer, nullable=False),
        Column("prev_hash", Text, nullable=False),
        Column("hash", Text, nullable=False),
    )


def _process_and_chain_checks() -> tuple[CheckConstraint, ...]:
    return (
        CheckConstraint("pid > 0", name="pid"),
        CheckConstraint(_hex("prev_hash", 64), name="prev_hash"),
        CheckConstraint(_hex("hash", 64), name="hash"),
    )


# A call waiting for a person's yes (migration 0016): the call's action digest, what a
# person is shown, until when (the store's clock), and the process that asks.
approval_requests = Table(
    "approval_requests",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("approval_id", Text, nullable=False),
    Column("effect_id", Text, nullable=False),
    Column("action_digest", Text, nullable=False),
    Column("operation", Text, nullable=False),
    Column("step", Text, nullable=False),
    Column("args", Text, nullable=True),
    Column("reason", Text, nullable=False),
    Column("requested_at", Text, nullable=False),
    Column("expires_at", Text, nullable=False),
    *_process_and_chain(),
    PrimaryKeyConstraint("run_id", "seq"),
    UniqueConstraint("run_id", "approval_id"),
    UniqueConstraint("run_id", "effect_id"),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
    CheckConstraint("seq >= 1", name="seq"),
    CheckConstraint(_identifier("approval_id"), name="approval_id"),
    CheckConstraint(_identifier("effect_id"), name="effect_id"),
    CheckConstraint(_identifier("operation"), name="operation"),
    CheckConstraint(_hex("action_digest", 64), name="action_digest"),
    CheckConstraint("expires_at > requested_at", name="expires_at"),
    *_process_and_chain_checks(),
    sqlite_strict=True,
)

# A person's answer to a request, at most one (migration 0016).
approval_decisions = Table(
    "approval_decisions",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("approval_id", Text, nullable=False),
    Column("decision", Text, nullable=False),
    # "by" is an SQL keyword.
    Column("decided_by", Text, nullable=False),
    Column("note", Text, nullable=False),
    Column("decided_at", Text, nullable=False),
    Column("source", Text, nullable=False),
    *_process_and_chain(),
    PrimaryKeyConstraint("run_id", "seq"),
    UniqueConstraint("run_id", "approval_id"),
    ForeignKeyConstraint(
        ["run_id", "approval_id"], ["approval_requests.run_id", "approval_requests.approval_id"]
    ),
    CheckConstraint("seq >= 1", name="seq"),
    CheckConstraint(words("decision", ("granted", "denied")), name="decision"),
    CheckConstraint(_identifier("decided_by"), name="decided_by"),
    CheckConstraint(_enumwords("source", ApprovalSource), name="source"),
    *_process_and_chain_checks(),
    sqlite_strict=True,
)

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
    Column("name", Text, nullable=True),
    PrimaryKeyConstraint("run_id"),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"]),
    CheckConstraint("pid > 0", name="pid"),
    CheckConstraint("name IS NULL OR length(name) BETWEEN 1 AND 200", name="name"),
    sqlite_strict=True,
)

RECORD_TABLES = (
    "claims",
    "outcomes",
    "observations",
    "resolutions",
    "approval_requests",
    "approval_decisions",
)
APPEND_ONLY_TABLES = (
    "runs",
    "claims",
    "scope_index",
    "outcomes",
    "observations",
    "resolutions",
    "approval_requests",
    "approval_decisions",
)


def has_every_column(tables: Mapping[str, Collection[str]]) -> bool:
    """Whether tables (name -> column names) hold every table and column of the schema.

    The views read columns of every table (effect_status a claim's step, since 0012):
    a store at an older revision, on its way to head, gets them once it has them all.
    """
    return all(
        set(tables.get(table.name, ())) >= {c.name for c in table.columns}
        for table in metadata.tables.values()
    )


def indexes() -> dict[str, Index]:
    return {str(index.name): index for table in metadata.tables.values() for index in table.indexes}
