"""resolutions record the process that wrote them: origin, OS user, host, program, pid

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (
    ("origin", sa.Text()),
    ("os_user", sa.Text()),
    ("host", sa.Text()),
    ("program", sa.Text()),
    ("pid", sa.Integer()),
)


def upgrade() -> None:
    """Add ``resolutions.origin``, ``os_user``, ``host``, ``program`` and ``pid``, NULL so far.

    Columns added at the end of the table, in place on both backends: no row is
    rewritten. A resolution that records no writer (every one written before) is encoded
    in the hash chain as before (``ledger._chain``, version 4), so it keeps verifying; it
    reads as one whose writer is unknown. The guard that refuses a resolution recording part
    of its writer only is a trigger: env.py re-installs every trigger and view afterwards.
    """
    for name, type_ in _COLUMNS:
        op.add_column("resolutions", sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    """Drop the five columns again: for the tests of earlier revisions only.

    The library never downgrades a store. A resolution that records its writer loses it,
    and with it its hash (the chain then fails at it). The triggers that read the columns
    are dropped first (SQLite refuses to drop a column they name); env.py re-installs those
    the revision's tables can hold afterwards.
    """
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for (name,) in bind.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'resolutions'"
        ).all():
            op.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    else:
        op.execute("DROP FUNCTION IF EXISTS ledger_resolutions_guard_origin() CASCADE")
    for name, _type in reversed(_COLUMNS):
        op.drop_column("resolutions", name)
