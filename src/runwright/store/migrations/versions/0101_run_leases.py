"""Run leases: which controller drives each run, with a fencing epoch and an expiry.

Revision ID: 0101_run_leases
Revises: 0100_server
"""

import sqlalchemy as sa
from alembic import op

revision = "0101_run_leases"
down_revision = "0100_server"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # No rows: a run without one has a free lease, which the first controller to drive it takes.
    op.create_table(
        "run_leases",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(200)),
        sa.Column("holder_node", sa.String(200)),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("released", sa.Boolean, nullable=False),
        sa.Column("lease_seconds", sa.Float),
        sa.Column("acquired_unix_s", sa.Float),
        sa.Column("renewed_unix_s", sa.Float),
        sa.Column("expires_unix_s", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_run_leases"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_leases_run_id_runs"),
    )


def downgrade() -> None:
    op.drop_table("run_leases")
