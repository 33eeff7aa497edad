"""Records to rows and back: the SQL of one run's rows, its chain and its validating load.

Both backends write the rows built here and load runs through these reads. Loading
validates every row through the record constructors and the history rules: a row
slipped in past the schema's guards (constraints switched off, triggers dropped) makes
loading fail closed instead of being believed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Table,
    exists,
    select,
    text,
)
from sqlalchemy import inspect as sa_inspect

from ledger import _chain
from ledger._owner import Writer
from ledger._sql.revisions import check_known
from ledger._sql.tables import (
    approval_decisions,
    approval_requests,
    claims,
    observations,
    outcomes,
    resolutions,
    run_writers,
    runs,
    scope_index,
)
from ledger.effects import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalSource,
    Coverage,
    EffectClaim,
    EffectKind,
    EffectOutcome,
    ExecutionOutcome,
    History,
    Impact,
    Observation,
    ObservationMechanism,
    OperationRef,
    Postcondition,
    Predicate,
    Record,
    Resolution,
    ResolutionOrigin,
    ResourceRef,
    check_history,
    recorded_json,
)
from ledger.errors import StoreCorruptError, StoreSchemaOldError, StoreTamperedError

# --------------------------------------------------------------------------- rows


# The first revision whose tables the reads here know: approvals (0016; before it, 0015's
# trace context in a claim's row, 0013's resolution writer, 0012's steps and recorded
# values, 0009's scope in a claim's row).
READABLE_FROM = "0016"


# The columns of the latest revisions that the reads select: with them, a store whose
# version row says otherwise (set back by hand) is read, and `verify` says what is wrong.
_READ_COLUMNS = {
    "claims": ("impact_scope", "step", "traceparent", "approval_id"),
    "resolutions": ("origin",),
    "approval_requests": ("approval_id",),
    "approval_decisions": ("approval_id",),
}


def _has_read_columns(conn: Connection) -> bool:
    inspector = sa_inspect(conn)
    for table, wanted in _READ_COLUMNS.items():
        if not inspector.has_table(table):
            return False
        found = {column["name"] for column in inspector.get_columns(table)}
        if not found.issuperset(wanted):
            return False
    return True


def check_readable(conn: Connection, name: object) -> None:
    """Refuse, in one clear line, to read a store at a revision these reads do not know.

    A revision newer than this library's (:class:`SchemaTooNewError`) is read by the
    version that wrote it, or a newer one; one older than these reads know
    (:class:`StoreSchemaOldError`) is upgraded by its next write.

    A store with no schema yet reads as empty elsewhere.
    """
    # Asked first, not tried: on PostgreSQL a failed statement aborts the read's whole
    # transaction, and the reads that follow would fail with it.
    if not sa_inspect(conn).has_table("alembic_version"):
        return
    revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    # A newer version's tables may hold what these reads would misread: refused first.
    check_known(revision, name)
    if (
        revision is not None
        and revision.isdigit()
        and revision < READABLE_FROM
        and not _has_read_columns(conn)
    ):
        store = f"the store {name}" if name else "the store"
        raise StoreSchemaOldError(
            f"{store} is at schema revision {revision}; this version of the library reads "
            f"revision {READABLE_FROM} and later: upgrade it with ledger migrate (so does the "
            "next write to it by this version: a worker's claim or outcome, ledger resolve), "
            "or read it with the version that wrote it"
        )


def run_exists(conn: Connection, run_id: str) -> bool:
    """Whether the store holds the run (it has written at least one record)."""
    return conn.execute(select(exists().where(runs.c.run_id == run_id))).scalar_one()


Rows = tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]


def _unencodable(value: object) -> object:
    raise TypeError(f"a claim's entries hold only strings and nulls, not {type(value).__name__}")


# The stdlib's C encoder, made once: ``json.dumps`` builds one for every call with these
# options, and the same array built in Python costs twice the C encoder's time. With no
# ``markers`` it skips the cycle check, which flat objects of strings never need.
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_ENCODE: Callable[[Any, int], Sequence[str]] | None = (
    None
    if _C_ENCODER is None
    # markers, default, encoder, indent, key and item separators, sort_keys, skipkeys, allow_nan
    else _C_ENCODER(None, _unencodable, encode_basestring, None, ":", ",", False, False, True)  # noqa: FBT003
)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_unencodable)


def _json(entries: list[dict[str, Any]]) -> str:
    """The entries as a JSON array of objects, compact, keys in the order given.

    What ``json.dumps(entries, ensure_ascii=False, separators=(",", ":"))`` returns for
    these flat objects of strings and nulls (a test holds the two equal, and equal to the
    text the store has always held), made by the stdlib's C encoder.
    """
    if _ENCODE is None:  # a Python without the json module's C speedups
        return _ENCODER.encode(entries)
    return "".join(_ENCODE(entries, 0))


def rows_of(run_id: str, record: Record) -> Rows:
    """The row of a record as the store holds it (chain aside), and a claim's entries.

    A claim's impact scope and obligations are stored in its row as JSON arrays of the
    entries returned here (which the chain encodes field by field).
    """
    if isinstance(record, EffectClaim):
        scope = [
            {"kind": ref.kind, "locator": ref.locator, "role": ref.role, "revision": ref.revision}
            for ref in record.impact_scope
        ]
        duties = [
            {
                "target_kind": p.target.kind,
                "target_locator": p.target.locator,
                "target_role": p.target.role,
                "target_revision": p.target.revision,
                "predicate": p.predicate.value,
                "expected": p.expected,
            }
            for p in record.obligations
        ]
        row = {
            "run_id": run_id,
            "seq": record.seq,
            "effect_id": record.effect_id,
            "action_id": record.action_id,
            "operation": record.operation.name,
            "backend": record.operation.backend,
            "args_sha256": record.operation.args_sha256,
            "scope_count": len(scope),
            "obligation_count": len(duties),
            "recorded_at": record.recorded_at,
            "kind": record.kind.value,
            "idempotency_key": record.idempotency_key,
            "retry_of": record.retry_of,
            "impact_scope": _json(scope),
            "obligations": _json(duties),
            "step": record.step,
            "args": None if record.args is None else recorded_json(record.args),
            "traceparent": record.traceparent,
            "approval_id": record.approval_id,
        }
        return row, scope, duties
    if isinstance(record, EffectOutcome):
        row = {
            "run_id": run_id,
            "seq": record.seq,
            "effect_id": record.effect_id,
            "execution": record.execution.value,
            "impact": record.impact.value,
            "execution_id": record.execution_id,
            "replayed": int(record.replayed),
            "recorded_at": record.recorded_at,
            "result": recorded_json(record.result) if record.result_recorded else None,
        }
        return row, [], []
    if isinstance(record, Resolution):
        row = {
            "run_id": run_id,
            "seq": record.seq,
            "effect_id": record.effect_id,
            "applied": int(record.applied),
            "resolved_by": record.by,
            "note": record.note,
            "recorded_at": record.recorded_at,
            "origin": None if record.origin is None else record.origin.value,
            "os_user": record.os_user,
            "host": record.host,
            "program": record.program,
            "pid": record.pid,
        }
        return row, [], []
    if isinstance(record, ApprovalRequest):
        row = {
            "run_id": run_id,
            "seq": record.seq,
            "approval_id": record.approval_id,
            "effect_id": record.effect_id,
            "action_digest": record.action_digest,
            "operation": record.operation,
            "step": record.step,
            "args": None if record.args is None else recorded_json(record.args),
            "reason": record.reason,
            "requested_at": record.requested_at,
            "expires_at": record.expires_at,
            "os_user": record.os_user,
            "host": record.host,
            "program": record.program,
            "pid": record.pid,
        }
        return row, [], []
    if isinstance(record, ApprovalDecision):
        row = {
            "run_id": run_id,
            "seq": record.seq,
            "approval_id": record.approval_id,
            "decision": record.decision,
            "decided_by": record.by,
            "note": record.note,
            "decided_at": record.decided_at,
            "source": record.source.value,
            "os_user": record.os_user,
            "host": record.host,
            "program": record.program,
            "pid": record.pid,
        }
        return row, [], []
    exists = None if record.exists is None else int(record.exists)
    row = {
        "run_id": run_id,
        "seq": record.seq,
        "observation_id": record.observation_id,
        "resource_kind": record.resource.kind,
        "resource_locator": record.resource.locator,
        "resource_role": record.resource.role,
        "resource_revision": record.resource.revision,
        "mechanism": record.mechanism.value,
        "coverage": record.coverage.value,
        "source_action_id": record.source_action_id,
        "resource_exists": exists,
        "sha256": record.sha256,
        "revision": record.revision,
        "recorded_at": record.recorded_at,
    }
    return row, [], []


def chain_hash(run_id: str, record: Record, prev_hash: str) -> str:
    """The hash a record has in its run's chain after ``prev_hash``."""
    row, scope, duties = rows_of(run_id, record)
    return _chain.link(prev_hash, _chain.encode(record.record_type, run_id, row, scope, duties))


