"""The forensic reads of a SQLite store (ledger.storage.Reader), one snapshot each.

Reads go through :func:`ledger.sqlite.reads.read`, which never writes or creates a file
it can avoid, and reads another user's store from a private copy. The reads themselves
are both backends' (``ledger._sql.reads``); here are SQLite's snapshot, its checks of
the file and the schema, the liveness of its runs and its shell.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from ledger._sql import reads as _shared
from ledger._sql.revisions import head_revision, known_revisions
from ledger._sql.views import with_views
from ledger.sqlite import liveness, schema_check, shell
from ledger.sqlite.reads import read
from ledger.storage import RecoveryHold, Shell

T = TypeVar("T")


def _has_table(conn: Connection, name: str) -> bool:
    found = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).first()
    return found is not None


class Reader(_shared.Reader):
    """The forensic reads of the store at ``directory`` (see ledger.storage.Reader)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _read(self, query: Callable[[Connection], T]) -> T:
        return read(self.directory, query)

    def _blank(self, conn: Connection) -> bool:
        # A database with no schema yet: its creator died before its first commit; empty.
        return not _has_table(conn, "runs")

    def _has_writers(self, conn: Connection) -> bool:
        return _has_table(conn, "run_writers")

    def _with_views(self, sql: str) -> str:
        return with_views(sql)

    def _schema_findings(self, conn: Connection) -> list[str]:
        """The file's integrity, the schema's revision, and every object not the library's."""
        problems: list[str] = []
        integrity = [row[0] for row in conn.exec_driver_sql("PRAGMA integrity_check")]
        if integrity != ["ok"]:
            problems.extend(f"integrity: {line}" for line in integrity)
        try:
            revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        except SQLAlchemyError:
            revision = None
        schema = schema_problems(conn)
        head = head_revision()
        if revision != head:
            behind = [p for p in schema if p.kind == "table" and p.what != "foreign"]
            if revision in known_revisions() and not behind:
                # The tables are head's already: the version row was set back by hand, and
                # the next writer's migration would fail on objects that exist.
                problems.append(
                    f"schema: revision {revision} recorded, but its tables are already "
                    f"revision {head}'s (set back by hand?): record it with "
                    f"UPDATE alembic_version SET version_num = '{head}'"
                )
            else:
                problems.append(f"schema: revision {revision} where {head} is current")
                if revision in known_revisions():
                    # An older revision differs from this one by design (the next writer
                    # migrates it); what no revision ever installs is reported all the same.
                    schema = [
                        p for p in schema if p.what == "foreign" and p.kind in ("trigger", "view")
                    ]
        problems.extend(f"schema: {p}" for p in schema)
        return problems

    def held(self, run_ids: Iterable[str]) -> set[str]:
        """Those of ``run_ids`` a live process holds (ledger.sqlite.liveness.held)."""
        return {run_id for run_id in run_ids if liveness.held(self.directory, run_id)}

    def recovering(self, run_id: str) -> contextlib.AbstractContextManager[RecoveryHold]:
        """Take the run for recovery (ledger.sqlite.liveness), or say who has it."""
        return liveness.recovering(self.directory, run_id)

    def shell(self, args: Sequence[str]) -> contextlib.AbstractContextManager[Shell]:
        """The sqlite3 shell on the store (ledger.sqlite.shell)."""
        return shell.session(self.directory, args)

    def query_command(self, query: str) -> list[str]:
        """The sqlite3 command line that prints ``query``'s rows as a box."""
        return shell.query_command(self.directory, query)


def schema_problems(conn: Connection) -> list[schema_check.Problem]:
    """Every table, index, trigger and view that is missing, changed or not the library's."""
    return schema_check.compare(conn.exec_driver_sql(schema_check.MASTER_SQL).all())
