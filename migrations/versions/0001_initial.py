"""initial schema: runs, claims and their scope and obligations, outcomes, observations

Revision ID: 0001
Revises: (none)
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the record tables; env.py then installs the triggers and views."""
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "length(run_id) = 32 AND ltrim(run_id, '0123456789abcdef') = ''",
            name=op.f("ck_runs_run_id"),
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_runs")),
        sqlite_strict=True,
    )
    op.create_table(
        "claims",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("effect_id", sa.Text(), nullable=False),
        sa.Column("action_id", sa.Text(), nullable=False),
        sa.Column("operation", sa.Text(), nullable=False),
        sa.Column("backend", sa.Text(), nullable=False),
        sa.Column("args_sha256", sa.Text(), nullable=False),
        sa.Column("scope_count", sa.Integer(), nullable=False),
        sa.Column("obligation_count", sa.Integer(), nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "length(args_sha256) = 64 AND ltrim(args_sha256, '0123456789abcdef') = ''",
            name=op.f("ck_claims_args_sha256"),
        ),
        sa.CheckConstraint("length(action_id) BETWEEN 1 AND 200", name=op.f("ck_claims_action_id")),
        sa.CheckConstraint("length(effect_id) BETWEEN 1 AND 200", name=op.f("ck_claims_effect_id")),
        sa.CheckConstraint("length(operation) BETWEEN 1 AND 200", name=op.f("ck_claims_operation")),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_claims_seq")),
        sa.CheckConstraint("scope_count >= 0", name=op.f("ck_claims_scope_count")),
        sa.CheckConstraint("obligation_count >= 0", name=op.f("ck_claims_obligation_count")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name=op.f("fk_claims_run_id_runs")),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_claims")),
        sa.UniqueConstraint("run_id", "effect_id", name=op.f("uq_claims_run_id_effect_id")),
        sqlite_strict=True,
    )
    op.create_table(
        "observations",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("observation_id", sa.Text(), nullable=False),
        sa.Column("resource_kind", sa.Text(), nullable=False),
        sa.Column("resource_locator", sa.Text(), nullable=False),
        sa.Column("resource_role", sa.Text(), nullable=False),
        sa.Column("resource_revision", sa.Text(), nullable=True),
        sa.Column("mechanism", sa.Text(), nullable=False),
        sa.Column("coverage", sa.Text(), nullable=False),
        sa.Column("source_action_id", sa.Text(), nullable=False),
        sa.Column("resource_exists", sa.Integer(), nullable=True),
        sa.Column("sha256", sa.Text(), nullable=True),
        sa.Column("revision", sa.Text(), nullable=True),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "coverage IN ('complete', 'partial')", name=op.f("ck_observations_coverage")
        ),
        sa.CheckConstraint(
            "mechanism IN ('filesystem_read', 'filesystem_stat', 'record_read', 'backend_query')",
            name=op.f("ck_observations_mechanism"),
        ),
        sa.CheckConstraint(
            "resource_kind IN ('fs', 'owned')", name=op.f("ck_observations_resource_kind")
        ),
        sa.CheckConstraint(
            "sha256 IS NULL OR (length(sha256) = 64 AND ltrim(sha256, '0123456789abcdef') = '')",
            name=op.f("ck_observations_sha256"),
        ),
        sa.CheckConstraint(
            "length(observation_id) BETWEEN 1 AND 200", name=op.f("ck_observations_observation_id")
        ),
        sa.CheckConstraint(
            "resource_exists IN (0, 1)", name=op.f("ck_observations_resource_exists")
        ),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_observations_seq")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_observations_run_id_runs")
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_observations")),
        sa.UniqueConstraint(
            "run_id", "observation_id", name=op.f("uq_observations_run_id_observation_id")
        ),
        sqlite_strict=True,
    )
    op.create_index(
        op.f("ix_observations_run_id_resource_kind_resource_locator"),
        "observations",
        ["run_id", "resource_kind", "resource_locator"],
        unique=False,
    )
    op.create_table(
        "impact_scope",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("effect_id", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("locator", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("revision", sa.Text(), nullable=True),
        sa.CheckConstraint("kind IN ('fs', 'owned')", name=op.f("ck_impact_scope_kind")),
        sa.CheckConstraint("position >= 0", name=op.f("ck_impact_scope_position")),
        sa.ForeignKeyConstraint(
            ["run_id", "effect_id"],
            ["claims.run_id", "claims.effect_id"],
            name=op.f("fk_impact_scope_run_id_effect_id_claims"),
        ),
        sa.PrimaryKeyConstraint("run_id", "effect_id", "position", name=op.f("pk_impact_scope")),
        sqlite_strict=True,
    )
    op.create_index(
        op.f("ix_impact_scope_run_id_kind_locator"),
        "impact_scope",
        ["run_id", "kind", "locator"],
        unique=False,
    )
    op.create_table(
        "obligations",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("effect_id", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("target_kind", sa.Text(), nullable=False),
        sa.Column("target_locator", sa.Text(), nullable=False),
        sa.Column("target_role", sa.Text(), nullable=False),
        sa.Column("target_revision", sa.Text(), nullable=True),
        sa.Column("predicate", sa.Text(), nullable=False),
        sa.Column("expected", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "(predicate IN ('exists', 'absent') AND expected IS NULL) OR (predicate IN ('sha256', 'revision') AND expected IS NOT NULL)",
            name=op.f("ck_obligations_expected"),
        ),
        sa.CheckConstraint(
            "predicate IN ('exists', 'absent', 'sha256', 'revision')",
            name=op.f("ck_obligations_predicate"),
        ),
        sa.CheckConstraint(
            "target_kind IN ('fs', 'owned')", name=op.f("ck_obligations_target_kind")
        ),
        sa.CheckConstraint("position >= 0", name=op.f("ck_obligations_position")),
        sa.ForeignKeyConstraint(
            ["run_id", "effect_id"],
            ["claims.run_id", "claims.effect_id"],
            name=op.f("fk_obligations_run_id_effect_id_claims"),
        ),
        sa.PrimaryKeyConstraint("run_id", "effect_id", "position", name=op.f("pk_obligations")),
        sqlite_strict=True,
    )
    op.create_table(
        "outcomes",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("effect_id", sa.Text(), nullable=False),
        sa.Column("execution", sa.Text(), nullable=False),
        sa.Column("impact", sa.Text(), nullable=False),
        sa.Column("execution_id", sa.Text(), nullable=True),
        sa.Column("replayed", sa.Integer(), nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "execution <> 'interrupted' OR impact = 'possible'",
            name=op.f("ck_outcomes_interrupted_impact"),
        ),
        sa.CheckConstraint(
            "execution IN ('running', 'reported_success', 'failed', 'interrupted')",
            name=op.f("ck_outcomes_execution"),
        ),
        sa.CheckConstraint(
            "impact IN ('none', 'possible', 'certain')", name=op.f("ck_outcomes_impact")
        ),
        sa.CheckConstraint(
            "replayed = 0 OR execution = 'interrupted'",
            name=op.f("ck_outcomes_replayed_interrupted"),
        ),
        sa.CheckConstraint(
            "execution_id IS NULL OR length(execution_id) BETWEEN 1 AND 200",
            name=op.f("ck_outcomes_execution_id"),
        ),
        sa.CheckConstraint("replayed IN (0, 1)", name=op.f("ck_outcomes_replayed")),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_outcomes_seq")),
        sa.ForeignKeyConstraint(
            ["run_id", "effect_id"],
            ["claims.run_id", "claims.effect_id"],
            name=op.f("fk_outcomes_run_id_effect_id_claims"),
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_outcomes")),
        sqlite_strict=True,
    )
    op.create_index(
        op.f("ix_outcomes_run_id_effect_id"), "outcomes", ["run_id", "effect_id"], unique=False
    )
    op.create_index(
        "uq_outcomes_terminal",
        "outcomes",
        ["run_id", "effect_id"],
        unique=True,
        sqlite_where=sa.text("execution <> 'running'"),
        postgresql_where=sa.text("execution <> 'running'"),
    )


def downgrade() -> None:
    """Stores are never downgraded: records are append-only."""
    raise NotImplementedError
