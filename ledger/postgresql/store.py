"""One PostgreSQL store, shared by the process: its engine, its transactions, its holder.

A batch is written in one transaction that first takes the run's transaction-level
advisory lock: appends to one run are serialised by the server, whichever host they
come from, so the checks of its preconditions (the run's row, the expected last seq)
and the guards' checks of seq and chain see every earlier append of the run, and two
writers of one run cannot both extend its chain. Appends to different runs do not wait
for each other. A COMMIT returns once the WAL is flushed (``synchronous_commit`` is
checked on every connection, see ledger.postgresql.engine).

Everything that can fail because of the store passes through
:mod:`ledger.postgresql.errors`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect

from ledger import _chain
from ledger.effects import History
from ledger.errors import (
    EffectPersistenceError,
    RunExistsError,
    RunHeldError,
    StoreUnavailableError,
)
from ledger.postgresql import engine as _engine
from ledger.postgresql import liveness
from ledger.postgresql.errors import storage_errors, translate
from ledger.sqlite import rows
from ledger.sqlite.commit import landed
from ledger.sqlite.schema import impact_scope, obligations, run_writers, runs
from ledger.storage import Batch, Lease, Mode, Record, Written


def _append_key(run_id: str) -> tuple[int, int]:
    # Apart from the liveness keys (ledger.postgresql.liveness): a hash of the whole id.
    digest = hashlib.sha256(b"ledger: append " + run_id.encode()).digest()
    return (
        int.from_bytes(digest[:4], "big", signed=True),
        int.from_bytes(digest[4:8], "big", signed=True),
    )


# One statement and the rows to run it with, in order.
Step = tuple[str, list[dict[str, Any]]]

_DIALECT = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]


def _sql(statement: Any) -> str:
    # Compiled once, at import: no compilation per write.
    return str(statement.compile(dialect=_DIALECT))


_INSERT = {kind: _sql(insert(table)) for kind, table in rows._TABLES.items()}  # noqa: SLF001 - the record kinds' tables
_INSERT_SCOPE = _sql(insert(impact_scope))
_INSERT_DUTY = _sql(insert(obligations))
_INSERT_RUN = _sql(insert(runs))
_upsert = pg_insert(run_writers)
_UPSERT_WRITER = _sql(
    _upsert.on_conflict_do_update(
        index_elements=["run_id"], set_={c: _upsert.excluded[c] for c in rows.WRITER_COLUMNS}
    )
)
_MAX_SEQ = "SELECT greatest({})".format(
    ", ".join(
        f"(SELECT coalesce(max(seq), 0) FROM {t} WHERE run_id = %(run_id)s)"
        for t in ("claims", "outcomes", "observations", "resolutions")
    )
)


def prepare(run_id: str, records: Sequence[Record], head: str) -> tuple[list[Step], str]:
    """The inserts of ``records`` in seq order, each chained to the one before, and the head.

    Consecutive records of one kind share a statement: claims, then their scope rows,
    then their obligations, as the guards require.
    """
    steps: list[Step] = []
    kind = ""
    group: list[Step] = []
    for record in records:
        if record.record_type != kind:
            steps.extend(step for step in group if step[1])
            kind = record.record_type
            group = [(_INSERT[kind], []), (_INSERT_SCOPE, []), (_INSERT_DUTY, [])]
        row, scope, duties = rows.rows_of(run_id, record)
        digest = _chain.link(head, _chain.encode(kind, run_id, row, scope, duties))
        row["prev_hash"] = head
        row["hash"] = digest
        group[0][1].append(row)
        group[1][1].extend(scope)
        group[2][1].extend(duties)
        head = digest
    steps.extend(step for step in group if step[1])
    return steps, head


def _execute(cursor: Any, sql: str, values: list[dict[str, Any]]) -> None:
    if len(values) == 1:
        cursor.execute(sql, values[0])
    else:
        cursor.executemany(sql, values)
    landed(cursor.rowcount, len(values), sql)


def _pipelined(raw: Any, lock: tuple[str, tuple[int, int]], steps: list[Step]) -> None:
    """The lock and the inserts sent together: one round trip to the server, not one each.

    Only for a batch with no precondition to read back first (most of them). The
    server runs the statements in order and stops at the first error; each statement's
    row count is checked once the pipeline has synced.
    """
    done: list[tuple[Any, int, str]] = []
    with raw.pipeline():
        locking = raw.cursor()
        locking.execute(*lock)
        for sql, values in steps:
            cursor = raw.cursor()
            if len(values) == 1:
                cursor.execute(sql, values[0])
            else:
                cursor.executemany(sql, values)
            done.append((cursor, len(values), sql))
    for cursor, expected, sql in done:
        landed(cursor.rowcount, expected, sql)


def _preconditions(cursor: Any, batch: Batch) -> None:
    if batch.start:
        cursor.execute("SELECT 1 FROM runs WHERE run_id = %(run_id)s", {"run_id": batch.run_id})
        if cursor.fetchone() is None:
            _execute(cursor, _INSERT_RUN, [{"run_id": batch.run_id, "created_at": batch.now}])
        elif not batch.continuing:
            raise RunExistsError(
                f"run {batch.run_id} already exists in the store; use EffectLog.load to continue it"
            )
    if batch.writer is not None:
        _execute(cursor, _UPSERT_WRITER, [rows.writer_row(batch.run_id, batch.writer, batch.now)])
    if batch.ends_at is not None:
        cursor.execute(_MAX_SEQ, {"run_id": batch.run_id})
        durable = int(cursor.fetchone()[0])
        if durable != batch.ends_at:
            raise RunHeldError(
                f"run {batch.run_id} holds records up to seq {durable} where this log "
                f"knows {batch.ends_at}: another writer touched it; load it again"
            )


class Store:
    """One PostgreSQL database, shared by every log of this process that writes to it."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.directory = _engine.display(location)  # the store's name in messages
        self._engine: Engine | None = None
        self._ready = False
        self._init_lock = threading.Lock()
        self.users = 0
        self.holder = liveness.Holder(self.engine, self.directory)

    def engine(self) -> Engine:
        """The store's engine, created on first use."""
        with self._init_lock:
            if self._engine is None:
                self._engine = _engine.engine(self.location)
            return self._engine

    # -- opening

    def open_for_writing(self) -> None:
        """Bring the schema to head (once, under the migration lock)."""
        if self._ready:
            return
        with storage_errors(f"cannot open the store {self.directory}"):
            _engine.upgrade(self.engine())
        self._ready = True

    def open_existing(self) -> bool:
        """Open a store that exists (a database holding the ledger's schema); False if none."""
        with (
            storage_errors(f"cannot open the store {self.directory}"),
            self.engine().connect() as conn,
        ):
            found = _engine.has_schema(conn)
            conn.rollback()
        if not found:
            return False
        self.open_for_writing()
        return True

    @contextlib.contextmanager
    def read(self, action: str) -> Iterator[Connection]:
        """A read-only snapshot of the store: one REPEATABLE READ, READ ONLY transaction."""
        with storage_errors(action), self.engine().connect() as plain:
            conn = plain.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
            with conn.begin():
                yield conn

    # -- the storage contract (ledger.storage)

    def load_run(self, run_id: str, action: str) -> tuple[History, str]:
        """The run's validated history and its head hash, from one snapshot."""
        with self.read(action) as conn:
            return rows.load_run(conn, run_id)

    def append(self, batch: Batch) -> Written:
        """Make ``batch`` durable in one transaction, the run's appends serialised."""
        steps, head = prepare(batch.run_id, batch.records, batch.head)
        try:
            self.open_for_writing()
            with self.engine().connect() as conn, conn.begin():
                raw = conn.connection.driver_connection
                if raw is None:  # pragma: no cover - a checked-out connection has one
                    raise StoreUnavailableError("the database connection is closed")  # noqa: TRY301 - translated below
                lock = ("SELECT pg_advisory_xact_lock(%s, %s)", _append_key(batch.run_id))
                if batch.start or batch.writer is not None or batch.ends_at is not None:
                    with raw.cursor() as cursor:
                        # Held to COMMIT: the run's next append, from any host, waits for it.
                        cursor.execute(*lock)
                        _preconditions(cursor, batch)
                        for sql, values in steps:
                            _execute(cursor, sql, values)
                else:
                    _pipelined(raw, lock, steps)
        except Exception as e:
            return Written(head, translate(batch.action, e))
        except BaseException as e:  # a signal handler raised: the transaction did not commit
            error = EffectPersistenceError(f"{batch.action}: the transaction was interrupted")
            return Written(head, error, e)
        return Written(head)

    def hold(self, run_id: str, mode: Mode) -> Lease | None:
        """Hold the run by a session advisory lock (ledger.postgresql.liveness)."""
        return self.holder.hold(liveness.run_key(run_id), mode)

    def dispose(self) -> None:
        """End the holder's session and close every pooled connection."""
        self.holder.close()
        with self._init_lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None
        self._ready = False


