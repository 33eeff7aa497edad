"""SQLite checks each table's inserted rows in one trigger, not one trigger per guard

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The triggers the guards were on SQLite until this revision, one per guard.
_ONE_PER_GUARD = (
    "runs_guard_key",
    "claims_guard_key",
    "observations_guard_key",
    "outcomes_guard_settled",
    "outcomes_guard_order",
    "resolutions_guard_key",
    "resolutions_guard_claim",
    "resolutions_guard_origin",
    "claims_guard_retry",
    "claims_guard_run",
    "observations_guard_run",
    "outcomes_guard_claim",
    "scope_index_guard_claim",
    "claims_guard_hash",
    "outcomes_guard_hash",
    "observations_guard_hash",
    "resolutions_guard_hash",
    "claims_guard_chain",
    "outcomes_guard_chain",
    "observations_guard_chain",
    "resolutions_guard_chain",
    "claims_guard_seq",
    "outcomes_guard_seq",
    "observations_guard_seq",
    "resolutions_guard_seq",
    "claims_guard_impact_scope",
    "claims_guard_obligations",
)


def upgrade() -> None:
    """Drop SQLite's one-trigger-per-guard triggers; no table changes.

    The environment re-creates every trigger and view after a revision: on SQLite each
    table's guards are now one ``<table>_guard`` trigger (``ledger.sqlite.schema``), with
    the same checks, in the same order, refusing with the same messages. It is created
    in the same transaction, so no row is ever inserted unguarded. PostgreSQL keeps its
    guards as they are.
    """
    if op.get_bind().dialect.name == "sqlite":
        for name in _ONE_PER_GUARD:
            op.execute(f'DROP TRIGGER IF EXISTS "{name}"')


def downgrade() -> None:
    """Nothing to undo in the tables: for the tests of earlier revisions only.

    The environment installs the library's triggers (the folded ones) at any revision.
    """
