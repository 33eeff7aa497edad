"""hash chain: prev_hash and hash on every record row, existing runs chained

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from ledger import _chain

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = {"claims": "claim", "outcomes": "outcome", "observations": "observation"}


def _rows(conn: sa.Connection, sql: str, **params: Any) -> list[dict[str, Any]]:
    # Named parameters: the same text for every dialect's driver.
    return [dict(row) for row in conn.execute(sa.text(sql), params).mappings()]


def _chain_run(conn: sa.Connection, run_id: str) -> None:
    records = []
    for table, kind in TABLES.items():
        records += [
            (row["seq"], table, kind, row)
            for row in _rows(conn, f"SELECT * FROM {table} WHERE run_id = :run", run=run_id)
        ]
    head = _chain.GENESIS
    for seq, table, kind, row in sorted(records, key=lambda r: r[0]):
        scope = duties = []
        if kind == "claim":
            scope = _rows(
                conn,
                "SELECT * FROM impact_scope WHERE run_id = :run AND effect_id = :effect"
                " ORDER BY position",
                run=run_id,
                effect=row["effect_id"],
            )
            duties = _rows(
                conn,
                "SELECT * FROM obligations WHERE run_id = :run AND effect_id = :effect"
                " ORDER BY position",
                run=run_id,
                effect=row["effect_id"],
            )
        digest = _chain.link(head, _chain.encode(kind, run_id, row, scope, duties))
        conn.execute(
            sa.text(
                f"UPDATE {table} SET prev_hash = :prev, hash = :hash"
                " WHERE run_id = :run AND seq = :seq"
            ),
            {"prev": head, "hash": digest, "run": run_id, "seq": seq},
        )
        head = digest


# SQLite cannot alter a column or a constraint in place: the table is rebuilt (which
# drops its triggers; env.py puts them back). PostgreSQL alters it in place, and could
# not drop a table that others' foreign keys name.
_RECREATE = {"sqlite": "always", "postgresql": "auto"}


def upgrade() -> None:
    """Add the chain columns, chain every existing run, then make the columns required.

    The whole upgrade is one transaction under the write lock, so no other connection
    sees a record unguarded or unchained; env.py re-installs every trigger afterwards.
    """
    conn = op.get_bind()
    for table in TABLES:
        op.add_column(table, sa.Column("prev_hash", sa.Text(), nullable=True))
        op.add_column(table, sa.Column("hash", sa.Text(), nullable=True))
        conn.exec_driver_sql(
            f"DROP TRIGGER IF EXISTS {table}_no_update"
            + ("" if conn.dialect.name == "sqlite" else f" ON {table}")
        )
    for run_id in conn.exec_driver_sql("SELECT run_id FROM runs ORDER BY run_id").scalars():
        _chain_run(conn, run_id)
    for table in TABLES:
        with op.batch_alter_table(table, recreate=_RECREATE[conn.dialect.name]) as batch:
            batch.alter_column("prev_hash", existing_type=sa.Text(), nullable=False)
            batch.alter_column("hash", existing_type=sa.Text(), nullable=False)
            for column in ("prev_hash", "hash"):
                batch.create_check_constraint(
                    op.f(f"ck_{table}_{column}"),
                    f"length({column}) = 64 AND ltrim({column}, '0123456789abcdef') = ''",
                )


def downgrade() -> None:
    """Stores are never downgraded: records are append-only."""
    raise NotImplementedError
