"""Identity and access actions: tokens, projects, roles, the audit log.

Who may do what (docs/server.md): anyone may make a token for themselves in their token's
project, capped at their own role, and list and revoke their own tokens; a project admin may
grant and remove roles in the project and make, list and revoke tokens of its members; a site
admin may do all of it anywhere, create projects and read the whole audit log; a project
operator reads the project's audit log. Each change commits with its audit record in one
transaction (store/identity.py); each refusal is audited as denied.
"""

import re
import time
from typing import Any

from runwright.access.base import AccessBase
from runwright.access.roles import AccessDenied, Permission, Role
from runwright.errors import NotFoundError, RunwrightError
from runwright.store.identity import ApiToken

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
"""Principal and project names: lower-case plain names (they appear in paths and URLs)."""
MAX_TOKEN_DAYS = 366
DEFAULT_TOKEN_DAYS = 90
KINDS = ("user", "service")
AUDIT_LIMIT = 10_000


def check_name(what: str, name: str) -> str:
    if not NAME.fullmatch(name):
        raise RunwrightError(
            f"{what} {name[:120]!r} is not a valid name: lower-case letters, digits, `.`, `_`, "
            "`-`, starting with a letter or digit, at most 100 characters"
        )
    return name


def check_days(days: float) -> float:
    if not (0 < days <= MAX_TOKEN_DAYS):
        raise RunwrightError(
            f"a token expires after more than 0 and at most {MAX_TOKEN_DAYS} days, not {days}"
        )
    return days


