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

import re
from collections.abc import Collection, Mapping

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

from ledger._chain import GENESIS, OBLIGATION_COLUMNS, SCOPE_COLUMNS, sql_hash
from ledger.effects import (
    RESOURCE_KINDS,
    Coverage,
    EffectKind,
    ExecutionOutcome,
    Impact,
    ObservationMechanism,
    Predicate,
    ResolutionOrigin,
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
    CheckConstraint(_enum_words("kind", EffectKind), name="kind"),
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
    sqlite_strict=True,
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
    CheckConstraint(_enum_words("execution", ExecutionOutcome), name="execution"),
    CheckConstraint(_hex("prev_hash", 64), name="prev_hash"),
    CheckConstraint(_hex("hash", 64), name="hash"),
    CheckConstraint(_enum_words("impact", Impact), name="impact"),
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
    CheckConstraint(_words("resource_kind", RESOURCE_KINDS), name="resource_kind"),
    CheckConstraint(_enum_words("mechanism", ObservationMechanism), name="mechanism"),
    CheckConstraint(_enum_words("coverage", Coverage), name="coverage"),
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

RECORD_TABLES = ("claims", "outcomes", "observations", "resolutions")
APPEND_ONLY_TABLES = (
    "runs",
    "claims",
    "scope_index",
    "outcomes",
    "observations",
    "resolutions",
)


# --------------------------------------------------------------------------- derived objects


def _raise(message: str) -> str:
    if "'" in message:
        raise ValueError("trigger messages are SQL string literals: no quotes")
    return f"SELECT RAISE(ABORT, 'ledger: {message}');"


def _guard(table: str, name: str, condition: str, message: str) -> tuple[str, str]:
    trigger = f"{table}_{name}"
    return trigger, (
        f"CREATE TRIGGER {trigger} BEFORE INSERT ON {table}\n"
        f"WHEN {condition}\nBEGIN {_raise(message)} END"
    )


def _seq_taken() -> str:
    return " OR ".join(
        f"EXISTS (SELECT 1 FROM {other} WHERE run_id = NEW.run_id AND seq = NEW.seq)"
        for other in RECORD_TABLES
    )


# The library's writer connections answer sqlite_source_id() with this prefix (see
# ledger.sqlite.engine); no other connection does, the stock shell's included.
WRITER_SOURCE_ID = "ledger-writer "
OTHER_WRITER = f"sqlite_source_id() NOT LIKE '{WRITER_SOURCE_ID}%'"


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
        _guard(
            "resolutions",
            "guard_key",
            "EXISTS (SELECT 1 FROM resolutions"
            " WHERE run_id = NEW.run_id AND effect_id = NEW.effect_id)",
            "resolutions is append-only, the effect is already resolved",
        ),
        _guard(
            "resolutions",
            "guard_claim",
            "NOT EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id"
            " AND effect_id = NEW.effect_id AND seq < NEW.seq)",
            "a resolution must come after its claim",
        ),
        _guard(
            "resolutions",
            "guard_origin",
            "CASE WHEN NEW.origin IS NULL THEN NEW.os_user IS NOT NULL OR NEW.host IS NOT NULL"
            " OR NEW.program IS NOT NULL OR NEW.pid IS NOT NULL"
            " ELSE NEW.os_user IS NULL OR NEW.host IS NULL OR NEW.program IS NULL"
            " OR NEW.pid IS NULL"
            f" OR NEW.origin NOT IN ({', '.join(repr(o.value) for o in ResolutionOrigin)})"
            " OR length(NEW.os_user) NOT BETWEEN 1 AND 200"
            " OR length(NEW.host) NOT BETWEEN 1 AND 200"
            " OR length(NEW.program) NOT BETWEEN 1 AND 200 OR NEW.pid < 1 END",
            "a resolution records its origin and the process that wrote it, or none of them",
        ),
        _guard(
            "claims",
            "guard_retry",
            "NEW.retry_of IS NOT NULL AND NOT EXISTS (SELECT 1 FROM claims WHERE"
            " run_id = NEW.run_id AND effect_id = NEW.retry_of AND seq < NEW.seq"
            " AND idempotency_key = NEW.idempotency_key)",
            "a retry must come after the claim it repeats and carry its idempotency key",
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
    # A scope_index row is the claim's own scope entry, or nothing: rows the claim's
    # trigger writes pass; one added by hand must match an entry of its claim.
    guards.append(
        _guard(
            "scope_index",
            "guard_claim",
            f"{OTHER_WRITER} AND NOT EXISTS (SELECT 1 FROM claims AS c, json_each(c.impact_scope)"
            " AS j WHERE c.run_id = NEW.run_id AND c.effect_id = NEW.effect_id"
            " AND j.key = NEW.position AND json_extract(j.value, '$.kind') = NEW.kind"
            " AND json_extract(j.value, '$.locator') = NEW.locator)",
            "scope_index is append-only, its rows are the scopes of the claims",
        )
    )
    # Each record must carry the hash of its own fields (a claim's covers its scope and
    # postconditions). sha3() is the stock shell's; the library registers the same
    # function on its connections. The library's own writers hashed the record in Python
    # an instant before: on them (OTHER_WRITER false) the hash is not computed a second
    # time, which was a seventh of a claim's cost. Every other connection, the shell's
    # included, is checked in full. (Created before the link guards, so that those fire
    # first: SQLite fires a table's triggers newest first, and a record that does not
    # extend the chain says so.)
    guards.extend(
        _guard(
            table,
            "guard_hash",
            f"{OTHER_WRITER} AND NEW.hash IS NOT {sql_hash(kind, 'NEW')}",
            f"{table} is append-only, the record hash does not match its fields",
        )
        for table, kind in (
            ("claims", "claim"),
            ("outcomes", "outcome"),
            ("observations", "observation"),
            ("resolutions", "resolution"),
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
    # The library builds and validates the arrays itself: the shell's are checked.
    guards.extend(
        _guard(
            "claims",
            name.removeprefix("claims_"),
            f"{OTHER_WRITER} AND ({entries_refused(*spec, postgresql=False)})",
            entries_message(spec[0], spec[1]),
        )
        for name, spec in ENTRY_GUARDS.items()
    )
    triggers.update(guards)
    triggers.update(SCOPE_INDEX_TRIGGER)
    return triggers


# What the tables' CHECK constraints refused in the rows of impact_scope and obligations
# before they became the claim's JSON arrays (migration 0009), refused in the arrays: an
# array of exactly the claim's count of objects, each with its resource kind, its
# predicate and expected value as the constraints allowed, and text where text belongs.
_SCOPE_ENTRY = (
    ("kind", "word", RESOURCE_KINDS),
    ("locator", "text", None),
    ("role", "text", None),
    ("revision", "text or null", None),
)
_DUTY_ENTRY = (
    ("target_kind", "word", RESOURCE_KINDS),
    ("target_locator", "text", None),
    ("target_role", "text", None),
    ("target_revision", "text or null", None),
    ("predicate", "word", tuple(m.value for m in Predicate)),
    ("expected", "text or null", None),
)


def entries_refused(
    column: str, count: str, entry: tuple[tuple[str, str, object], ...], *, postgresql: bool
) -> str:
    """An SQL condition, true when the claim row NEW's JSON ``column`` is not well formed."""
    if postgresql:
        doc = f"NEW.{column}::jsonb"
        each = f"jsonb_array_elements({doc}) AS j(value)"
        array = (
            f"CASE WHEN jsonb_typeof({doc}) = 'array'"
            f" THEN jsonb_array_length({doc}) = NEW.{count} ELSE FALSE END"
        )
        checks = ["jsonb_typeof(j.value) = 'object'"]
        members = "(SELECT count(*) FROM jsonb_object_keys(j.value))"
        get, kind, text = "j.value ->> '{}'", "jsonb_typeof(j.value -> '{}')", "string"
    else:
        doc = f"NEW.{column}"
        each = f"json_each({doc}) AS j"
        array = (
            f"CASE WHEN json_valid({doc}) THEN json_type({doc}) = 'array'"
            f" AND json_array_length({doc}) = NEW.{count} ELSE FALSE END"
        )
        checks = ["j.type = 'object'"]
        # Every member, a key given twice included (json_extract reads the first).
        members = "(SELECT count(*) FROM json_each(j.value))"
        get, kind, text = "json_extract(j.value, '$.{}')", "json_type(j.value, '$.{}')", "text"
    checks.append(f"{members} = {len(entry)}")
    for key, what, words in entry:
        if what == "word":
            checks.append(_words(get.format(key), words))
        elif what == "text":
            checks.append(f"{kind.format(key)} = '{text}'")
        else:
            checks.append(f"{kind.format(key)} IN ('{text}', 'null')")
    if column == "obligations":
        predicate, expected = get.format("predicate"), get.format("expected")
        checks.append(
            f"(({predicate} IN ('exists', 'absent') AND {expected} IS NULL)"
            f" OR ({predicate} IN ('sha256', 'revision') AND {expected} IS NOT NULL))"
        )
    # CASE, not AND: SQLite's JSON functions raise on text that is not JSON, and a CASE
    # reads its branches only when it gets to them.
    obj, rest = checks[0], " AND ".join(checks[1:])
    return (
        f"CASE WHEN coalesce({array}, FALSE) THEN EXISTS (SELECT 1 FROM {each} WHERE"
        f" NOT CASE WHEN {obj} THEN coalesce({rest}, FALSE) ELSE FALSE END) ELSE TRUE END"
    )


def entries_message(column: str, count: str) -> str:
    """What the guard of a claim's JSON ``column`` says when it refuses a claim."""
    return f"claims is append-only, its {column} must be an array of {count} valid entries"


ENTRY_GUARDS = {
    f"claims_guard_{column}": (column, count, entry)
    for column, count, entry in (
        ("impact_scope", "scope_count", _SCOPE_ENTRY),
        ("obligations", "obligation_count", _DUTY_ENTRY),
    )
}


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
        SELECT 1 FROM scope_index AS sc
          JOIN claims AS c2 ON c2.run_id = sc.run_id AND c2.effect_id = sc.effect_id
         WHERE sc.run_id = p.run_id AND sc.kind = p.target_kind
           AND {where}
           AND {_IN_FLIGHT})"""


# The locators a scope may have to overlap the target by equality: the target itself and,
# for fs and external, each prefix of it that ends at a '/' of it, with and without that
# '/' (for fs, "/" is everyone's ancestor). One IN list, so that each is one index lookup.
# Never LIKE: file names hold % and _.
_AT_OR_ABOVE = """sc.locator IN (
            WITH RECURSIVE pos(i) AS (
                SELECT 1 UNION ALL SELECT i + 1 FROM pos WHERE i < length(p.target_locator))
            SELECT p.target_locator
            UNION ALL SELECT substr(p.target_locator, 1, i - 1) FROM pos
             WHERE p.target_kind <> 'owned' AND substr(p.target_locator, i, 1) = '/'
            UNION ALL SELECT substr(p.target_locator, 1, i) FROM pos
             WHERE p.target_kind <> 'owned' AND substr(p.target_locator, i, 1) = '/')"""

# A candidate observation is stale when an overlapping claim is in flight: one scoped at
# or above the target, or below it: past the target's '/' (a range of the index), or,
# for a target that ends with '/' ("/", a URI's directory), anywhere after it.
_STALE = " OR ".join(
    (
        _scopes(_AT_OR_ABOVE),
        "(p.target_kind <> 'owned' AND "
        + _scopes("sc.locator >= p.target_locator || '/' AND sc.locator < p.target_locator || '0'")
        + ")",
        "(p.target_kind <> 'owned' AND substr(p.target_locator, -1) = '/' AND "
        + _scopes(
            "sc.locator > p.target_locator AND sc.locator <"
            " substr(p.target_locator, 1, length(p.target_locator) - 1) || '0'"
        )
        + ")",
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


def _evidence(column: str, after: str) -> str:
    """The evidence's ``column`` (a decision or a column of ``ob``) for obligation p."""
    return f"""(
        SELECT {column}
          FROM observations AS ob
         WHERE ob.run_id = p.run_id
           AND ob.resource_kind = p.target_kind
           AND ob.resource_locator = p.target_locator
           AND ob.coverage = 'complete'
           AND +ob.seq > {after}
           AND {_DECISION} IS NOT NULL
           AND NOT ({_STALE})
         ORDER BY +ob.seq DESC
         LIMIT 1)"""


_EVIDENCE = _evidence(_DECISION, "o.seq")

_DUTIES = "FROM obligations AS p WHERE p.run_id = c.run_id AND p.effect_id = c.effect_id"

# Decision rule 7: every obligation of claim s that its evidence violates shows its target
# exactly as the last complete observation made before the claim did: absent both times,
# or one digest (one revision, where neither has a digest).
_SAME_STATE = """CASE
             WHEN ev.resource_exists = 0 OR bf.resource_exists = 0
               THEN ev.resource_exists = 0 AND bf.resource_exists = 0
             WHEN ev.sha256 IS NOT NULL OR bf.sha256 IS NOT NULL THEN ev.sha256 IS bf.sha256
             ELSE ev.revision IS NOT NULL AND ev.revision = bf.revision
           END"""

_BEFORE = """(SELECT max(b.seq) FROM observations AS b
                WHERE b.run_id = p.run_id AND b.resource_kind = p.target_kind
                  AND b.resource_locator = p.target_locator AND b.coverage = 'complete'
                  AND b.resource_exists IS NOT NULL AND b.seq < s.seq)"""

_UNCHANGED = f"""NOT EXISTS (
        SELECT 1 FROM obligations AS p
         WHERE p.run_id = s.run_id AND p.effect_id = s.effect_id
           AND {_evidence(_DECISION, "s.current_seq")} = 0
           AND NOT coalesce((
                SELECT {_SAME_STATE}
                  FROM observations AS ev, observations AS bf
                 WHERE ev.run_id = p.run_id AND ev.seq = {_evidence("ob.seq", "s.current_seq")}
                   AND bf.run_id = p.run_id AND bf.seq = {_BEFORE}), 0))"""

# The rules of docs/concepts.md#decisions, for one attempt; ledger.effects.decide.
_OWN_STEP = f"""CASE
             WHEN s.resolution = 'applied' THEN 'done'
             WHEN s.resolution = 'not_applied' THEN 'retry'
             WHEN s.verdict = 'verified' THEN 'done'
             WHEN s.verdict = 'pending' THEN 'wait'
             WHEN s.verdict = 'failed' THEN 'retry'
             WHEN s.execution = 'reported_success' AND s.verdict = 'unverified' THEN 'done'
             WHEN s.kind IN ('read', 'idempotent') THEN 'retry'
             WHEN s.kind = 'write' AND s.verdict = 'contradicted' AND {_UNCHANGED} THEN 'retry'
             ELSE 'escalate'
           END"""

_VERDICTS = f"""
    SELECT c.run_id, c.seq, c.effect_id, c.action_id, c.operation, c.backend,
           c.recorded_at AS claimed_at, o.execution, o.impact,
           c.kind, c.idempotency_key, c.retry_of, c.step, o.seq AS current_seq,
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
                     LIMIT 1)"""

# The attempt that speaks for claim t: its newest retry's newest retry ... or itself.
# A claim's retries are found by the index of retries: "+x.seq" keeps SQLite from
# walking the run's later claims by (run_id, seq) instead (and max() from walking it
# backwards), which made one run's statuses cost the square of its claims.
_NEWEST_ATTEMPT = """(
        WITH RECURSIVE attempt(effect_id, seq, n) AS (
            SELECT t.effect_id, t.seq, 0
            UNION ALL
            SELECT r.effect_id, r.seq, attempt.n + 1
              FROM attempt JOIN claims AS r
                ON r.run_id = t.run_id
               AND r.seq = (SELECT max(+x.seq) FROM claims AS x
                             WHERE x.run_id = t.run_id AND x.retry_of = attempt.effect_id
                               AND +x.seq > attempt.seq))
        SELECT effect_id FROM attempt ORDER BY n DESC LIMIT 1)"""

# Common table expressions rather than nested subqueries: SQLite's parser has a depth
# limit. NOT MATERIALIZED keeps each one a view the planner folds into the query, so that
# asking for one run or one effect still reads only its rows.
EFFECT_STATUS = f"""
WITH verdicts AS NOT MATERIALIZED ({_VERDICTS}
),
resolved AS NOT MATERIALIZED (
    SELECT v.*,
           (SELECT CASE r.applied WHEN 1 THEN 'applied' ELSE 'not_applied' END
              FROM resolutions AS r
             WHERE r.run_id = v.run_id AND r.effect_id = v.effect_id) AS resolution
      FROM verdicts AS v
),
steps AS NOT MATERIALIZED (
    SELECT s.*, {_OWN_STEP} AS own_step FROM resolved AS s
)
SELECT t.run_id, t.seq, t.effect_id, t.action_id, t.operation, t.backend, t.claimed_at,
       t.execution, t.impact, t.verdict,
       CASE WHEN t.resolution IS NULL
             AND t.verdict IN ('pending', 'unverified', 'contradicted')
             AND coalesce(t.impact, 'possible') <> 'none' THEN 1 ELSE 0 END AS unresolved_impact,
       t.kind, t.idempotency_key, t.retry_of, t.resolution,
       CASE WHEN NOT EXISTS (SELECT 1 FROM claims AS x
                              WHERE x.run_id = t.run_id AND x.retry_of = t.effect_id
                                AND +x.seq > t.seq)
            THEN t.own_step
            ELSE (SELECT a.own_step FROM steps AS a
                   WHERE a.run_id = t.run_id AND a.effect_id = {_NEWEST_ATTEMPT})
       END AS next_step,
       t.step
  FROM steps AS t
"""


# A claim's impact scope and postconditions, one row per entry, as the tables of those
# names held them before migration 0009: plain SQL reads them like any table.
def _entries_view(column: str, keys: tuple[str, ...]) -> str:
    fields = "".join(f",\n       json_extract(j.value, '$.{k}') AS {k}" for k in keys)
    return (
        f"\nSELECT c.run_id, c.effect_id, j.key AS position{fields}"
        f"\n  FROM claims AS c, json_each(c.{column}) AS j\n"
    )


IMPACT_SCOPE = _entries_view("impact_scope", SCOPE_COLUMNS)
OBLIGATIONS = _entries_view("obligations", OBLIGATION_COLUMNS)

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
# The tables each trigger fires on or reads: a store at an older revision (on its way to
# head) gets the guards whose tables it has.
TRIGGER_TABLES = {
    name: frozenset(re.findall(r"\b(?:ON|FROM|JOIN) (\w+)", ddl)) & set(metadata.tables)
    for name, ddl in SQLITE_TRIGGERS.items()
}
# ... and the columns of its own table it reads (NEW.x).
TRIGGER_COLUMNS = {
    name: frozenset(re.findall(r"\bNEW\.(\w+)", ddl)) for name, ddl in SQLITE_TRIGGERS.items()
}
# The views' queries: the stored views are made of them, and the library's own reads use
# them directly (as common table expressions), so that no report is computed from a view
# someone replaced in the store.
VIEW_QUERIES = {
    # Before effect_status, which reads obligations.
    "impact_scope": IMPACT_SCOPE,
    "obligations": OBLIGATIONS,
    "effect_status": EFFECT_STATUS,
    "unsettled_claims": UNSETTLED_CLAIMS,
}
VIEWS = {name: f"\nCREATE VIEW {name} AS{query}" for name, query in VIEW_QUERIES.items()}
EFFECT_STATUS_VIEW = VIEWS["effect_status"]

# Every effect's row, in the column order of ledger.storage.EffectRow.from_view, oldest
# claim first; {where} is empty or a WHERE clause (the reports of both backends).
STATUS_QUERY = (
    "SELECT run_id, seq, effect_id, operation, execution, impact, verdict, unresolved_impact,"
    " claimed_at, kind, idempotency_key, resolution, next_step, step FROM effect_status"
    " {where} ORDER BY claimed_at, run_id, seq"
)


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
    for name, ddl in SQLITE_TRIGGERS.items():
        on = re.search(r" ON (\w+)\n", ddl).group(1)  # type: ignore[union-attr]
        if TRIGGER_TABLES[name] <= tables.keys() and TRIGGER_COLUMNS[name] <= tables[on]:
            connection.exec_driver_sql(ddl)
    if has_every_column(tables):
        for ddl in VIEWS.values():
            connection.exec_driver_sql(ddl)
    # Indexes belong to the migrations; one dropped by hand (the unique index that allows
    # one terminal outcome per claim, say) is put back, and fails if forged rows forbid it.
    for index in _indexes().values():
        table = index.table.name  # type: ignore[union-attr]
        if tables.get(table, set()) >= {c.name for c in index.columns}:
            index.create(connection, checkfirst=True)


def has_every_column(tables: Mapping[str, Collection[str]]) -> bool:
    """Whether tables (name -> column names) hold every table and column of the schema.

    The views read columns of every table (effect_status a claim's step, since 0012):
    a store at an older revision, on its way to head, gets them once it has them all.
    """
    return all(
        set(tables.get(table.name, ())) >= {c.name for c in table.columns}
        for table in metadata.tables.values()
    )


def _indexes() -> dict[str, Index]:
    return {str(index.name): index for table in metadata.tables.values() for index in table.indexes}
