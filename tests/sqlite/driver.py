"""The SQLite backend's test driver (``tests.backends.Backend``), with the stock ``sqlite3``.

What the contract suite needs to see of a store, or to do to it as another process
would, done the way an operator would: a plain ``sqlite3`` connection opened read-only,
the frames of the store's write-ahead log, a second connection holding the write lock,
and an open file description's lock on the run's byte of ``ledger.lock``. The tests of
the SQLite backend itself (``tests/sqlite``) share the same helpers, and a few more: SQL
run on a store as an attacker would, and a store left at an older schema revision.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command

from ledger._sql.guards import insert_guards
from ledger.sqlite import liveness
from ledger.sqlite.engine import _foreign_keys_off, _on_begin, _on_connect, alembic_config
from ledger.sqlite.schema import SQLITE_TRIGGERS, guard_check
from ledger.storage import Mode
from tests.builders import CHILD_TIMEOUT, require_tool

DB = "ledger.sqlite3"
WAL = DB + "-wal"
SHM = DB + "-shm"
LOCK = "ledger.lock"


def connect_ro(db: Path) -> contextlib.closing[sqlite3.Connection]:
    """A plain read-only sqlite3 connection to the database ``db``, outside the library."""
    return contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=30))


def query(db: Path, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    """The rows of a read-only query on the database ``db``, outside the library."""
    with connect_ro(db) as conn:
        return conn.execute(sql, tuple(params)).fetchall()


def execute(db: Path, sql: str) -> None:
    """Run ``sql`` (one or more statements) on ``db`` as a user of the sqlite3 module would."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.executescript(sql)
    finally:
        conn.close()


def shell_script(
    db: Path, script: str, *, json_rows: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in the stock ``sqlite3`` shell on ``db``, stopping at the first error.

    With ``json_rows`` the shell is read-only and prints rows as JSON.
    """
    args = [require_tool("sqlite3"), "-init", os.devnull, "-bail"]
    if json_rows:
        args += ["-json", "-readonly"]
    return subprocess.run(
        [*args, str(db)], input=script, capture_output=True, text=True, timeout=60, check=False
    )


def at_revision(db: Path, revision: str) -> None:
    """Create the database ``db`` (and its private directory) migrated to ``revision`` only."""
    db.parent.mkdir(mode=0o700)
    migrate(db, revision)
    db.chmod(0o600)


def migrate(db: Path, revision: str, *, down: bool = False) -> None:
    """Upgrade (or with ``down`` downgrade) ``db`` to ``revision`` as the library migrates."""
    engine = sa.create_engine(f"sqlite:///{db}")
    sa.event.listen(engine, "connect", _on_connect)
    sa.event.listen(engine, "begin", _on_begin)
    try:
        with engine.connect() as conn, _foreign_keys_off(conn), conn.begin():
            (command.downgrade if down else command.upgrade)(alembic_config(conn), revision)
    finally:
        engine.dispose()


def wal_commits(db: Path) -> int:
    """How many transactions the write-ahead log of ``db`` holds since it was last reset."""
    return len(wal_frames_per_commit(db))


def wal_frames_per_commit(db: Path) -> list[int]:
    """How many frames (pages) each transaction in the write-ahead log of ``db`` wrote.

    SQLite's WAL format: a 32-byte header (page size at bytes 8..12, the salt at
    16..24), then frames of a 24-byte header and one page. A frame belongs to the
    current log only if its salt (header bytes 8..16) is the log's; bytes 4..8 are
    non-zero only in the last frame of a committed transaction.
    """
    data = db.with_name(db.name + "-wal").read_bytes()
    assert int.from_bytes(data[:4], "big") in {0x377F0682, 0x377F0683}, "not a WAL file"
    page_size = int.from_bytes(data[8:12], "big")
    salt = data[16:24]
    counts, frames = [], 0
    for offset in range(32, len(data) - 24 - page_size + 1, 24 + page_size):
        header = data[offset : offset + 24]
        if header[8:16] != salt:
            break
        frames += 1
        if int.from_bytes(header[4:8], "big") != 0:
            counts.append(frames)
            frames = 0
    return counts


# Linux's OFD locks (F_OFD_SETLK) conflict with the POSIX record locks the log takes
# even within one process, so an open file description of this process stands for
# another process holding a run, with no child process (whose work a mutation run could
# not see).
_FLOCK = "hhqqi4x"  # Linux's struct flock: type, whence, start, length, pid
_KIND = {Mode.SHARED: fcntl.F_RDLCK, Mode.EXCLUSIVE: fcntl.F_WRLCK}


class Elsewhere:
    """A run's byte of the store's ``ledger.lock``, held or probed as another process would."""

    def __init__(self, store: Path, run_id: str) -> None:
        self._fd = os.open(store / LOCK, os.O_RDWR | os.O_CLOEXEC)
        self._offset = int(run_id[:15], 16)  # docs/storage.md, "Liveness"

    def _lock(self, command: int, kind: int) -> int:
        arg = struct.pack(_FLOCK, kind, os.SEEK_SET, self._offset, 1, 0)
        kind_found: int = struct.unpack(_FLOCK, fcntl.fcntl(self._fd, command, arg))[0]
        return kind_found

    def hold(self, mode: Mode) -> None:
        self._lock(fcntl.F_OFD_SETLK, _KIND[mode])

    def release(self) -> None:
        self._lock(fcntl.F_OFD_SETLK, fcntl.F_UNLCK)

    def could_hold(self, mode: Mode) -> bool:
        return self._lock(fcntl.F_OFD_GETLK, _KIND[mode]) == fcntl.F_UNLCK

    def close(self) -> None:
        # Closing any descriptor of a file drops every POSIX lock this process has on
        # it, the logs' included: only once they are closed.
        os.close(self._fd)


class SQLiteBackend:
    """A store is a directory holding ``ledger.sqlite3`` (WAL mode) and ``ledger.lock``."""

    name = "sqlite"

    def location(self, parent: Path) -> Path:
        return parent / "store"

    def exists(self, store: Path) -> bool:
        return Path(store).exists()

    def query(self, store: Path, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with connect_ro(store / DB) as conn:
            return conn.execute(sql, tuple(params)).fetchall()

    def row_counts(self, store: Path) -> dict[str, int]:
        with connect_ro(store / DB) as conn:
            tables = [
                name
                for (name,) in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                    " AND name NOT LIKE 'sqlite_%'"
                )
            ]
            return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}

    def commits(self, store: Path) -> int:
        return wal_commits(store / DB)

    @contextlib.contextmanager
    def unavailable(self, store: Path) -> Iterator[None]:
        with replaced_by_a_file(store):
            yield

    @contextlib.contextmanager
    def write_locked(self, store: Path) -> Iterator[None]:
        with write_locked(store / DB):
            yield

    def elsewhere(self, store: Path, run_id: str) -> Elsewhere:
        return Elsewhere(store, run_id)


@contextlib.contextmanager
def replaced_by_a_file(store: Path) -> Iterator[None]:
    """Move the store directory aside and put a regular file at its path; then undo it."""
    aside = store.with_name(store.name + ".aside")
    store.rename(aside)
    store.write_bytes(b"not a directory\n")
    try:
        yield
    finally:
        store.unlink()
        aside.rename(store)


@contextlib.contextmanager
def write_locked(db: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the store's write lock (rolled back at the end unless committed)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


SQLITE = SQLiteBackend()


# --------------------------------------------------------------------------- the writers' turn

_HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 1, int(sys.argv[2]), os.SEEK_SET)
print("held", flush=True)
sys.stdin.readline()
"""

