"""approvals: requests, decisions, and the approval a claim was made under

Revision ID: 0016
Revises: 0015
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _text(name: str, *, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.Text(), nullable=nullable)


def upgrade() -> None:
    """Create ``approval_requests`` and ``approval_decisions``; add ``claims.approval_id``.

    The column is added at the end of its table, in place on both backends: no row is
    rewritten, and a claim made without an approval is encoded in the hash chain as before
    (``ledger._chain``, version 6). The partial unique index lets one approval be used by
    one claim. env.py re-installs every trigger and view afterwards.
    """
    op.create_table(
        "approval_requests",
        _text("run_id"),
        sa.Column("seq", sa.Integer(), nullable=False),
        _text("approval_id"),
        _text("effect_id"),
        _text("action_digest"),
        _text("operation"),
        _text("step"),
        _text("args", nullable=True),
        _text("reason"),
        _text("requested_at"),
        _text("expires_at"),
        _text("os_user"),
        _text("host"),
        _text("program"),
        sa.Column("pid", sa.Integer(), nullable=False),
        _text("prev_hash"),
        _text("hash"),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_approval_requests")),
        sa.UniqueConstraint(
            "run_id", "approval_id", name=op.f("uq_approval_requests_run_id_approval_id")
        ),
        sa.UniqueConstraint(
            "run_id", "effect_id", name=op.f("uq_approval_requests_run_id_effect_id")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_approval_requests_run_id_runs")
        ),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_approval_requests_seq")),
        sa.CheckConstraint(
            "length(approval_id) BETWEEN 1 AND 200", name=op.f("ck_approval_requests_approval_id")
        ),
        sa.CheckConstraint(
            "length(effect_id) BETWEEN 1 AND 200", name=op.f("ck_approval_requests_effect_id")
        ),
        sa.CheckConstraint(
            "length(operation) BETWEEN 1 AND 200", name=op.f("ck_approval_requests_operation")
        ),
        sa.CheckConstraint(
            "length(action_digest) = 64 AND ltrim(action_digest, '0123456789abcdef') = ''",
            name=op.f("ck_approval_requests_action_digest"),
        ),
        sa.CheckConstraint(
            "expires_at > requested_at", name=op.f("ck_approval_requests_expires_at")
        ),
        sa.CheckConstraint("pid > 0", name=op.f("ck_approval_requests_pid")),
        sa.CheckConstraint(
            "length(prev_hash) = 64 AND ltrim(prev_hash, '0123456789abcdef') = ''",
            name=op.f("ck_approval_requests_prev_hash"),
        ),
        sa.CheckConstraint(
            "length(hash) = 64 AND ltrim(hash, '0123456789abcdef') = ''",
            name=op.f("ck_approval_requests_hash"),
        ),
        sqlite_strict=True,
    )
    op.create_table(
        "approval_decisions",
        _text("run_id"),
        sa.Column("seq", sa.Integer(), nullable=False),
        _text("approval_id"),
        _text("decision"),
        _text("decided_by"),
        _text("note"),
        _text("decided_at"),
        _text("source"),
        _text("os_user"),
        _text("host"),
        _text("program"),
        sa.Column("pid", sa.Integer(), nullable=False),
        _text("prev_hash"),
        _text("hash"),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_approval_decisions")),
        sa.UniqueConstraint(
            "run_id", "approval_id", name=op.f("uq_approval_decisions_run_id_approval_id")
        ),
        sa.ForeignKeyConstraint(
            ["run_id", "approval_id"],
            ["approval_requests.run_id", "approval_requests.approval_id"],
            name=op.f("fk_approval_decisions_run_id_approval_id_approval_requests"),
        ),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_approval_decisions_seq")),
        sa.CheckConstraint(
            "decision IN ('granted', 'denied')", name=op.f("ck_approval_decisions_decision")
        ),
        sa.CheckConstraint(
            "length(decided_by) BETWEEN 1 AND 200", name=op.f("ck_approval_decisions_decided_by")
        ),
        sa.CheckConstraint(
            "source IN ('command', 'program', 'elicitation')",
            name=op.f("ck_approval_decisions_source"),
        ),
        sa.CheckConstraint("pid > 0", name=op.f("ck_approval_decisions_pid")),
        sa.CheckConstraint(
            "length(prev_hash) = 64 AND ltrim(prev_hash, '0123456789abcdef') = ''",
            name=op.f("ck_approval_decisions_prev_hash"),
        ),
        sa.CheckConstraint(
            "length(hash) = 64 AND ltrim(hash, '0123456789abcdef') = ''",
            name=op.f("ck_approval_decisions_hash"),
        ),
        sqlite_strict=True,
    )
    op.add_column("claims", _text("approval_id", nullable=True))
    op.create_index(
        "uq_claims_approval",
        "claims",
        ["run_id", "approval_id"],
        unique=True,
        sqlite_where=sa.text("approval_id IS NOT NULL"),
        postgresql_where=sa.text("approval_id IS NOT NULL"),
    )


def downgrade() -> None:
    """Drop them again: for the tests of earlier revisions only.

    The library never downgrades a store; a run with approvals loses them, and its chain
    then fails at the first. The views and triggers that read what goes are dropped
    first; env.py re-installs those the revision's tables can hold afterwards.
    """
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        derived = bind.exec_driver_sql(
            "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')"
            " AND (sql LIKE '%approval%' OR tbl_name LIKE 'approval%')"
        ).all()
    else:
        derived = [
            ("view", name)
            for name in bind.exec_driver_sql(
                "SELECT viewname FROM pg_views WHERE schemaname = current_schema()"
            ).scalars()
        ]
    cascade = "" if bind.dialect.name == "sqlite" else " CASCADE"
    for kind, name in derived:
        op.execute(f'DROP {kind.upper()} IF EXISTS "{name}"{cascade}')
    if bind.dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS ledger_claims_guard_approval() CASCADE")
    op.drop_index("uq_claims_approval", table_name="claims")
    op.drop_column("claims", "approval_id")
    op.drop_table("approval_decisions")
    op.drop_table("approval_requests")