_registry_lock = threading.Lock()
_registry: dict[str, Store] = {}


def acquire(location: str) -> Store:
    """The process's :class:`Store` for ``location``, shared by every log on it."""
    _engine.parse(location)  # a URL that names no PostgreSQL store fails here
    with _registry_lock:
        store = _registry.get(location)
        if store is None:
            store = _registry[location] = Store(location)
        store.users += 1
        return store


def release(store: Store) -> None:
    """Drop one user of ``store``; the last one ends its session and closes its connections."""
    with _registry_lock:
        store.users -= 1
        if store.users <= 0:
            if _registry.get(store.location) is store:
                del _registry[store.location]
            store.dispose()


_abandoned: list[liveness.Holder] = []


def _after_fork_in_child() -> None:
    # Connections must not cross fork(): the child starts with fresh engines and holders.
    # The parent's are kept from the garbage collector, whose close would end the
    # parent's sessions (and drop its locks) through the shared sockets.
    global _registry_lock  # noqa: PLW0603 - the lock itself may have been held at fork
    _registry_lock = threading.Lock()
    for store in _registry.values():
        store._init_lock = threading.Lock()  # noqa: SLF001 - rebuilt after fork
        if store._engine is not None:  # noqa: SLF001
            store._engine.dispose(close=False)  # noqa: SLF001 - the parent's connections
            store._engine = None  # noqa: SLF001
        _abandoned.append(store.holder)
        store.holder = liveness.Holder(store.engine, store.directory)
        store._ready = False  # noqa: SLF001


os.register_at_fork(after_in_child=_after_fork_in_child)