_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, int(sys.argv[2]), os.SEEK_SET)
except OSError:
    print("taken")
else:
    print("free")
"""


def _lock_file(store_dir: Path) -> str:
    return str(store_dir / liveness.LOCK_NAME)


@contextlib.contextmanager
def other_process_holds_the_turn(store_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds the store's turn byte until the block ends."""
    argv = [sys.executable, "-c", _HOLD, _lock_file(store_dir), str(liveness.TURN_OFFSET)]
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.kill()
        holder.wait(CHILD_TIMEOUT)
        for stream in (holder.stdin, holder.stdout):
            if stream is not None:
                stream.close()


def turn_seen_from_another_process(store_dir: Path) -> str:
    """'taken' if some process other than the asking one holds the turn byte, else 'free'."""
    argv = [sys.executable, "-c", _PROBE, _lock_file(store_dir), str(liveness.TURN_OFFSET)]
    return subprocess.run(
        argv, capture_output=True, text=True, check=True, timeout=CHILD_TIMEOUT
    ).stdout.strip()


def drop_changed_guards(conn: sqlite3.Connection) -> None:
    """Drop every guard trigger that is not the library's: missing, it is put back on write.

    What an attacker does after :func:`drop_guards` to leave no changed trigger behind
    (the library refuses to write to a store whose triggers it did not write).
    """
    for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
    ).fetchall():
        if name in SQLITE_TRIGGERS and sql != SQLITE_TRIGGERS[name]:
            conn.execute(f"DROP TRIGGER {name}")


def drop_guards(conn: sqlite3.Connection, *guards: str) -> None:
    """Take the named guards (``claims_guard_chain``, say) out of the store's triggers.

    Each table's guards are one trigger, a statement each: the trigger is re-created
    without the guards' statements, whatever else it holds kept. (The store's schema
    check then finds the trigger changed.)
    """
    every = insert_guards("sqlite")
    for name in guards:
        guard = every[name]
        trigger = f"{guard.table}_guard"
        found = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (trigger,)
        ).fetchone()
        if found is None:  # dropped whole already
            continue
        lines = found[0].split("\n")
        if guard_check(guard) not in lines:
            raise ValueError(f"the store has no guard {name}")
        kept = [line for line in lines if line != guard_check(guard)]
        conn.execute(f"DROP TRIGGER {trigger}")
        if len(kept) > 3:  # a head, BEGIN and END, and a check at least
            conn.execute("\n".join(kept))
