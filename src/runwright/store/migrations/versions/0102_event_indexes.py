"""Event indexes for reads that must not grow with a run's history (issue 20).

`status` reads a run's state changes and incidents, the controller's run views the few event
types its passes consult (control/runlog.py), `events --type X` one type: each is `run_id = ? AND
type IN (...) [AND seq > ?] ORDER BY seq`. With only an index on run_id, a run with a million
STEP_HEALTHY rows was scanned whole for its dozen state changes (~1 s per `status`). An index on
(run_id, type, seq) answers them from the rows they return. (run_id, seq) replaces the index on
run_id alone: the same look-ups, plus the tail reads (`after_seq`, the newest N) in order. On
SQLite an index already ends with the rowid, which is seq, so this one only names it; PostgreSQL
needs seq in the key to seek instead of filtering every row of the run.

Revision ID: 0102_event_indexes
Revises: 0101_run_leases
"""

from alembic import op

revision = "0102_event_indexes"
down_revision = "0101_run_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_events_run_id_type_seq", "events", ["run_id", "type", "seq"])
    op.create_index("ix_events_run_id_seq", "events", ["run_id", "seq"])
    op.drop_index("ix_events_run_id", table_name="events")


def downgrade() -> None:
    op.create_index("ix_events_run_id", "events", ["run_id"])
    op.drop_index("ix_events_run_id_seq", table_name="events")
    op.drop_index("ix_events_run_id_type_seq", table_name="events")
