"""hash guards skip what the library's own writers hashed an instant before

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """No table changes: the environment re-creates every view and trigger after a revision.

    On SQLite the ``*_guard_hash`` triggers (in ``ledger._sql.guards``) no longer
    recompute the hash of a record written by the library's own connections, which
    compute it in Python just before; every other connection (the stock shell's, any
    program's) is checked as before. PostgreSQL's guards are unchanged.
    """


def downgrade() -> None:
    """Nothing to undo in the tables."""