_TABLES = {
    "claim": claims,
    "outcome": outcomes,
    "observation": observations,
    "resolution": resolutions,
    "approval_request": approval_requests,
    "approval_decision": approval_decisions,
}


# What a new writer replaces: every column of run_writers but its key.
WRITER_COLUMNS = tuple(c.name for c in run_writers.columns if c.name != "run_id")


def landed(rowcount: int, expected: int, sql: str) -> None:
    """Refuse a statement that wrote fewer rows than it was given.

    Only a trigger that skips a row (SQLite's ``RAISE(IGNORE)``, a PostgreSQL trigger
    function returning NULL) makes an ``INSERT`` skip a row without an error: the
    library installs none that does, so the store was tampered with, and nothing
    written by this transaction may be acknowledged.
    """
    if rowcount != expected:
        table = sql.split("INTO", 1)[-1].split("(", 1)[0].strip()
        raise StoreTamperedError(
            f"{expected - rowcount} of {expected} row(s) given to {table} did not land: "
            "a trigger that is not the library's is dropping them; run ledger verify"
        )


P = TypeVar("P")


def chained(
    run_id: str,
    records: Sequence[Record],
    head: str,
    inserts: Mapping[str, tuple[str, Callable[[dict[str, Any]], P]]],
) -> tuple[list[tuple[str, list[P]]], str]:
    """The inserts of records in seq order, each row chained to the one before, and the head.

    ``inserts`` gives each record kind's statement and the parameters of a row for it (a
    backend's driver style); consecutive records of one kind share a statement.
    """
    steps: list[tuple[str, list[P]]] = []
    kind = ""
    params: list[P] = []
    for record in records:
        if record.record_type != kind:
            kind = record.record_type
            params = []
            steps.append((inserts[kind][0], params))
        row, scope, duties = rows_of(run_id, record)
        digest = _chain.link(head, _chain.encode(kind, run_id, row, scope, duties))
        row["prev_hash"] = head
        row["hash"] = digest
        params.append(inserts[kind][1](row))
        head = digest
    return steps, head