class AdminActions(AccessBase):
    def whoami(self) -> dict[str, Any]:
        return {
            "name": self.actor.name,
            "via": self.actor.via,
            "project": self.actor.project,
            "role": self.actor.role.label if self.actor.role else None,
            "site_admin": self.actor.site_admin,
            "token_id": self.actor.token_id,
        }

    # -- tokens -------------------------------------------------------------------------------

    def create_token(
        self,
        principal: str | None = None,
        project: str | None = None,
        *,
        days: float = DEFAULT_TOKEN_DAYS,
        role_cap: str | None = None,
        label: str | None = None,
    ) -> dict[str, Any]:
        """A token for `principal` (default: oneself) in `project` (default: one's token's
        project). The token is in the answer once and nowhere else."""
        principal = check_name("principal", principal or self.actor.name)
        project = check_name("project", project or self.home_project)
        check_days(days)
        cap = Role.parse(role_cap).label if role_cap else None
        audit = self.audit(
            "token.create",
            project=project,
            target=f"principal:{principal}",
            parameters={"days": days, "role_cap": cap, "label": label},
        )
        self._require_manage(project, principal, audit.action, audit.target, own_ok=True)
        role = self.identity.role(project, principal)
        if role is None:
            raise self.refuse(
                NotFoundError(f"{principal!r} has no role in project {project!r}"),
                audit.action,
                project=project,
                target=audit.target,
            )
        record, token = self.identity.create_token(
            principal=principal,
            project=project,
            expires_unix_s=time.time() + days * 86_400,
            role_cap=cap,
            label=label,
            audit=audit,
        )
        return {"token": token, **record.model_dump(mode="json")}

    def bootstrap_admin(
        self, principal: str, project: str, days: float, label: str | None = None
    ) -> dict[str, Any]:
        """The first admin of a fresh deployment: a site admin and its token, made against the
        store directly (only a CLI on the store may; the server has no anonymous path)."""
        if self.actor.via != "cli" or self.actor.project is not None:
            raise RunwrightError("`token create --admin` works only on the store itself")
        check_name("principal", principal)
        check_name("project", project)
        check_days(days)
        record, token = self.identity.create_token(
            principal=principal,
            project=project,
            expires_unix_s=time.time() + days * 86_400,
            role_cap=None,
            label=label,
            audit=self.audit(
                "token.create",
                project=project,
                target=f"principal:{principal}",
                parameters={"days": days, "site_admin": True, "label": label},
            ),
            site_admin=True,
            bootstrap_role=Role.ADMIN.label,
        )
        return {"token": token, **record.model_dump(mode="json")}

    def list_tokens(self, project: str | None = None) -> list[dict[str, Any]]:
        """One's own tokens; a project admin's list adds the project's; a site admin's, all."""
        if self.actor.site_admin:
            tokens = self.identity.tokens(project=project)
        elif self.actor.may(Permission.MANAGE_MEMBERS):
            tokens = self.identity.tokens(project=self.actor.project)
        else:
            tokens = self.identity.tokens(principal=self.actor.name)
        now = time.time()
        return [t.model_dump(mode="json") | {"usable": t.usable(now)} for t in tokens]

    def revoke_token(self, token_id: str) -> dict[str, Any]:
        audit = self.audit("token.revoke", target=f"token:{token_id[:32]}")
        token = self.identity.token(token_id) if re.fullmatch(r"[0-9a-f]{12}", token_id) else None
        if token is None:
            raise self.refuse(
                NotFoundError(f"no token {token_id[:32]!r}; `runwright token list` shows them"),
                audit.action,
                target=audit.target,
            )
        audit = audit.model_copy(update={"project": token.project})
        self._require_manage(token.project, token.principal, audit.action, audit.target, True)
        self.identity.revoke_token(token_id, audit)
        revoked = self.identity.token(token_id)
        assert revoked is not None
        return revoked.model_dump(mode="json")

    # -- projects and roles -------------------------------------------------------------------

    def create_project(self, name: str) -> dict[str, Any]:
        audit = self.audit("project.create", project=name[:100], target=f"project:{name[:100]}")
        if not self.actor.site_admin:
            raise self.refuse(
                AccessDenied(f"{self.actor.name} is not a site admin; only one creates projects"),
                audit.action,
                project=audit.project,
                target=audit.target,
            )
        check_name("project", name)
        self.identity.create_project(name, audit)
        return {"project": name}

    def projects(self) -> list[str]:
        if self.actor.site_admin:
            return self.identity.projects()
        return [self.actor.project] if self.actor.project else []

    def set_role(
        self, project: str, principal: str, role: str | None, kind: str = "user"
    ) -> dict[str, Any]:
        """Grant `role` (None: remove the principal from the project)."""
        action = "role.grant" if role is not None else "role.revoke"
        label = Role.parse(role).label if role is not None else None
        audit = self.audit(
            action,
            project=project[:100],
            target=f"principal:{principal[:100]}",
            parameters={"role": label, "kind": kind},
        )
        self._require_manage(project, principal, action, audit.target, own_ok=False)
        check_name("project", project)
        check_name("principal", principal)
        if kind not in KINDS:
            raise RunwrightError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
        self.identity.set_role(project, principal, label, kind, audit)
        return {"project": project, "principal": principal, "role": label}

    def members(self, project: str) -> list[dict[str, Any]]:
        if not (self.actor.site_admin or self.actor.project == project):
            raise NotFoundError(f"no project {project!r}")
        return [m.model_dump(mode="json") for m in self.identity.members(project)]

    # -- audit --------------------------------------------------------------------------------

    def audit_entries(
        self,
        *,
        project: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        since_unix_s: float | None = None,
        after_seq: int = 0,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """Site admins read every record; a project's operators and admins read the project's."""
        if not self.actor.site_admin:
            self.require(Permission.READ_AUDIT, "reading the audit log", None)
            if project not in (None, self.actor.project):
                raise NotFoundError(f"no project {project!r}")
            project = self.actor.project
        entries = self.audit_log.query(
            project=project,
            actor=actor,
            action=action,
            target=target,
            since_unix_s=since_unix_s,
            after_seq=after_seq,
            limit=max(1, min(limit, AUDIT_LIMIT)),
        )
        return [e.model_dump(mode="json") for e in entries]

    # -- helpers ------------------------------------------------------------------------------

    def _require_manage(
        self, project: str, principal: str, action: str, target: str | None, own_ok: bool
    ) -> None:
        """Site admins manage anything; a project admin its project's members; anyone their
        own tokens (`own_ok`) in their token's project. A project the actor cannot see is not
        found."""
        if self.actor.site_admin:
            return
        if project != self.actor.project:
            raise self.refuse(
                NotFoundError(f"no project {project!r}"), action, project=project, target=target
            )
        if own_ok and principal == self.actor.name:
            return
        self.require(
            Permission.MANAGE_MEMBERS,
            "managing the project's members and their tokens",
            action,
            project=project,
            target=target,
        )


def token_line(token: ApiToken | dict[str, Any]) -> str:
    row = token.model_dump() if isinstance(token, ApiToken) else token
    expires = time.strftime("%Y-%m-%d", time.localtime(row["expires_unix_s"]))
    state = "revoked" if row.get("revoked_unix_s") else f"expires {expires}"
    cap = f", at most {row['role_cap']}" if row.get("role_cap") else ""
    return f"{row['token_id']}  {row['principal']} in {row['project']}{cap}  {state}"
