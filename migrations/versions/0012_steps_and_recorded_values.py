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
    """Stores are never downgraded: records are append-only."""
    raise NotImplementedError
