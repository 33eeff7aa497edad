"""run_writers.name: what a worker calls itself, shown by ``ledger runs``

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the writer's name (none for the runs written before): display only, not history."""
    # SQLite keeps a table's definition as text: rebuilt, it reads as the library writes it.
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table("run_writers", recreate="always" if sqlite else "auto") as batch:
        batch.add_column(sa.Column("name", sa.Text(), nullable=True))
        batch.create_check_constraint(
            op.f("ck_run_writers_name"), "name IS NULL OR length(name) BETWEEN 1 AND 200"
        )


def downgrade() -> None:
    """Stores are never downgraded: records are append-only."""
    raise NotImplementedError
