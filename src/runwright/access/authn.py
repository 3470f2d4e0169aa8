"""From a bearer token to an `Actor`: who it is, in which project, with which role.

The role is read at every request (the principal's role now, capped by the token's), so a role
removed or lowered takes effect at once for tokens already handed out.
"""

import time

from runwright.access.roles import Actor, Role, Unauthenticated
from runwright.store import Store
from runwright.store.identity import Identity, token_id_of

ANONYMOUS = "anonymous"


class Refusal(Unauthenticated):
    """Unauthenticated, with who the token claimed to be (for the audit record)."""

    def __init__(self, message: str, claimed: str = ANONYMOUS) -> None:
        super().__init__(message)
        self.claimed = claimed


def authenticate(store: Store, token: str | None, request_id: str | None = None) -> Actor:
    if not token:
        raise Refusal(
            "no API token: send `Authorization: Bearer <token>` (the CLI reads "
            "$RUNWRIGHT_TOKEN or ~/.config/runwright/credentials)"
        )
    if token_id_of(token) is None:
        raise Refusal("the API token is malformed: a token starts with `rwt_`")
    found = Identity(store).credentials(token)
    if found is None:
        raise Refusal("the API token is not known: make one with `runwright token create`")
    record, site_admin, member = found
    claimed = f"{record.principal} (token {record.token_id})"
    if record.revoked_unix_s is not None:
        raise Refusal(f"API token {record.token_id} was revoked by {record.revoked_by}", claimed)
    if time.time() >= record.expires_unix_s:
        raise Refusal(
            f"API token {record.token_id} expired; make a new one with `runwright token create`",
            claimed,
        )
    role = Role.parse(member) if member else None
    if role is not None and record.role_cap is not None:
        role = min(role, Role.parse(record.role_cap))
    return Actor(
        name=record.principal,
        via="api",
        project=record.project,
        role=role,
        site_admin=site_admin,
        token_id=record.token_id,
        request_id=request_id,
    )
