"""The forensic reads of a PostgreSQL store (ledger.storage.Reader), one snapshot each.

Each read is one ``REPEATABLE READ, READ ONLY`` transaction. The reads themselves are
both backends' (``ledger._sql.reads``); here are PostgreSQL's snapshot, its check of the
schema's revision and guards, the liveness of its runs, and ``psql``, which ``ledger
sql`` opens with every transaction read-only.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from sqlalchemy import Connection, text

from ledger._sql import reads as _shared
from ledger._sql import rows
from ledger._sql.revisions import head_revision
from ledger.postgresql import engine as _engine
from ledger.postgresql import liveness
from ledger.postgresql import store as _store
from ledger.postgresql.guards import TRIGGER_TABLE, with_views
from ledger.postgresql.store import Store
from ledger.storage import RecoveryHold, Shell, ShellMissingError

T = TypeVar("T")


class Reader(_shared.Reader):
    """The forensic reads of the store at ``location`` (see ledger.storage.Reader)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.name = _engine.display(location)

    def _read(self, query: Callable[[Connection], T]) -> T:
        store = Store(self.location)
        try:
            with store.read(f"cannot read the store {self.name}") as conn:
                rows.check_readable(conn, self.name)
                return query(conn)
        finally:
            store.dispose()

    def _blank(self, conn: Connection) -> bool:
        # A database with no ledger schema (yet): it holds no run.
        return bool(conn.execute(text("SELECT to_regclass('runs') IS NULL")).scalar_one())

    def _with_views(self, sql: str) -> str:
        return with_views(sql)

    def _schema_findings(self, conn: Connection) -> list[str]:
        """The schema's revision, and the guards missing, foreign or disabled."""
        found: list[str] = []
        revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        if revision != head_revision():
            found.append(f"schema: revision {revision} where {head_revision()} is current")
        found.extend(f"schema: {p}" for p in _guard_problems(conn))
        return found

    @contextlib.contextmanager
    def recovering(self, run_id: str) -> Iterator[RecoveryHold]:
        """Take the run for recovery, or say who has it.

        On the session that holds the runs of this process's logs: a log of this process
        may load the run meanwhile, as on SQLite, where the holds are the process's.
        """
        store = _store.acquire(self.location)
        try:
            with liveness.recovering(store.holder, run_id) as found:
                yield found
        finally:
            _store.release(store)

    def held(self, run_ids: Iterable[str]) -> set[str]:
        """Those of ``run_ids`` whose key a session holds (ledger.postgresql.liveness.HELD)."""
        wanted = list(run_ids)

        def query(conn: Connection) -> set[str]:
            held = text(liveness.HELD)
            return {r for r in wanted if conn.execute(held, liveness.held_key(r)).scalar_one()}

        return self._read(query) if wanted else set()

    @contextlib.contextmanager
    def shell(self, args: Sequence[str]) -> Iterator[Shell]:
        """``psql`` on the store, every transaction read-only."""
        yield Shell([*self._psql(), *args])

    def query_command(self, query: str) -> list[str]:
        """The ``psql`` command line that prints ``query``'s rows."""
        return [*self._psql(), "-c", query]

    def _psql(self) -> list[str]:
        program = shutil.which("psql")
        if program is None:
            raise ShellMissingError(
                "psql is not installed (Debian/Ubuntu: apt install postgresql-client); "
                f"any PostgreSQL client can read {self.name}"
            )
        url = _engine.parse(self.location).set(drivername="postgresql")
        # libpq reads PGOPTIONS: every transaction of the session is read-only.
        conninfo = url.render_as_string(hide_password=False)
        return [program, "--no-psqlrc", "--set=ON_ERROR_STOP=1", _readonly(conninfo)]


def _guard_problems(conn: Connection) -> list[str]:
    """Guards of the library missing from the store, and triggers on its tables that are not."""
    found = {
        (name, table)
        for name, table in conn.execute(
            text(
                "SELECT t.tgname, c.relname FROM pg_trigger AS t"
                " JOIN pg_class AS c ON c.oid = t.tgrelid"
                " WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace"
            )
        ).all()
    }
    wanted = set(TRIGGER_TABLE.items())
    problems = [f"trigger {name} on {table} is missing" for name, table in sorted(wanted - found)]
    problems += [
        f"trigger {name} on {table} is not the library's" for name, table in sorted(found - wanted)
    ]
    disabled = conn.execute(
        text(
            "SELECT t.tgname FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid"
            " WHERE NOT t.tgisinternal AND t.tgenabled = 'D'"
            " AND c.relnamespace = current_schema()::regnamespace ORDER BY 1"
        )
    ).scalars()
    problems += [f"trigger {name} is disabled" for name in disabled]
    return problems


def _readonly(conninfo: str) -> str:
    separator = "&" if "?" in conninfo else "?"
    # jit off: see ledger.postgresql.engine (the views' plans take seconds to compile).
    return f"{conninfo}{separator}options=-c%20default_transaction_read_only%3Don%20-c%20jit%3Doff"
