"""Every actor against every endpoint of a real server, with the status each cell must answer
(no token, a malformed, an expired and a revoked one, a token of another project, each role,
a site admin); then the audit log must hold exactly the mutating calls, ok or denied, each with
its actor. And what each role may see of a run: sample text redacted below operator, the spec's
secrets masked for everyone."""

# ruff: noqa: E501  (MATRIX is a table: one line per actor reads best)

import pytest

from runwright.events import EventType

from .conftest import RUN_A, RUN_S, SAMPLE, SECRET, spec_mapping

pytestmark = pytest.mark.integration
# endpoint -> (method, path, body, audited action or None)
ENDPOINTS = {
    "health": ("GET", "/health", None, None),
    "whoami": ("GET", "/v1/whoami", None, None),
    "list": ("GET", "/v1/runs", None, None),
    "status": ("GET", f"/v1/runs/{RUN_A}", None, None),
    "events": ("GET", f"/v1/runs/{RUN_A}/events", None, None),
    "queue": ("GET", "/v1/queue", None, None),
    "checkpoints": ("GET", f"/v1/runs/{RUN_A}/checkpoints", None, None),
    "report": ("GET", f"/v1/runs/{RUN_A}/report", None, None),
    "audit": ("GET", "/v1/audit", None, None),
    "submit": ("POST", "/v1/runs", "SPEC", "run.submit"),
    "pause": ("POST", f"/v1/runs/{RUN_A}/pause", {"reason": "matrix"}, "run.pause"),
    "resume": ("POST", f"/v1/runs/{RUN_A}/resume", {"reason": "matrix"}, "run.resume"),
    "cancel": ("POST", f"/v1/runs/{RUN_A}/cancel", {"reason": "matrix"}, "run.cancel"),
    "gc": ("POST", f"/v1/runs/{RUN_A}/checkpoints/gc", {"min_age_seconds": 0}, "checkpoint.gc"),
    "grant": ("PUT", "/v1/projects/alpha/members/newbie", {"role": "viewer"}, "role.grant"),
    "token": ("POST", "/v1/tokens", {"days": 1}, "token.create"),
    "project": ("POST", "/v1/projects", "PROJECT", "project.create"),
}
COLUMNS = list(ENDPOINTS)

# One row per actor, one status per endpoint, in COLUMNS' order.
#                 health who list stat evts queue ckpt rept audit subm paus resm cncl gc  grant tokn proj
MATRIX = {
    "no token":    (200, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401),
    "malformed":   (200, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401),
    "expired":     (200, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401),
    "revoked":     (200, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401),
    "other proj":  (200, 200, 200, 404, 404, 200, 404, 404, 200, 201, 404, 404, 404, 404, 404, 201, 403),
    "viewer":      (200, 200, 200, 200, 200, 200, 200, 200, 403, 403, 403, 403, 403, 403, 403, 201, 403),
    "submitter":   (200, 200, 200, 200, 200, 200, 200, 200, 403, 201, 200, 200, 200, 403, 403, 201, 403),
    "operator":    (200, 200, 200, 200, 200, 200, 200, 200, 200, 201, 200, 200, 200, 200, 403, 201, 403),
    "admin":       (200, 200, 200, 200, 200, 200, 200, 200, 200, 201, 200, 200, 200, 200, 200, 201, 403),
    "site admin":  (200, 200, 200, 404, 404, 200, 404, 404, 200, 201, 404, 404, 404, 404, 200, 201, 201),
}  # fmt: skip


def _body(body, actor: str):
    if body == "SPEC":
        return {"spec": spec_mapping()}
    if body == "PROJECT":
        return {"name": "gamma-" + actor.replace(" ", "-")}
    return body


