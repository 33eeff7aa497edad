"""telemetry: a claim's trace context (W3C traceparent)

Revision ID: 0015
Revises: 0014
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``claims.traceparent`` (NULL for every claim so far).

    A column added at the end of its table, in place on both backends: no row is
    rewritten. A claim without a trace context is encoded in the hash chain as before
    (``ledger._chain``, version 5), so every existing record keeps verifying. Its format is
    checked by every load, as the record's other fields are. env.py re-installs every
    trigger and view afterwards.
    """
    op.add_column("claims", sa.Column("traceparent", sa.Text(), nullable=True))


def downgrade() -> None:
    """Drop the column again: for the tests of earlier revisions only.

    The library never downgrades a store. A claim that holds a trace context loses it, and
    with it its hash (the chain then fails at it). The views and triggers that read the
    column are dropped first (SQLite refuses to drop a column they name); env.py
    re-installs those the revision's tables can hold afterwards.
    """
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        derived = bind.exec_driver_sql(
            "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')"
            " AND sql LIKE '%traceparent%'"
        ).all()
    else:
        derived = [
            ("view", name)
            for name in bind.exec_driver_sql(
                "SELECT viewname FROM pg_views WHERE schemaname = current_schema()"
            ).scalars()
        ]
    cascade = "" if bind.dialect.name == "sqlite" else " CASCADE"  # views read views there
    for kind, name in derived:
        op.execute(f'DROP {kind.upper()} IF EXISTS "{name}"{cascade}')
    op.drop_column("claims", "traceparent")
