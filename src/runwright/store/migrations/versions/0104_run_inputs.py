"""Run inputs: which datasets each run trained on, for lineage queries (store/lineage.py).

Filled from the DATA_STAGE_READY events already stored, so a store written before lineage
existed answers for its old runs too.

Revision ID: 0104_run_inputs
Revises: 0103_store_locks
"""

import sqlalchemy as sa
from alembic import op

from runwright.events import EventType

revision = "0104_run_inputs"
down_revision = "0103_store_locks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "run_inputs",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("tokenizer_hash", sa.String(64)),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("recorded_unix_s", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "dataset_id", name="pk_run_inputs"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_inputs_run_id_runs"),
    )
    op.create_index("ix_run_inputs_dataset_id", "run_inputs", ["dataset_id"])
    events = sa.table(
        "events",
        sa.column("run_id", sa.String),
        sa.column("generation", sa.Integer),
        sa.column("type", sa.String),
        sa.column("time_unix_s", sa.Float),
        sa.column("attributes", sa.JSON),
        sa.column("seq", sa.Integer),
    )
    rows = op.get_bind().execute(
        sa.select(events.c.run_id, events.c.generation, events.c.time_unix_s, events.c.attributes)
        .where(events.c.type == EventType.DATA_STAGE_READY)
        .order_by(events.c.seq)
    )
    first: dict[tuple[str, str], dict] = {}
    for run_id, generation, when, attributes in rows:
        dataset_id = (attributes or {}).get("dataset_id")
        if isinstance(dataset_id, str) and dataset_id:
            first.setdefault(
                (run_id, dataset_id),
                {
                    "run_id": run_id,
                    "dataset_id": dataset_id[:64],
                    "tokenizer_hash": (attributes.get("tokenizer_hash") or None),
                    "generation": generation,
                    "recorded_unix_s": when,
                },
            )
    if first:
        op.bulk_insert(table, list(first.values()))


def downgrade() -> None:
    op.drop_index("ix_run_inputs_dataset_id", "run_inputs")
    op.drop_table("run_inputs")
