"""resume: a claim's step and recorded arguments, an outcome's recorded result

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``claims.step`` ('' for every claim so far), ``claims.args`` and ``outcomes.result``.

    Columns added at the end of their tables, in place on both backends: no row is
    rewritten. A claim with no step and no arguments, and an outcome with no result, are
    encoded in the hash chain as before (``ledger._chain``, version 3), so every existing
    record keeps verifying. A step's length is checked by every load, as the record's
    other fields are. env.py re-installs every trigger and view afterwards.
    """
    op.add_column("claims", sa.Column("step", sa.Text(), nullable=False, server_default=""))
    op.add_column("claims", sa.Column("args", sa.Text(), nullable=True))
    op.add_column("outcomes", sa.Column("result", sa.Text(), nullable=True))


def downgrade() -> None:
    """Drop the three columns again: for the tests of earlier revisions only.

    The library never downgrades a store. A record that holds a step, arguments or a
    result loses them, and with them its hash (the chain then fails at it): only a store
    whose records hold none keeps verifying. The views and triggers that read the columns
    are dropped first (SQLite refuses to drop a column they name); env.py re-installs those
    the revision's tables can hold afterwards.
    """
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        derived = bind.exec_driver_sql(
            "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')"
            " AND (sql LIKE '%step%' OR sql LIKE '%args%' OR sql LIKE '%result%')"
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
    op.drop_column("outcomes", "result")
    op.drop_column("claims", "args")
    op.drop_column("claims", "step")
