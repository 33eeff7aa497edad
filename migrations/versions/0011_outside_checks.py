"""other writers' rows are checked behind one trigger; a claim's one resource is indexed without a temporary table

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

    On SQLite the checks only other writers' rows get (each record's hash, a claim's JSON
    arrays) move from ``BEFORE INSERT`` triggers of the record tables to ``INSTEAD OF``
    triggers of the empty views ``outside_claims``, ``outside_outcomes``,
    ``outside_observations`` and ``outside_resolutions``, into which one trigger per table
    hands every row not written by the library; and a claim with one resource puts it in
    ``scope_index`` with ``INSERT ... VALUES``. Every row is checked as before.
    PostgreSQL's guards are unchanged.
    """


def downgrade() -> None:
    """Nothing to undo in the tables."""
