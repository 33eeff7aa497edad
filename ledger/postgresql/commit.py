"""Group commit on PostgreSQL: the writers of one process share transactions.

A durable append costs a round trip to the server and a ``COMMIT`` that waits for the
WAL flush, whatever the transaction holds. When several threads of the process write at
the same moment, the first becomes the *leader* (ledger._combiner): it takes every job
waiting, takes each job's run lock (the transaction-level advisory lock that serialises
a run's appends across hosts) in ascending key order, so that leaders of two processes
never wait for each other in a cycle, sends every job's statements in one pipeline (one
round trip) and commits once. While it commits, new jobs queue up for the next leader.

A job the store refuses (its run exists, another writer advanced its chain, a guard
refused a row) aborts the shared transaction. The leader then runs the batch again one
job at a time, each in a savepoint, so that the refused job fails alone, with its own
error, and every other job commits. A failure of the transaction itself (the server
gone, a failed ``COMMIT``) is reported to every caller in it. A job alone in its batch
(a single writer, or no one else writing at that moment) is written as it would be
without grouping: one transaction, no savepoint, nothing extra.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect

from ledger._combiner import GroupCommitQueue
from ledger._combiner import Job as _Job
from ledger._sql import rows
from ledger._sql.guards import IMPORTING_SETTING
from ledger._sql.rows import landed
from ledger._sql.tables import RECORD_TABLES, run_writers, runs
from ledger.errors import (
    EffectPersistenceError,
    RunExistsError,
    RunHeldError,
    StoreUnavailableError,
)
from ledger.postgresql.errors import translate
from ledger.storage import Batch

# One statement and the rows to run it with, in order.
Step = tuple[str, list[dict[str, Any]]]

# Enough to share a COMMIT many times over; small enough that one large job cannot keep
# a crowd of small ones waiting behind it for long.
MAX_BATCH = 64

_LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"
# Around the inserts of a run ``ledger import`` replays, in their transaction: the guards
# then leave the store's clock out of judging its approvals (ledger._sql.guards.live).
_IMPORTING = f"SELECT set_config('{IMPORTING_SETTING}', 'on', true)"
_IMPORTED = f"SELECT set_config('{IMPORTING_SETTING}', 'off', true)"

_DIALECT = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]


def sql(statement: Any) -> str:
    """``statement`` compiled for psycopg, once (at import): no compilation per write."""
    return str(statement.compile(dialect=_DIALECT))


_INSERT_RUN = sql(insert(runs))
# The run's row unless it exists: its row count tells which, without a read first, so
# that a batch's preconditions can travel in the pipeline with its inserts.
_CREATE_RUN = (
    "INSERT INTO runs (run_id, created_at) SELECT %(run_id)s, %(created_at)s"
    " WHERE NOT EXISTS (SELECT 1 FROM runs WHERE run_id = %(run_id)s)"
)
_upsert = pg_insert(run_writers)
_UPSERT_WRITER = sql(
    _upsert.on_conflict_do_update(
        index_elements=["run_id"], set_={c: _upsert.excluded[c] for c in rows.WRITER_COLUMNS}
    )
)
_MAX_SEQ = "SELECT greatest({})".format(
    ", ".join(
        f"(SELECT coalesce(max(seq), 0) FROM {t} WHERE run_id = %(run_id)s)" for t in RECORD_TABLES
    )
)


def append_key(run_id: str) -> tuple[int, int]:
    """The key of the run's append lock (apart from ledger.postgresql.liveness's keys)."""
    digest = hashlib.sha256(b"ledger: append " + run_id.encode()).digest()
    return (
        int.from_bytes(digest[:4], "big", signed=True),
        int.from_bytes(digest[4:8], "big", signed=True),
    )


def _has_preconditions(batch: Batch) -> bool:
    return batch.start or batch.writer is not None or batch.ends_at is not None


def _run_exists(batch: Batch) -> RunExistsError:
    return RunExistsError(
        f"run {batch.run_id} already exists in the store; use EffectLog.load to continue it"
    )


def _run_held(batch: Batch, durable: int) -> RunHeldError:
    return RunHeldError(
        f"run {batch.run_id} holds records up to seq {durable} where this log "
        f"knows {batch.ends_at}: another writer touched it; load it again"
    )


class Job(_Job):
    """One caller's batch, its rows built and hashed by the caller's thread; how it ended."""

    __slots__ = ("batch", "steps")

    def __init__(self, batch: Batch, steps: Sequence[Step]) -> None:
        super().__init__()
        self.batch = batch
        self.steps = steps

    def settle(self, error: BaseException | None) -> None:
        """The job's fate: durable (``None``), or the error its caller is told."""
        self.error = None if error is None else translate(self.batch.action, error)
        self.done = True


