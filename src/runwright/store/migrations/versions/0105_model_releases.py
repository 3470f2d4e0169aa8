"""The model registry: release requests, their gates, lineage and decisions (store/releases.py).

Revision ID: 0105_model_releases
Revises: 0104_run_inputs
"""

import sqlalchemy as sa
from alembic import op

revision = "0105_model_releases"
down_revision = "0104_run_inputs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_releases",
        sa.Column("release_id", sa.String(64), nullable=False),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.String(64), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("export_path", sa.Text, nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("release_sha256", sa.String(64)),
        sa.Column("status", sa.String(24), nullable=False),
        sa.Column("gates", sa.JSON, nullable=False),
        sa.Column("lineage", sa.JSON, nullable=False),
        sa.Column("requested_by", sa.String(200), nullable=False),
        sa.Column("requested_unix_s", sa.Float, nullable=False),
        sa.Column("decided_by", sa.String(200)),
        sa.Column("decided_unix_s", sa.Float),
        sa.Column("decision_note", sa.Text),
        sa.PrimaryKeyConstraint("release_id", name="pk_model_releases"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_model_releases_run_id_runs"),
        sa.UniqueConstraint("project", "name", "version", name="uq_model_releases_version"),
    )
    op.create_index("ix_model_releases_run_id", "model_releases", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_model_releases_run_id", "model_releases")
    op.drop_table("model_releases")
