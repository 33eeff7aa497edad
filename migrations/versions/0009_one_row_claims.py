"""a claim in one row: its impact scope and postconditions as JSON in the claim

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SCOPE = ("kind", "locator", "role", "revision")
_DUTIES = (
    "target_kind",
    "target_locator",
    "target_role",
    "target_revision",
    "predicate",
    "expected",
)


def _array(dialect: str, table: str, columns: tuple[str, ...]) -> str:
    """The claim's rows of ``table`` as a JSON array of objects, in position order."""
    where = "k.run_id = claims.run_id AND k.effect_id = claims.effect_id"
    if dialect == "sqlite":
        pairs = ", ".join(f"'{c}', k.{c}" for c in columns)
        return (
            f"(SELECT json_group_array(json_object({pairs}))"
            f" FROM (SELECT * FROM {table} AS k WHERE {where} ORDER BY k.position) AS k)"
        )
    pairs = ", ".join(f"'{c}', k.{c}" for c in columns)
    return (
        f"coalesce((SELECT json_agg(json_build_object({pairs}) ORDER BY k.position)::text"
        f" FROM {table} AS k WHERE {where}), '[]')"
    )


def upgrade() -> None:
    """Move each claim's impact-scope and obligation rows into two JSON columns of the claim.

    A claim becomes one row, one insert. The chain encodes the same fields in the same
    order as before (``ledger._chain``), so every existing record keeps verifying. The
    tables ``impact_scope`` and ``obligations`` become views of those names with the same
    columns; ``scope_index`` keeps the scopes searchable by resource for the views. One
    transaction under the write lock; env.py re-installs every trigger and view afterwards.
    """
    conn = op.get_bind()
    dialect = conn.dialect.name
    sqlite = dialect == "sqlite"
    # The views and the claims' guards read the old tables; all are re-created at the end.
    for view in ("effect_status", "unsettled_claims"):
        conn.exec_driver_sql(f"DROP VIEW IF EXISTS {view}")
    for trigger in ("claims_no_update", "claims_guard_hash"):
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}" + ("" if sqlite else " ON claims"))
    op.add_column("claims", sa.Column("impact_scope", sa.Text(), nullable=True))
    op.add_column("claims", sa.Column("obligations", sa.Text(), nullable=True))
    conn.exec_driver_sql(
        f"UPDATE claims SET impact_scope = {_array(dialect, 'impact_scope', _SCOPE)},"
        f" obligations = {_array(dialect, 'obligations', _DUTIES)}"
    )
    op.create_table(
        "scope_index",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("locator", sa.Text(), nullable=False),
        sa.Column("effect_id", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(
            "run_id", "kind", "locator", "effect_id", "position", name=op.f("pk_scope_index")
        ),
        sqlite_strict=True,
        sqlite_with_rowid=False,
    )
    conn.exec_driver_sql(
        "INSERT INTO scope_index (run_id, kind, locator, effect_id, position)"
        " SELECT run_id, kind, locator, effect_id, position FROM impact_scope"
    )
    op.drop_table("impact_scope")
    op.drop_table("obligations")
    if not sqlite:  # their guards' functions outlive the tables on PostgreSQL
        for table in ("impact_scope", "obligations"):
            for guard in ("guard_claim", "guard_key"):
                conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS ledger_{table}_{guard}()")
    # SQLite keeps a table's definition as text: rebuilt, it reads as the library writes it.
    with op.batch_alter_table("claims", recreate="always" if sqlite else "auto") as batch:
        batch.alter_column("impact_scope", existing_type=sa.Text(), nullable=False)
        batch.alter_column("obligations", existing_type=sa.Text(), nullable=False)


def downgrade() -> None:
    """Stores are never downgraded: records are append-only."""
    raise NotImplementedError
