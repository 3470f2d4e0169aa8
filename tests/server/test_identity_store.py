"""The identity and audit tables on SQLite and PostgreSQL: tokens are found by their secret only,
a change commits with its audit record or not at all, and the database itself refuses to change
or remove an audit record."""

import time

import pytest
import sqlalchemy as sa

from runwright.errors import NotFoundError
from runwright.store import Store
from runwright.store.audit import AuditLog, NewAudit
from runwright.store.identity import Identity


def _audit(action: str) -> NewAudit:
    return NewAudit(actor="tester", via="cli", project="default", action=action)


def test_tokens_changes_and_the_append_only_log(any_store_url):
    store = Store(any_store_url)
    identity, log = Identity(store), AuditLog(store.engine)
    identity.set_role("default", "ana", "operator", "user", _audit("role.grant"))
    record, token = identity.create_token(
        principal="ana",
        project="default",
        expires_unix_s=time.time() + 60,
        role_cap=None,
        label=None,
        audit=_audit("token.create"),
    )
    found, site_admin, role = identity.credentials(token)
    assert (found.token_id, site_admin, role) == (record.token_id, False, "operator")
    assert identity.credentials(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert identity.credentials("rwt_" + record.token_id + "x" * 43) is None

    # A change that fails is rolled back, and its failure recorded after.
    with pytest.raises(NotFoundError):
        identity.set_role("nowhere", "ana", "viewer", "user", _audit("role.grant"))
    entries = log.query()
    assert [(e.action, e.outcome) for e in entries] == [
        ("role.grant", "ok"),
        ("token.create", "ok"),
        ("role.grant", "failed"),
    ]
    assert identity.members("default")[0].role == "operator"

    refused = ["UPDATE audit_log SET outcome = 'ok'", "DELETE FROM audit_log"]
    if store.engine.dialect.name == "postgresql":
        refused.append("TRUNCATE audit_log")
    for statement in refused:
        with pytest.raises(sa.exc.DatabaseError, match="append-only"), store.engine.begin() as c:
            c.exec_driver_sql(statement)
    assert len(log.query()) == 3
    store.close()
