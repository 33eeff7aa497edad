"""One store on disk, shared by the process: its files, its transactions, its lifetime.

Everything that can fail because of the store passes through
:func:`~ledger.sqlite.errors.storage_errors` (or ``translate``), where SQLAlchemy,
sqlite3, Alembic and OS errors become the leaves of :class:`EffectPersistenceError`.
Connections and migrations are :mod:`ledger.sqlite.engine`'s; the writers of one
process queue first-come, first-served before they ask SQLite for the lock.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import sqlite3
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError

from ledger import _lifetime, _paths
from ledger._sql.revisions import (
    alembic_config,
    check_known,
    create_at_head,
    head_revision,
    revision_mismatch,
    revisions,
)
from ledger.effects import History, utc_now
from ledger.errors import (
    EffectPersistenceError,
    StoreCorruptError,
    StoreUnavailableError,
)
from ledger.sqlite import liveness, rows
from ledger.sqlite import schema_check as _schema_check
from ledger.sqlite import trust as _trust
from ledger.sqlite import turn as _turn
from ledger.sqlite.commit import GroupCommit, Job, Step, writing_connection
from ledger.sqlite.engine import (
    BUSY_TIMEOUT_MS,
    FULL,
    OFF,
    READ_ONLY,
    SOURCE,
    Source,
    _foreign_keys_off,
    _on_begin,
    _on_connect,
)
from ledger.sqlite.errors import storage_errors, translate
from ledger.sqlite.schema import install_derived
from ledger.sqlite.statx import attributes
from ledger.sqlite.watch import Watch
from ledger.storage import Batch, Lease, Mode, Written

log = logging.getLogger("ledger")

T = TypeVar("T")

# --------------------------------------------------------------------------- files


def check_directory(directory: Path) -> None:
    """Refuse a store directory a writer must not use (see :mod:`ledger.sqlite.trust`)."""
    _trust.check_directory(directory, writer=True)


def check_file(path: Path, *, required: bool = True) -> None:
    """Refuse a database (or -wal/-shm) file a writer must not use (see ledger.sqlite.trust)."""
    _trust.check_file(path, owner=os.geteuid(), required=required)


_SHARED = stat.S_IWGRP | stat.S_IWOTH  # a write bit for group or others: see ledger.sqlite.trust


def check_files(directory: Path, db_path: Path) -> None:
    """Every trust check on the store's directory and files, for a writer."""
    _trust.check_store(directory, db_path, writer=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_files(directory: Path, db_path: Path) -> None:
    """Create the store directory (0700) and an empty database file (0600) if missing.

    The file is created by the library itself with ``O_EXCL | O_NOFOLLOW`` before
    SQLite opens it, never through ``umask`` (process-wide, racy); SQLite gives
    ``-wal`` and ``-shm`` the database file's mode.
    """
    if not os.path.lexists(directory):
        # Missing ancestors get 0700 too (os.makedirs would give them the umask's
        # default): nobody else may rename the path under the store. Top-down, and a
        # directory another process creates meanwhile is fine.
        missing = [directory]
        while not os.path.lexists(missing[-1].parent):
            missing.append(missing[-1].parent)
        for path in reversed(missing):
            with contextlib.suppress(FileExistsError):
                path.mkdir(mode=0o700)
            _fsync_dir(path.parent)
    check_directory(directory)
    if not os.path.lexists(db_path):
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(db_path, flags, 0o600)
        except FileExistsError:
            pass  # another process or thread won the race; it is checked below
        else:
            os.close(fd)
            _fsync_dir(directory)
    check_file(db_path)


# --------------------------------------------------------------------------- engine


# SQLite's words for a migration that meets what it was to create: a table, index,
# trigger or view, or a column, already there.
_ALREADY_THERE = ("already exists", "duplicate column name")


def _already_there(error: DBAPIError) -> bool:
    return any(words in str(error.orig).lower() for words in _ALREADY_THERE)


def _empty(conn: Connection) -> bool:
    """Whether the database holds nothing yet: a new store, to be created at head."""
    return conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar() == 0


def _tables(master: Sequence[Any]) -> dict[tuple[str, str], _schema_check.Definition]:
    # What migrations make: tables and their indexes. Triggers and views are re-installed
    # after every migration whatever the revision (ledger.sqlite.schema.install_derived).
    return {
        (kind, name): _schema_check.definition(kind, sql)
        for kind, name, sql in master
        if kind in ("table", "index") and sql and not name.startswith("sqlite_")
    }


def _revision_of_tables(master: Sequence[Any]) -> str | None:
    """The newest revision whose tables and indexes ``sqlite_master`` holds, if any.

    Each revision is built in turn in a scratch database, as the library migrates, and
    compared with these. Only a store refused for a mismatched revision asks.
    """
    from alembic import command  # noqa: PLC0415 - readers never import Alembic

    want = _tables(master)
    found = None
    with tempfile.TemporaryDirectory() as scratch:
        engine = create_engine(f"sqlite+pysqlite:///{scratch}/scratch.sqlite3")
        event.listen(engine, "connect", _on_connect)
        event.listen(engine, "begin", _on_begin)
        try:
            with engine.connect() as conn, _foreign_keys_off(conn):
                for revision in revisions():
                    with conn.begin():
                        command.upgrade(alembic_config(conn), revision)
                        built = conn.exec_driver_sql(_schema_check.MASTER_SQL).all()
                    if _tables(built) == want:
                        found = revision
        finally:
            engine.dispose()
    return found


class _FairLock:
    """A first-come, first-served lock: SQLite's busy handler is not fair, this queue is.

    The holder hands the lock directly to the oldest waiter. A waiter interrupted
    while it waits (a signal handler raising, Ctrl-C) leaves the queue, or passes the
    lock on if it was already handed over, so it never strands the writers behind it.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiters: collections.deque[threading.Lock] = collections.deque()
        self._held = False

    def __enter__(self) -> None:
        with self._mutex:
            if not self._held:
                self._held = True
                return
            gate = threading.Lock()
            gate.acquire()
            self._waiters.append(gate)
        try:
            gate.acquire()  # released by the holder that hands the lock over
        except BaseException:
            with self._mutex:
                if gate in self._waiters:
                    self._waiters.remove(gate)
                else:  # the lock was handed to us as we were interrupted: pass it on
                    self._hand_over()
            raise

    def __exit__(self, *exc: object) -> None:
        with self._mutex:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._waiters:
            self._waiters.popleft().release()  # still held, now by the next waiter
        else:
            self._held = False


class Store:
    """One database file, shared by every log of this process that writes to it.

    ``synchronous`` is FULL but for the stores :func:`unsynchronised` lets the bench open.
    """

    def __init__(self, directory: Path, *, synchronous: int = FULL) -> None:
        self.directory = directory
        self.synchronous = synchronous
        self.path = directory / _paths.DB_NAME
        self.write_lock = _FairLock()
        self.engine: Engine | None = None
        self._ready = False
        self._init_lock = threading.Lock()
        self.users = 0
        self._held: Any = None  # the connection every record is written on, from the pool
        self._driver: sqlite3.Connection  # its sqlite3 connection, while it is held
        self._source: Source | None = None  # what its sqlite_source_id() answers
        self._check_paths = tuple(str(p) for p in (directory, *_trust.store_files(self.path)))
        self._schema_version: int | None = None  # the schema_version last checked whole
        self._watch = Watch()  # whether the files may have changed since their last check
        self.turn = _turn.attach(directory)
        self._attached = True  # to self.turn, until dispose
        self.group = self._group()

    def _group(self) -> GroupCommit:
        return GroupCommit(
            self._connection,
            self.write_lock,
            translate,
            self._check_schema,
            self.turn,
            source=lambda: self._source,
        )

    # -- opening

    def _engine(self) -> Engine:
        if self.engine is None:
            engine = create_engine(
                f"sqlite+pysqlite:///{self.path}",
                connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
                pool_size=4,
                max_overflow=8,
                pool_timeout=BUSY_TIMEOUT_MS / 1000,
            )
            event.listen(
                engine, "connect", functools.partial(_on_connect, synchronous=self.synchronous)
            )
            event.listen(engine, "begin", _on_begin)
            self.engine = engine
        return self.engine

    def open_for_writing(self) -> None:
        """Create the files if needed, check them, and bring the schema to head."""
        if not self._ready:  # every write asks: answer without a lock once it is open
            self._open()

    def _open(self) -> None:
        with self._init_lock:
            if self._ready:
                return
            with storage_errors(f"cannot open the store {self.directory}"):
                create_files(self.directory, self.path)
                check_files(self.directory, self.path)
                self._upgrade()
                _paths.remember_store(self.directory)
            self._ready = True

    def open_existing(self) -> bool:
        """Open a store that exists, for reading and later writing; False if there is none."""
        with storage_errors(f"cannot open the store {self.directory}"):
            if not os.path.lexists(self.directory):
                return False
            check_directory(self.directory)
            if not os.path.lexists(self.path):
                return False
        self.open_for_writing()
        return True

    def _upgrade(self) -> None:
        """Apply pending migrations and check the schema whole, under the write lock.

        Racing openers wait rather than fail. Whatever is missing of the library's guards,
        views and indexes is put back; a schema that holds a trigger or view that is not
        the library's, or a changed guard or table, is refused (see ledger.sqlite.schema_check).
        A store at a revision this library does not know is refused before the lock is
        taken; one whose migration meets objects its revision lacks is refused, the
        migration rolled back whole.
        """
        head = head_revision()
        engine = self._engine()
        # Most opens find the schema current and whole: ask in a read, without the lock,
        # and without Alembic (a tenth of a worker's start-up), needed only to migrate.
        with engine.execution_options(**{READ_ONLY: True}).begin() as conn:
            current = _stamped(conn)
            check_known(current, self.directory)
            if current == head and not _schema_check.compare(
                conn.exec_driver_sql(_schema_check.MASTER_SQL).all()
            ):
                self._schema_version = _schema_version(conn)
                return
        from alembic import command  # noqa: PLC0415 - readers never import Alembic
        from alembic.runtime.migration import MigrationContext  # noqa: PLC0415

        failed: tuple[str | None, str] | None = None
        try:
            with (
                self.write_lock,
                engine.connect() as conn,
                _foreign_keys_off(conn),
                conn.begin(),
            ):
                current = MigrationContext.configure(conn).get_current_revision()
                check_known(current, self.directory)
                if current is None and _empty(conn):
                    log.info("creating store %s at %s", self.path, head)
                    create_at_head(conn, install_derived)
                elif current != head:
                    log.info("migrating store %s from %s to %s", self.path, current, head)
                    try:
                        command.upgrade(alembic_config(conn), "head")
                    except DBAPIError as e:
                        if _already_there(e):
                            failed = (current, str(e.orig))
                        raise
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if broken:
                        raise StoreCorruptError(
                            f"migrating {self.path} to {head} would break {len(broken)} "
                            f"foreign key(s), first in {broken[0][0]}; nothing was changed"
                        )
                raw = conn.connection.driver_connection
                if raw is None:  # pragma: no cover - a checked-out connection always has one
                    raise StoreUnavailableError("the database connection is closed")
                self._guard_schema(raw.cursor())
                self._schema_version = _schema_version(conn)
        except DBAPIError as e:
            if failed is None:
                raise
            # Rolled back by now: what the tables are is read from the store as it stays.
            with engine.execution_options(**{READ_ONLY: True}).begin() as conn:
                master = conn.exec_driver_sql(_schema_check.MASTER_SQL).all()
            raise revision_mismatch(
                self.directory,
                *failed,
                tables_are=_revision_of_tables(master),
                with_=f"sqlite3 {self.path}",
            ) from e

    def _guard_schema(self, cursor: sqlite3.Cursor) -> None:
        """Restore or refuse what is not the library's in the schema (write transaction held)."""
        restored = _schema_check.guard(cursor, str(self.path))
        if restored:
            # Someone dropped guards or replaced a view (from the sqlite3 shell): they are
            # back before anything is written; load still validates every row it reads.
            log.warning("store %s: %s; re-installed", self.path, "; ".join(map(str, restored)))

    def _check_schema(self, cursor: sqlite3.Cursor) -> None:
        """At the start of every write transaction: check the schema again if it changed.

        ``PRAGMA schema_version`` changes with every change of the schema by anyone, so a
        trigger planted while this process runs is met before its next write.
        """
        version = cursor.execute("PRAGMA schema_version").fetchone()[0]
        if version != self._schema_version:
            self._guard_schema(cursor)
            self._schema_version = cursor.execute("PRAGMA schema_version").fetchone()[0]

    # -- transactions

    def _connection(self) -> sqlite3.Connection:
        if self._held is not None:
            return self._driver  # asked at every write: the pool's wrapper is not asked again
        # Checked out of the pool for good: pragmas were set and read back on connect.
        held = self._engine().raw_connection()
        connection = held.driver_connection
        if connection is None:  # pragma: no cover - a checked-out connection has one
            held.close()
            raise StoreUnavailableError("the database connection is closed")
        try:
            driver = writing_connection(connection)
        except BaseException:
            held.close()  # back to the pool; the next write checks one out again
            raise
        self._held, self._driver, self._source = held, driver, held.info.get(SOURCE)
        return self._driver

    def _check(self) -> None:
        """:func:`check_files` before every transaction: whole only if anything happened.

        The kernel reports what could change the checks' answer (ledger.sqlite.watch):
        while it reports nothing, the files are as the last full check found them.
        """
        if self._watch.quiet():
            return
        with self._watch.checking(self._check_paths):
            self._check_whole()

    def _check_whole(self) -> None:
        """:func:`check_files`, in as few system calls as it takes."""
        uid = os.geteuid()
        directory, *files = self._check_paths
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & _SHARED:
            check_directory(self.directory)  # raises, saying what is wrong
        for i, path in enumerate(files):
            try:
                # Not lstat for the -wal: reading its times would make this commit's
                # fdatasync write its inode too (see ledger.sqlite.statx). The others are
                # not synced at every commit, and lstat costs less than a ctypes call.
                found = attributes(path) if path.endswith("-wal") else os.lstat(path)
            except FileNotFoundError:
                if i == 0:
                    check_file(self.path)  # raises: the database file is missing
                continue
            if (
                not stat.S_ISREG(found.st_mode)
                or found.st_nlink != 1
                or found.st_uid != uid
                or found.st_mode & _SHARED
            ):
                check_file(Path(path))  # raises, saying what is wrong

    def commit(
        self,
        action: str,
        steps: Sequence[Step],
        before: Callable[[sqlite3.Cursor], None] | None = None,
        *,
        imported: bool = False,
    ) -> Job:
        """Run ``before`` and ``steps`` in a write transaction, grouped with other threads'.

        Returns the job once the transaction holding it has committed or failed: its
        ``error`` (an :class:`EffectPersistenceError` for storage trouble) and
        ``interrupt`` (a signal handler's exception met meanwhile, for the caller to
        raise after it has recorded the job's fate). ``imported``: the steps write a run
        ``ledger import`` replays.
        """
        job = Job(action, steps, before, imported=imported)
        try:
            self.open_for_writing()
            # The files are checked by each writer in its own thread, just before it
            # queues: the leader's transaction holds only SQL (see ledger.sqlite.commit).
            self._check()
        except (EffectPersistenceError, OSError) as e:
            job.error = translate(action, e)
            job.done = True
            return job
        return self.group.submit(job)

    @contextlib.contextmanager
    def read(self, action: str) -> Iterator[Connection]:
        """A read transaction (deferred ``BEGIN``): one consistent snapshot, no write lock."""
        with storage_errors(action):
            check_files(self.directory, self.path)
            engine = self._engine().execution_options(**{READ_ONLY: True})
            with engine.begin() as conn:
                yield conn

    # -- the storage contract (ledger.storage)

    def load_run(self, run_id: str, action: str) -> tuple[History, str]:
        """The run's validated history and its head hash, from one read transaction."""
        with self.read(action) as conn:
            return rows.load_run(conn, run_id)

    def append(self, batch: Batch) -> Written:
        """Make ``batch`` durable in a transaction grouped with other threads' batches."""
        # Rows and hashes are built here, in the caller's thread, not in the shared
        # transaction (see ledger.sqlite.commit).
        steps, head = rows.prepare(batch.run_id, batch.records, batch.head)
        job = self.commit(batch.action, steps, rows.preconditions(batch), imported=batch.imported)
        return Written(head, job.error, job.interrupt)

    def now(self, action: str) -> str:  # noqa: ARG002 - the contract's signature
        """The store's clock: this machine's, as the guards' ``strftime('now')`` reads it."""
        return utc_now()

    def hold(self, run_id: str, mode: Mode) -> Lease | None:
        """Hold the run by a kernel lock in the store's ``ledger.lock`` (ledger.sqlite.liveness)."""
        return liveness.hold(self.directory, run_id, mode)

    def dispose(self) -> None:
        """Close every pooled connection."""
        if self._held is not None:
            self._held.close()
            self._held = self._source = None
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None
        if self._attached:
            self._attached = False
            _turn.detach(self.turn)
        self._watch.close()
        self._ready = False

    def after_fork(self) -> None:
        """In a forked child: fresh connections, locks and turn; files and schema checked again.

        The parent's connection is kept from the garbage collector, whose close would act
        on the parent's database through the shared descriptor.
        """
        if self._held is not None:
            _abandoned.append(self._held)
            self._held = self._source = None
        if self.engine is not None:
            self.engine.dispose(close=False)
            self.engine = None
        self.write_lock = _FairLock()
        self.turn = _turn.attach(self.directory)  # the parent's waiter is not in the child
        self._attached = True
        self.group = self._group()
        self._init_lock = threading.Lock()
        self._ready = False


def _stamped(conn: Connection) -> str | None:
    """The revision ``alembic_version`` holds, read as Alembic reads it; ``None`` for none.

    A table of several rows (Alembic's branches, which the library never makes) is
    ``None`` here: the store then takes the migrating path, where Alembic reads it itself.
    """
    table = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
    ).first()
    if table is None:
        return None
    rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
    return str(rows[0][0]) if len(rows) == 1 else None


