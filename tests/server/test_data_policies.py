"""Dataset use policies through a real `runwright server` (issue 25): a project sees the policy
of a dataset granted to it and nothing of one that is not; only the policy's owner or a site
admin changes, withdraws or deletes it, each attempt in the audit log; the CLI's --server path
reaches the same actions."""

from runwright_tests_tiny import TINY_DATA
from typer.testing import CliRunner

from runwright.access.base import local_actor
from runwright.access.service import Access
from runwright.cli.main import app
from runwright.data import build_dataset
from runwright.store.audit import AuditLog

runner = CliRunner()


def test_policies_through_the_server_follow_the_owner_and_the_grant(world, monkeypatch):
    server, tokens, _ = world
    dataset_id = build_dataset(TINY_DATA, server.root).manifest.dataset_id
    store = server.store()
    local = Access(store, server.root, local_actor())
    local.create_project("gamma")
    local.set_role("gamma", "gina", "admin")
    local.set_role("gamma", "olga", "viewer")
    gina = local.create_token("gina", "gamma", days=1)["token"]
    olga = local.create_token("olga", "gamma", days=1)["token"]
    local.grant_dataset("gamma", dataset_id)
    path = f"/v1/datasets/{dataset_id}"
    with (
        server.client(gina) as admin,
        server.client(olga) as owner,
        server.client(tokens["viewer"]) as stranger,
    ):
        assert admin.get(f"{path}/policy").json()["current"]["version"] == 0
        assert stranger.get(f"{path}/policy").status_code == 404  # not granted to alpha
        # A project admin is not the dataset's owner: refused, audited.
        refused = admin.post(f"{path}/withdraw", json={"reason": "mine now"})
        assert refused.status_code == 403, refused.text
        assert "a site admin can" in refused.json()["error"]
        with server.client(server.admin_token) as site:
            made = site.post(f"{path}/policy", json={"changes": {"owner": "olga"}})
            assert made.status_code == 200, made.text
        withdrawn = owner.post(f"{path}/withdraw", json={"reason": "consent withdrawn"})
        assert withdrawn.status_code == 200, withdrawn.text
        assert withdrawn.json()["policy"]["standing"] == "withdrawn"
    actions = [
        (e.actor, e.action, e.outcome)
        for e in AuditLog(store.engine).query(target=f"dataset:{dataset_id}")
    ]
    assert actions == [
        (local_actor().name, "dataset.grant", "ok"),
        ("gina", "dataset.withdraw", "denied"),
        ("root-admin", "dataset.policy", "ok"),
        ("olga", "dataset.withdraw", "ok"),
    ]
    monkeypatch.setenv("RUNWRIGHT_SERVER", server.url)
    monkeypatch.setenv("RUNWRIGHT_TOKEN", olga)
    shown = runner.invoke(app, ["data", "policy", dataset_id, "--json"])
    assert shown.exit_code == 0, shown.output
    assert '"standing": "withdrawn"' in shown.output
    store.close()