def writer_row(run_id: str, writer: Writer, now: str) -> dict[str, object]:
    """The run_writers row that names ``writer`` as the run's writer since ``now``."""
    return {
        "run_id": run_id,
        "host": writer.host,
        "boot_id": writer.boot_id,
        "pid": writer.pid,
        "process_started": writer.started,
        "since": now,
        "name": writer.name,
    }


# --------------------------------------------------------------------------- reads


class _InvalidRowError(Exception):
    """A row that does not make a valid record."""


def _bool(value: Any, column: str) -> bool | None:
    if value is None:
        return None
    if type(value) is int and value in (0, 1):
        return bool(value)
    raise _InvalidRowError(f"{column} holds {value!r}, which is not 0, 1 or NULL")


def _outcome(row: Any) -> EffectOutcome:
    replayed = _bool(row["replayed"], "replayed")
    if replayed is None:
        raise _InvalidRowError("replayed is NULL")
    return EffectOutcome(
        effect_id=row["effect_id"],
        seq=row["seq"],
        execution=ExecutionOutcome(row["execution"]),
        impact=Impact(row["impact"]),
        execution_id=row["execution_id"],
        replayed=replayed,
        recorded_at=row["recorded_at"],
        result=_stored_json(row["result"], "result"),
        result_recorded=row["result"] is not None,
    )


