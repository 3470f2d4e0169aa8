"""The model registry: each release of a checkpoint's export, its gates, lineage and decision.

A release is requested for a run's checkpoint under a model name; the request takes the next
version of that name in its project (1, 2, ... never reused) before anything is exported, so the
export folder can carry the version. govern/release.py then exports, runs the gates and records
their verdicts: BLOCKED when a gate failed, else AWAITING_APPROVAL until a person with the role
to approve it decides (RELEASED or REJECTED). Each move is one conditional UPDATE, so two
people deciding at once cannot both win, and a decided release never changes again.
"""

import secrets
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from runwright.errors import NotFoundError, RunwrightError
from runwright.records import Record
from runwright.store.schema import model_releases

if TYPE_CHECKING:
    from runwright.store.store import Store


class ReleaseStatus(StrEnum):
    CHECKING = "CHECKING"
    """Requested: the export and its gates are being run (a request whose process died stays
    here; `runwright release list` shows it, and a new request takes the next version)."""
    BLOCKED = "BLOCKED"
    """A gate failed; final (fix the cause and request again)."""
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """Every automatic gate passed; waits for a person with the role to approve."""
    RELEASED = "RELEASED"
    """Approved: the model may be used."""
    REJECTED = "REJECTED"
    """A person with the role to approve refused it; final."""


class ReleaseRow(Record):
    """One release as the registry holds it."""

    release_id: str
    project: str
    name: str
    """The model's name in the registry."""
    version: int
    run_id: str
    checkpoint_id: str
    step: int
    export_path: str
    format: str
    release_sha256: str | None
    """sha256 of the export's release.json (which hashes every other file)."""
    status: ReleaseStatus
    gates: list[dict[str, Any]]
    """One `{name, verdict, evidence, fix, figures}` per gate (govern/release_gates.py)."""
    lineage: dict[str, Any]
    """What the checkpoint was trained on (govern/lineage.py's trace) and the code."""
    requested_by: str
    requested_unix_s: float
    decided_by: str | None = None
    decided_unix_s: float | None = None
    decision_note: str | None = None


class ReleaseStateError(RunwrightError):
    """A release is not in the state the action needs (approving a blocked one, deciding twice)."""


