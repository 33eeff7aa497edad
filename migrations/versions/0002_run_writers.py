"""run_writers: the host and process that writes each run

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add run_writers: who owns a run now, not part of its append-only history."""
    op.create_table(
        "run_writers",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("boot_id", sa.Text(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("process_started", sa.Text(), nullable=True),
        sa.Column("since", sa.Text(), nullable=False),
        sa.CheckConstraint("pid > 0", name=op.f("ck_run_writers_pid")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_run_writers_run_id_runs")
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_writers")),
        sqlite_strict=True,
    )


def downgrade() -> None:
    """Stores are never downgraded: records are append-only."""
    raise NotImplementedError
