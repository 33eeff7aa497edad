"""Group commit: the writers of one process share one connection, one transaction, one fsync.

A durable write costs one ``fdatasync`` of the WAL, whatever it holds. When several
threads write at the same moment, the first becomes the *leader*: it takes every
job waiting in the queue, runs them in one ``BEGIN IMMEDIATE`` transaction on the
connection the store holds, commits once, and wakes their threads. Each job runs in
its own savepoint, so a job that fails (its run already exists, say) is rolled back
alone and reported to its own caller; a failure of the transaction itself (the disk
is full at ``COMMIT``) is reported to every caller in it, because it hit all their
records. No caller returns before the transaction that holds its job is committed.
The queue is the one every batched write uses (ledger._combiner): while a leader
commits, new jobs queue up for the next leader, so under load every fsync acknowledges
many writes, and without load a write pays no wait at all.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from sqlite3 import Connection, Cursor
from typing import Any

from ledger._combiner import GroupCommitQueue
from ledger._combiner import Job as _Job
from ledger._sql.rows import landed
from ledger.errors import EffectPersistenceError
from ledger.sqlite.engine import BUSY_TIMEOUT_MS, Source
from ledger.sqlite.turn import Turn

# One statement and the rows to run it with, in order.
Step = tuple[str, list[tuple[Any, ...]]]

# Enough to amortize the fsync many times over, small enough that one slow job (a
# large claim_many) cannot hold a whole crowd of small ones behind it for long.
MAX_BATCH = 64


class Job(_Job):
    """One caller's writes, prepared: checks to run first, then statements; how it ended.

    The rows are built (and hashed) by the caller's thread before the job is queued, so
    the leader's transaction only hands SQLite what is ready: under load, other threads
    hold Python's GIL, and every statement the leader runs is a wait to get it back.
    """

    __slots__ = ("action", "before", "imported", "steps")

    def __init__(
        self,
        action: str,
        steps: Sequence[Step],
        before: Callable[[Cursor], None] | None = None,
        *,
        imported: bool = False,
    ) -> None:
        super().__init__()
        self.action = action
        self.steps = steps
        self.before = before
        self.imported = imported  # a run ``ledger import`` replays (storage.Batch.imported)


class GroupCommit(GroupCommitQueue[Job]):
    """The queue of one store's writers in this process, and the leader that commits them."""

    def __init__(
        self,
        connection: Callable[[], Connection],
        lock: Any,
        translate: Callable[[str, BaseException], BaseException],
        check: Callable[[Cursor], None],
        turn: Turn | None = None,
        *,
        source: Callable[[], Source | None] = lambda: None,
    ) -> None:
        """``connection`` gives the held connection.

        ``lock`` is the store's in-process write lock (shared with migrations and
        forensic writes); ``translate`` turns a storage error into the caller's error;
        ``check`` runs first in every transaction (the schema's check), and its error
        fails every job of the transaction; ``turn`` is the process's place among the
        store's writing processes, taken before ``BEGIN IMMEDIATE`` (none: go without);
        ``source`` gives the held connection's ``sqlite_source_id()`` (none: an imported
        job is written as any other, its approvals judged by the store's clock).
        """
        self._connection = connection
        self._source = source
        self._lock = lock
        self._translate = translate
        self._check = check
        self._turn = turn
        super().__init__(MAX_BATCH)

    def _interrupted(self, jobs: list[Job], _error: BaseException | None) -> None:
        self._fail(jobs, EffectPersistenceError("the transaction was interrupted"))

    def _fail(self, jobs: list[Job], error: BaseException) -> None:
        for job in jobs:
            if not job.done:
                job.error = self._translate(job.action, error)
                job.done = True

    def _commit(self, batch: list[Job]) -> None:
        with self._lock:
            try:
                self._transaction(batch)
            finally:
                if self._turn is not None:
                    self._turn.give_back()

    def _transaction(self, batch: list[Job]) -> None:
        connection: Connection | None = None
        try:
            connection = self._connection()
            cursor = connection.cursor()
            if self._turn is not None:
                self._turn.take()
            begin_immediate(cursor)
            self._check(cursor)
        except BaseException as e:
            # Nothing of it may stay open on the shared connection: not after an error
            # (the store refused), nor after a signal handler raised (Ctrl-C) while
            # BEGIN waited for SQLite's write lock, which it may hold by now.
            if connection is not None and connection.in_transaction:
                connection.rollback()
            if not isinstance(e, Exception):
                raise  # the queue settles the jobs as interrupted; the leader gets it
            self._fail(batch, e)
            return
        committed: list[Job] = []
        committing = False
        try:
            committed = self._run(connection, cursor, batch)
            committing = True
            cursor.execute("COMMIT")
        except BaseException as e:
            interrupted = not isinstance(e, Exception)
            if interrupted and committing and not connection.in_transaction:
                # A signal handler raised just after COMMIT: the jobs are durable.
                for job in committed:
                    job.done = True
                raise
            # Whatever stopped the transaction (an error, or a signal handler raising
            # mid-way), nothing of it may stay open on the shared connection.
            if connection.in_transaction:
                connection.rollback()
            if interrupted:  # _lead tells the callers; the leader gets the signal
                raise
            self._fail(batch, e)
            return
        for job in committed:  # COMMIT returned: these are durable, whatever comes next
            job.done = True

    def _run(self, connection: Connection, cursor: Cursor, batch: list[Job]) -> list[Job]:
        """Run the jobs; return those that succeeded (the failed ones are done already)."""
        source = self._source()
        if len(batch) == 1:  # nobody to protect from it: no savepoint needed
            _apply(cursor, batch[0], source)
            return batch
        try:
            _apply_together(cursor, batch, source)
        except Exception:  # the jobs are taken one by one below
            # One job's rows were refused (its run exists, say), or the store failed: take
            # the jobs one by one, each in a savepoint, so each is told its own fate.
            if connection.in_transaction:
                connection.rollback()
            begin_immediate(cursor)
            self._check(cursor)  # what it restored went with the rollback
        else:
            return batch
        committed = []
        for job in batch:
            cursor.execute("SAVEPOINT job")
            try:
                _apply(cursor, job, source)
            except Exception as e:
                if not connection.in_transaction:
                    raise  # SQLite rolled the whole transaction back: it hit every job
                cursor.execute("ROLLBACK TO job")
                cursor.execute("RELEASE job")
                job.error = self._translate(job.action, e)
                job.done = True
            else:
                cursor.execute("RELEASE job")
                committed.append(job)
        return committed


