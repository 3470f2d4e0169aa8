"""Tables of the durable store. Times are unix seconds (float); JSON columns hold records that the
layers above validate with pydantic.

The schema is created and evolved only through the Alembic migrations in `migrations/`; this module
is the single description both the migrations and the queries use.
"""

import sqlalchemy as sa

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("spec_hash", sa.String(64), nullable=False, index=True),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("plan", sa.JSON, nullable=False),
    sa.Column("idempotency_key", sa.String(200), unique=True),
    # The fencing token: bumped on every (re)start and on cancel; a write carrying another
    # generation is rejected.
    sa.Column("generation", sa.Integer, nullable=False, default=0),
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
    # The shared server (migration 0100_server): whose run it is, who submitted it.
    sa.Column("project", sa.String(100), nullable=False, server_default="default", index=True),
    sa.Column("submitted_by", sa.String(200)),
    # The newest report served of the run (migration 0108_run_report_hash); REPORT_HASHED
    # events name every one.
    sa.Column("report_sha256", sa.String(64)),
)

attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True),
    sa.Column("started_unix_s", sa.Float, nullable=False),
    sa.Column("ended_unix_s", sa.Float),
    sa.Column("world_size", sa.Integer, nullable=False),
    sa.Column("exit_code", sa.Integer),
    sa.Column("failure_class", sa.String(32)),
    sa.Column("detail", sa.JSON),
)

events = sa.Table(
    "events",
    metadata,
    # seq orders events as the store accepted them; event_id makes a duplicate a no-op.
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(200), nullable=False, unique=True),
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("type", sa.String(48), nullable=False),
    sa.Column("step", sa.Integer),
    sa.Column("world_size", sa.Integer),
    sa.Column("checkpoint_id", sa.String(64)),
    sa.Column("time_unix_s", sa.Float, nullable=False),
    sa.Column("attributes", sa.JSON, nullable=False),
    # Reads that must not grow with a run's history (migration 0102_event_indexes): one run's
    # events of some types in order (status, `events --type`, the controller's run views), and
    # one run's events after a sequence number or its newest ones.
    sa.Index("ix_events_run_id_type_seq", "run_id", "type", "seq"),
    sa.Index("ix_events_run_id_seq", "run_id", "seq"),
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column("checkpoint_id", sa.String(64), primary_key=True),
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False, index=True),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("manifest_sha256", sa.String(64)),
    sa.Column("attributes", sa.JSON, nullable=False),
    sa.Column("created_unix_s", sa.Float, nullable=False),
)

datasets = sa.Table(
    "datasets",
    metadata,
    sa.Column("dataset_id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("manifest", sa.JSON, nullable=False),
    sa.Column("created_unix_s", sa.Float, nullable=False),
)

run_leases = sa.Table(
    "run_leases",
    metadata,
    # Which controller drives the run (store/leases.py). Its times come from the DATABASE's
    # clock, not the writer's, so controllers on hosts whose clocks disagree agree on expiry.
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), primary_key=True),
    sa.Column("holder", sa.String(200)),
    sa.Column("holder_node", sa.String(200)),
    # The fencing token of controller writes: raised on every change of holder.
    sa.Column("epoch", sa.Integer, nullable=False),
    sa.Column("released", sa.Boolean, nullable=False),
    sa.Column("lease_seconds", sa.Float),
    sa.Column("acquired_unix_s", sa.Float),
    sa.Column("renewed_unix_s", sa.Float),
    sa.Column("expires_unix_s", sa.Float, nullable=False),
)

store_locks = sa.Table(
    "store_locks",
    metadata,
    # Named locks over store-wide jobs (store/locks.py), e.g. the admission pass; timed by the
    # DATABASE's clock, as run leases are.
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("holder", sa.String(200)),
    sa.Column("epoch", sa.Integer, nullable=False),
    sa.Column("released", sa.Boolean, nullable=False),
    sa.Column("acquired_unix_s", sa.Float),
    sa.Column("expires_unix_s", sa.Float, nullable=False),
)

run_inputs = sa.Table(
    "run_inputs",
    metadata,
    # Which datasets each run trained on, as its loaders reported them (DATA_STAGE_READY): the
    # index lineage queries read (store/lineage.py), written once per run and dataset.
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), primary_key=True),
    sa.Column("dataset_id", sa.String(64), primary_key=True),
    sa.Column("tokenizer_hash", sa.String(64)),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("recorded_unix_s", sa.Float, nullable=False),
    sa.Index("ix_run_inputs_dataset_id", "dataset_id"),
)

model_releases = sa.Table(
    "model_releases",
    metadata,
    # The model registry (store/releases.py): one row per release request of a checkpoint's
    # export, with the gates it passed or failed, its lineage and who decided it.
    sa.Column("release_id", sa.String(64), primary_key=True),
    sa.Column("project", sa.String(100), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    # Numbered per (project, name) from 1, in request order; never reused.
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False),
    sa.Column("checkpoint_id", sa.String(64), nullable=False),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("export_path", sa.Text, nullable=False),
    sa.Column("format", sa.String(16), nullable=False),
    # sha256 of the export's release.json, whose file list hashes every other file.
    sa.Column("release_sha256", sa.String(64)),
    sa.Column("status", sa.String(24), nullable=False),
    sa.Column("gates", sa.JSON, nullable=False),
    sa.Column("lineage", sa.JSON, nullable=False),
    sa.Column("requested_by", sa.String(200), nullable=False),
    sa.Column("requested_unix_s", sa.Float, nullable=False),
    sa.Column("decided_by", sa.String(200)),
    sa.Column("decided_unix_s", sa.Float),
    sa.Column("decision_note", sa.Text),
    sa.UniqueConstraint("project", "name", "version", name="uq_model_releases_version"),
    sa.Index("ix_model_releases_run_id", "run_id"),
)
