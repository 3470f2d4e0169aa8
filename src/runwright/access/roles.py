"""Roles per project and what each may do (docs/server.md has the table).

Roles are ordered, each holding every permission of the ones below it:
viewer < submitter < operator < admin. A site admin (the first admin made by
`runwright token create --admin`) may in addition manage projects, principals, dataset grants
and read the whole audit log. A token acts in one project, with at most its role cap.
"""

from enum import IntEnum, StrEnum

from runwright.errors import RunwrightError
from runwright.records import Record


class Role(IntEnum):
    """A principal's role in a project; a higher role holds every permission of a lower one."""

    VIEWER = 1
    SUBMITTER = 2
    OPERATOR = 3
    ADMIN = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> "Role":
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(r.label for r in cls)
            raise RunwrightError(f"{text!r} is not a role; use one of {names}") from None


class Permission(StrEnum):
    """What an action needs."""

    READ = "read"
    """List and look at runs, events, reports, the queue, datasets and checkpoints."""
    SUBMIT = "submit"
    """Submit runs."""
    CANCEL_OWN = "cancel_own"
    """Cancel runs one submitted oneself."""
    CANCEL_ANY = "cancel_any"
    """Cancel any run of the project (an operator intervention)."""
    MANAGE_CHECKPOINTS = "manage_checkpoints"
    """Remove checkpoint residue (gc), export checkpoints and request releases."""
    READ_SAMPLE_TEXT = "read_sample_text"
    """See free text from the workers (failure messages, log tails): it may quote training data."""
    READ_AUDIT = "read_audit"
    """Read the project's audit log."""
    APPROVE_RELEASE = "approve_release"
    """Approve or reject a release whose gates passed (someone else's, through the server)."""
    MANAGE_MEMBERS = "manage_members"
    """Grant and remove roles in the project; make and revoke tokens of its members."""


LEAST_ROLE: dict[Permission, Role] = {
    Permission.READ: Role.VIEWER,
    Permission.SUBMIT: Role.SUBMITTER,
    Permission.CANCEL_OWN: Role.SUBMITTER,
    Permission.CANCEL_ANY: Role.OPERATOR,
    Permission.MANAGE_CHECKPOINTS: Role.OPERATOR,
    Permission.READ_SAMPLE_TEXT: Role.OPERATOR,
    Permission.READ_AUDIT: Role.OPERATOR,
    Permission.APPROVE_RELEASE: Role.ADMIN,
    Permission.MANAGE_MEMBERS: Role.ADMIN,
}
"""The least role holding each permission (the roles table of docs/server.md)."""


class AccessDenied(RunwrightError):
    """The actor is known and sees the target, but its role does not allow the action (HTTP
    403). A target in another project is NotFoundError instead (404), so names do not leak."""


class Unauthenticated(RunwrightError):
    """No token, or one that is malformed, unknown, expired or revoked (HTTP 401)."""


class Actor(Record):
    """Who is acting, as the request established it."""

    name: str
    """Principal name, or `local:<os user>` for a CLI on the store itself."""
    via: str
    """`api` or `cli`."""
    project: str | None
    """The project the token acts in; None: every project (a CLI on the store itself)."""
    role: Role | None
    """Effective role in `project`: the principal's role, capped by the token's."""
    site_admin: bool = False
    """Site admin: projects, principals, dataset grants, the whole audit log."""
    token_id: str | None = None
    """The token used, if any."""
    request_id: str | None = None
    """The API request's id."""

    def may(self, permission: Permission) -> bool:
        if self.site_admin:
            return True
        return self.role is not None and self.role >= LEAST_ROLE[permission]

    def sees(self, project: str) -> bool:
        """Whether `project`'s runs, datasets and checkpoints exist for this actor at all."""
        return self.project is None or self.project == project

    def denial(self, permission: Permission, doing: str) -> AccessDenied:
        role = self.role.label if self.role else "no role"
        need = LEAST_ROLE[permission].label
        return AccessDenied(
            f"{self.name} has {role} in project {self.project}; {doing} needs {need} or "
            "higher: ask a project admin (`runwright project grant`)"
        )