def _stored_json(text: object, column: str) -> Any:
    """A recorded value read back: its canonical JSON text, or NULL for none recorded."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise _InvalidRowError(f"{column} holds {type(text).__name__}, not JSON text")
    try:
        value = json.loads(text)
    except ValueError:
        raise _InvalidRowError(f"{column} is not JSON: {text!r:.80}") from None
    if recorded_json(value) != text:
        raise _InvalidRowError(f"{column} is not in the canonical form the library writes")
    return value


def _resolution(row: Any) -> Resolution:
    applied = _bool(row["applied"], "applied")
    if applied is None:
        raise _InvalidRowError("applied is NULL")
    return Resolution(
        effect_id=row["effect_id"],
        seq=row["seq"],
        applied=applied,
        by=row["resolved_by"],
        recorded_at=row["recorded_at"],
        note=row["note"],
        origin=None if row["origin"] is None else ResolutionOrigin(row["origin"]),
        os_user=row["os_user"],
        host=row["host"],
        program=row["program"],
        pid=row["pid"],
    )


def _approval_request(row: Any) -> ApprovalRequest:
    return ApprovalRequest(
        approval_id=row["approval_id"],
        seq=row["seq"],
        effect_id=row["effect_id"],
        action_digest=row["action_digest"],
        operation=row["operation"],
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        os_user=row["os_user"],
        host=row["host"],
        program=row["program"],
        pid=row["pid"],
        step=row["step"],
        args=_stored_json(row["args"], "args"),
        reason=row["reason"],
    )


def _approval_decision(row: Any) -> ApprovalDecision:
    return ApprovalDecision(
        approval_id=row["approval_id"],
        seq=row["seq"],
        decision=row["decision"],
        by=row["decided_by"],
        decided_at=row["decided_at"],
        source=ApprovalSource(row["source"]),
        os_user=row["os_user"],
        host=row["host"],
        program=row["program"],
        pid=row["pid"],
        note=row["note"],
    )


def _observation(row: Any) -> Observation:
    return Observation(
        observation_id=row["observation_id"],
        seq=row["seq"],
        resource=ResourceRef(
            row["resource_kind"],
            row["resource_locator"],
            row["resource_role"],
            row["resource_revision"],
        ),
        mechanism=ObservationMechanism(row["mechanism"]),
        coverage=Coverage(row["coverage"]),
        source_action_id=row["source_action_id"],
        exists=_bool(row["resource_exists"], "resource_exists"),
        sha256=row["sha256"],
        revision=row["revision"],
        recorded_at=row["recorded_at"],
    )


# The record tables after claims, in the order a run is read: kind, table, row reader.
_AFTER_CLAIMS: tuple[tuple[str, Table, Callable[[Any], Any]], ...] = (
    ("outcome", outcomes, _outcome),
    ("observation", observations, _observation),
    ("resolution", resolutions, _resolution),
    ("approval_request", approval_requests, _approval_request),
    ("approval_decision", approval_decisions, _approval_decision),
)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A key given twice would be read as its last value here and as its first by SQLite's
    # json_extract (the views, the shell's recipes): two readings of one record.
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _InvalidRowError(f"an object repeats a key: {keys}")
    return dict(pairs)


def _entries(row: Any, column: str, keys: tuple[str, ...], count: str) -> list[tuple[Any, ...]]:
    """The entries of a claim's JSON array column, each as its values in ``keys`` order."""
    try:
        entries = json.loads(row[column], object_pairs_hook=_pairs)
    except (TypeError, ValueError) as e:
        raise _InvalidRowError(f"{column} is not JSON: {e}") from e
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and tuple(e) == keys for e in entries
    ):
        raise _InvalidRowError(f"{column} must be an array of objects with the keys {keys}")
    if len(entries) != row[count]:
        raise _InvalidRowError(f"{count} is {row[count]!r} but {column} holds {len(entries)}")
    return [tuple(e[k] for k in keys) for e in entries]


def _check_scope_index(conn: Connection, run_id: str, wanted: set[tuple[Any, ...]]) -> None:
    """The run's scope_index rows are exactly its claims' scope entries."""
    held = {
        tuple(row)
        for row in conn.execute(
            select(
                scope_index.c.kind,
                scope_index.c.locator,
                scope_index.c.effect_id,
                scope_index.c.position,
            ).where(scope_index.c.run_id == run_id)
        )
    }
    if held != wanted:
        extra, missing = sorted(held - wanted), sorted(wanted - held)
        raise _InvalidRowError(
            "scope_index does not match the claims' impact scopes"
            f" (rows not in a scope: {extra[:3]}, scope entries without a row: {missing[:3]})"
        )


