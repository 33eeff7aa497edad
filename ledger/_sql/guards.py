"""The guards: what every row inserted into a record table must satisfy, as data.

Each guard is a condition on the new row (``NEW``) that refuses it, and the message it is
refused with; each backend renders them (SQLite as one ``BEFORE INSERT`` trigger per
table, see :func:`by_table`; PostgreSQL as PL/pgSQL trigger functions), so both refuse
the same rows with the same words. UPDATE and DELETE of the append-only tables are
refused by triggers each backend writes itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from ledger._chain import GENESIS, sql_hash
from ledger._sql.tables import RECORD_TABLES, metadata
from ledger._sql.tables import words as _words
from ledger.effects import RESOURCE_KINDS, Predicate, ResolutionOrigin
from ledger.storage import ANSWER_TOO_LATE, CHAIN_NOT_EXTENDED, GRANT_LAPSED, SEQ_TAKEN


class Guard(NamedTuple):
    """One check of an inserted row: true ``condition`` refuses it with ``message``."""

    table: str
    name: str
    condition: str
    message: str

    @property
    def trigger(self) -> str:
        """The name of the trigger (and, on PostgreSQL, of its function's suffix)."""
        return f"{self.table}_{self.name}"

    @property
    def columns(self) -> frozenset[str]:
        """The columns of the new row the condition reads.

        A store at an older revision gets the guards whose columns it has.
        """
        return frozenset(re.findall(r"\bNEW\.(\w+)", self.condition))

    @property
    def tables(self) -> frozenset[str]:
        """The library's tables the guard fires on or reads.

        A store at an older revision gets the guards whose tables it has: a condition
        naming a table the store lacks would fail every insert (the chain guards read
        every record table, approvals' included).
        """
        named = re.findall(r"(?:\b(?:FROM|JOIN)|,) (\w+)", self.condition)
        return frozenset(named).intersection(metadata.tables) | {self.table}


# The library's writer connections answer sqlite_source_id() with this prefix (see
# ledger.sqlite.engine); no other connection does, the stock shell's included.
WRITER_SOURCE_ID = "ledger-writer "
OTHER_WRITER = f"sqlite_source_id() NOT LIKE '{WRITER_SOURCE_ID}%'"
# ... and this one while they write a run ``ledger import`` replays (a Batch's
# ``imported``): one of the library's writers all the same, as the prefix says.
IMPORT_SOURCE_ID = f"{WRITER_SOURCE_ID}import "
# The PostgreSQL setting the library's writers turn on, in their transaction, around the
# inserts of an imported run (PostgreSQL trusts the roles that may write).
IMPORTING_SETTING = "ledger.importing"


def live(dialect: str) -> str:
    """True unless the row is one of a run ``ledger import`` replays, as SQL.

    An import replays history: whether each answer and each claim under an approval came
    before the approval expired is the run's own record, held to its rules by every
    import, load and verify; the store's clock at import, long past those expiries, has
    no say. Every other write, the shell's included, is judged by the store's clock.
    """
    if dialect == "sqlite":
        return f"sqlite_source_id() NOT LIKE '{IMPORT_SOURCE_ID}%'"
    return f"coalesce(current_setting('{IMPORTING_SETTING}', true), '') <> 'on'"


def store_now(dialect: str) -> str:
    """The store's clock as SQL, in the form the library writes times (``utc_now``'s).

    What decides whether an approval has expired: the database's clock when the row is
    inserted, not the writer's.
    """
    if dialect == "sqlite":
        return "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')"
    return "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"


def _approval_guards(dialect: str) -> list[Guard]:
    """The guards of approval requests, decisions, and claims made under an approval."""
    now = store_now(dialect)
    live_write = live(dialect)
    granted = (
        "SELECT 1 FROM approval_requests AS r, approval_decisions AS d"
        " WHERE r.run_id = NEW.run_id AND r.approval_id = NEW.approval_id"
        " AND d.run_id = r.run_id AND d.approval_id = r.approval_id"
        " AND d.decision = 'granted' AND d.seq < NEW.seq AND r.effect_id = NEW.effect_id"
    )
    return [
        Guard(
            "approval_requests",
            "guard_key",
            "EXISTS (SELECT 1 FROM approval_requests WHERE run_id = NEW.run_id"
            " AND (approval_id = NEW.approval_id OR effect_id = NEW.effect_id))",
            "approval_requests is append-only, that approval_id or effect_id is already requested",
        ),
        Guard(
            "approval_requests",
            "guard_run",
            "NOT EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id)",
            "approval_requests rows need their run in runs",
        ),
        Guard(
            "approval_requests",
            "guard_claimed",
            "EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id AND effect_id = NEW.effect_id)",
            "an approval request reserves an effect id no claim has",
        ),
        Guard(
            "approval_decisions",
            "guard_key",
            "EXISTS (SELECT 1 FROM approval_decisions WHERE run_id = NEW.run_id"
            " AND approval_id = NEW.approval_id)",
            "approval_decisions is append-only, that approval is already decided",
        ),
        Guard(
            "approval_decisions",
            "guard_request",
            "NOT EXISTS (SELECT 1 FROM approval_requests WHERE run_id = NEW.run_id"
            " AND approval_id = NEW.approval_id AND seq < NEW.seq)",
            "an approval decision must come after its request",
        ),
        Guard(
            "approval_decisions",
            "guard_expired",
            "EXISTS (SELECT 1 FROM approval_requests WHERE run_id = NEW.run_id"
            f" AND approval_id = NEW.approval_id AND (({live_write} AND expires_at <= {now})"
            " OR expires_at <= NEW.decided_at))",
            f"{ANSWER_TOO_LATE}, an answer to it is refused",
        ),
        Guard(
            "approval_decisions",
            "guard_self",
            "NEW.source <> 'elicitation' AND EXISTS (SELECT 1 FROM approval_requests"
            " WHERE run_id = NEW.run_id AND approval_id = NEW.approval_id"
            " AND host = NEW.host AND pid = NEW.pid)",
            "an approval request is not decided by the process that made it",
        ),
        Guard(
            "claims",
            "guard_approval_used",
            "NEW.approval_id IS NOT NULL AND EXISTS (SELECT 1 FROM claims"
            " WHERE run_id = NEW.run_id AND approval_id = NEW.approval_id)",
            "that approval is already used by a claim, an approval is used once",
        ),
        Guard(
            "claims",
            "guard_approval",
            f"NEW.approval_id IS NOT NULL AND NOT EXISTS ({granted})",
            "a claim under an approval needs that approval granted for its effect before it",
        ),
        Guard(
            "claims",
            "guard_approval_expired",
            f"NEW.approval_id IS NOT NULL AND {live_write} AND EXISTS (SELECT 1"
            " FROM approval_requests WHERE run_id = NEW.run_id AND approval_id = NEW.approval_id"
            f" AND expires_at <= {now})",
            f"{GRANT_LAPSED}, a claim under it is refused",
        ),
    ]


def _seq_taken() -> str:
    return " OR ".join(
        f"EXISTS (SELECT 1 FROM {other} WHERE run_id = NEW.run_id AND seq = NEW.seq)"
        for other in RECORD_TABLES
    )


def insert_guards(dialect: str) -> dict[str, Guard]:
    """The checks every inserted row must pass on ``dialect`` ("sqlite" or "postgresql").

    By trigger name, in the order the triggers are created. The two lists differ where
    the databases do: PostgreSQL cannot tell the library's writers from others (the
    guards that skip the library's writers are SQLite's; PostgreSQL checks a claim's
    JSON for every writer, and keeps the others out by roles), and lacks ``sha3()``.
    """
    sqlite = dialect == "sqlite"
    # SQLite's IS NOT compares any two values, NULL included; PostgreSQL spells it so.
    is_not = " IS NOT " if sqlite else " IS DISTINCT FROM "
    # INSERT OR REPLACE deletes the old row without firing DELETE triggers, so every
    # key is also guarded before INSERT: a taken key aborts instead of being replaced.
    guards = [
        Guard(
            "runs",
            "guard_key",
            "EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id)",
            "runs is append-only, that run_id is already recorded",
        ),
        Guard(
            "claims",
            "guard_key",
            "EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id AND effect_id = NEW.effect_id)",
            "claims is append-only, that effect_id is already claimed in the run",
        ),
        Guard(
            "observations",
            "guard_key",
            "EXISTS (SELECT 1 FROM observations"
            " WHERE run_id = NEW.run_id AND observation_id = NEW.observation_id)",
            "observations is append-only, that observation_id is already recorded in the run",
        ),
        Guard(
            "outcomes",
            "guard_settled",
            "EXISTS (SELECT 1 FROM outcomes WHERE run_id = NEW.run_id"
            " AND effect_id = NEW.effect_id AND execution <> 'running')",
            "outcomes is append-only, the effect already has a terminal outcome",
        ),
        Guard(
            "outcomes",
            "guard_order",
            "EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id"
            " AND effect_id = NEW.effect_id AND seq >= NEW.seq)",
            "an outcome must come after its claim",
        ),
        Guard(
            "resolutions",
            "guard_key",
            "EXISTS (SELECT 1 FROM resolutions"
            " WHERE run_id = NEW.run_id AND effect_id = NEW.effect_id)",
            "resolutions is append-only, the effect is already resolved",
        ),
        Guard(
            "resolutions",
            "guard_claim",
            "NOT EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id"
            " AND effect_id = NEW.effect_id AND seq < NEW.seq)",
            "a resolution must come after its claim",
        ),
        Guard(
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
        Guard(
            "claims",
            "guard_retry",
            "NEW.retry_of IS NOT NULL AND NOT EXISTS (SELECT 1 FROM claims WHERE"
            " run_id = NEW.run_id AND effect_id = NEW.retry_of AND seq < NEW.seq"
            " AND idempotency_key = NEW.idempotency_key)",
            "a retry must come after the claim it repeats and carry its idempotency key",
        ),
    ]
    guards.extend(
        Guard(
            table,
            "guard_run",
            "NOT EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id)",
            f"{table} rows need their run in runs",
        )
        for table in ("claims", "observations")
    )
    guards.extend(_approval_guards(dialect))
    guards.append(
        Guard(
            "outcomes",
            "guard_claim",
            "NOT EXISTS (SELECT 1 FROM claims WHERE run_id = NEW.run_id"
            " AND effect_id = NEW.effect_id)",
            "an outcome needs its claim",
        )
    )
    # A scope_index row is the claim's own scope entry, or nothing: rows the claim's
    # trigger writes pass; one added by hand must match an entry of its claim.
    sqlite_only = [
        Guard(
            "scope_index",
            "guard_claim",
            f"{OTHER_WRITER} AND NOT EXISTS (SELECT 1 FROM claims AS c, json_each(c.impact_scope)"
            " AS j WHERE c.run_id = NEW.run_id AND c.effect_id = NEW.effect_id"
            " AND j.key = NEW.position AND json_extract(j.value, '$.kind') = NEW.kind"
            " AND json_extract(j.value, '$.locator') = NEW.locator)",
            "scope_index is append-only, its rows are the scopes of the claims",
        )
    ]
    # Each record must carry the hash of its own fields (a claim's covers its scope and
    # postconditions). sha3() is the stock shell's; the library registers the same
    # function on its connections. The library's own writers hashed the record in Python
    # an instant before: on them (OTHER_WRITER false) the hash is not computed a second
    # time, which was a seventh of a claim's cost. Every other connection, the shell's
    # included, is checked in full. (Created before the link guards, so that those fire
    # first: SQLite fires a table's triggers newest first, and a record that does not
    # extend the chain says so.)
    sqlite_only.extend(
        Guard(
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
            ("approval_requests", "approval_request"),
            ("approval_decisions", "approval_decision"),
        )
    )
    if sqlite:
        guards.extend(sqlite_only)
    # ... and extend the run's chain: its prev_hash is the hash of the record just before
    # it (by seq), or the genesis value for the first.
    previous = " UNION ALL ".join(
        f"SELECT hash FROM {t} WHERE run_id = NEW.run_id AND seq = NEW.seq - 1"
        for t in RECORD_TABLES
    )
    guards.extend(
        Guard(
            table,
            "guard_chain",
            f"NEW.prev_hash{is_not}(CASE WHEN NEW.seq = 1 THEN '{GENESIS}' ELSE ({previous}) END)",
            f"{table} is append-only, {CHAIN_NOT_EXTENDED}",
        )
        for table in RECORD_TABLES
    )
    guards.extend(
        Guard(
            table,
            "guard_seq",
            _seq_taken(),
            f"{table} is append-only, {SEQ_TAKEN}",
        )
        for table in RECORD_TABLES
    )
    # The library builds and validates the arrays itself: on SQLite the shell's are
    # checked; PostgreSQL, which cannot tell the library's writers from others, checks
    # every writer's.
    guards.extend(
        Guard(
            "claims",
            name.removeprefix("claims_"),
            f"{OTHER_WRITER} AND ({entries_refused(*spec, postgresql=False)})"
            if sqlite
            else entries_refused(*spec, postgresql=True),
            entries_message(spec[0], spec[1]),
        )
        for name, spec in ENTRY_GUARDS.items()
    )
    return {guard.trigger: guard for guard in guards}


def by_table(guards: Iterable[Guard]) -> dict[str, list[Guard]]:
    """The guards of each table, in the order SQLite checks them.

    SQLite renders a table's guards as one trigger whose statements run in turn: one
    trigger program per inserted row instead of one per guard (SQLite sets up each
    program afresh for every row). The order is the reverse of :func:`insert_guards`',
    the order in which SQLite fired them when each guard was its own trigger (newest
    first), so a row that fails several guards is refused with the same message.
    """
    tables: dict[str, list[Guard]] = {}
    for guard in reversed(list(guards)):
        tables.setdefault(guard.table, []).append(guard)
    return tables


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
