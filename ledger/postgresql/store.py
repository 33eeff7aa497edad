"""One PostgreSQL store, shared by the process: its engine, its transactions, its holder.

A batch is written in a transaction that first takes the run's transaction-level
advisory lock: appends to one run are serialised by the server, whichever host they
come from, so the checks of its preconditions (the run's row, the expected last seq)
and the guards' checks of seq and chain see every earlier append of the run, and two
writers of one run cannot both extend its chain. Appends to different runs do not wait
for each other on the server; the threads of this process that append at the same
moment share a transaction (ledger.postgresql.commit). A COMMIT returns once the WAL
is flushed (``synchronous_commit`` is checked on every connection, see
ledger.postgresql.engine).

Everything that can fail because of the store passes through
:mod:`ledger.postgresql.errors`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, insert

from ledger import _lifetime
from ledger._sql import rows
from ledger._sql.reads import read_clock
from ledger.effects import History
from ledger.errors import EffectPersistenceError
from ledger.postgresql import engine as _engine
from ledger.postgresql import liveness
from ledger.postgresql.commit import GroupCommit, Job, Step, sql
from ledger.postgresql.errors import storage_errors, translate
from ledger.storage import Batch, Lease, Mode, Record, Written


def _named(row: dict[str, Any]) -> dict[str, Any]:
    return row  # psycopg binds the row's columns by name


_INSERTS = {
    kind: (sql(insert(table)), _named)
    for kind, table in rows._TABLES.items()  # noqa: SLF001 - the record kinds' tables
}


def prepare(run_id: str, records: Sequence[Record], head: str) -> tuple[list[Step], str]:
    """The inserts of ``records`` in seq order, each chained to the one before, and the head."""
    return rows.chained(run_id, records, head, _INSERTS)


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
        self.group = GroupCommit(self.engine)

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
            _engine.upgrade(self.engine(), self.directory)
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
        """Make ``batch`` durable in one transaction, grouped with other threads' batches."""
        # Rows and hashes are built here, in the caller's thread, not by the leader of
        # the shared transaction (see ledger.postgresql.commit).
        steps, head = prepare(batch.run_id, batch.records, batch.head)
        try:
            self.open_for_writing()
        except Exception as e:
            return Written(head, translate(batch.action, e))
        except BaseException as e:  # a signal handler raised: nothing was written
            error = EffectPersistenceError(f"{batch.action}: the transaction was interrupted")
            return Written(head, error, e)
        job = self.group.submit(Job(batch, steps))
        return Written(head, job.error, job.interrupt)

    def now(self, action: str) -> str:
        """The server's clock, as the guards read it (``clock_timestamp()``), at microseconds."""
        with self.read(action) as conn:
            return read_clock(conn)

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

    def after_fork(self) -> None:
        """In a forked child: a fresh engine and holder, as neither may cross fork().

        The parent's are kept from the garbage collector, whose close would end the
        parent's sessions (and drop its locks) through the shared sockets.
        """
        self._init_lock = threading.Lock()  # may have been held at fork
        if self._engine is not None:
            self._engine.dispose(close=False)  # the parent's connections
            self._engine = None
        _abandoned.append(self.holder)
        self.holder = liveness.Holder(self.engine, self.directory)
        self.group = GroupCommit(self.engine)  # its lock may have been held at fork
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
    global _registry_lock  # noqa: PLW0603 - the lock itself may have been held at fork
    _registry_lock = threading.Lock()
    for store in _registry.values():
        store.after_fork()


_lifetime.at_fork(_after_fork_in_child)