def claim_of(row: Any) -> tuple[EffectClaim, list[tuple[Any, ...]]]:
    """The claim of a row of ``claims``, and its impact scope's entries as stored."""
    scope = _entries(row, "impact_scope", _chain.SCOPE_COLUMNS, "scope_count")
    duties = _entries(row, "obligations", _chain.OBLIGATION_COLUMNS, "obligation_count")
    claim = EffectClaim(
        effect_id=row["effect_id"],
        seq=row["seq"],
        action_id=row["action_id"],
        operation=OperationRef(row["operation"], row["backend"], row["args_sha256"]),
        impact_scope=tuple(ResourceRef(*s) for s in scope),
        obligations=tuple(
            Postcondition(ResourceRef(*d[:4]), Predicate(d[4]), d[5]) for d in duties
        ),
        recorded_at=row["recorded_at"],
        kind=EffectKind(row["kind"]),
        idempotency_key=row["idempotency_key"],
        retry_of=row["retry_of"],
        step=row["step"],
        args=_stored_json(row["args"], "args"),
        traceparent=row["traceparent"],
        approval_id=row["approval_id"],
    )
    return claim, scope


def load_history(conn: Connection, run_id: str) -> History:
    """Read and validate every record of one run; fail closed on anything wrong."""
    return load_run(conn, run_id)[0]


def _check_chain(run_id: str, history: History, links: dict[int, tuple[str, str]]) -> str:
    prev = _chain.GENESIS
    for record in history.records():
        stored_prev, stored_hash = links[record.seq]
        if stored_prev != prev:
            raise _InvalidRowError(
                f"chain broken at seq {record.seq}: its prev_hash is not the hash of the record "
                "before it (a record was removed, inserted or reordered)"
            )
        if chain_hash(run_id, record, prev) != stored_hash:
            raise _InvalidRowError(
                f"chain broken at seq {record.seq}: its hash does not match its fields "
                "(the record was changed)"
            )
        prev = stored_hash
    return prev


def load_run(conn: Connection, run_id: str) -> tuple[History, str]:
    """The validated history of a run and the hash at its head."""
    links: dict[int, tuple[str, str]] = {}
    where = "record"
    try:
        claim_rows = list(
            conn.execute(
                select(claims).where(claims.c.run_id == run_id).order_by(claims.c.seq)
            ).mappings()
        )
        loaded_claims = []
        indexed: set[tuple[Any, ...]] = set()
        for row in claim_rows:
            where = f"claim at seq {row['seq']}"
            links[row["seq"]] = (row["prev_hash"], row["hash"])
            claim, scope = claim_of(row)
            indexed.update(
                (s[0], s[1], row["effect_id"], position) for position, s in enumerate(scope)
            )
            loaded_claims.append(claim)
        loaded: dict[str, list[Any]] = {kind: [] for kind, _, _ in _AFTER_CLAIMS}
        for kind, source, build in _AFTER_CLAIMS:
            for row in conn.execute(
                select(source).where(source.c.run_id == run_id).order_by(source.c.seq)
            ).mappings():
                where = f"{kind} at seq {row['seq']}"
                links[row["seq"]] = (row["prev_hash"], row["hash"])
                loaded[kind].append(build(row))
        where = "scope_index"
        _check_scope_index(conn, run_id, indexed)
        where = "history"
        history = History(
            tuple(loaded_claims),
            tuple(loaded["outcome"]),
            tuple(loaded["observation"]),
            tuple(loaded["resolution"]),
            tuple(loaded["approval_request"]),
            tuple(loaded["approval_decision"]),
        )
        check_history(history)
        where = "chain"
        head_hash = _check_chain(run_id, history, links)
        if history.records() and not run_exists(conn, run_id):
            raise _InvalidRowError("the run has records but no row in runs")  # noqa: TRY301 - reported below with the others
    except (ValueError, TypeError, _InvalidRowError) as e:
        raise StoreCorruptError(
            f"run {run_id} does not validate ({where}): {e}; refusing to load it"
        ) from e
    return history, head_hash


# --------------------------------------------------------------------------- checking at scale

# What check_history reads of each record: every other field of a record already checked
# (built, and hashed into the chain) is let go, so that checking a run of 100,000 effects
# holds a few fields of each record instead of the whole run.
_UNREAD = {
    "claim": (
        "action_id",
        "operation",
        "impact_scope",
        "obligations",
        "step",
        "args",
        "traceparent",
    ),
    "outcome": ("execution_id", "result"),
    "observation": ("resource", "sha256", "revision", "source_action_id"),
    "resolution": ("by", "note"),
    "approval_request": ("operation", "step", "args", "reason"),
    "approval_decision": ("by", "note"),
}
_PAGE = 1000
# The (seq, prev_hash, hash) of every record of a run, in seq order.
_LINKS = (
    " UNION ALL ".join(
        f"SELECT seq, prev_hash, hash FROM {t.name} WHERE run_id = :run_id"
        for t in _TABLES.values()
    )
    + " ORDER BY seq"
)


