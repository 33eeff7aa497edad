"""a claim's one resource goes into scope_index without a temporary table

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """No table changes: the environment re-creates every view and trigger after a revision.

    On SQLite a claim with exactly one resource in its impact scope puts it in
    ``scope_index`` with ``INSERT ... VALUES`` (trigger ``claims_scope_index_one``);
    ``claims_scope_index`` keeps ``INSERT ... SELECT`` for claims with more. SQLite runs
    an ``INSERT ... SELECT`` into a table with triggers through a temporary table. The
    rows are the same. PostgreSQL's trigger is unchanged.
    """


def downgrade() -> None:
    """Nothing to undo in the tables."""
