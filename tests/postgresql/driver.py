"""The PostgreSQL backend's test driver (``tests.backends.Backend``), with plain psycopg.

What the contract suite needs to see of a store, or to do to it as another process
would, done the way an operator would: a read-only psycopg session of its own, the
transaction ids of the rows, the database closed to new connections with the library's
sessions ended, tables locked against writers, and a session of its own holding a run's
advisory lock. Each store is a new database of the test process's server
(``tests/postgresql/server.py``).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg

from ledger.postgresql.liveness import run_key
from ledger.storage import Mode
from tests.postgresql.server import server

TABLES_SQL = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
RECORD_TABLES = ("claims", "impact_scope", "obligations", "outcomes", "observations", "resolutions")


def database(store: str | Path) -> str:
    """The database name of a store's URL."""
    return urlsplit(str(store)).path.lstrip("/")


def connect(store: str | Path, **kwargs: Any) -> psycopg.Connection:
    """A plain psycopg connection to the store's database, outside the library."""
    parts = urlsplit(str(store))
    host = parse_qs(parts.query).get("host", [server().socket_dir])[0]
    return psycopg.connect(host=str(host), dbname=database(store), user=parts.username, **kwargs)


def execute(store: str | Path, sql: str, params: Sequence[object] = ()) -> None:
    """Run ``sql`` on the store as a psql user would (autocommit)."""
    with connect(store, autocommit=True) as conn:
        conn.execute(_params(sql), tuple(params) or None)


def _params(sql: str) -> str:
    # The suite writes its queries with sqlite3's ? placeholders.
    return re.sub(r"\?", "%s", sql.replace("%", "%%"))


class Elsewhere:
    """A run's advisory lock, held or probed on a session of its own, as another host would."""

    def __init__(self, store: str | Path, run_id: str) -> None:
        self._store = store
        self._key = run_key(run_id)
        self._conn = connect(store, autocommit=True)
        self._held: Mode | None = None

    def hold(self, mode: Mode) -> None:
        function = "pg_try_advisory_lock_shared" if mode is Mode.SHARED else "pg_try_advisory_lock"
        got = self._conn.execute(f"SELECT {function}(%s)", (self._key,)).fetchone()
        assert got == (True,), f"the run is held elsewhere: {mode}"
        self._held = mode

    def release(self) -> None:
        if self._held is not None:
            function = (
                "pg_advisory_unlock_shared" if self._held is Mode.SHARED else "pg_advisory_unlock"
            )
            self._conn.execute(f"SELECT {function}(%s)", (self._key,))
            self._held = None

    def could_hold(self, mode: Mode) -> bool:
        with connect(self._store, autocommit=True) as probe:
            if mode is Mode.SHARED:
                got = probe.execute("SELECT pg_try_advisory_lock_shared(%s)", (self._key,))
            else:
                got = probe.execute("SELECT pg_try_advisory_lock(%s)", (self._key,))
            return bool(got.fetchone()[0])  # the probe's session ends: nothing stays taken

    def close(self) -> None:
        self._conn.close()


class PostgreSQLBackend:
    """A store is a database of the test server, named by its URL."""

    name = "postgresql"

    def location(self, parent: Path) -> str:
        del parent  # a database, not a directory
        return server().new_database()

    def exists(self, store: str | Path) -> bool:
        with connect(store) as conn:
            found = conn.execute("SELECT to_regclass('alembic_version') IS NOT NULL").fetchone()
            return bool(found[0])

    def query(
        self, store: str | Path, sql: str, params: Sequence[object] = ()
    ) -> list[tuple[Any, ...]]:
        # jit off, as docs/postgresql.md advises for sessions that read the views.
        with connect(store, options="-c default_transaction_read_only=on -c jit=off") as conn:
            return conn.execute(_params(sql), tuple(params) or None).fetchall()

    def row_counts(self, store: str | Path) -> dict[str, int]:
        with connect(store) as conn:
            tables = [t for (t,) in conn.execute(TABLES_SQL)]
            return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}

    def commits(self, store: str | Path) -> int:
        # Every row carries the id of the transaction that wrote it (xmin): the write
        # transactions the store holds are the distinct ids among its rows.
        with connect(store) as conn:
            tables = [t for (t,) in conn.execute(TABLES_SQL)]
            union = " UNION ".join(f'SELECT xmin::text AS x FROM "{t}"' for t in tables)
            return int(
                conn.execute(f"SELECT count(DISTINCT x) FROM ({union}) AS ids").fetchone()[0]
            )

    @contextlib.contextmanager
    def unavailable(self, store: str | Path) -> Iterator[None]:
        name = database(store)
        with server().connect(autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
            # The library's pooled sessions end; its liveness sessions (a log's hold on its
            # run) stay, as they would through a short outage that spares them.
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name = 'ledger'",
                (name,),
            )
            _wait_gone(admin, name)
            try:
                yield
            finally:
                admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")

    @contextlib.contextmanager
    def write_locked(self, store: str | Path) -> Iterator[None]:
        with connect(store) as conn:
            tables = [t for (t,) in conn.execute(TABLES_SQL)]
            # SHARE mode lets readers in and keeps every INSERT and UPDATE waiting.
            conn.execute(f"LOCK TABLE {', '.join(tables)} IN SHARE MODE")
            try:
                yield
            finally:
                conn.rollback()

    def elsewhere(self, store: str | Path, run_id: str) -> Elsewhere:
        return Elsewhere(store, run_id)


def _wait_gone(admin: psycopg.Connection, name: str) -> None:
    deadline = time.monotonic() + 30
    while admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = 'ledger'",
        (name,),
    ).fetchone() != (0,):
        assert time.monotonic() < deadline, "the library's sessions did not end"
        time.sleep(0.01)


POSTGRESQL = PostgreSQLBackend()
