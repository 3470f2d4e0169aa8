"""What every action shares: the store, the root, the actor, the audit writer, and the look-up of
a run that exists only inside the actor's project."""

import getpass
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from runwright.access.redaction import Disclosure, secret_values
from runwright.access.roles import Actor, Permission, Role
from runwright.errors import NotFoundError, RunwrightError
from runwright.layout import validate_run_id
from runwright.store import RunRecord, Store
from runwright.store.audit import AuditLog, NewAudit
from runwright.store.identity import Identity
from runwright.store.store import DEFAULT_PROJECT


def local_actor() -> Actor:
    """A CLI working on the store itself: whoever can open the store file or database can
    change anything in it, so it acts on every project with every permission; the audit log
    records it as `local:<os user>` (the user name the OS reports, not authenticated)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return Actor(name=f"local:{user}", via="cli", project=None, role=Role.ADMIN, site_admin=True)


class AccessBase:
    """One actor's view of one store and root."""

    def __init__(
        self,
        store: Store | Callable[[], Store],
        root: Path,
        actor: Actor,
        *,
        root_given: bool = True,
        pools_file: Path | None = None,
    ) -> None:
        self._store = store
        self.root = root
        self.actor = actor
        self.root_given = root_given
        """False when a CLI's --root was left out: a checkpoint target may then be a folder path
        (as `inventory.checkpoint_root` reads a target without a root)."""
        self.pools_file = pools_file
        """The pools file runs are placed through (control/pools.py); None: $RUNWRIGHT_POOLS,
        else `<root>/pools.yaml`, else one local pool."""

    @cached_property
    def store(self) -> Store:
        """The store; a CLI passes a function that opens it, so a command on a checkpoint or
        dataset folder (no run, no store) never creates one."""
        return self._store if isinstance(self._store, Store) else self._store()

    @cached_property
    def identity(self) -> Identity:
        return Identity(self.store)

    @cached_property
    def audit_log(self) -> AuditLog:
        return AuditLog(self.store.engine)

    # -- audit --------------------------------------------------------------------------------

    def audit(self, action: str, **fields: Any) -> NewAudit:
        """The audit record of `action` by this actor (appended by `record`)."""
        fields.setdefault("project", self.actor.project)
        return NewAudit(
            actor=self.actor.name,
            via=self.actor.via,
            action=action,
            request_id=self.actor.request_id,
            **fields,
        )

    def record(self, action: str, **fields: Any) -> None:
        self.audit_log.append(self.audit(action, **fields))

    def refuse(self, error: RunwrightError, action: str, **fields: Any) -> RunwrightError:
        """Record a refused attempt (outcome denied) and hand back the error to raise."""
        self.record(action, outcome="denied", detail=str(error), **fields)
        return error

    def require(
        self, permission: Permission, doing: str, action: str | None, **fields: Any
    ) -> None:
        """Go on only if the actor holds `permission`; a refusal of a mutating `action` is
        audited."""
        if self.actor.may(permission):
            return
        error = self.actor.denial(permission, doing)
        raise self.refuse(error, action, **fields) if action else error

    def require_intervention(
        self, run: RunRecord, doing: str, action: str, parameters: dict[str, Any]
    ) -> None:
        """A person's intervention on `run` (cancel, pause, an operator action, marking steps
        contaminated): its submitter with CANCEL_OWN, anyone with CANCEL_ANY; a refusal is
        audited as `action`."""
        if run.submitted_by == self.actor.name and self.actor.may(Permission.CANCEL_OWN):
            return
        self.require(
            Permission.CANCEL_ANY,
            f"{doing} a run someone else submitted",
            action,
            target=run.run_id,
            project=run.project,
            parameters=parameters,
        )

    # -- what the actor sees ------------------------------------------------------------------

    @property
    def home_project(self) -> str:
        """Where this actor's submissions go."""
        return self.actor.project or DEFAULT_PROJECT

    def run(self, run_id: str, action: str | None = None) -> RunRecord:
        """The run `run_id` (or a unique prefix) in the actor's project. A run of another project
        is "no run", as if it did not exist; for a mutating `action` the refusal is audited."""
        try:
            validate_run_id(run_id)
            return self.store.get_run(run_id, project=self.actor.project)
        except (NotFoundError, ValueError) as exc:
            # A malformed id is the caller's mistake (400), named as such; no look-up is made.
            error = exc if isinstance(exc, NotFoundError) else RunwrightError(str(exc))
            if action is None:
                raise error from None
            raise self.refuse(error, action, target=run_id[:300]) from None

    def disclosure(self, run: RunRecord | None = None) -> Disclosure:
        sample_text = self.actor.may(Permission.READ_SAMPLE_TEXT)
        if run is not None:  # the data class of the run's datasets has its say (issue 25)
            from runwright.data.policy import shows_sample_text
            from runwright.govern.data_contract import strictest_class

            data_class = strictest_class(self.store, run.run_id, Path(run.root))
            if data_class is not None:
                sample_text = shows_sample_text(data_class, sample_text, self.actor.site_admin)
        return Disclosure(
            sample_text=sample_text,
            secrets=secret_values(run.spec) if run is not None else (),
        )