@contextlib.contextmanager
def _streamed(conn: Connection, table: Table, run_id: str) -> Iterator[Iterator[Any]]:
    """The run's rows of ``table`` in seq order, fetched a page at a time, closed after.

    On PostgreSQL a server-side cursor: the rows never sit in memory all at once.
    """
    statement = (
        select(table)
        .where(table.c.run_id == run_id)
        .order_by(table.c.seq)
        .execution_options(yield_per=_PAGE)
    )
    with conn.execute(statement) as result:
        yield iter(result.mappings())


def _let_go(record: Record) -> Record:
    """``record`` without the fields check_history does not read (set to None in place).

    Only for a record built here and never handed out: it is no longer a valid record.
    """
    for name in _UNREAD[record.record_type]:
        object.__setattr__(record, name, None)
    return record


def check_run(
    conn: Connection, run_id: str, see: Callable[[Record], bool] | None = None
) -> tuple[str, int]:
    """Validate a run exactly as :func:`load_run` does: its head hash and its record count.

    The same checks in the same order, so a run that does not validate is refused with
    the same message (:class:`StoreCorruptError`); but each record is let go once it is
    built and its hash checked, and rows are read as they come: memory holds the few
    fields of each record the history's rules read, not the run. ``see`` is shown each
    record as it is built (claims, outcomes, observations, resolutions, each in seq
    order); a record it answers True for is kept whole, for it to hold.
    """
    where = "record"
    # The seqs whose hash, computed from their record after their stored prev_hash,
    # differs from their stored hash: checked in seq order once the links are.
    changed: set[Any] = set()
    kept: dict[str, list[Any]] = {kind: [] for kind in _TABLES}
    indexed: set[tuple[Any, ...]] = set()

    def keep(kind: str, row: Any, record: Record) -> None:
        prev = row["prev_hash"]
        if not isinstance(prev, str) or chain_hash(run_id, record, prev) != row["hash"]:
            changed.add(row["seq"])
        whole = (see is not None and see(record)) or (
            # The rules compare an approved claim's action digest with its request's.
            isinstance(record, EffectClaim) and record.approval_id is not None
        )
        kept[kind].append(record if whole else _let_go(record))

    try:
        with _streamed(conn, claims, run_id) as found:
            for row in found:
                where = f"claim at seq {row['seq']}"
                claim, scope = claim_of(row)
                indexed.update(
                    (s[0], s[1], row["effect_id"], position) for position, s in enumerate(scope)
                )
                keep("claim", row, claim)
        for kind, source, build in _AFTER_CLAIMS:
            with _streamed(conn, source, run_id) as found:
                for row in found:
                    where = f"{kind} at seq {row['seq']}"
                    keep(kind, row, build(row))
        where = "scope_index"
        _check_scope_index(conn, run_id, indexed)
        indexed.clear()
        where = "history"
        history = History(
            tuple(kept["claim"]),
            tuple(kept["outcome"]),
            tuple(kept["observation"]),
            tuple(kept["resolution"]),
            tuple(kept["approval_request"]),
            tuple(kept["approval_decision"]),
        )
        kept.clear()
        check_history(history)
        where = "chain"
        head_hash = _check_links(conn, run_id, changed)
        count = len(history.records())
        if count and not run_exists(conn, run_id):
            raise _InvalidRowError("the run has records but no row in runs")  # noqa: TRY301 - reported below with the others
    except (ValueError, TypeError, _InvalidRowError) as e:
        raise StoreCorruptError(
            f"run {run_id} does not validate ({where}): {e}; refusing to load it"
        ) from e
    return head_hash, count


def _check_links(conn: Connection, run_id: str, changed: set[Any]) -> str:
    """:func:`_check_chain` of a run whose seqs are 1, 2, 3, … (check_history passed)."""
    prev = _chain.GENESIS
    with conn.execute(text(_LINKS).execution_options(yield_per=_PAGE), {"run_id": run_id}) as links:
        for seq, stored_prev, stored_hash in links:
            if stored_prev != prev:
                raise _InvalidRowError(
                    f"chain broken at seq {seq}: its prev_hash is not the hash of the record "
                    "before it (a record was removed, inserted or reordered)"
                )
            if seq in changed:
                raise _InvalidRowError(
                    f"chain broken at seq {seq}: its hash does not match its fields "
                    "(the record was changed)"
                )
            prev = stored_hash
    return prev


