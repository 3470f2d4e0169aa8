"""Malformed requests to a real server, sent with an admin's token (so only the request's form
can refuse them): bad JSON, oversized bodies (declared and chunked), unknown fields, wrong
types, path traversal in every kind of id. Each gets a 4xx JSON error naming the problem, and
nothing changes: no run, token, role or project appears or moves, and the audit log gains no
record of anything done."""

import json

import pytest

from .conftest import RUN_A, spec_mapping

pytestmark = pytest.mark.integration
OVER_LIMIT = 10 * 2**20 + 1
JSON = {"content-type": "application/json"}

CASES = [
    # (name, method, path, keyword arguments of the request, expected status, text in the error)
    ("bad json", "POST", "/v1/runs", {"content": b"{bad", "headers": JSON}, 400, "not valid JSON"),
    ("json array", "POST", "/v1/runs", {"json": []}, 422, "body"),
    ("unknown field", "POST", "/v1/runs", {"json": {"spec": {}, "sneaky": 1}}, 422, "sneaky"),
    ("missing spec", "POST", "/v1/runs", {"json": {}}, 422, "spec"),
    ("invalid spec", "POST", "/v1/runs", {"json": {"spec": {"name": 3}}}, 422, "invalid job spec"),
    ("NUL in key", "POST", "/v1/runs",
     {"json": {"spec": spec_mapping(), "idempotency_key": "a\x00b"}}, 422, "NUL"),
    ("declared too large", "POST", "/v1/runs",
     {"content": b"x" * OVER_LIMIT, "headers": JSON}, 413, "over"),
    ("chunked too large", "POST", "/v1/runs",
     {"content": iter([b"x" * 2**20] * 11), "headers": JSON}, 413, "over"),
    ("traversal in run id", "POST", "/v1/runs/%2e%2e/cancel", {}, 400, "not a run id"),
    ("NUL in run id", "GET", "/v1/runs/a%00b", {}, 400, "not a run id"),
    ("slashes in run id", "GET", "/v1/runs/..%2F..%2Fetc%2Fpasswd", {}, 404, "no endpoint"),
    ("traversal in checkpoint", "GET", f"/v1/runs/{RUN_A}/checkpoints/%2e%2e", {}, 400,
     "not a checkpoint"),
    ("traversal in dataset id", "GET", "/v1/datasets/%2e%2e", {}, 400, "not a dataset id"),
    ("traversal in principal", "PUT", "/v1/projects/alpha/members/%2e%2e",
     {"json": {"role": "viewer"}}, 400, "not a valid name"),
    ("unknown role", "PUT", "/v1/projects/alpha/members/newcomer",
     {"json": {"role": "superuser"}}, 400, "not a role"),
    ("token forever", "POST", "/v1/tokens", {"json": {"days": 100000}}, 422, "days"),
    ("unknown token id", "DELETE", "/v1/tokens/%2e%2e", {}, 404, "no token"),
    ("nan seconds", "POST", f"/v1/runs/{RUN_A}/checkpoints/gc",
     {"content": b'{"min_age_seconds": NaN}', "headers": JSON}, 422, "min_age_seconds"),
    ("zero entries", "POST", f"/v1/runs/{RUN_A}/checkpoints/gc",
     {"json": {"max_entries": 0}}, 422, "max_entries"),
    ("limit zero", "GET", "/v1/runs?limit=0", {}, 422, "limit"),
    ("limit text", "GET", "/v1/runs?limit=many", {}, 422, "limit"),
    ("negative after", "GET", f"/v1/runs/{RUN_A}/events?after=-1", {}, 422, "after"),
]  # fmt: skip


def _state(server) -> dict:
    store = server.store()
    with store.engine.connect() as conn:
        snapshot = {
            table: conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY 1, 2").all()
            for table in ("runs", "api_tokens", "project_members", "projects", "project_datasets")
        }
        snapshot["events"] = conn.exec_driver_sql("SELECT count(*) FROM events").scalar()
        seq = conn.exec_driver_sql("SELECT max(seq) FROM audit_log").scalar()
    store.close()
    return {"tables": json.dumps(snapshot, default=str), "audit_seq": seq}


@pytest.mark.parametrize(("name", "method", "path", "kwargs", "status", "says"), CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_malformed_requests_get_a_4xx_json_error_and_change_nothing(
    world, name, method, path, kwargs, status, says
):
    server, tokens, _ = world
    before = _state(server)
    with server.client(tokens["admin"]) as client:
        response = client.request(method, path, **kwargs)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == status and says in body["error"], body
    after = _state(server)
    assert after["tables"] == before["tables"], "a malformed request changed the store"
    store = server.store()
    with store.engine.connect() as conn:
        outcomes = (
            conn.exec_driver_sql(
                "SELECT outcome FROM audit_log WHERE seq > ?", (before["audit_seq"],)
            )
            .scalars()
            .all()
        )
    store.close()
    assert "ok" not in outcomes, "an audit record says a malformed request did something"
