"""effect_status by index: the view computes each claim's verdict by indexed lookups

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """No table changes: the environment re-creates every view and trigger after a revision.

    ``effect_status`` used to compute every claim of the store before a ``WHERE`` could
    narrow it; its new definition (in ``ledger._sql.views``) follows the indexes by run,
    effect and resource, so one run or one effect reads only what its rules consult.
    """


def downgrade() -> None:
    """Nothing to undo in the tables."""