# --------------------------------------------------------------------------- reading again


def reread_claims(conn: Connection, run_id: str, effect_ids: Collection[str]) -> list[EffectClaim]:
    """The claims of ``effect_ids`` in a run validated in this snapshot, in seq order."""
    found = []
    ids = sorted(effect_ids)
    for at in range(0, len(ids), _PAGE):
        statement = select(claims).where(
            claims.c.run_id == run_id, claims.c.effect_id.in_(ids[at : at + _PAGE])
        )
        found += [claim_of(row)[0] for row in conn.execute(statement).mappings()]
    return sorted(found, key=lambda c: c.seq)


def _above(locator: str) -> list[str]:
    # Every P such that locator starts with P + "/": the fs locators it lies below.
    return [locator[:i] for i, char in enumerate(locator) if char == "/"]


def overlap_candidates(
    conn: Connection, run_id: str, targets: Collection[tuple[str, str]]
) -> set[str]:
    """The effects of a run whose impact scope may overlap one of ``targets`` (kind, locator).

    What the run's index finds (ledger._run.index.RunIndex): a scope entry at a target
    (any kind); for an ``fs`` target, an entry at ``/``, at a directory above the target
    or below it (every ``fs`` entry for ``/``); for an ``external`` target, every
    ``external`` entry. One pass over the run's scope index, a page at a time.
    """
    exact = set(targets)
    fs = {locator for kind, locator in exact if kind == "fs"}
    external = any(kind == "external" for kind, _ in exact)
    above = {p for locator in fs for p in _above(locator)}
    found: set[str] = set()
    statement = (
        select(scope_index.c.kind, scope_index.c.locator, scope_index.c.effect_id)
        .where(scope_index.c.run_id == run_id)
        .execution_options(yield_per=_PAGE)
    )
    with conn.execute(statement) as entries:
        for kind, locator, effect_id in entries:
            if (
                (kind, locator) in exact
                or (external and kind == "external")
                or (
                    fs
                    and kind == "fs"
                    and (
                        "/" in fs
                        or locator == "/"
                        or locator in above
                        or any(p in fs for p in _above(locator))
                    )
                )
            ):
                found.add(effect_id)
    return found


def reread_outcomes(
    conn: Connection, run_id: str, effect_ids: Collection[str]
) -> list[EffectOutcome]:
    """The outcomes of ``effect_ids`` in a run validated in this snapshot, in seq order."""
    found = []
    ids = sorted(effect_ids)
    for at in range(0, len(ids), _PAGE):
        statement = select(outcomes).where(
            outcomes.c.run_id == run_id, outcomes.c.effect_id.in_(ids[at : at + _PAGE])
        )
        found += [_outcome(row) for row in conn.execute(statement).mappings()]
    return sorted(found, key=lambda o: o.seq)


def observed_targets(conn: Connection, run_id: str) -> set[tuple[str, str]]:
    """The (kind, locator) of every resource a run's observations name."""
    statement = select(observations.c.resource_kind, observations.c.resource_locator).where(
        observations.c.run_id == run_id
    )
    return {(kind, locator) for kind, locator in conn.execute(statement.distinct())}


def reread_resolutions(conn: Connection, run_id: str) -> Iterator[Resolution]:
    """The resolutions of a run validated in this snapshot, in seq order, as they come."""
    with _streamed(conn, resolutions, run_id) as found:
        for row in found:
            yield _resolution(row)


_TIMES = (
    " UNION ALL ".join(
        f"SELECT seq, {time} FROM {t.name} WHERE run_id = :run_id"
        for t, time in (
            (claims, "recorded_at"),
            (outcomes, "recorded_at"),
            (observations, "recorded_at"),
            (resolutions, "recorded_at"),
            (approval_requests, "requested_at"),
            (approval_decisions, "decided_at"),
        )
    )
    + " ORDER BY seq"
)


def reread_times(conn: Connection, run_id: str) -> Iterator[tuple[int, str | None]]:
    """The seq and time of every record of a run, in seq order, as they come."""
    with conn.execute(text(_TIMES).execution_options(yield_per=_PAGE), {"run_id": run_id}) as found:
        for seq, recorded_at in found:
            yield int(seq), recorded_at
