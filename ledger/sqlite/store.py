"""One store on disk: its files, its engine, its transactions, its migrations.

Everything that can fail because of the store passes through
:func:`~ledger.sqlite.errors.storage_errors` (or ``translate``), where SQLAlchemy,
sqlite3, Alembic and OS errors become the leaves of :class:`EffectPersistenceError`.

Durability is not assumed: every connection is put in WAL mode with
``synchronous=FULL`` and foreign keys on, and the pragmas are read back; a
connection where one did not take is refused. Writers begin with ``BEGIN
IMMEDIATE`` (a deferred transaction that upgrades to a write lock bypasses
SQLite's busy handler), and the writers of one process queue first-come,
first-served before they ask SQLite for the lock.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy.exc
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.pool import ConnectionPoolEntry, NullPool

from ledger import _paths
from ledger._chain import sha3
from ledger.effects import History
from ledger.errors import (
    EffectPersistenceError,
    StoreCorruptError,
    StoreFileRefusedError,
    StoreUnavailableError,
)
from ledger.sqlite import liveness, rows
from ledger.sqlite import schema_check as _schema_check
from ledger.sqlite import trust as _trust
from ledger.sqlite.commit import GroupCommit, Job, Step
from ledger.sqlite.errors import storage_errors, translate
from ledger.storage import Batch, Lease, Mode, Written

log = logging.getLogger("ledger")

T = TypeVar("T")

BUSY_TIMEOUT_MS = 60_000
READ_ONLY = "ledger_read_only"

# PRAGMA synchronous levels. FULL, always, but for the scratch stores of ``ledger bench``
# (see unsynchronised), which is the one caller that may take the disk out.
FULL = 2
OFF = 0


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


def _wal(cursor: sqlite3.Cursor) -> Any:
    """Put the database in WAL mode, waiting out other processes doing the same.

    Switching a new database to WAL takes an exclusive lock from a shared one; when
    several processes create a store at the same moment, SQLite reports the deadlock
    at once (SQLITE_BUSY) instead of calling the busy handler, so wait here instead.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.001
    while True:
        try:
            return cursor.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as e:
            if getattr(e, "sqlite_errorcode", None) != sqlite3.SQLITE_BUSY:
                raise
            if time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _on_connect(
    dbapi_connection: Any, _record: ConnectionPoolEntry, synchronous: int = FULL
) -> None:
    # SQLAlchemy emits BEGIN itself (see _on_begin); pysqlite must not.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = _wal(cursor)
        cursor.execute(f"PRAGMA synchronous = {synchronous}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA recursive_triggers = ON")
        # The guards check each record's hash with sha3(), as the stock shell has it. A
        # function the application registers may run in triggers only with a trusted
        # schema; the schema is checked whole before anything is written (foreign
        # triggers and views are refused), and sha3 is the only function registered.
        dbapi_connection.create_function("sha3", 1, sha3, deterministic=True)
        dbapi_connection.create_function("sha3", 2, sha3, deterministic=True)
        cursor.execute("PRAGMA trusted_schema = ON")
        readings = {
            "journal_mode": (str(mode[0]).lower() if mode else None, "wal"),
            "synchronous": (cursor.execute("PRAGMA synchronous").fetchone()[0], synchronous),
            "foreign_keys": (cursor.execute("PRAGMA foreign_keys").fetchone()[0], 1),
        }
    finally:
        cursor.close()
    for pragma, (actual, wanted) in readings.items():
        if actual != wanted:
            dbapi_connection.close()
            raise StoreFileRefusedError(
                f"PRAGMA {pragma} is {actual!r} where {wanted!r} is required; refusing to write"
            )


def _on_begin(conn: Connection) -> None:
    read_only = conn.get_execution_options().get(READ_ONLY, False)
    conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def _migrations_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # ledger/
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise EffectPersistenceError("the store migrations are not installed with the package")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration driven from code, sharing ``connection`` if given."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def _revisions(location: str) -> tuple[str | None, frozenset[str]]:
    # Reading the scripts imports every migration module: once per process, not per open.
    cfg = Config()
    cfg.set_main_option("script_location", location)
    script = ScriptDirectory.from_config(cfg)
    return script.get_current_head(), frozenset(r.revision for r in script.walk_revisions())


def head_revision() -> str:
    """The newest schema revision this library ships."""
    head, _ = _revisions(str(_migrations_dir()))
    if head is None:  # pragma: no cover - the package always ships migrations
        raise EffectPersistenceError("no schema revision is shipped")
    return head


def known_revisions() -> frozenset[str]:
    """Every schema revision this library ships, the newest included."""
    return _revisions(str(_migrations_dir()))[1]


