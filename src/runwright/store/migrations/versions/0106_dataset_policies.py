"""Dataset use policies: versions of each dataset's policy and standing (store/dataset_policies.py).

Revision ID: 0106_dataset_policies
Revises: 0105_model_releases
"""

import sqlalchemy as sa
from alembic import op

revision = "0106_dataset_policies"
down_revision = "0105_model_releases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dataset_policies",
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("standing", sa.String(16), nullable=False),
        sa.Column("policy", sa.JSON, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("changed_by", sa.String(200), nullable=False),
        sa.Column("changed_unix_s", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("dataset_id", "version", name="pk_dataset_policies"),
    )
    op.create_index("ix_dataset_policies_standing", "dataset_policies", ["standing"])


def downgrade() -> None:
    op.drop_index("ix_dataset_policies_standing", "dataset_policies")
    op.drop_table("dataset_policies")
