"""The operator actions' API (server/operator.py) against a real server: who may ask for each
(the submitter on their own run, an operator on any; a move to another pool only an operator),
every call audited with its actor, and a request that cannot apply answered in words without
changing the run (the live actions on a real run: tests/control/test_operator_actions.py)."""

import pytest

from runwright.events import EventType

from .conftest import RUN_A

pytestmark = pytest.mark.integration
ACTIONS = {
    "rollback": ({"checkpoint": "4", "reason": "look"}, "run.rollback"),
    "skip-shard": ({"shard": "no-such-shard", "reason": "look"}, "run.skip_shard"),
    "move": ({"pool": "no-such-pool", "reason": "look"}, "run.move_pool"),
    "stop": ({"reason": "look"}, "run.stop"),
}
STATUS = {
    "viewer": (403, 403, 403, 403),
    "submitter": (200, 200, 403, 200),
    "operator": (200, 200, 200, 200),
    "other proj": (404, 404, 404, 404),
}


def test_who_may_ask_for_each_action_and_each_call_is_audited(world):
    server, tokens, claimed = world
    store = server.store()
    before = len(store.events(RUN_A))
    with store.engine.connect() as conn:
        first = conn.exec_driver_sql("SELECT max(seq) FROM audit_log").scalar()
    answers = {}
    for actor, statuses in STATUS.items():
        with server.client(tokens[actor]) as client:
            for (name, (body, _)), want in zip(ACTIONS.items(), statuses, strict=True):
                response = client.post(f"/v1/runs/{RUN_A}/{name}", json=body)
                assert response.status_code == want, (actor, name, response.text)
                answers[actor, name] = response.json()
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT actor, action, outcome FROM audit_log WHERE seq > ? ORDER BY seq", (first,)
        ).all()
    expected = [
        (claimed[actor], action, "ok" if want == 200 else "denied")
        for actor, statuses in STATUS.items()
        for (_, (_, action)), want in zip(ACTIONS.items(), statuses, strict=True)
    ]
    assert sorted(tuple(r) for r in rows) == sorted(expected)

    # Nothing here could apply to the run as it is, and each answer says why.
    said = {name: answers["operator", name] for name in ACTIONS}
    assert all(a["outcome"] == "INVALID_TRANSITION" for a in said.values()), said
    assert "only a running run can be rolled back" in said["rollback"]["detail"]
    assert "only a running run can be stopped with a save" in said["stop"]["detail"]
    assert "no-such-pool" in said["move"]["detail"]
    assert "no-such-shard" in said["skip-shard"]["detail"]
    kinds = {e.type for e in store.events(RUN_A)[before:]}
    assert EventType.OPERATOR_ACTION_REQUESTED not in kinds
    assert EventType.STOP_REQUESTED not in kinds
    store.close()


def test_a_request_body_names_the_field_it_lacks(world):
    server, tokens, _ = world
    with server.client(tokens["operator"]) as client:
        response = client.post(f"/v1/runs/{RUN_A}/rollback", json={"reason": "no target"})
    assert response.status_code == 422
    assert "checkpoint" in response.text