class GroupCommit(GroupCommitQueue[Job]):
    """The queue of one store's writers in this process, and the leader that commits them."""

    def __init__(self, engine: Callable[[], Engine]) -> None:
        """``engine`` gives the store's engine (created on first use)."""
        self._engine = engine
        super().__init__(MAX_BATCH)

    def _interrupted(self, jobs: list[Job], _error: BaseException | None) -> None:
        # Nothing of the transaction committed, or its COMMIT was cut short and its fate
        # is unknown: either way the callers cannot be told their records are durable.
        for job in jobs:
            job.settle(EffectPersistenceError("the transaction was interrupted"))

    def _commit(self, batch: list[Job]) -> None:
        """Settle every job of ``batch``; a signal handler's exception is raised as it is."""
        if len(batch) == 1:  # nobody to protect from it: written as if alone
            job = batch[0]
            try:
                with self._engine().connect() as conn, conn.begin():
                    _alone(_driver(conn), job)
            except Exception as e:
                job.settle(_unmasked(e))
            else:
                job.settle(None)
            return
        try:
            committing = False
            with self._engine().connect() as conn, conn.begin():
                _together(_driver(conn), batch)
                committing = True
        except Exception as e:
            _unmasked(e)
            if committing:  # the COMMIT itself failed: it hit every job
                for job in batch:
                    job.settle(e)
                return
        else:
            for job in batch:
                job.settle(None)
            return
        # One job's rows were refused (or the server failed): the jobs one by one, each
        # in a savepoint, so that each is told its own fate.
        self._one_by_one(batch)

    def _one_by_one(self, batch: list[Job]) -> None:
        written: list[Job] = []
        try:
            with self._engine().connect() as conn, conn.begin():
                raw = _driver(conn)
                with raw.cursor() as cursor:
                    # Every run's lock first, in key order (see the module's docstring).
                    cursor.executemany(_LOCK, _keys(batch))
                    for job in batch:
                        cursor.execute("SAVEPOINT job")
                        try:
                            _preconditions(cursor, job.batch)
                            _write(cursor, job)
                        except Exception as e:
                            # Raises in turn if the connection itself failed: then the
                            # whole transaction is lost, for every job.
                            cursor.execute("ROLLBACK TO SAVEPOINT job")
                            job.settle(e)
                        else:
                            cursor.execute("RELEASE SAVEPOINT job")
                            written.append(job)
        except Exception as e:
            _unmasked(e)
            for job in batch:
                if not job.done:
                    job.settle(e)
            return
        for job in written:
            job.settle(None)


def _unmasked(error: Exception) -> Exception:
    """``error``, unless it hides a signal handler's exception: then that is raised.

    A rollback that fails on the way out of an interrupted transaction (the driver
    closed the connection when its cancel was interrupted in turn) is raised by
    SQLAlchemy in place of the interrupt, which it keeps as the context.
    """
    hidden = error.__context__
    while hidden is not None:
        if not isinstance(hidden, Exception):
            raise hidden
        hidden = hidden.__context__
    return error


def _driver(conn: Connection) -> Any:
    raw = conn.connection.driver_connection
    if raw is None:  # pragma: no cover - a checked-out connection has one
        raise StoreUnavailableError("the database connection is closed")
    return raw


def _keys(batch: list[Job]) -> list[tuple[int, int]]:
    return sorted({append_key(job.batch.run_id) for job in batch})


def _execute(cursor: Any, statement: str, values: list[dict[str, Any]]) -> None:
    if len(values) == 1:
        cursor.execute(statement, values[0])
    else:
        cursor.executemany(statement, values)
    landed(cursor.rowcount, len(values), statement)


def _write(cursor: Any, job: Job) -> None:
    """``job``'s statements; an imported job's between turning the setting on and off.

    A statement that fails aborts the transaction (or the job's savepoint), and the
    rollback that follows undoes the setting with it: it never outlives the job.
    """
    if job.batch.imported:
        cursor.execute(_IMPORTING)
    for statement, values in job.steps:
        _execute(cursor, statement, values)
    if job.batch.imported:
        cursor.execute(_IMPORTED)


