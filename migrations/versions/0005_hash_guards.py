"""hash guards: the schema checks each record's hash, not only its link

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """No table changes: the environment re-creates every view and trigger after a revision.

    The new ``*_guard_hash`` triggers (in ``ledger._sql.guards``) refuse a record whose
    ``hash`` is not SHA3-256 of its ``prev_hash`` and fields, as the stock shell's
    ``sha3()`` computes it; rows already in the store are checked by ``ledger verify``.
    """


def downgrade() -> None:
    """Nothing to undo in the tables."""