@contextlib.contextmanager
def _foreign_keys_off(conn: Connection) -> Iterator[None]:
    """Foreign keys off around a migration, as SQLite prescribes for rebuilding tables.

    Rebuilding a parent table (a batch migration) drops and renames it, which foreign
    keys would refuse mid-way; the pragma is a no-op inside a transaction, so it is set
    before BEGIN and ``PRAGMA foreign_key_check`` stands in for it before COMMIT.
    """
    raw = conn.connection.driver_connection
    if raw is None:  # pragma: no cover - a checked-out connection always has one
        raise StoreUnavailableError("the database connection is closed")
    raw.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        raw.execute("PRAGMA foreign_keys = ON")
        if raw.execute("PRAGMA foreign_keys").fetchone() != (1,):  # pragma: no cover
            conn.invalidate()  # never hand a connection without foreign keys to a writer


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
        self._held: Any = None  # the connection every record is written on
        self._check_paths = tuple(str(p) for p in (directory, *_trust.store_files(self.path)))
        self._schema_version: int | None = None  # the schema_version last checked whole
        self.group = GroupCommit(self._connection, self.write_lock, translate, self._check_schema)

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
        """
        head = head_revision()
        engine = self._engine()
        # Most opens find the schema current and whole: ask in a read, without the lock.
        with engine.execution_options(**{READ_ONLY: True}).begin() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
            if current == head and not _schema_check.compare(
                conn.exec_driver_sql(_schema_check.MASTER_SQL).all()
            ):
                self._schema_version = _schema_version(conn)
                return
        with (
            self.write_lock,
            engine.connect() as conn,
            _foreign_keys_off(conn),
            conn.begin(),
        ):
            current = MigrationContext.configure(conn).get_current_revision()
            if current != head:
                log.info("migrating store %s from %s to %s", self.path, current, head)
                command.upgrade(alembic_config(conn), "head")
                broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
                if broken:
                    raise StoreCorruptError(
                        f"migrating {self.path} to {head} would break {len(broken)} foreign "
                        f"key(s), first in {broken[0][0]}; nothing was changed"
                    )
            raw = conn.connection.driver_connection
            if raw is None:  # pragma: no cover - a checked-out connection always has one
                raise StoreUnavailableError("the database connection is closed")
            self._guard_schema(raw.cursor())
            self._schema_version = _schema_version(conn)

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
        if self._held is None:
            # Checked out of the pool for good: pragmas were set and read back on connect.
            self._held = self._engine().raw_connection()
        connection = self._held.driver_connection
        if connection is None:  # pragma: no cover - a checked-out connection has one
            raise StoreUnavailableError("the database connection is closed")
        return connection  # type: ignore[no-any-return]

    def _check(self) -> None:
        """:func:`check_files` before every transaction, in as few system calls as it takes."""
        uid = os.geteuid()
        directory, *files = self._check_paths
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & _SHARED:
            check_directory(self.directory)  # raises, saying what is wrong
        for i, path in enumerate(files):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                if i == 0:
                    check_file(self.path)  # raises: the database file is missing
                continue
            if (
                not stat.S_ISREG(st.st_mode)
                or st.st_nlink != 1
                or st.st_uid != uid
                or st.st_mode & _SHARED
            ):
                check_file(Path(path))  # raises, saying what is wrong

    def commit(
        self,
        action: str,
        steps: Sequence[Step],
        before: Callable[[sqlite3.Cursor], None] | None = None,
    ) -> Job:
        """Run ``before`` and ``steps`` in a write transaction, grouped with other threads'.

        Returns the job once the transaction holding it has committed or failed: its
        ``error`` (an :class:`EffectPersistenceError` for storage trouble) and
        ``interrupt`` (a signal handler's exception met meanwhile, for the caller to
        raise after it has recorded the job's fate).
        """
        job = Job(action, steps, before)
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
    def write(self, action: str) -> Iterator[Connection]:
        """A write transaction: queued in-process, ``BEGIN IMMEDIATE``, files checked first."""
        self.open_for_writing()
        with storage_errors(action), self.write_lock:
            check_files(self.directory, self.path)
            with self._engine().begin() as conn:
                raw = conn.connection.driver_connection
                if raw is None:  # pragma: no cover - a checked-out connection has one
                    raise StoreUnavailableError("the database connection is closed")
                self._check_schema(raw.cursor())
                yield conn

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
        job = self.commit(batch.action, steps, rows.preconditions(batch))
        return Written(head, job.error, job.interrupt)

    def hold(self, run_id: str, mode: Mode) -> Lease | None:
        """Hold the run by a kernel lock in the store's ``ledger.lock`` (ledger.sqlite.liveness)."""
        return liveness.hold(self.directory, run_id, mode)

    def dispose(self) -> None:
        """Close every pooled connection."""
        if self._held is not None:
            self._held.close()
            self._held = None
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None
        self._ready = False


def _schema_version(conn: Connection) -> int:
    return int(conn.exec_driver_sql("PRAGMA schema_version").scalar_one())


def read_only_uri(db: Path, *, immutable: bool) -> str:
    """The SQLite URI that opens ``db`` read-only; ``immutable`` also takes no lock.

    ``immutable`` reads create and change no file at all (not even ``-wal``/``-shm``,
    which a ``mode=ro`` reader creates when it may), but see nothing that is still in a
    WAL and are not protected from a checkpoint that lands while they read. The path is
    percent-encoded from its bytes, so that a path that is not UTF-8 opens too.
    """
    path = urllib.parse.quote(os.fsencode(db.absolute()), safe="/")
    return f"file:{path}?mode=ro" + ("&immutable=1" if immutable else "")


def _reader_connect(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.isolation_level = None
    conn.execute("PRAGMA query_only = ON")
    return conn


def wal_size(db: Path) -> int:
    """The size of ``db``'s ``-wal``: -1 when there is none, 0 when it holds no commit."""
    try:
        return os.lstat(db.with_name(db.name + "-wal")).st_size
    except FileNotFoundError:
        return -1


def _fingerprint(db: Path) -> tuple[int, int, int, int, int]:
    st = db.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, wal_size(db))


def check_readable(directory: Path) -> _trust.Checked:
    """The reader's checks on a store (see ledger.sqlite.trust): refuse, or say what was seen."""
    db = directory / _paths.DB_NAME
    if not os.path.lexists(db):
        raise StoreUnavailableError(f"there is no store at {directory}")
    return _trust.check_store(directory, db, writer=False)


def needs_copy(checked: _trust.Checked) -> bool:
    """Whether SQLite must read a private copy instead of the store's own files.

    Always for a store this user does not own: SQLite would map, rewrite, and as root
    chown its ``-shm``, and create files in it. Also for a crashed store of ours (a
    ``-wal`` without its ``-shm``) in a directory we cannot write: SQLite cannot build the
    missing index there.
    """
    if not checked.ours:
        return True
    return (
        checked.wal_size > 0 and not checked.has_shm and not os.access(checked.directory, os.W_OK)
    )


def read(directory: Path, query: Callable[[Connection], T]) -> T:
    """Run ``query`` on one read-only snapshot of a store, for forensics.

    It never writes, and creates no file when it can avoid it. The store's files are
    checked first, as a writer's are, except that the store may be another user's.
    Another user's store is read from a private copy (see :mod:`ledger.sqlite.trust`), so that
    no file of it is opened by SQLite. With no ``-wal`` no connection has the store open
    and every commit is in the database file: it is read ``immutable`` (no lock, no file
    created; works for a user who may read the store but not write its directory), and
    if the file changed or a ``-wal`` appeared while it read, the result is discarded and
    the query runs again ``mode=ro``. With a ``-wal`` (a writer is active, or crashed) it
    runs ``mode=ro``, so that commits still in the WAL are read.
    """
    db = directory / _paths.DB_NAME
    with storage_errors(f"cannot read the store {directory}"):
        checked = check_readable(directory)
        if needs_copy(checked):
            with _trust.private_copy(checked) as copy:
                return _read_once(read_only_uri(copy, immutable=False), query)
        before = _fingerprint(db)
        if before[-1] <= 0:  # no -wal, or an empty one: every commit is in the file
            try:
                result = _read_once(read_only_uri(db, immutable=True), query)
            except (sqlalchemy.exc.SQLAlchemyError, EffectPersistenceError):
                if _fingerprint(db) == before:
                    raise  # the store did not change: the failure is real
            else:
                if _fingerprint(db) == before:
                    return result
            log.info("store %s changed during an immutable read; reading it again", db)
        return _read_once(read_only_uri(db, immutable=False), query)


def _read_once(uri: str, query: Callable[[Connection], T]) -> T:
    engine = create_engine(
        "sqlite+pysqlite://", creator=lambda: _reader_connect(uri), poolclass=NullPool
    )
    event.listen(engine, "begin", _on_begin)
    try:
        with engine.execution_options(**{READ_ONLY: True}).begin() as conn:
            return query(conn)
    finally:
        engine.dispose()


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
    # Connections must not cross fork(): the child starts with fresh stores.
    global _registry_lock  # noqa: PLW0603 - the lock itself may have been held at fork
    _registry_lock = threading.Lock()
    for store in _registry.values():
        if store._held is not None:  # noqa: SLF001 - the parent's: never touch it here
            _abandoned.append(store._held)  # noqa: SLF001 - kept from the GC, which closes
            store._held = None  # noqa: SLF001
        if store.engine is not None:
            store.engine.dispose(close=False)
            store.engine = None
        store.write_lock = _FairLock()
        store.group = GroupCommit(
            store._connection,  # noqa: SLF001 - rebuilt, like the locks
            store.write_lock,
            translate,
            store._check_schema,  # noqa: SLF001 - same reason
        )
        store._init_lock = threading.Lock()  # noqa: SLF001 - same reason
        store._ready = False  # noqa: SLF001 - re-check files and schema after fork


os.register_at_fork(after_in_child=_after_fork_in_child)