def _preconditions(cursor: Any, batch: Batch) -> None:
    """Check ``batch``'s preconditions and write its run's rows, one statement at a time."""
    if batch.start:
        cursor.execute("SELECT 1 FROM runs WHERE run_id = %(run_id)s", {"run_id": batch.run_id})
        if cursor.fetchone() is None:
            _execute(cursor, _INSERT_RUN, [{"run_id": batch.run_id, "created_at": batch.now}])
        elif not batch.continuing:
            raise _run_exists(batch)
    if batch.writer is not None:
        _execute(cursor, _UPSERT_WRITER, [rows.writer_row(batch.run_id, batch.writer, batch.now)])
    if batch.ends_at is not None:
        cursor.execute(_MAX_SEQ, {"run_id": batch.run_id})
        durable = int(cursor.fetchone()[0])
        if durable != batch.ends_at:
            raise _run_held(batch, durable)


def _alone(raw: Any, job: Job) -> None:
    """One job in the caller's transaction, its run locked first (held to COMMIT)."""
    lock = (_LOCK, append_key(job.batch.run_id))
    if _has_preconditions(job.batch) or job.batch.imported:
        with raw.cursor() as cursor:
            cursor.execute(*lock)
            _preconditions(cursor, job.batch)
            _write(cursor, job)
        return
    # The lock and the inserts sent together: one round trip to the server, not one
    # each. The server runs them in order and stops at the first error; each
    # statement's row count is checked once the pipeline has synced.
    sent: list[tuple[Any, int, str]] = []
    with raw.pipeline():
        raw.cursor().execute(*lock)
        for statement, values in job.steps:
            cursor = raw.cursor()
            if len(values) == 1:
                cursor.execute(statement, values[0])
            else:
                cursor.executemany(statement, values)
            sent.append((cursor, len(values), statement))
    for cursor, expected, statement in sent:
        landed(cursor.rowcount, expected, statement)


def _together(raw: Any, batch: list[Job]) -> None:
    """Every job of ``batch`` in the caller's transaction, sent as one pipeline.

    The runs' locks, in key order; each job's preconditions as statements whose results
    are read once the pipeline has synced; then the n-th steps of all jobs, one
    statement per SQL. Each job keeps its own order (its run's row before its records,
    its claims before their scope rows); jobs write different runs, which no guard
    relates, so their rows may share a statement. Raises if any job would fail, leaving
    the transaction to be rolled back.
    """
    checks: list[Callable[[], None]] = []
    with raw.pipeline():
        raw.cursor().executemany(_LOCK, _keys(batch))
        for job in batch:
            checks.extend(_send_preconditions(raw, job.batch))
        # An imported job's rows share a statement with no other job's: the guards judge
        # them by the setting, which is the transaction's.
        for job in batch:
            if job.batch.imported:
                raw.cursor().execute(_IMPORTING)
                for statement, values in job.steps:
                    cursor = raw.cursor()
                    cursor.executemany(statement, values)
                    checks.append(_landed_later(cursor, len(values), statement))
                raw.cursor().execute(_IMPORTED)
        shared = [job for job in batch if not job.batch.imported]
        for n in range(max((len(job.steps) for job in shared), default=0)):
            merged: dict[str, list[dict[str, Any]]] = {}
            for job in shared:
                if n < len(job.steps):
                    statement, values = job.steps[n]
                    merged.setdefault(statement, []).extend(values)
            for statement, values in merged.items():
                cursor = raw.cursor()
                cursor.executemany(statement, values)
                checks.append(_landed_later(cursor, len(values), statement))
    for check in checks:
        check()


def _landed_later(cursor: Any, expected: int, statement: str) -> Callable[[], None]:
    return lambda: landed(cursor.rowcount, expected, statement)


def _send_preconditions(raw: Any, batch: Batch) -> list[Callable[[], None]]:
    """:func:`_preconditions` as statements sent now, with the checks of their results."""
    checks: list[Callable[[], None]] = []
    if batch.start:
        creating = raw.cursor()
        creating.execute(_CREATE_RUN, {"run_id": batch.run_id, "created_at": batch.now})

        def created() -> None:
            if creating.rowcount == 0 and not batch.continuing:
                raise _run_exists(batch)

        checks.append(created)
    if batch.writer is not None:
        writing = raw.cursor()
        writing.execute(_UPSERT_WRITER, rows.writer_row(batch.run_id, batch.writer, batch.now))
        checks.append(_landed_later(writing, 1, _UPSERT_WRITER))
    if batch.ends_at is not None:
        reading = raw.cursor()
        reading.execute(_MAX_SEQ, {"run_id": batch.run_id})

        def unchanged() -> None:
            durable = int(reading.fetchone()[0])
            if durable != batch.ends_at:
                raise _run_held(batch, durable)

        checks.append(unchanged)
    return checks
