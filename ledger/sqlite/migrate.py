"""``ledger migrate`` on a SQLite store: create it, or bring its schema to head.

Its own module, above both the engine and the store it opens: the engine's migrations
run inside the store's checked opening, and the store imports the engine.
"""

from __future__ import annotations

import os
from pathlib import Path

from ledger._paths import DB_NAME
from ledger._sql.revisions import check_known, head_revision
from ledger.errors import StoreCorruptError
from ledger.sqlite import store as _store
from ledger.sqlite.engine import READ_ONLY
from ledger.sqlite.errors import storage_errors


def migrate(directory: Path) -> tuple[str | None, str]:
    """Create the store at ``directory``, or bring its schema to head: (revision before, after).

    The revision before is ``None`` for a store created now (or a database its creator
    left blank). The store is opened as a worker's first write opens it, with every check
    of its files and schema. Refused, with nothing changed: a database holding tables but
    no ledger schema (not a store), and a store at a revision this library does not know.
    """
    opened = _store.acquire(directory)
    try:
        before = None
        db = directory / DB_NAME
        with storage_errors(f"cannot migrate the store {directory}"):
            if os.path.lexists(db):
                _store.check_files(directory, db)
                engine = opened._engine()  # noqa: SLF001 - the store's own, checked connections
                with engine.execution_options(**{READ_ONLY: True}).begin() as conn:
                    tables = {
                        name
                        for (name,) in conn.exec_driver_sql(
                            "SELECT name FROM sqlite_master WHERE type = 'table'"
                        )
                    }
                    if "alembic_version" in tables:
                        before = conn.exec_driver_sql(
                            "SELECT version_num FROM alembic_version"
                        ).scalar()
                if before is None and tables - {"alembic_version"}:
                    raise StoreCorruptError(
                        f"{db} holds tables but no ledger schema: it is not a store; "
                        "nothing was changed"
                    )
                check_known(before, directory)
        opened.open_for_writing()
    finally:
        _store.release(opened)
    return before, head_revision()
