"""Dataset use policies: every version of each dataset's policy and standing, append-only.

A dataset's id hashes its content, so a policy change (a licence corrected, a purpose added), a
withdrawal or a deletion never changes the dataset: it is a new row here, numbered per dataset
from 1 (version 0 is the build's tags, read from the manifest, never stored). A row is never
updated or deleted: the latest one is in force, the earlier ones are the history, and a deleted
dataset's last row is its tombstone (who, when, why). A change says which version it saw
(`expected_version`); if another change landed first the write is a stale outcome, not an
overwrite. The audit record of the change commits in the same transaction.
"""

import time
from typing import TYPE_CHECKING

import sqlalchemy as sa

from runwright.data.policy import PolicyVersion, Standing, UsePolicy
from runwright.store.audit import NewAudit, insert_audit
from runwright.store.schema import metadata

if TYPE_CHECKING:
    from runwright.store.store import Store

dataset_policies = sa.Table(
    "dataset_policies",
    metadata,
    sa.Column("dataset_id", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("standing", sa.String(16), nullable=False),
    sa.Column("policy", sa.JSON, nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("changed_by", sa.String(200), nullable=False),
    sa.Column("changed_unix_s", sa.Float, nullable=False),
    sa.Index("ix_dataset_policies_standing", "standing"),
)


class DatasetPolicies:
    """The store's dataset policies (`store.policies`)."""

    def __init__(self, store: "Store") -> None:
        self._engine = store.engine
        self._begin = store.begin

    def latest(self, dataset_id: str) -> PolicyVersion | None:
        """The version in force, or None when no change was ever stored (version 0 holds)."""
        query = (
            dataset_policies.select()
            .where(dataset_policies.c.dataset_id == dataset_id)
            .order_by(dataset_policies.c.version.desc())
            .limit(1)
        )
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else _version(row)

    def history(self, dataset_id: str) -> list[PolicyVersion]:
        """Every stored version, oldest first."""
        query = (
            dataset_policies.select()
            .where(dataset_policies.c.dataset_id == dataset_id)
            .order_by(dataset_policies.c.version)
        )
        with self._engine.connect() as conn:
            return [_version(r) for r in conn.execute(query)]

    def not_active(self, dataset_ids: list[str]) -> list[PolicyVersion]:
        """The latest version of each of `dataset_ids` that is withdrawn or deleted."""
        if not dataset_ids:
            return []
        newest = (
            sa.select(
                dataset_policies.c.dataset_id,
                sa.func.max(dataset_policies.c.version).label("version"),
            )
            .where(dataset_policies.c.dataset_id.in_(dataset_ids))
            .group_by(dataset_policies.c.dataset_id)
            .subquery()
        )
        query = (
            dataset_policies.select()
            .join(
                newest,
                (dataset_policies.c.dataset_id == newest.c.dataset_id)
                & (dataset_policies.c.version == newest.c.version),
            )
            .where(dataset_policies.c.standing != Standing.ACTIVE.value)
            .order_by(dataset_policies.c.dataset_id)
        )
        with self._engine.connect() as conn:
            return [_version(r) for r in conn.execute(query)]

    def append(
        self,
        dataset_id: str,
        *,
        expected_version: int,
        standing: Standing,
        policy: UsePolicy,
        reason: str | None,
        changed_by: str,
        audit: NewAudit,
    ) -> PolicyVersion | None:
        """Write version `expected_version + 1` with its audit record; None when another
        change took that number first (nothing written: the caller reads the latest again)."""
        version = PolicyVersion(
            dataset_id=dataset_id,
            version=expected_version + 1,
            standing=standing,
            policy=policy,
            reason=reason,
            changed_by=changed_by,
            changed_unix_s=time.time(),
        )
        values = version.model_dump(mode="json")
        try:
            with self._begin() as conn:
                conn.execute(dataset_policies.insert().values(**values))
                insert_audit(conn, audit)
        except sa.exc.IntegrityError:
            return None
        return version


def _version(row: sa.Row) -> PolicyVersion:
    return PolicyVersion.model_validate(row._asdict())