def begin_immediate(cursor: Cursor, timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
    """``BEGIN IMMEDIATE``, waiting up to ``timeout_ms`` for other processes' writes to end.

    SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between tries, so a writer of
    another process may sleep on for tens of milliseconds after the lock was given back,
    and under contention that is the tail of every claim. A try that fails costs
    microseconds: here the pauses grow from 0.2 ms to 2 ms at most, with the same
    deadline. The cursor's connection has SQLite's handler off (``busy_timeout`` 0, see
    :func:`writing_connection`); the store's other connections keep it.
    """
    deadline: float | None = None
    pause = _FIRST_PAUSE
    while True:
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if e.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout_ms / 1000
            elif now >= deadline:
                raise
        else:
            return
        time.sleep(pause)
        pause = min(2 * pause, _LAST_PAUSE)


def writing_connection(connection: sqlite3.Connection) -> sqlite3.Connection:
    """``connection``, made the one that writes records: SQLite's busy handler off.

    It only ever runs write transactions opened by :func:`begin_immediate`, which waits
    for the lock itself; inside one, it holds the write lock and its snapshot, and in WAL
    mode neither its statements, nor COMMIT, nor the passive checkpoint after it wait on
    another connection. Turned off once here, not around every BEGIN: two statements
    fewer per commit.
    """
    connection.execute("PRAGMA busy_timeout = 0")
    return connection


_FIRST_PAUSE, _LAST_PAUSE = 0.0002, 0.002


def execute_step(cursor: Cursor, sql: str, rows: list[tuple[Any, ...]]) -> None:
    """Run one statement of a job with its rows (one row, or many), and check they landed."""
    if len(rows) == 1:
        cursor.execute(sql, rows[0])
    else:
        cursor.executemany(sql, rows)
    landed(cursor.rowcount, len(rows), sql)


def _apply(cursor: Cursor, job: Job, source: Source | None) -> None:
    if job.before is not None:
        job.before(cursor)
    _steps(cursor, job, source)


def _steps(cursor: Cursor, job: Job, source: Source | None) -> None:
    """``job``'s statements; an imported job's with the connection saying so to the guards.

    Said for these statements alone: from just before the first to just after the last,
    whether they succeed or not, so that nothing else the connection runs (another
    job's rows, a later transaction) is taken for an import.
    """
    if not job.imported or source is None:
        for sql, rows in job.steps:
            execute_step(cursor, sql, rows)
        return
    source.importing = True
    try:
        for sql, rows in job.steps:
            execute_step(cursor, sql, rows)
    finally:
        source.importing = False


def _apply_together(cursor: Cursor, batch: list[Job], source: Source | None) -> None:
    """Every job's steps, the n-th steps of all jobs in one statement per SQL.

    Each job keeps its own order (its claims before their scope rows, its records in
    seq order); jobs write different runs, which no guard relates, so their rows may
    share a statement. One statement for many rows is one round trip for the GIL. An
    imported job's rows share a statement with no other job's: the guards judge them
    by the statement's writer (see :func:`_steps`).
    """
    for job in batch:
        if job.before is not None:
            job.before(cursor)
    for job in batch:
        if job.imported:
            _steps(cursor, job, source)
    shared = [job for job in batch if not job.imported]
    for n in range(max((len(job.steps) for job in shared), default=0)):
        merged: dict[str, list[tuple[Any, ...]]] = {}
        for job in shared:
            if n < len(job.steps):
                sql, rows = job.steps[n]
                merged.setdefault(sql, []).extend(rows)
        for sql, rows in merged.items():
            execute_step(cursor, sql, rows)
