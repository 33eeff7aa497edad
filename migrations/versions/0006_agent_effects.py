"""agent effects: a claim's kind, idempotency key and retry; resolutions; external resources

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ledger.effects import idempotency_key

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HEX32 = (
    "idempotency_key = '' OR"
    " (length(idempotency_key) = 32 AND ltrim(idempotency_key, '0123456789abcdef') = '')"
)
_KINDS = "'read', 'idempotent', 'write', 'irreversible'"
_RESOURCES = "'fs', 'owned', 'external'"


# SQLite cannot alter a column or a constraint in place: the table is rebuilt (which
# drops its triggers; env.py puts them back). PostgreSQL alters it in place, and could
# not drop a table that others' foreign keys name.
_RECREATE = {"sqlite": "always", "postgresql": "auto"}


def upgrade() -> None:
    """Give every claim its kind (``write``) and key, add resolutions, allow ``external``.

    Claims made before kinds existed are writes with no retry and the key their run and
    effect id derive: the chain encodes exactly those as it did before (``ledger._chain``),
    so every existing record keeps verifying. One transaction under the write lock; env.py
    re-installs every trigger and view afterwards.
    """
    conn = op.get_bind()
    op.add_column("claims", sa.Column("kind", sa.Text(), nullable=True))
    op.add_column("claims", sa.Column("idempotency_key", sa.Text(), nullable=True))
    op.add_column("claims", sa.Column("retry_of", sa.Text(), nullable=True))
    conn.exec_driver_sql(
        "DROP TRIGGER IF EXISTS claims_no_update"
        + ("" if conn.dialect.name == "sqlite" else " ON claims")
    )
    for run_id, effect_id in conn.exec_driver_sql("SELECT run_id, effect_id FROM claims").all():
        conn.execute(
            sa.text(
                "UPDATE claims SET kind = 'write', idempotency_key = :key"
                " WHERE run_id = :run AND effect_id = :effect"
            ),
            {"key": idempotency_key(run_id, effect_id), "run": run_id, "effect": effect_id},
        )
    with op.batch_alter_table("claims", recreate=_RECREATE[conn.dialect.name]) as batch:
        batch.alter_column("kind", existing_type=sa.Text(), nullable=False)
        batch.alter_column("idempotency_key", existing_type=sa.Text(), nullable=False)
        batch.create_check_constraint(op.f("ck_claims_kind"), f"kind IN ({_KINDS})")
        batch.create_check_constraint(op.f("ck_claims_idempotency_key"), _HEX32)
        batch.create_check_constraint(
            op.f("ck_claims_retry_of"),
            "retry_of IS NULL OR (length(retry_of) BETWEEN 1 AND 200 AND retry_of <> effect_id)",
        )
        batch.create_index(op.f("ix_claims_run_id_retry_of"), ["run_id", "retry_of"])
    for table, column in (
        ("impact_scope", "kind"),
        ("obligations", "target_kind"),
        ("observations", "resource_kind"),
    ):
        with op.batch_alter_table(table, recreate=_RECREATE[conn.dialect.name]) as batch:
            batch.drop_constraint(op.f(f"ck_{table}_{column}"), type_="check")
            batch.create_check_constraint(
                op.f(f"ck_{table}_{column}"), f"{column} IN ({_RESOURCES})"
            )
    op.create_table(
        "resolutions",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("effect_id", sa.Text(), nullable=False),
        sa.Column("applied", sa.Integer(), nullable=False),
        sa.Column("resolved_by", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.Column("prev_hash", sa.Text(), nullable=False),
        sa.Column("hash", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_resolutions")),
        sa.UniqueConstraint("run_id", "effect_id", name=op.f("uq_resolutions_run_id_effect_id")),
        sa.ForeignKeyConstraint(
            ["run_id", "effect_id"],
            ["claims.run_id", "claims.effect_id"],
            name=op.f("fk_resolutions_run_id_effect_id_claims"),
        ),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_resolutions_seq")),
        sa.CheckConstraint("applied IN (0, 1)", name=op.f("ck_resolutions_applied")),
        sa.CheckConstraint(
            "length(resolved_by) BETWEEN 1 AND 200", name=op.f("ck_resolutions_resolved_by")
        ),
        sa.CheckConstraint(
            "length(prev_hash) = 64 AND ltrim(prev_hash, '0123456789abcdef') = ''",
            name=op.f("ck_resolutions_prev_hash"),
        ),
        sa.CheckConstraint(
            "length(hash) = 64 AND ltrim(hash, '0123456789abcdef') = ''",
            name=op.f("ck_resolutions_hash"),
        ),
        sqlite_strict=True,
    )


def downgrade() -> None:
    """Stores are never downgraded: records are append-only."""
    raise NotImplementedError
