"""The shared server: principals, projects, roles, API tokens, dataset grants and the audit log;
each run records its project and submitter.

The audit log is append-only in the database itself: a trigger refuses UPDATE and DELETE on
SQLite and PostgreSQL (and TRUNCATE on PostgreSQL), so no code path, and no SQL client short of
dropping the trigger, changes a row once written.

Revision ID: 0100_server
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0100_server"
down_revision = "0001"
branch_labels = None
depends_on = None

APPEND_ONLY = "the audit log is append-only: its rows are never updated or deleted"


def upgrade() -> None:
    op.create_table(
        "principals",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("site_admin", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_principals"),
    )
    op.create_table(
        "projects",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_projects"),
    )
    op.create_table(
        "project_members",
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("principal", sa.String(100), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("granted_unix_s", sa.Float, nullable=False),
        sa.Column("granted_by", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("project", "principal", name="pk_project_members"),
        sa.ForeignKeyConstraint(
            ["project"], ["projects.name"], name="fk_project_members_project_projects"
        ),
        sa.ForeignKeyConstraint(
            ["principal"], ["principals.name"], name="fk_project_members_principal_principals"
        ),
    )
    op.create_table(
        "api_tokens",
        sa.Column("token_id", sa.String(32), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(100), nullable=False),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("role_cap", sa.String(16)),
        sa.Column("label", sa.String(200)),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("expires_unix_s", sa.Float, nullable=False),
        sa.Column("revoked_unix_s", sa.Float),
        sa.Column("revoked_by", sa.String(200)),
        sa.PrimaryKeyConstraint("token_id", name="pk_api_tokens"),
        sa.UniqueConstraint("secret_sha256", name="uq_api_tokens_secret_sha256"),
        sa.ForeignKeyConstraint(
            ["principal"], ["principals.name"], name="fk_api_tokens_principal_principals"
        ),
        sa.ForeignKeyConstraint(
            ["project"], ["projects.name"], name="fk_api_tokens_project_projects"
        ),
    )
    op.create_table(
        "project_datasets",
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("granted_unix_s", sa.Float, nullable=False),
        sa.Column("granted_by", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("project", "dataset_id", name="pk_project_datasets"),
        sa.ForeignKeyConstraint(
            ["project"], ["projects.name"], name="fk_project_datasets_project_projects"
        ),
    )
    op.create_table(
        "audit_log",
        sa.Column("seq", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("time_unix_s", sa.Float, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("via", sa.String(16), nullable=False),
        sa.Column("project", sa.String(100)),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(300)),
        sa.Column("parameters", sa.JSON, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text),
        sa.Column("request_id", sa.String(64)),
        sa.PrimaryKeyConstraint("seq", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_project", "audit_log", ["project"])
    op.create_index("ix_audit_log_time_unix_s", "audit_log", ["time_unix_s"])
    with op.batch_alter_table("runs") as batch:
        # Runs submitted before projects existed belong to the default project.
        batch.add_column(
            sa.Column("project", sa.String(100), nullable=False, server_default="default")
        )
        batch.add_column(sa.Column("submitted_by", sa.String(200)))
    op.create_index("ix_runs_project", "runs", ["project"])
    op.execute(
        sa.text(
            "INSERT INTO projects (name, created_unix_s, created_by) "
            "VALUES ('default', 0, 'migration 0100_server')"
        )
    )
    _append_only_triggers()


def _append_only_triggers() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_log_no_{verb.lower()} BEFORE {verb} ON audit_log "
                f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END"
            )
        return
    op.execute(
        "CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN RAISE EXCEPTION '{APPEND_ONLY}'; END $$"
    )
    op.execute(
        "CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log "
        "FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()"
    )
    op.execute(
        "CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log "
        "FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.execute("DROP TRIGGER audit_log_no_truncate ON audit_log")
        op.execute("DROP TRIGGER audit_log_no_change ON audit_log")
        op.execute("DROP FUNCTION audit_log_append_only()")
    op.drop_index("ix_runs_project", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("submitted_by")
        batch.drop_column("project")
    for table in (
        "audit_log",
        "project_datasets",
        "api_tokens",
        "project_members",
        "projects",
        "principals",
    ):
        op.drop_table(table)