class ModelReleases:
    """The store's model registry (`store.releases`)."""

    def __init__(self, store: "Store") -> None:
        self._engine = store.engine
        self._begin = store.begin

    def reserve(
        self,
        *,
        project: str,
        name: str,
        run_id: str,
        checkpoint_id: str,
        step: int,
        format: str,
        export_path: Callable[[int], str],
        requested_by: str,
    ) -> ReleaseRow:
        """A new CHECKING release taking the next version of `name` in `project`; its export
        goes to `export_path(version)`."""
        for _ in range(8):  # two requests of one name at once: the loser takes the next number
            try:
                with self._begin() as conn:
                    latest = conn.execute(
                        sa.select(sa.func.max(model_releases.c.version)).where(
                            model_releases.c.project == project, model_releases.c.name == name
                        )
                    ).scalar()
                    version = (latest or 0) + 1
                    row = {
                        "release_id": f"rel-{secrets.token_hex(8)}",
                        "project": project,
                        "name": name,
                        "version": version,
                        "run_id": run_id,
                        "checkpoint_id": checkpoint_id,
                        "step": step,
                        "export_path": export_path(version),
                        "format": format,
                        "release_sha256": None,
                        "status": ReleaseStatus.CHECKING.value,
                        "gates": [],
                        "lineage": {},
                        "requested_by": requested_by,
                        "requested_unix_s": time.time(),
                    }
                    conn.execute(model_releases.insert().values(**row))
                    return ReleaseRow.model_validate(row)
            except sa.exc.IntegrityError:
                continue
        raise RunwrightError(f"could not take a version of model {name!r}: too many at once")

    def finish(
        self,
        release_id: str,
        *,
        status: ReleaseStatus,
        gates: list[dict[str, Any]],
        lineage: dict[str, Any],
        format: str,
        release_sha256: str | None,
    ) -> ReleaseRow:
        """Record the gates' verdicts of a CHECKING release: BLOCKED or AWAITING_APPROVAL."""
        if status not in (ReleaseStatus.BLOCKED, ReleaseStatus.AWAITING_APPROVAL):
            raise ValueError(f"a checked release is BLOCKED or AWAITING_APPROVAL, not {status}")
        values = {
            "status": status.value,
            "gates": gates,
            "lineage": lineage,
            "format": format,
            "release_sha256": release_sha256,
        }
        return self._move(release_id, ReleaseStatus.CHECKING, values)

    def decide(
        self,
        release_id: str,
        *,
        status: ReleaseStatus,
        gates: list[dict[str, Any]],
        by: str,
        note: str | None = None,
    ) -> ReleaseRow:
        """A decision on an AWAITING_APPROVAL release: RELEASED or REJECTED by a person, or
        BLOCKED when its export no longer matches what the gates checked."""
        if status not in (ReleaseStatus.RELEASED, ReleaseStatus.REJECTED, ReleaseStatus.BLOCKED):
            raise ValueError(f"a decision is RELEASED, REJECTED or BLOCKED, not {status}")
        values = {
            "status": status.value,
            "gates": gates,
            "decided_by": by,
            "decided_unix_s": time.time(),
            "decision_note": note,
        }
        return self._move(release_id, ReleaseStatus.AWAITING_APPROVAL, values)

    def _move(self, release_id: str, frm: ReleaseStatus, values: dict[str, Any]) -> ReleaseRow:
        table = model_releases
        with self._begin() as conn:
            moved = conn.execute(
                table.update()
                .where(table.c.release_id == release_id, table.c.status == frm.value)
                .values(**values)
            ).rowcount
            row = conn.execute(table.select().where(table.c.release_id == release_id)).first()
        if row is None:
            raise NotFoundError(f"no release {release_id}")
        found = ReleaseRow.model_validate(row._asdict())
        if not moved:
            raise ReleaseStateError(
                f"release {release_id} ({found.name} v{found.version}) is {found.status.value}, "
                f"not {frm.value}: "
                + (
                    "request a new release of a fixed checkpoint or export"
                    if found.status is ReleaseStatus.BLOCKED
                    else "it was decided already"
                    if found.status in (ReleaseStatus.RELEASED, ReleaseStatus.REJECTED)
                    else "its gates are still running"
                )
            )
        return found

    def get(self, release_id: str, *, project: str | None = None) -> ReleaseRow:
        """The release `release_id` or a unique prefix of it (in `project` when given)."""
        table = model_releases
        query = table.select().where(table.c.release_id.startswith(release_id, autoescape=True))
        if project is not None:
            query = query.where(table.c.project == project)
        with self._engine.connect() as conn:
            rows = conn.execute(query.limit(2)).all()
        if not rows:
            where = f" in project {project}" if project else ""
            raise NotFoundError(f"no release {release_id}{where}; `runwright release list`")
        if len(rows) > 1:
            raise NotFoundError(f"release id prefix {release_id!r} is ambiguous; give more of it")
        return ReleaseRow.model_validate(rows[0]._asdict())

    def find(
        self,
        *,
        project: str | None = None,
        name: str | None = None,
        run_ids: list[str] | None = None,
    ) -> list[ReleaseRow]:
        """Releases, newest request first, filtered by project, model name or runs."""
        table = model_releases
        query = table.select()
        if project is not None:
            query = query.where(table.c.project == project)
        if name is not None:
            query = query.where(table.c.name == name)
        if run_ids is not None:
            query = query.where(table.c.run_id.in_(run_ids))
        query = query.order_by(table.c.requested_unix_s.desc(), table.c.version.desc())
        with self._engine.connect() as conn:
            return [ReleaseRow.model_validate(r._asdict()) for r in conn.execute(query)]
