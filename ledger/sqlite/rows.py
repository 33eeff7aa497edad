"""SQLite's writes of a run: statements compiled once, and the checks of a batch.

The rows, the chain and the validating reads are both backends' (``ledger._sql.rows``,
named here too, where SQLite's callers and tests found them); here is what writes them
on the sqlite3 cursor the store holds.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import bindparam, func, insert, literal_column, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from ledger._owner import Writer
from ledger._sql.rows import (
    _TABLES,
    READABLE_FROM,
    WRITER_COLUMNS,
    Rows,
    chain_hash,
    chained,
    check_readable,
    check_run,
    claim_of,
    landed,
    load_history,
    load_run,
    rows_of,
    run_exists,
    writer_row,
)
from ledger._sql.tables import run_writers, runs
from ledger.effects import Record
from ledger.errors import RunExistsError, RunHeldError
from ledger.sqlite.commit import Step
from ledger.storage import Batch

# Both backends' rows and reads, named here too (SQLite's callers and tests find them here).
__all__ = [
    "READABLE_FROM",
    "WRITER_COLUMNS",
    "Rows",
    "chain_hash",
    "chained",
    "check_readable",
    "check_run",
    "claim_of",
    "durable_seq",
    "landed",
    "load_history",
    "load_run",
    "preconditions",
    "prepare",
    "rows_of",
    "run_exists",
    "set_writer",
    "start_run",
    "writer_row",
]

# --------------------------------------------------------------------------- the hot path
# A record is written on the connection the store holds, through statements that
# SQLAlchemy compiled once, here, at import: no pool checkout and no compilation per
# write, which would cost about as much as the fsync itself.

_DIALECT = sqlite.dialect()


class _Compiled:
    """A statement compiled once: its SQL and a getter of its parameters from a row dict."""

    def __init__(self, statement: ClauseElement) -> None:
        compiled = statement.compile(dialect=_DIALECT)
        if not isinstance(compiled, SQLCompiler):  # pragma: no cover - always, for SQL
            raise TypeError(f"cannot compile {statement!r}")
        self.sql = str(compiled)
        names = tuple(compiled.positiontup or ())
        self._get = itemgetter(*names)
        self._single = len(names) == 1

    def params(self, row: dict[str, Any]) -> tuple[Any, ...]:
        values = self._get(row)
        return (values,) if self._single else values


_INSERT = {kind: _Compiled(insert(table)) for kind, table in _TABLES.items()}
_INSERT_RUN = _Compiled(insert(runs))
_RUN_EXISTS = _Compiled(select(runs.c.run_id).where(runs.c.run_id == bindparam("run_id")))
_upsert = sqlite_insert(run_writers)
_UPSERT_WRITER = _Compiled(
    _upsert.on_conflict_do_update(
        index_elements=["run_id"], set_={c: _upsert.excluded[c] for c in WRITER_COLUMNS}
    )
)
# Each table's max(seq) of the run is one step down its (run_id, seq) key: no scan.
_MAX_SEQ = _Compiled(
    select(
        func.max(
            *(
                func.coalesce(
                    select(func.max(t.c.seq))
                    .where(t.c.run_id == bindparam("run_id"))
                    .scalar_subquery(),
                    literal_column("0"),
                )
                for t in _TABLES.values()
            )
        )
    )
)


_INSERTS = {kind: (compiled.sql, compiled.params) for kind, compiled in _INSERT.items()}


def prepare(run_id: str, records: Sequence[Record], head: str) -> tuple[list[Step], str]:
    """The statements that insert records in seq order, each chained to the one before."""
    return chained(run_id, records, head, _INSERTS)


def start_run(cursor: sqlite3.Cursor, run_id: str, now: str, *, continuing: bool) -> None:
    """Record the run in the transaction of its first record; refuse to restart one."""
    if cursor.execute(_RUN_EXISTS.sql, (run_id,)).fetchone() is None:
        cursor.execute(_INSERT_RUN.sql, _INSERT_RUN.params({"run_id": run_id, "created_at": now}))
        landed(cursor.rowcount, 1, _INSERT_RUN.sql)
    elif not continuing:
        raise RunExistsError(
            f"run {run_id} already exists in the store; use EffectLog.load to continue it"
        )


def set_writer(cursor: sqlite3.Cursor, run_id: str, writer: Writer, now: str) -> None:
    """Record ``writer`` as the run's last writer, for display (liveness is the run's lock)."""
    cursor.execute(_UPSERT_WRITER.sql, _UPSERT_WRITER.params(writer_row(run_id, writer, now)))
    landed(cursor.rowcount, 1, _UPSERT_WRITER.sql)


def durable_seq(cursor: sqlite3.Cursor, run_id: str) -> int:
    """The highest ``seq`` the run holds, 0 for none."""
    row = cursor.execute(_MAX_SEQ.sql, _MAX_SEQ.params({"run_id": run_id})).fetchone()
    return int(row[0])


def preconditions(batch: Batch) -> Callable[[sqlite3.Cursor], None] | None:
    """What must hold, and be done first, in the transaction that writes ``batch``."""
    if not batch.start and batch.writer is None and batch.ends_at is None:
        return None

    def check(cursor: sqlite3.Cursor) -> None:
        if batch.start:
            start_run(cursor, batch.run_id, batch.now, continuing=batch.continuing)
        if batch.writer is not None:
            set_writer(cursor, batch.run_id, batch.writer, batch.now)
        if batch.ends_at is not None:
            durable = durable_seq(cursor, batch.run_id)
            if durable != batch.ends_at:
                raise RunHeldError(
                    f"run {batch.run_id} holds records up to seq {durable} where this log "
                    f"knows {batch.ends_at}: another writer touched it; load it again"
                )

    return check
