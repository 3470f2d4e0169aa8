"""Initial schema: runs, attempts, events, checkpoints, datasets.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("plan", sa.JSON, nullable=False),
        sa.Column("idempotency_key", sa.String(200)),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("terminal_reason", sa.String(32)),
        sa.Column("state_detail", sa.Text),
        sa.Column("workdir", sa.Text, nullable=False),
        sa.Column("root", sa.Text, nullable=False),
        sa.Column("allocation", sa.JSON),
        sa.Column("rank_manifest", sa.JSON),
        sa.Column("last_heartbeat_unix_s", sa.Float),
        sa.Column("last_step", sa.Integer),
        sa.Column("latest_checkpoint_id", sa.String(64)),
        sa.Column("data_cursor", sa.JSON),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("updated_unix_s", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
        sa.UniqueConstraint("idempotency_key", name="uq_runs_idempotency_key"),
    )
    op.create_index("ix_runs_spec_hash", "runs", ["spec_hash"])
    op.create_table(
        "attempts",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("started_unix_s", sa.Float, nullable=False),
        sa.Column("ended_unix_s", sa.Float),
        sa.Column("world_size", sa.Integer, nullable=False),
        sa.Column("exit_code", sa.Integer),
        sa.Column("failure_class", sa.String(32)),
        sa.Column("detail", sa.JSON),
        sa.PrimaryKeyConstraint("run_id", "generation", name="pk_attempts"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_attempts_run_id_runs"),
    )
    op.create_table(
        "events",
        sa.Column("seq", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("type", sa.String(48), nullable=False),
        sa.Column("step", sa.Integer),
        sa.Column("world_size", sa.Integer),
        sa.Column("checkpoint_id", sa.String(64)),
        sa.Column("time_unix_s", sa.Float, nullable=False),
        sa.Column("attributes", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_events"),
        sa.UniqueConstraint("event_id", name="uq_events_event_id"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_events_run_id_runs"),
    )
    op.create_index("ix_events_run_id", "events", ["run_id"])
    op.create_table(
        "checkpoints",
        sa.Column("checkpoint_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("manifest_sha256", sa.String(64)),
        sa.Column("attributes", sa.JSON, nullable=False),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("checkpoint_id", name="pk_checkpoints"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_checkpoints_run_id_runs"),
    )
    op.create_index("ix_checkpoints_run_id", "checkpoints", ["run_id"])
    op.create_table(
        "datasets",
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("manifest", sa.JSON, nullable=False),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("dataset_id", name="pk_datasets"),
    )


def downgrade() -> None:
    for table in ("datasets", "checkpoints", "events", "attempts", "runs"):
        op.drop_table(table)
