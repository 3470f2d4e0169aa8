"""Experiments: runs grouped under an owner and a hypothesis (store/experiments.py).

Revision ID: 0107_experiments
Revises: 0106_dataset_policies
"""

import sqlalchemy as sa
from alembic import op

revision = "0107_experiments"
down_revision = "0106_dataset_policies"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "experiments",
        sa.Column("project", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("hypothesis", sa.Text, nullable=False),
        sa.Column("created_by", sa.String(200)),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("project", "name", name="pk_experiments"),
    )
    op.create_table(
        "experiment_runs",
        sa.Column("project", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("added_by", sa.String(200)),
        sa.Column("added_unix_s", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("project", "name", "run_id", name="pk_experiment_runs"),
    )
    op.create_index("ix_experiment_runs_run", "experiment_runs", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_experiment_runs_run", "experiment_runs")
    op.drop_table("experiment_runs")
    op.drop_table("experiments")
