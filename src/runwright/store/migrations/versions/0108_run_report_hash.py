"""The newest served report's hash in the run's row (store.py `record_report_hash`).

Revision ID: 0108_run_report_hash
Revises: 0107_experiments
"""

import sqlalchemy as sa
from alembic import op

revision = "0108_run_report_hash"
down_revision = "0107_experiments"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("report_sha256", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("report_sha256")
