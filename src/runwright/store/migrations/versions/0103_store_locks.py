"""Named store locks (store/locks.py): one controller at a time runs the admission pass.

Revision ID: 0103_store_locks
Revises: 0102_event_indexes
"""

import sqlalchemy as sa
from alembic import op

revision = "0103_store_locks"
down_revision = "0102_event_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "store_locks",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("holder", sa.String(200)),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("released", sa.Boolean, nullable=False),
        sa.Column("acquired_unix_s", sa.Float),
        sa.Column("expires_unix_s", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_store_locks"),
    )


def downgrade() -> None:
    op.drop_table("store_locks")