def _schema_version(conn: Connection) -> int:
    return int(conn.exec_driver_sql("PRAGMA schema_version").scalar_one())


_registry_lock = threading.Lock()
_registry: dict[Path, Store] = {}
_unsynchronised: set[Path] = set()  # directories whose next Store is OFF; see unsynchronised


def acquire(directory: Path) -> Store:
    """The process's :class:`Store` for ``directory``, shared by every log on it."""
    key = directory.absolute()
    with _registry_lock:
        store = _registry.get(key)
        if store is None:
            level = OFF if key in _unsynchronised else FULL
            store = _registry[key] = Store(key, synchronous=level)
        store.users += 1
        return store


def release(store: Store) -> None:
    """Drop one user of ``store``; the last one closes its connections."""
    with _registry_lock:
        store.users -= 1
        if store.users <= 0:
            # An unsynchronised store may already have left the registry to a FULL one.
            if _registry.get(store.directory) is store:
                del _registry[store.directory]
            store.dispose()


@contextlib.contextmanager
def unsynchronised(directory: Path) -> Iterator[None]:
    """The store of ``directory``, opened inside the block, is ``synchronous=OFF``: for the bench.

    A log takes its store at ``load`` or at its first write; one that takes it inside
    the block writes OFF for as long as it is open. ``ledger bench`` uses it on the
    scratch stores it creates, to measure the library's own cost with the disk taken
    out, and to build large stores faster.
    Nothing written so is durable. It is scoped to that one directory and to the block,
    never a switch of the process: every other store, opened meanwhile or later, is
    FULL. At the end the directory's store leaves the registry, so a log opened on it
    later gets a FULL store of its own even while one opened inside is still open. A
    directory whose store is already open is refused: its logs would share a FULL store.
    """
    key = directory.absolute()
    with _registry_lock:
        if key in _registry or key in _unsynchronised:
            raise RuntimeError(f"the store {key} is already open")
        _unsynchronised.add(key)
    try:
        yield
    finally:
        with _registry_lock:
            _unsynchronised.discard(key)
            store = _registry.get(key)
            if store is not None and store.synchronous != FULL:
                del _registry[key]


_abandoned: list[Any] = []


def _after_fork_in_child() -> None:
    # Connections must not cross fork(): the child starts with fresh stores. Runs after
    # the turns' reset (ledger.sqlite.turn registers first), so a store attaches anew.
    global _registry_lock  # noqa: PLW0603 - the lock itself may have been held at fork
    _registry_lock = threading.Lock()
    for store in _registry.values():
        store.after_fork()


_lifetime.at_fork(_after_fork_in_child)