def test_every_actor_against_every_endpoint(world):
    server, tokens, claimed = world
    store = server.store()
    with store.engine.connect() as conn:
        first = conn.exec_driver_sql("SELECT max(seq) FROM audit_log").scalar()
    got: dict[str, tuple[int, ...]] = {}
    expected_audit = []
    for actor in MATRIX:
        with server.client(tokens[actor]) as client:
            row = []
            for name in COLUMNS:
                method, path, body, action = ENDPOINTS[name]
                response = client.request(method, path, json=_body(body, actor))
                row.append(response.status_code)
                assert response.headers["content-type"].startswith("application/json"), name
                if response.status_code >= 400:
                    assert response.json()["error"], (actor, name)
                if action is not None:
                    outcome = "ok" if response.status_code < 300 else "denied"
                    expected_audit.append((claimed[actor], action, outcome))
            got[actor] = tuple(row)
    mismatches = {
        actor: {c: (want, have) for c, want, have in zip(COLUMNS, MATRIX[actor], got[actor],
                                                          strict=True) if want != have}
        for actor in MATRIX
    }  # fmt: skip
    assert not any(mismatches.values()), {a: m for a, m in mismatches.items() if m}

    # Exactly the mutating calls, ok or denied, each with its actor; nothing else.
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT actor, action, outcome, via FROM audit_log WHERE seq > ? ORDER BY seq",
            (first,),
        ).all()
    assert sorted((a, b, c) for a, b, c, _ in rows) == sorted(expected_audit)
    assert {via for *_, via in rows} == {"api"}
    store.close()


def test_the_audit_log_cannot_be_changed(world):
    server, _tokens, _ = world
    store = server.store()
    for statement in ("UPDATE audit_log SET outcome = 'ok'", "DELETE FROM audit_log"):
        with pytest.raises(Exception, match="append-only"), store.engine.begin() as conn:
            conn.exec_driver_sql(statement)
    store.close()


@pytest.mark.parametrize(
    ("role", "sees_sample"),
    [("viewer", False), ("submitter", False), ("operator", True), ("admin", True)],
)
def test_sample_text_by_role_and_secrets_for_nobody(world, role, sees_sample):
    server, tokens, _ = world
    with server.client(tokens[role]) as client:
        answers = [
            client.get(f"/v1/runs/{RUN_S}"),
            client.get(f"/v1/runs/{RUN_S}/events"),
            client.get(f"/v1/runs/{RUN_S}/report"),
            client.get("/v1/runs"),
            client.get("/v1/queue"),
        ]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert SECRET not in answer.text
        assert (SAMPLE in answer.text) is sees_sample, answer.request.url
    status = answers[0].json()
    failure = next(e for e in status["events"] if e["type"] == EventType.FAILURE_CLASSIFIED)
    assert failure["attributes"]["failure_class"] == "data"  # the error type is always shown
    if not sees_sample:
        assert failure["attributes"]["message"].startswith("<redacted: ")
    report = answers[2].json()["report"]
    assert report["spec"]["environment"]["env"] == {"HF_TOKEN": "***", "OMP_NUM_THREADS": "1"}


def test_a_dataset_granted_to_one_project_does_not_exist_for_another(world):
    server, tokens, _ = world
    dataset_id = "ab" * 32
    folder = server.root / "datasets" / dataset_id
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    with server.client(server.admin_token) as admin:
        granted = admin.post("/v1/projects/beta/datasets", json={"dataset_id": dataset_id})
        assert granted.status_code == 201, granted.text
    with server.client(tokens["other proj"]) as beta, server.client(tokens["admin"]) as alpha:
        assert [d["dataset_id"] for d in beta.get("/v1/datasets").json()] == [dataset_id]
        assert alpha.get("/v1/datasets").json() == []
        # beta reaches the dataset (whose manifest is not a real one: a 400 naming it) ...
        assert beta.get(f"/v1/datasets/{dataset_id}").status_code == 400
        # ... alpha is told it does not exist, exactly as for an id nobody has.
        mine, nobodys = (alpha.get(f"/v1/datasets/{d}") for d in (dataset_id, "cd" * 32))
        assert mine.status_code == nobodys.status_code == 404
        assert mine.json()["error"].replace(dataset_id, "X") == nobodys.json()["error"].replace(
            "cd" * 32, "X"
        )
        assert alpha.post(f"/v1/datasets/{dataset_id}/verify").status_code == 404
