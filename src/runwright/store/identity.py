"""Who may use a shared store: principals (users and service accounts), projects, each member's
role in a project, API tokens and which datasets a project may read.

A token is `rwt_` + a 12-hex-digit id + 43 characters of `secrets.token_urlsafe(32)` (32 random
bytes). The store keeps its id and the sha256 of the whole token, never the token: the id finds
the row, the digest is compared in constant time. A fast hash is right here (as for GitHub's
tokens): guessing a 256-bit random secret is out of reach, and a password hash would cost every
request tens of milliseconds. What a role may do is decided above the store (`runwright.access`);
this module reads and writes rows, each change in one transaction with its audit record.
"""

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa

from runwright.errors import NotFoundError, RunwrightError
from runwright.records import Record
from runwright.store.audit import AuditLog, NewAudit, insert_audit
from runwright.store.schema import metadata

if TYPE_CHECKING:
    from runwright.store.store import Store

TOKEN_PREFIX = "rwt_"
TOKEN_ID_CHARS = 12

principals = sa.Table(
    "principals",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("site_admin", sa.Boolean, nullable=False, default=False),
    sa.Column("created_unix_s", sa.Float, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
)
projects = sa.Table(
    "projects",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("created_unix_s", sa.Float, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
)
project_members = sa.Table(
    "project_members",
    metadata,
    sa.Column("project", sa.String(100), sa.ForeignKey("projects.name"), primary_key=True),
    sa.Column("principal", sa.String(100), sa.ForeignKey("principals.name"), primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("granted_unix_s", sa.Float, nullable=False),
    sa.Column("granted_by", sa.String(200), nullable=False),
)
api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("token_id", sa.String(32), primary_key=True),
    sa.Column("secret_sha256", sa.String(64), nullable=False, unique=True),
    sa.Column("principal", sa.String(100), sa.ForeignKey("principals.name"), nullable=False),
    sa.Column("project", sa.String(100), sa.ForeignKey("projects.name"), nullable=False),
    sa.Column("role_cap", sa.String(16)),
    sa.Column("label", sa.String(200)),
    sa.Column("created_unix_s", sa.Float, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("expires_unix_s", sa.Float, nullable=False),
    sa.Column("revoked_unix_s", sa.Float),
    sa.Column("revoked_by", sa.String(200)),
)
project_datasets = sa.Table(
    "project_datasets",
    metadata,
    sa.Column("project", sa.String(100), sa.ForeignKey("projects.name"), primary_key=True),
    sa.Column("dataset_id", sa.String(64), primary_key=True),
    sa.Column("granted_unix_s", sa.Float, nullable=False),
    sa.Column("granted_by", sa.String(200), nullable=False),
)


_TOKEN_VIEW = sa.select(*[c for c in api_tokens.c if c.name != "secret_sha256"])
"""A token row without its digest: what every read but authentication sees."""


class Member(Record):
    """A principal's role in a project."""

    project: str
    """Project."""
    principal: str
    """Principal."""
    role: str
    """viewer, submitter, operator or admin."""
    granted_unix_s: float
    """When the role was granted."""
    granted_by: str
    """Who granted it."""


class ApiToken(Record):
    """A token as stored: everything but the secret, which exists only in the caller's hands."""

    token_id: str
    """Public id (the 12 hex digits after `rwt_`): what `token list|revoke` show and take."""
    principal: str
    """Whose token."""
    project: str
    """The one project it acts in."""
    role_cap: str | None
    """At most this role, whatever the principal's role is (None: the principal's role)."""
    label: str | None
    """Free text to tell tokens apart."""
    created_unix_s: float
    """When it was made."""
    created_by: str
    """Who made it."""
    expires_unix_s: float
    """When it stops working."""
    revoked_unix_s: float | None
    """When it was revoked, if it was."""
    revoked_by: str | None
    """Who revoked it."""

    def usable(self, now_unix_s: float) -> bool:
        return self.revoked_unix_s is None and now_unix_s < self.expires_unix_s


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """(token id, the whole token): 32 random bytes behind a public id."""
    token_id = secrets.token_hex(TOKEN_ID_CHARS // 2)
    return token_id, f"{TOKEN_PREFIX}{token_id}{secrets.token_urlsafe(32)}"


def token_id_of(token: str) -> str | None:
    """The id part of a well-formed token; None for anything else."""
    if not token.startswith(TOKEN_PREFIX) or len(token) < len(TOKEN_PREFIX) + TOKEN_ID_CHARS + 40:
        return None
    token_id = token[len(TOKEN_PREFIX) : len(TOKEN_PREFIX) + TOKEN_ID_CHARS]
    return token_id if all(c in "0123456789abcdef" for c in token_id) else None


class Identity:
    """Principals, projects, members, tokens and dataset grants of one store."""

    def __init__(self, store: "Store") -> None:
        self._engine = store.engine

    # -- reads --------------------------------------------------------------------------------

    def projects(self) -> list[str]:
        with self._engine.connect() as conn:
            return list(
                conn.execute(sa.select(projects.c.name).order_by(projects.c.name)).scalars()
            )

    def role(self, project: str, principal: str) -> str | None:
        with self._engine.connect() as conn:
            return conn.execute(
                sa.select(project_members.c.role).where(
                    project_members.c.project == project, project_members.c.principal == principal
                )
            ).scalar()

    def members(self, project: str) -> list[Member]:
        query = project_members.select().where(project_members.c.project == project)
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(project_members.c.principal))
            return [Member.model_validate(r._asdict()) for r in rows]

    def token(self, token_id: str) -> ApiToken | None:
        return self._one(_TOKEN_VIEW.where(api_tokens.c.token_id == token_id), ApiToken)

    def tokens(self, *, principal: str | None = None, project: str | None = None) -> list[ApiToken]:
        query = _TOKEN_VIEW.order_by(api_tokens.c.created_unix_s)
        if principal is not None:
            query = query.where(api_tokens.c.principal == principal)
        if project is not None:
            query = query.where(api_tokens.c.project == project)
        with self._engine.connect() as conn:
            return [ApiToken.model_validate(r._asdict()) for r in conn.execute(query)]

    def credentials(self, token: str) -> tuple[ApiToken, bool, str | None] | None:
        """(the stored token, whether its principal is a site admin, the principal's role in
        the token's project now) in one query, for a request's authentication; None when no
        such token exists. Expiry and revocation are the caller's to judge."""
        token_id = token_id_of(token)
        if token_id is None:
            return None
        query = (
            sa.select(api_tokens, principals.c.site_admin, project_members.c.role)
            .join(principals, principals.c.name == api_tokens.c.principal)
            .outerjoin(
                project_members,
                sa.and_(
                    project_members.c.project == api_tokens.c.project,
                    project_members.c.principal == api_tokens.c.principal,
                ),
            )
            .where(api_tokens.c.token_id == token_id)
        )
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None or not hmac.compare_digest(row.secret_sha256, token_digest(token)):
            return None
        fields = row._asdict()
        site_admin, role = bool(fields.pop("site_admin")), fields.pop("role")
        fields.pop("secret_sha256")
        return ApiToken.model_validate(fields), site_admin, role

    def datasets(self, project: str) -> list[str]:
        with self._engine.connect() as conn:
            return list(
                conn.execute(
                    sa.select(project_datasets.c.dataset_id)
                    .where(project_datasets.c.project == project)
                    .order_by(project_datasets.c.dataset_id)
                ).scalars()
            )

    def dataset_granted(self, project: str, dataset_id: str) -> bool:
        return dataset_id in self.datasets(project)

    # -- changes (each with its audit record, in one transaction) ------------------------------

    def create_project(self, name: str, audit: NewAudit) -> None:
        def change(conn: sa.Connection) -> None:
            if conn.execute(sa.select(projects.c.name).where(projects.c.name == name)).first():
                raise RunwrightError(f"project {name!r} already exists")
            conn.execute(
                projects.insert().values(
                    name=name, created_unix_s=time.time(), created_by=audit.actor
                )
            )

        self._audited(change, audit)

    def ensure_principal(
        self, conn: sa.Connection, name: str, kind: str, by: str, site_admin: bool = False
    ) -> None:
        """Create the principal unless it exists (a kind given again must agree)."""
        row = conn.execute(principals.select().where(principals.c.name == name)).first()
        if row is None:
            conn.execute(
                principals.insert().values(
                    name=name,
                    kind=kind,
                    site_admin=site_admin,
                    created_unix_s=time.time(),
                    created_by=by,
                )
            )
            return
        if row.kind != kind:
            raise RunwrightError(f"{name!r} is a {row.kind}, not a {kind}; pick another name")
        if site_admin and not row.site_admin:
            conn.execute(
                principals.update().where(principals.c.name == name).values(site_admin=True)
            )

    def set_role(
        self, project: str, principal: str, role: str | None, kind: str, audit: NewAudit
    ) -> None:
        """Grant `role` in `project` (creating the principal as `kind` if new), or with None
        remove the principal from the project."""

        def change(conn: sa.Connection) -> None:
            _require_project(conn, project)
            where = (project_members.c.project == project, project_members.c.principal == principal)
            if role is None:
                if conn.execute(project_members.delete().where(*where)).rowcount == 0:
                    raise NotFoundError(f"{principal!r} is not a member of project {project!r}")
                return
            self.ensure_principal(conn, principal, kind, audit.actor)
            values = {"role": role, "granted_unix_s": time.time(), "granted_by": audit.actor}
            if conn.execute(project_members.update().where(*where).values(**values)).rowcount == 0:
                conn.execute(
                    project_members.insert().values(project=project, principal=principal, **values)
                )

        self._audited(change, audit)

    def create_token(
        self,
        *,
        principal: str,
        project: str,
        expires_unix_s: float,
        role_cap: str | None,
        label: str | None,
        audit: NewAudit,
        kind: str = "user",
        site_admin: bool = False,
        bootstrap_role: str | None = None,
    ) -> tuple[ApiToken, str]:
        """A new token (its record and the token itself, shown once). `bootstrap_role` also
        makes the principal (and project) if missing and grants it that role: the first admin's
        path, run against the store directly."""
        token_id, token = new_token()
        now = time.time()

        def change(conn: sa.Connection) -> None:
            if bootstrap_role is not None:
                if not conn.execute(
                    sa.select(projects.c.name).where(projects.c.name == project)
                ).first():
                    conn.execute(
                        projects.insert().values(
                            name=project, created_unix_s=now, created_by=audit.actor
                        )
                    )
                self.ensure_principal(conn, principal, kind, audit.actor, site_admin)
                where = (
                    project_members.c.project == project,
                    project_members.c.principal == principal,
                )
                conn.execute(project_members.delete().where(*where))
                conn.execute(
                    project_members.insert().values(
                        project=project,
                        principal=principal,
                        role=bootstrap_role,
                        granted_unix_s=now,
                        granted_by=audit.actor,
                    )
                )
            _require_project(conn, project)
            if (
                conn.execute(principals.select().where(principals.c.name == principal)).first()
                is None
            ):
                raise NotFoundError(
                    f"no principal {principal!r}; grant it a role in a project first"
                )
            conn.execute(
                api_tokens.insert().values(
                    token_id=token_id,
                    secret_sha256=token_digest(token),
                    principal=principal,
                    project=project,
                    role_cap=role_cap,
                    label=label,
                    created_unix_s=now,
                    created_by=audit.actor,
                    expires_unix_s=expires_unix_s,
                )
            )

        self._audited(change, audit.model_copy(update={"target": f"token:{token_id}"}))
        record = self.token(token_id)
        assert record is not None
        return record, token

    def revoke_token(self, token_id: str, audit: NewAudit) -> None:
        def change(conn: sa.Connection) -> None:
            changed = conn.execute(
                api_tokens.update()
                .where(api_tokens.c.token_id == token_id, api_tokens.c.revoked_unix_s.is_(None))
                .values(revoked_unix_s=time.time(), revoked_by=audit.actor)
            ).rowcount
            if changed == 0:
                exists = conn.execute(
                    sa.select(api_tokens.c.token_id).where(api_tokens.c.token_id == token_id)
                ).first()
                if exists is None:
                    raise NotFoundError(f"no token {token_id!r}; `runwright token list` shows them")
                raise RunwrightError(f"token {token_id} is already revoked")

        self._audited(change, audit)

    def grant_dataset(self, project: str, dataset_id: str, audit: NewAudit) -> None:
        def change(conn: sa.Connection) -> None:
            _require_project(conn, project)
            where = (
                project_datasets.c.project == project,
                project_datasets.c.dataset_id == dataset_id,
            )
            if conn.execute(sa.select(project_datasets.c.project).where(*where)).first() is None:
                conn.execute(
                    project_datasets.insert().values(
                        project=project,
                        dataset_id=dataset_id,
                        granted_unix_s=time.time(),
                        granted_by=audit.actor,
                    )
                )

        self._audited(change, audit)

    # -- helpers ------------------------------------------------------------------------------

    def _audited(self, change: Callable[[sa.Connection], None], audit: NewAudit) -> None:
        """`change` and its audit record commit together; a change that fails is rolled back
        and its failure is recorded (with the outcome and the reason) after."""
        try:
            with self._engine.begin() as conn:
                change(conn)
                insert_audit(conn, audit)
        except RunwrightError as exc:
            AuditLog(self._engine).append(
                audit.model_copy(update={"outcome": "failed", "detail": str(exc)})
            )
            raise

    def _one(self, query: sa.Select, record: type[Record]) -> Record | None:  # type: ignore[type-arg]
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return record.model_validate(row._asdict()) if row else None


def _require_project(conn: sa.Connection, project: str) -> None:
    if conn.execute(sa.select(projects.c.name).where(projects.c.name == project)).first() is None:
        raise NotFoundError(
            f"no project {project!r}; a site admin creates it with `runwright project create`"
        )
