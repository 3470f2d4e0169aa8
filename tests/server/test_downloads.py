"""Reads that disclose data or weights through a real server (access/downloads.py): a dataset's
sample text and files, a committed checkpoint's files, an export's files; each role-checked and
in the audit log, allowed or refused, with what was read."""

import shutil
from pathlib import Path

import pytest
import torch

from runwright.ckpt import Checkpointer, LocalFence, MemorySink, TrainState, start_generation
from runwright.ckpt.storage import CheckpointStorage
from runwright.data import build_dataset
from runwright.layout import dataset_dir, run_paths
from runwright.spec.policies import CheckpointSpec

from .conftest import RUN_A, RUN_B

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).parents[2] / "examples"


def _audit(store, after: int) -> list[tuple[str, str, str, str | None]]:
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT actor, action, outcome, parameters FROM audit_log WHERE seq > ? AND action "
            "IN ('dataset.samples', 'dataset.download', 'checkpoint.download', "
            "'export.download') ORDER BY seq",
            (after,),
        ).all()
    return [tuple(r) for r in rows]


def _last_seq(store) -> int:
    with store.engine.connect() as conn:
        return conn.exec_driver_sql("SELECT coalesce(max(seq), 0) FROM audit_log").scalar()


def test_dataset_samples_and_files_by_role_each_audited(world, tmp_path):
    server, tokens, _ = world
    built = build_dataset(EXAMPLES / "data" / "tiny.yaml", tmp_path / "built")
    dataset_id = built.manifest.dataset_id
    shutil.copytree(built.folder, dataset_dir(server.root, dataset_id), dirs_exist_ok=True)
    with server.client(tokens["site admin"]) as admin:
        granted = admin.post("/v1/projects/alpha/datasets", json={"dataset_id": dataset_id})
        assert granted.status_code == 201, granted.text
    store = server.store()
    first = _last_seq(store)
    shard = built.manifest.shards[0].name

    with server.client(tokens["operator"]) as operator:
        samples = operator.get(f"/v1/datasets/{dataset_id}/samples", params={"count": 2})
        assert samples.status_code == 200, samples.text
        texts = [s["text"] for s in samples.json()["samples"]]
        assert len(texts) == 2 and all(isinstance(t, str) and t for t in texts)
        got = operator.get(f"/v1/datasets/{dataset_id}/files/{shard}.bin")
        assert got.status_code == 200
        assert got.content == (built.folder / f"{shard}.bin").read_bytes()
        # Only what the manifest lists, by plain name.
        assert operator.get(f"/v1/datasets/{dataset_id}/files/stats.txt").status_code == 404
        assert operator.get(f"/v1/datasets/{dataset_id}/files/..%2Fx").status_code in (400, 404)
    with server.client(tokens["viewer"]) as viewer:
        assert viewer.get(f"/v1/datasets/{dataset_id}/samples").status_code == 403
        assert viewer.get(f"/v1/datasets/{dataset_id}/files/{shard}.bin").status_code == 403
    with server.client(tokens["other proj"]) as other:  # not granted to beta: no such dataset
        assert other.get(f"/v1/datasets/{dataset_id}/files/{shard}.bin").status_code == 404

    rows = _audit(store, first)
    assert [(a, b, c) for a, b, c, _ in rows] == [
        ("operator_a", "dataset.samples", "ok"),
        ("operator_a", "dataset.download", "ok"),
        ("viewer_a", "dataset.samples", "denied"),
        ("viewer_a", "dataset.download", "denied"),
    ]
    size = (built.folder / f"{shard}.bin").stat().st_size
    assert f'"bytes": {size}' in str(rows[1][3]).replace("'", '"')
    assert all(t not in str(rows) for t in texts)  # the audit holds numbers, never the text
    store.close()


def test_checkpoint_and_export_files_by_role_each_audited(world):
    server, tokens, _ = world
    root = run_paths(server.root, RUN_A).checkpoints
    fence = LocalFence(str(root))
    start_generation(fence, CheckpointStorage(str(root)))
    saver = Checkpointer(str(root), policy=CheckpointSpec(), fence=fence, events=MemorySink())
    model = torch.nn.Linear(2, 2)
    saver.save(1, TrainState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1)))
    saver.close()
    export = server.root / "exports" / "alpha" / RUN_A / "v1"
    export.mkdir(parents=True)
    (export / "config.json").write_text('{"n_layer": 1}')
    store = server.store()
    first = _last_seq(store)

    with server.client(tokens["operator"]) as operator:
        listed = operator.get(f"/v1/runs/{RUN_A}/checkpoints/latest").json()
        name = listed["manifest"]["files"][0]["name"]
        got = operator.get(f"/v1/runs/{RUN_A}/checkpoints/latest/files/{name}")
        assert got.status_code == 200
        assert got.content == (root / listed["folder"] / name).read_bytes()
        exported = operator.get(f"/v1/runs/{RUN_A}/exports/v1/files/config.json")
        assert exported.status_code == 200 and exported.content == b'{"n_layer": 1}'
    with server.client(tokens["submitter"]) as submitter:
        denied = submitter.get(f"/v1/runs/{RUN_A}/checkpoints/latest/files/{name}")
        assert denied.status_code == 403
    with server.client(tokens["other proj"]) as other:  # RUN_A is not beta's: no such run
        assert other.get(f"/v1/runs/{RUN_A}/exports/v1/files/config.json").status_code == 404
    with server.client(tokens["operator"]) as operator:  # beta's run does not exist for alpha
        assert operator.get(f"/v1/runs/{RUN_B}/exports/v1/files/x").status_code == 404

    rows = [(a, b, c) for a, b, c, _ in _audit(store, first)]
    assert rows == [
        ("operator_a", "checkpoint.download", "ok"),
        ("operator_a", "export.download", "ok"),
        ("submitter_a", "checkpoint.download", "denied"),
        ("admin_b", "export.download", "denied"),
        ("operator_a", "export.download", "denied"),
    ]
    store.close()
